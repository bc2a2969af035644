#!/usr/bin/python3
"""PyTorch baseline for `cubist bench --model bert`: the masked-language-model
training step (forward, backward, AdamW on every parameter) of
tests/torch/bert_ref.py's network (hidden and attention-probability dropout
0.1 by torch's own F.dropout, as cubist's bench) in float32 on N CPU threads, on uniform
random rows (two token types, full length, 15% of positions masked, or
exactly --max-predictions P of each sequence as cubist's bench); prints
ONE JSON line {"tokens_per_s": ..., "step_ms": ..., "params": ..., "variant": ...,
"variants": {...}}. Two variants are timed in turn and the faster one reported:
"all_rows" (the decoder on every row, as Hugging Face's BertForMaskedLM) and
"masked_rows" (the decoder on the masked rows only, cubist's own trick;
the same loss). --variant NAME times one only. Run it
as cubist does:
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_bert.py
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
import bert_ref  # noqa: E402


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
    a = ap.parse_args()
    a.native_dropout = True
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    P = params(a)
    opt = torch.optim.AdamW(list(P.values()), lr=1e-4, eps=1e-6, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)
    B, T = a.batch, a.seq_len
    lens = torch.full((B,), T)
    types = (torch.arange(T) >= T // 2).long().expand(B, T)

    def step():
        ids = torch.randint(a.vocab - 4, (B, T), generator=g)
        if a.max_predictions:  # P distinct positions a sequence, as cubist's BERT masking
            at = torch.rand(B, T, generator=g).argsort(-1)[:, :a.max_predictions]
            hit = torch.zeros(B, T, dtype=torch.bool).scatter_(1, at, True)
        else:
            hit = torch.rand(B, T, generator=g) < 0.15
        tg = torch.where(hit, ids, torch.full_like(ids, -1))
        opt.zero_grad()
        bert_ref.forward(P, a, ids, types, tg, lens).backward()
        opt.step()

    def timed(name):  # seconds per step after one untimed step
        a.masked_rows = name == "masked_rows"
        step()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        return (time.perf_counter() - t0) / a.steps

    names = ["all_rows", "masked_rows"] if a.variant == "best" else [a.variant]
    secs = {n: timed(n) for n in names}
    best = min(secs, key=secs.get)
    dt = secs[best]
    print(json.dumps({"tokens_per_s": B * T / dt, "step_ms": dt * 1e3, "variant": best,
                      "variants": {n: B * T / s for n, s in secs.items()},
                      "params": sum(t.numel() for t in P.values()), "threads": a.threads,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
