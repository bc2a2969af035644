#!/usr/bin/python3
"""PyTorch baseline for `cubist bench`: one GPT-2 training step (forward, backward,
AdamW update) in float32 on N CPU threads; prints ONE JSON line

  {"tokens_per_s": ..., "step_ms": ..., "model_gflops": ..., "threads": ..., "torch": "1.13..."}

model_gflops is the achieved model FLOP rate (GFLOP/s) with model FLOPs per token
= 6*N_params + 12*L*C*T, the count cb_gpt_flops_per_token uses, so the two
programs' figures compare directly. Defaults: GPT-2 124M (L 12, C 768, NH 12,
V 50304, wpe rows --ctx 1024), B 4, T 64, 2 threads, 1 warm-up step then 3 timed.
--grad-accum M makes a step M micro-batches of B sequences, each forward and
backward of loss/M adding into the gradients, then one AdamW update (tokens/s
counts all M*B*T tokens), as cubist's --micro-batches.
`cubist bench` passes its own --ctx (the model's context, not T) so that both
programs build the same model, and refuses the run when "params" differs from
its own parameter count; a failure here (non-zero exit) fails `cubist bench`.

Environment, which must be set by the caller (cubist's bench runs it via
subprocess this way):
  OMP_WAIT_POLICY=PASSIVE   torch's OpenMP threads otherwise spin between ops and
                            steal the shared cores from everything else; it is read
                            when the OpenMP runtime loads, so it cannot be set from
                            inside this script.
  OPENBLAS_CORETYPE=CORE    the OpenBLAS kernels cubist chose for itself (its
                            startup line names them; `cubist bench` passes its
                            own choice), so both sides run the same GEMMs.
  e.g.  OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_bench.py
The script warns on stderr when either is not so; stdout carries only the JSON.

Variants (--variant NAME; --variants times every one in interleaved rounds and
prints a table):
  functional      the GPT as tensor expressions on a dict of parameters
                  (tests/torch/cbref.py), torch.optim.AdamW (for-loop)
  module          nn.Module: nn.Linear, nn.LayerNorm, nn.GELU('tanh'), the
                  usual causal attention (masked_fill, softmax), the tied head
                  as F.linear, AdamW (for-loop), zero_grad(set_to_none=True)
  module-foreach  the same with AdamW(foreach=True): one multi-tensor kernel
                  per operation instead of a loop over 148 tensors
  module-baddbmm  module-foreach, attention scores as one baddbmm with an
                  additive -inf mask buffer (no mask tensor per step)
  best            (what `cubist bench` runs) every variant above in turn,
                  the same steps each, and the fastest one's figure: the
                  reference is PyTorch's best program in the same run, so no
                  simpler one beats it there ("variants" in the JSON holds
                  each one's tokens/s; "timed" how many windows of --steps
                  steps the figure is the best of, so that `cubist bench`
                  times its own step in as many windows and keeps its best)
The default is module-foreach, the nn.Module program with the multi-tensor
AdamW; on a shared machine the variants' order changes from run to run, so
`cubist bench` asks for best.
PyTorch 1.13 has no fused CPU AdamW, no scaled_dot_product_attention and no
torch.compile, so these are its options. --bf16 runs the step under
torch.autocast("cpu", bfloat16): fp32 weights and AdamW, bf16 matmuls
through oneDNN, PyTorch's own mixed precision.
"""
import argparse
import math
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import cbref  # noqa: E402

