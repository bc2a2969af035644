#!/usr/bin/python3
"""PyTorch baseline for `cubist bench`: one GPT-2 training step (forward, backward,
AdamW update) in float32 on N CPU threads; prints ONE JSON line

  {"tokens_per_s": ..., "step_ms": ..., "model_gflops": ..., "threads": ..., "torch": "1.13..."}

model_gflops is the achieved model FLOP rate (GFLOP/s) with model FLOPs per token
= 6*N_params + 12*L*C*T, the count cb_gpt_flops_per_token uses, so the two
programs' figures compare directly. Defaults: GPT-2 124M (L 12, C 768, NH 12,
V 50304, wpe rows --ctx 1024), B 4, T 64, 2 threads, 1 warm-up step then 3 timed.
`cubist bench` passes its own --ctx (the model's context, not T) so that both
programs build the same model, and refuses the run when "params" differs from
its own parameter count; a failure here (non-zero exit) fails `cubist bench`.

Environment, which must be set by the caller (cubist's bench runs it via
subprocess this way):
  OMP_WAIT_POLICY=PASSIVE   torch's OpenMP threads otherwise spin between ops and
                            steal the shared cores from everything else; it is read
                            when the OpenMP runtime loads, so it cannot be set from
                            inside this script.
  OPENBLAS_CORETYPE unset   forcing a core type picks GEMM kernels the machine
                            would not, and the figure stops being the machine's.
  e.g.  OMP_WAIT_POLICY=PASSIVE env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/torch_bench.py
The script warns on stderr when either is not so; stdout carries only the JSON.
Measured on the 2-core development machine at B=4 T=64, 2 threads: ~131 tokens/s.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import cbref  # noqa: E402

cbref.warn_env_for_bench()

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64, help="T, tokens per sequence of the step")
    ap.add_argument("--ctx", type=int, default=1024, help="rows of wpe (model context), >= T")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    ap.add_argument("--bf16", action="store_true",
                    help="forward and backward under torch.autocast('cpu', bfloat16): PyTorch's "
                         "mixed precision (fp32 weights and AdamW, bf16 matmuls through oneDNN)")
    a = ap.parse_args()
    B, T = a.batch, a.seq_len
    if a.ctx < T:
        sys.exit(f"--ctx {a.ctx} is below --seq-len {T}; raise --ctx")
    if a.steps < 1:
        sys.exit("--steps must be at least 1")
    torch.set_num_threads(a.threads)
    cfg = cbref.Config(a.layers, a.d_model, a.heads, a.ctx, a.vocab)
    P = cbref.init_random(cfg, 1337)
    for t in P.values():
        t.requires_grad_(True)
    opt = cbref.make_adamw(cfg, P, 0.9, 0.95, 1e-8, 0.1)
    for g in opt.param_groups:
        g["lr"] = 3e-4
    gen = torch.Generator().manual_seed(0)
    tok = torch.randint(0, a.vocab, (B, T + 1), generator=gen)
    x, y = tok[:, :T].contiguous(), tok[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = cbref.gpt2_loss(P, cfg, x, y, gelu_fn=cbref.gelu_fused)
        loss.backward()
        opt.step()
        return loss.item()  # forces completion before the clock stops

    step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = (time.perf_counter() - t0) / a.steps
    tps = B * T / dt
    print(json.dumps({
        "tokens_per_s": round(tps, 3),
        "step_ms": round(dt * 1e3, 3),
        "model_gflops": round(cbref.flops_per_token(cfg, T) * tps / 1e9, 3),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "B": B, "T": T, "L": a.layers, "C": a.d_model, "NH": a.heads, "V": a.vocab,
        "params": cbref.num_params(cfg),
    }), flush=True)


if __name__ == "__main__":
    main()
