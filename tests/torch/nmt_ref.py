#!/usr/bin/python3
"""PyTorch reference for tests/test_nmt.sh: `cubist train --model nmt`
(cb_model_declare_nmt, src/graph/nmt.c) recomputed in float64 from cubist's
initial weights on the rows cubist dumped (--dump-batches: per row T source ids,
T decoder input ids, T targets, source length, target length), trained by
torch.optim.AdamW with cubist's schedule and clipping. Checks the loss of every
step (1e-5 relative) and every gradient of step 1 (1e-4 as ||a-b||/||b||);
prints PASS/FAIL lines and a summary. `nmt_ref.py --runs FILE`: one such run per
line of FILE (its arguments, tab-separated), each after a line '@@ K', in one
process."""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cbref import Checks, read_safetensors, lr_at, clip_grads, run_lines  # noqa: E402
from bert_ref import dropper  # noqa: E402  (cubist's counter-based dropout masks)

F = torch.nn.functional


def attend(q, k, v, NH, qlen, klen, causal):
    """Query i of row b sees keys j < klen[b] (j <= i when causal); a query with no
    key, and every query i >= qlen[b], gives zero (cubist's padded attention)."""
    B, T, C = q.shape
    hs = C // NH
    q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(hs)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    mask = (j[None] < klen[:, None, None]) & ((j <= i)[None] if causal else True)
    p = torch.nan_to_num(torch.softmax(s.masked_fill(~mask[:, None], float("-inf")), -1))
    o = (p @ v).transpose(1, 2).reshape(B, T, C)
    return o * (torch.arange(T)[None, :] < qlen[:, None])[..., None]


def forward(P, a, src_ids, dec_ids, tg, slen, tlen, step=0):
    logits = decode_logits(P, a, src_ids, dec_ids, slen, tlen, step)
    return F.cross_entropy(logits.reshape(-1, a.vocab), tg.reshape(-1),
                           label_smoothing=a.smoothing, ignore_index=a.vocab - 3)


def decode_logits(P, a, src_ids, dec_ids, slen, tlen, step=0):
    """The logits (B, T, vocab) of every decoder position (a: heads, layers,
    dec_layers, pre_ln, vocab, no_emb_scale, dropout, seed)."""
    C, NH = P["emb.weight"].shape[1], a.heads
    ln = lambda x, p: F.layer_norm(x, (C,), P[p + ".weight"], P[p + ".bias"], 1e-5)  # noqa: E731
    lin = lambda x, p: x @ P[p + ".weight"] + P[p + ".bias"]  # noqa: E731
    drop = dropper(a, step)  # cubist's masks, in its declaration order
    pre = lambda x, p: ln(x, p) if a.pre_ln else x  # noqa: E731
    post = lambda x, y, p: x + drop(y) if a.pre_ln else ln(x + drop(y), p)  # noqa: E731
    T = src_ids.shape[1]
    scale = 1.0 if a.no_emb_scale else math.sqrt(C)  # the paper's sqrt(d) before the positions
    emb = lambda ids: drop(P["emb.weight"][ids] * scale + P["emb.pos"][:T])  # noqa: E731
    ffn = lambda h, p: lin(F.relu(lin(h, p + ".fc1")), p + ".fc2")  # noqa: E731

    def selfattn(h, p, lens, causal):
        q, k, v = lin(h, p + ".attn.qkv").split(C, -1)
        return lin(attend(q, k, v, NH, lens, lens, causal), p + ".attn.proj")

    x = emb(src_ids)
    for l in range(a.layers):
        p = f"enc.{l}"
        x = post(x, selfattn(pre(x, p + ".ln1"), p, slen, False), p + ".ln1")
        x = post(x, ffn(pre(x, p + ".ln2"), p), p + ".ln2")
    if a.pre_ln:
        x = ln(x, "enc.ln_f")
    y = emb(dec_ids)
    for l in range(a.dec_layers):
        p = f"dec.{l}"
        y = post(y, selfattn(pre(y, p + ".ln1"), p, tlen, True), p + ".ln1")
        q = lin(pre(y, p + ".ln2"), p + ".xattn.q")
        k, v = lin(x, p + ".xattn.kv").split(C, -1)
        y = post(y, lin(attend(q, k, v, NH, tlen, slen, False), p + ".xattn.proj"), p + ".ln2")
        y = post(y, ffn(pre(y, p + ".ln3"), p), p + ".ln3")
    if a.pre_ln:
        y = ln(y, "dec.ln_f")
    return y @ P["emb.weight"][:a.vocab].T


