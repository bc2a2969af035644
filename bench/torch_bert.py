#!/usr/bin/python3
"""PyTorch baseline for `cubist bench --model bert`: the masked-language-model
training step (forward, backward, AdamW on every parameter) of
tests/torch/bert_ref.py's network (hidden and attention-probability dropout
0.1 by torch's own F.dropout, as cubist's bench) in float32 on N CPU threads, on uniform
random rows (two token types, full length, 15% of positions masked, or
exactly --max-predictions P of each sequence as cubist's bench); prints
ONE JSON line {"tokens_per_s": ..., "step_ms": ..., "params": ..., "variant": ...,
"timed": ..., "variants": {...}} ("timed": how many windows of --steps steps the
figure is the best of; `cubist bench` times its own step in as many). Two variants are timed in turn and the faster one reported:
"all_rows" (the decoder on every row, as Hugging Face's BertForMaskedLM) and
"masked_rows" (the decoder on the masked rows only, cubist's own trick;
the same loss). --variant NAME times one only. Each is timed as each of
the programs of --program (default best: every one in turn, the fastest
kept, as bench/torch_bench.py does for GPT):
  functional  tests/torch/bert_ref.py's forward (x @ W + b, the padding mask
              applied by masked_fill and where), for-loop AdamW
  addmm       the step written for speed in PyTorch 1.13: activations 2-D
              (B T, C) so that each linear is one addmm with its bias, the
              scale folded into the contiguous copy of q, no mask passes
              when every sequence is full length (an additive mask
              otherwise), F.gelu, F.layer_norm, F.dropout,
              zero_grad(set_to_none=True), for-loop AdamW
  addmm-foreach  the same with AdamW(foreach=True)
PyTorch 1.13 has no scaled_dot_product_attention, no fused CPU AdamW and no
torch.compile, so these are its options. --check compares the programs'
losses and gradients on the same weights and rows with dropout off
(within 1e-5). Run it
as cubist does:
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_bert.py
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import cbref  # noqa: E402

cbref.warn_env_for_bench()

import torch  # noqa: E402
import bert_ref  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def params(a):
    enc = "roberta" if a.model == "roberta" else "bert"
    _, head, head_ln, bias = bert_ref.names(a.model)
    C, V, T = a.d_model, a.vocab, a.seq_len
    e = f"{enc}.embeddings."
    shapes = {e + "word_embeddings.weight": (V, C), e + "position_embeddings.weight": (T, C),
              e + "token_type_embeddings.weight": (2, C), e + "LayerNorm.weight": (C,),
              e + "LayerNorm.bias": (C,), head + ".weight": (C, C), head + ".bias": (C,),
              head_ln + ".weight": (C,), head_ln + ".bias": (C,), bias: (V,)}
    for l in range(a.layers):
        p = f"{enc}.encoder.layer.{l}."
        for n, (i, o) in {"attention.self.qkv": (C, 3 * C), "attention.output.dense": (C, C),
                          "intermediate.dense": (C, 4 * C), "output.dense": (4 * C, C)}.items():
            shapes[p + n + ".weight"], shapes[p + n + ".bias"] = (i, o), (o,)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[p + n + ".weight"], shapes[p + n + ".bias"] = (C,), (C,)
    P = {}
    for n, s in shapes.items():
        P[n] = (torch.ones(s) if "LayerNorm.weight" in n or "layer_norm.weight" in n
                else torch.zeros(s) if len(s) == 1 else torch.randn(s) * 0.02).requires_grad_(True)
    return P


def fast_loss(P, a, ids, types, tg, lens):
    """The `addmm` program's forward: bert_ref.forward's network and loss
    (the decoder on the masked rows when a.masked_rows)."""
    enc, head, head_ln, bias = bert_ref.names(a.model)
    B, T = ids.shape
    C, NH = a.d_model, a.heads
    hs = C // NH
    drop = (lambda x: F.dropout(x, a.dropout)) if a.dropout > 0 else (lambda x: x)
    adrop = (lambda x: F.dropout(x, a.attn_dropout)) if a.attn_dropout > 0 else (lambda x: x)
    lin = lambda x, n: torch.addmm(P[n + ".bias"], x, P[n + ".weight"])  # noqa: E731
    ln = lambda x, n: F.layer_norm(x, (C,), P[n + ".weight"], P[n + ".bias"], 1e-5)  # noqa: E731
    full = bool((lens == T).all())
    if not full:  # keys past a sequence's length: -inf added to the scores
        key_ok = torch.arange(T)[None, :] < lens[:, None]
        add_mask = torch.zeros(B, 1, 1, T).masked_fill(~key_ok[:, None, None, :], float("-inf"))
        row_ok = key_ok.reshape(B * T, 1)
    e = f"{enc}.embeddings."
    x = (P[e + "word_embeddings.weight"][ids] + P[e + "position_embeddings.weight"][:T]
         + P[e + "token_type_embeddings.weight"][types]).reshape(B * T, C)
    x = drop(ln(x, e + "LayerNorm"))
    scale = 1.0 / math.sqrt(hs)
    for l in range(a.layers):
        p = f"{enc}.encoder.layer.{l}."
        q, k, v = lin(x, p + "attention.self.qkv").view(B, T, 3, NH, hs).permute(2, 0, 3, 1, 4)
        s = torch.matmul(q * scale, k.transpose(-2, -1))
        if not full:
            s = s + add_mask
        h = torch.matmul(adrop(s.softmax(-1)), v).transpose(1, 2).reshape(B * T, C)
        if not full:  # padded query rows: zero, as cubist's
            h = h * row_ok
        x = ln(x + drop(lin(h, p + "attention.output.dense")), p + "attention.output.LayerNorm")
        h = lin(F.gelu(lin(x, p + "intermediate.dense")), p + "output.dense")
        x = ln(x + drop(h), p + "output.LayerNorm")
    h = ln(F.gelu(lin(x, head)), head_ln)
    tg = tg.reshape(-1)
    if a.masked_rows:
        sel = tg >= 0
        h, tg = h[sel], tg[sel]
    logits = torch.addmm(P[bias], h, P[e + "word_embeddings.weight"].t())
    return F.cross_entropy(logits, tg, ignore_index=-1)


PROGRAMS = {  # name: (forward, AdamW foreach, zero_grad set_to_none)
    "functional": (bert_ref.forward, False, False),
    "addmm": (fast_loss, False, True),
    "addmm-foreach": (fast_loss, True, True),
}


def check(a, P, ids, types, tg, lens):
    """The programs' losses (1e-5 relative) and gradients (||d|| / ||ref|| <= 1e-5 for
    every tensor; float32 sums in another order) on the same weights and rows, dropout off"""
    keep = a.dropout, a.attn_dropout, a.native_dropout
    a.dropout, a.attn_dropout, a.native_dropout = 0.0, 0.0, False
    ok = True
    with torch.no_grad():  # biases and LayerNorms off their zero / one start, so that they count
        for v in P.values():
            if v.dim() == 1:
                v.add_(torch.randn(v.shape) * 0.1)

    def run(fwd, t, ln):
        for v in P.values():
            v.grad = None
        loss = fwd(P, a, ids, types, t, ln)
        loss.backward()
        return float(loss), {n: v.grad.clone() for n, v in P.items() if v.grad is not None}
    for rows in (False, True):
        a.masked_rows = rows
        for padded in (False, True):
            ln, t = lens.clone(), tg
            if padded:
                ln[0] = ln[0] // 2
                t = torch.where(torch.arange(tg.shape[1])[None, :] < ln[:, None], tg, -1)
            want, gw = run(bert_ref.forward, t, ln)
            got, gg = run(fast_loss, t, ln)
            rel = abs(got - want) / abs(want)
            gerr = max(float((gg[n] - gw[n]).norm() / gw[n].norm().clamp_min(1e-30)) for n in gw)
            ok &= rel <= 1e-5 and gerr <= 1e-5 and sorted(gg) == sorted(gw)
            print(f"# check masked_rows={rows} padded={padded}: functional {want:.7f} addmm "
                  f"{got:.7f} rel {rel:.1e} (tol 1e-5); {len(gw)} gradients, worst "
                  f"||d||/||ref|| {gerr:.1e} (tol 1e-5)", file=sys.stderr)
    a.dropout, a.attn_dropout, a.native_dropout = keep
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert")
    for f, d in (("--layers", 12), ("--d-model", 768), ("--heads", 12), ("--seq-len", 128),
                 ("--batch", 8), ("--vocab", 30522), ("--steps", 3), ("--threads", 2)):
        ap.add_argument(f, type=int, default=d)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--attn-dropout", type=float, default=0.1)
    ap.add_argument("--variant", default="best", choices=["best", "all_rows", "masked_rows"])
    ap.add_argument("--max-predictions", type=int, default=0,
                    help="masked positions per sequence (0: 15%% of the positions, drawn each)")
    ap.add_argument("--program", default="best", choices=["best"] + list(PROGRAMS))
    ap.add_argument("--check", action="store_true",
                    help="compare the programs' losses and gradients (dropout off); exit 0 if "
                         "within 1e-5")
    a = ap.parse_args()
    a.native_dropout = True
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    P = params(a)
    g = torch.Generator().manual_seed(1)
    B, T = a.batch, a.seq_len
    lens = torch.full((B,), T)
    types = (torch.arange(T) >= T // 2).long().expand(B, T)

    def batch():
        ids = torch.randint(a.vocab - 4, (B, T), generator=g)
        if a.max_predictions:  # P distinct positions a sequence, as cubist's BERT masking
            at = torch.rand(B, T, generator=g).argsort(-1)[:, :a.max_predictions]
            hit = torch.zeros(B, T, dtype=torch.bool).scatter_(1, at, True)
        else:
            hit = torch.rand(B, T, generator=g) < 0.15
        return ids, torch.where(hit, ids, torch.full_like(ids, -1))

    if a.check:
        ids, tg = batch()
        sys.exit(0 if check(a, P, ids, types, tg, lens) else 1)

    def timed(variant, program):  # seconds per step after one untimed step
        a.masked_rows = variant == "masked_rows"
        fwd, foreach, to_none = PROGRAMS[program]
        opt = torch.optim.AdamW(list(P.values()), lr=1e-4, eps=1e-6, weight_decay=0.0,
                                foreach=foreach)

        def step():
            ids, tg = batch()
            opt.zero_grad(set_to_none=to_none)
            fwd(P, a, ids, types, tg, lens).backward()
            opt.step()
        step()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        return (time.perf_counter() - t0) / a.steps

    names = ["all_rows", "masked_rows"] if a.variant == "best" else [a.variant]
    progs = list(PROGRAMS) if a.program == "best" else [a.program]
    secs = {f"{n} {p}": timed(n, p) for n in names for p in progs}
    best = min(secs, key=secs.get)
    dt = secs[best]
    print(json.dumps({"tokens_per_s": B * T / dt, "step_ms": dt * 1e3, "variant": best,
                      "timed": len(secs),
                      "variants": {n: round(B * T / s, 2) for n, s in secs.items()},
                      "params": sum(t.numel() for t in P.values()), "threads": a.threads,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