cbref.warn_env_for_bench()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, C, NH, T, baddbmm):
        super().__init__()
        self.NH, self.baddbmm = NH, baddbmm
        self.ln_1, self.ln_2 = nn.LayerNorm(C, eps=cbref.LN_EPS), nn.LayerNorm(C, eps=cbref.LN_EPS)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.gelu = nn.GELU(approximate="tanh")
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        self.register_buffer("mask", mask, persistent=False)
        self.register_buffer("neg", torch.zeros(T, T).masked_fill(~mask, float("-inf")), persistent=False)

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.reshape(B, T, self.NH, hs).transpose(1, 2) for t in (q, k, v))
        if self.baddbmm:
            qf, kf = q.reshape(B * self.NH, T, hs), k.reshape(B * self.NH, T, hs)
            att = torch.baddbmm(self.neg[:T, :T].to(qf.dtype).expand(B * self.NH, T, T), qf,
                                kf.transpose(1, 2), alpha=1.0 / math.sqrt(hs))
            att = att.softmax(dim=-1).reshape(B, self.NH, T, T)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, cfg, baddbmm):
        super().__init__()
        C = cfg.d_model
        self.wte, self.wpe = nn.Embedding(cfg.vocab, C), nn.Embedding(cfg.seq_len, C)
        self.h = nn.ModuleList(Block(C, cfg.n_head, cfg.seq_len, baddbmm) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(C, eps=cbref.LN_EPS)
        for n, p in self.named_parameters():
            if n.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1:
                std = 0.02 / (math.sqrt(2 * cfg.n_layer) if "proj.weight" in n else 1)
                nn.init.normal_(p, 0.0, std)

    def forward(self, x, y):
        B, T = x.shape
        h = self.wte(x) + self.wpe.weight[:T]
        for b in self.h:
            h = b(h)
        logits = F.linear(self.ln_f(h), self.wte.weight)
        return F.cross_entropy(logits.reshape(B * T, -1).float(), y.reshape(B * T))


def module_step(cfg, x, y, bf16, foreach, baddbmm):
    torch.manual_seed(1337)
    m = GPT(cfg, baddbmm)
    dec = [p for n, p in m.named_parameters() if p.dim() == 2 and not n.startswith("w")]
    nodec = [p for n, p in m.named_parameters() if not (p.dim() == 2 and not n.startswith("w"))]
    opt = torch.optim.AdamW([{"params": dec, "weight_decay": 0.1}, {"params": nodec, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=foreach)

    def step():
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for xm, ym in zip(x, y):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = m(xm, ym) / len(x)
            loss.backward()
            total += loss.item()  # forces completion before the clock stops
        opt.step()
        return total
    return step, sum(p.numel() for p in m.parameters())


def functional_step(cfg, x, y, bf16):
    P = cbref.init_random(cfg, 1337)
    for t in P.values():
        t.requires_grad_(True)
    opt = cbref.make_adamw(cfg, P, 0.9, 0.95, 1e-8, 0.1)
    for g in opt.param_groups:
        g["lr"] = 3e-4

    def step():
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for xm, ym in zip(x, y):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = cbref.gpt2_loss(P, cfg, xm, ym, gelu_fn=cbref.gelu_fused) / len(x)
            loss.backward()
            total += loss.item()
        opt.step()
        return total
    return step, cbref.num_params(cfg)


VARIANTS = {
    "functional": lambda c, x, y, bf16: functional_step(c, x, y, bf16),
    "module": lambda c, x, y, bf16: module_step(c, x, y, bf16, False, False),
    "module-foreach": lambda c, x, y, bf16: module_step(c, x, y, bf16, True, False),
    "module-baddbmm": lambda c, x, y, bf16: module_step(c, x, y, bf16, True, True),
}
DEFAULT = "module-foreach"


def best_variant(cfg, x, y, bf16, steps):
    """Every variant timed in turn; (name, seconds per step, params, {name: tokens/s})."""
    M, B, T = x.shape
    best, figures = None, {}
    for name in VARIANTS:
        step, params = VARIANTS[name](cfg, x, y, bf16)
        if params != cbref.num_params(cfg):
            sys.exit(f"variant {name} has {params} parameters, expected {cbref.num_params(cfg)}")
        dt = timed(step, steps)
        del step  # frees the model and its AdamW state before the next one
        figures[name] = round(M * B * T / dt, 3)
        if best is None or dt < best[1]:
            best = (name, dt, params)
    return best + (figures,)


def timed(step, steps):
    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def variants(a, cfg, x, y):
    """Every variant, fp32 and bf16 autocast, in --rounds interleaved rounds; the best
    round of each (the least disturbed on a shared machine) is its figure."""
    M, B, T = x.shape
    print(f"# B={B} T={T} x {M} micro-batches {a.threads} threads, torch {torch.__version__}: tokens/s, best of "
          f"{a.rounds} interleaved rounds of {a.steps} steps", flush=True)
    best = {}
    for r in range(a.rounds):
        for name in VARIANTS:
            for bf16 in (False, True):
                step, _ = VARIANTS[name](cfg, x, y, bf16)
                tps = M * B * T / timed(step, a.steps)
                best[name, bf16] = max(best.get((name, bf16), 0.0), tps)
                print(f"# round {r + 1} {name} {'bf16' if bf16 else 'fp32'} {tps:.1f}", flush=True)
    for name in VARIANTS:
        print(f"{name:16s} fp32 {best[name, False]:8.1f}   bf16 autocast {best[name, True]:8.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=4, help="B, sequences per micro-batch")
    ap.add_argument("--grad-accum", type=int, default=1,
                    help="M micro-batches per optimizer step, gradients accumulated (1)")
    ap.add_argument("--seq-len", type=int, default=64, help="T, tokens per sequence of the step")
    ap.add_argument("--ctx", type=int, default=1024, help="rows of wpe (model context), >= T")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    ap.add_argument("--bf16", action="store_true",
                    help="forward and backward under torch.autocast('cpu', bfloat16): PyTorch's "
                         "mixed precision (fp32 weights and AdamW, bf16 matmuls through oneDNN)")
    ap.add_argument("--variant", default=DEFAULT, choices=sorted(VARIANTS) + ["best"],
                    help="the program timed (default %(default)s); best: every one, the fastest kept")
    ap.add_argument("--variants", action="store_true",
                    help="time every variant in fp32 and bf16 autocast and print a table")
    ap.add_argument("--rounds", type=int, default=3, help="--variants: interleaved rounds (3)")
    a = ap.parse_args()
    B, T, M = a.batch, a.seq_len, a.grad_accum
    if M < 1:
        sys.exit("--grad-accum must be at least 1")
    if a.ctx < T:
        sys.exit(f"--ctx {a.ctx} is below --seq-len {T}; raise --ctx")
    if a.steps < 1:
        sys.exit("--steps must be at least 1")
    torch.set_num_threads(a.threads)
    cfg = cbref.Config(a.layers, a.d_model, a.heads, a.ctx, a.vocab)
    gen = torch.Generator().manual_seed(0)
    tok = torch.randint(0, a.vocab, (M, B, T + 1), generator=gen)
    x, y = tok[:, :, :T].contiguous(), tok[:, :, 1:].contiguous()
    if a.variants:
        variants(a, cfg, x, y)
        return
    figures = None
    if a.variant == "best":
        a.variant, dt, params, figures = best_variant(cfg, x, y, a.bf16, a.steps)
    else:
        step, params = VARIANTS[a.variant](cfg, x, y, a.bf16)
        if params != cbref.num_params(cfg):
            sys.exit(f"variant {a.variant} has {params} parameters, expected {cbref.num_params(cfg)}")
        dt = timed(step, a.steps)
    tps = M * B * T / dt
    print(json.dumps({
        "tokens_per_s": round(tps, 3),
        "step_ms": round(dt * 1e3, 3),
        "model_gflops": round(cbref.flops_per_token(cfg, T) * tps / 1e9, 3),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "variant": a.variant, "bf16_autocast": a.bf16,
        "timed": len(figures) if figures else 1,
        "B": B, "T": T, "grad_accum": M, "L": a.layers, "C": a.d_model, "NH": a.heads, "V": a.vocab,
        "params": cbref.num_params(cfg),
        **({"variants": figures} if figures else {}),
    }), flush=True)


if __name__ == "__main__":
    main()