def main(argv=None):
    ap = argparse.ArgumentParser()
    for f in ("--init", "--batches", "--log", "--grads"):
        ap.add_argument(f, required=True)
    for f in ("--batch", "--seq-len", "--layers", "--dec-layers", "--heads", "--steps", "--vocab"):
        ap.add_argument(f, type=int, required=True)
    ap.add_argument("--pre-ln", action="store_true")
    ap.add_argument("--no-emb-scale", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--smoothing", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=7e-4)
    ap.add_argument("--min-lr", type=float, default=7e-5)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.98)
    ap.add_argument("--eps", type=float, default=1e-9)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--label", default="nmt")
    a = ap.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    ck = Checks()
    init, _ = read_safetensors(a.init)
    P = {k: torch.tensor(np.asarray(v), dtype=torch.float64, requires_grad=k != "emb.pos")
         for k, v in init.items()}
    T = a.seq_len
    rows = torch.tensor(np.fromfile(a.batches, dtype="<i4").reshape(-1, a.batch, 3 * T + 2).astype(np.int64))
    ck.check(rows.shape[0] == a.steps, f"{a.label} batches", f"{rows.shape[0]} steps dumped")
    log = [json.loads(l) for l in open(a.log) if l.strip()]
    names = sorted(n for n in P if n != "emb.pos")  # the sinusoid table is fixed
    opt = torch.optim.AdamW([P[n] for n in names], lr=0.0, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=0.0)
    got_g, _ = read_safetensors(a.grads)
    print(f"# {a.label}: {a.steps} steps of {a.batch} rows, real targets a step "
          f"{[int((rows[s, :, 2 * T:3 * T] != a.vocab - 3).sum()) for s in range(a.steps)]}", flush=True)
    for s in range(a.steps):
        opt.zero_grad()
        r = rows[s]
        loss = forward(P, a, r[:, :T], r[:, T:2 * T], r[:, 2 * T:3 * T], r[:, 3 * T], r[:, 3 * T + 1], s)
        loss.backward()
        ref, got = float(loss), float(log[s]["loss"])
        rel = abs(got - ref) / abs(ref)
        ck.check(rel <= 1e-5, f"{a.label} loss step {s + 1}", f"cubist {got:.9g} torch {ref:.9g} rel {rel:.2e} tol 1e-5")
        if s == 0:
            gn = sorted(n for n in got_g if n != "emb.pos")
            ck.check(gn == names, f"{a.label} gradient names", f"{len(gn)} tensors")
            for n in names:
                if n not in got_g:
                    continue
                g, rf = np.asarray(got_g[n], np.float64), P[n].grad.numpy()
                g = g[:rf.shape[0]] if g.shape != rf.shape else g
                err = float(np.linalg.norm(g - rf)) / max(float(np.linalg.norm(rf)), 1e-30)
                ck.check(err <= 1e-4, f"{a.label} grad {n:<24s}", f"||d||/||ref|| {err:.2e} tol 1e-4")
        clip_grads([P[n].grad for n in names], a.clip)
        lr = lr_at(s, a.lr, a.min_lr, a.warmup, a.steps)
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
    return ck.summary(f"{a.label} against PyTorch")


if __name__ == "__main__":
    sys.exit(run_lines(sys.argv[2], main) if sys.argv[1:2] == ["--runs"] else main())
