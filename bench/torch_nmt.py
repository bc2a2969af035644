#!/usr/bin/python3
"""PyTorch baseline for `cubist bench --model nmt`: one training step (forward,
backward, AdamW on every parameter) of the Transformer encoder-decoder of
tests/torch/nmt_ref.py (cb_model_declare_nmt: post-LN, ReLU FFN, one embedding
shared by the source, the decoder's input and the output projection, scaled by
sqrt(d) in front of fixed sinusoidal positions, dropout on sublayer outputs and
embeddings by torch's own F.dropout, label-smoothed cross-entropy with padding
targets left out) as an nn.Module in float32 on N CPU threads. Rows: B pairs of
T positions a side, row k's source holding T - k % (T/8) tokens and its target
T - 3k % (T/8) (a length-bucketed batch; the rest padding), ids uniform over
the vocabulary less the three specials. Prints ONE JSON line
  {"tokens_per_s": ..., "step_ms": ..., "params": ..., "variant": ..., "variants": {...},
   "timed": ...} ("timed": the windows of --steps steps the figure is the best of;
  `cubist bench` times its own step in as many)
tokens = the real source + target tokens of the step; params leaves out the
fixed position table (a buffer here, a tensor in cubist). Variants
(--variant NAME, default best: every one in turn, the fastest one's figure):
  masked   attention scores q k^T, masked_fill(-inf) by the key lengths (and
           causality), softmax
  baddbmm  the scores as one baddbmm onto an additive -inf mask built once
           (the lengths are the same every step)
Both use AdamW(foreach=True) (PyTorch 1.13 has no fused CPU AdamW, no
scaled_dot_product_attention, no torch.compile) and zero_grad(set_to_none).
Run it as cubist does:
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_nmt.py
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
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def lengths(B, T):
    """the source and target lengths of row k (cubist bench's formula)"""
    w = max(T // 8, 1)
    return (torch.tensor([T - k % w for k in range(B)]),
            torch.tensor([T - (3 * k) % w for k in range(B)]))


def sinusoids(T, C):
    t, i = torch.arange(T, dtype=torch.float64)[:, None], torch.arange(0, C, 2, dtype=torch.float64)
    a = t / torch.pow(10000.0, i / C)
    pe = torch.zeros(T, C, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(a), torch.cos(a[:, :C // 2])
    return pe.float()


class Attention(nn.Module):
    """self-attention (one fused qkv linear) or cross-attention (q, and a fused kv)"""

    def __init__(self, C, NH, cross):
        super().__init__()
        self.C, self.NH, self.cross = C, NH, cross
        if cross:
            self.q, self.kv = nn.Linear(C, C), nn.Linear(C, 2 * C)
        else:
            self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)

    def forward(self, x, mem, mask, bias):
        B, Tq, C = x.shape
        NH, hs = self.NH, C // self.NH
        if self.cross:
            q, (k, v) = self.q(x), self.kv(mem).split(C, -1)
        else:
            q, k, v = self.qkv(x).split(C, -1)
        Tk = k.shape[1]
        q, k, v = (t.reshape(B, -1, NH, hs).transpose(1, 2) for t in (q, k, v))
        if bias is not None:  # [B*NH, Tq, Tk] additive mask
            s = torch.baddbmm(bias, q.reshape(B * NH, Tq, hs), k.reshape(B * NH, Tk, hs).transpose(1, 2),
                              alpha=1.0 / math.sqrt(hs)).reshape(B, NH, Tq, Tk)
        else:  # mask [B, 1, Tq or 1, Tk], True where a key is seen
            s = (q @ k.transpose(-1, -2) * (1.0 / math.sqrt(hs))).masked_fill(~mask, float("-inf"))
        return self.proj((s.softmax(-1) @ v).transpose(1, 2).reshape(B, Tq, C))


class FFN(nn.Module):
    def __init__(self, C, Fw):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(C, Fw), nn.Linear(Fw, C)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class EncoderBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.attn, self.ffn = Attention(a.d_model, a.heads, False), FFN(a.d_model, a.ffn)
        self.ln1, self.ln2 = nn.LayerNorm(a.d_model, eps=1e-5), nn.LayerNorm(a.d_model, eps=1e-5)
        self.p = a.dropout

    def forward(self, x, m):
        x = self.ln1(x + F.dropout(self.attn(x, None, m["src"], m.get("src_b")), self.p))
        return self.ln2(x + F.dropout(self.ffn(x), self.p))


class DecoderBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        C = a.d_model
        self.attn, self.xattn, self.ffn = Attention(C, a.heads, False), Attention(C, a.heads, True), FFN(C, a.ffn)
        self.ln1, self.ln2, self.ln3 = (nn.LayerNorm(C, eps=1e-5) for _ in range(3))
        self.p = a.dropout

    def forward(self, y, enc, m):
        y = self.ln1(y + F.dropout(self.attn(y, None, m["tgt"], m.get("tgt_b")), self.p))
        y = self.ln2(y + F.dropout(self.xattn(y, enc, m["x"], m.get("x_b")), self.p))
        return self.ln3(y + F.dropout(self.ffn(y), self.p))


class NMT(nn.Module):
    def __init__(self, a):
        super().__init__()
        C = a.d_model
        self.emb = nn.Embedding(a.vocab, C)
        self.register_buffer("pos", sinusoids(a.seq_len, C), persistent=False)
        self.enc = nn.ModuleList(EncoderBlock(a) for _ in range(a.layers))
        self.dec = nn.ModuleList(DecoderBlock(a) for _ in range(a.layers))
        self.scale, self.p, self.smoothing, self.pad = math.sqrt(C), a.dropout, 0.1, a.vocab - 3
        for n, w in self.named_parameters():
            if n.endswith("bias"):
                nn.init.zeros_(w)
            elif w.dim() > 1:
                nn.init.normal_(w, 0.0, 0.02)

    def embed(self, ids):
        return F.dropout(self.emb(ids) * self.scale + self.pos[:ids.shape[1]], self.p)

    def forward(self, src, dec, tg, m):
        x = self.embed(src)
        for b in self.enc:
            x = b(x, m)
        y = self.embed(dec)
        for b in self.dec:
            y = b(y, x, m)
        logits = F.linear(y, self.emb.weight)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1),
                               label_smoothing=self.smoothing, ignore_index=self.pad)


def masks(a, sl, tl, baddbmm):
    """boolean masks (True: seen) and, for baddbmm, the additive [B*NH, Tq, Tk] ones"""
    T, NH = a.seq_len, a.heads
    j = torch.arange(T)
    src_keys = (j[None, :] < sl[:, None])[:, None, None, :]          # [B,1,1,T]
    tgt_keys = (j[None, :] < tl[:, None])[:, None, None, :]
    causal = (j[None, :] <= j[:, None])[None, None]                  # [1,1,T,T]
    m = {"src": src_keys, "tgt": tgt_keys & causal, "x": src_keys}
    if baddbmm:
        for k in ("src", "tgt", "x"):
            full = m[k].expand(a.batch, NH, T, T).reshape(a.batch * NH, T, T)
            m[k + "_b"] = torch.zeros(full.shape).masked_fill(~full, float("-inf"))
    return m


def batch(a, g, sl, tl):
    """random ids: source + EOS, BOS + target, target + EOS; padding past the lengths"""
    B, T, V = a.batch, a.seq_len, a.vocab
    pad, bos, eos = V - 3, V - 2, V - 1
    j = torch.arange(T)[None, :]
    words = torch.randint(V - 3, (B, T), generator=g)
    src = torch.where(j < sl[:, None] - 1, words, torch.where(j == sl[:, None] - 1, eos, pad))
    words = torch.randint(V - 3, (B, T), generator=g)
    tg = torch.where(j < tl[:, None] - 1, words, torch.where(j == tl[:, None] - 1, eos, pad))
    dec = torch.cat([torch.full((B, 1), bos), tg[:, :-1]], 1).masked_fill(j >= tl[:, None], pad)
    return src, dec, tg


def run(a, baddbmm):
    torch.manual_seed(0)
    model = NMT(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                            weight_decay=0.0, foreach=True)
    sl, tl = lengths(a.batch, a.seq_len)
    m = masks(a, sl, tl, baddbmm)
    g = torch.Generator().manual_seed(1)

    def step():
        src, dec, tg = batch(a, g, sl, tl)
        opt.zero_grad(set_to_none=True)
        loss = model(src, dec, tg, m)
        loss.backward()
        opt.step()
        return loss.item()

    step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = (time.perf_counter() - t0) / a.steps
    return dt, int(sl.sum() + tl.sum()), sum(p.numel() for p in model.parameters())


def main():
    ap = argparse.ArgumentParser()
    for f, d in (("--layers", 6), ("--d-model", 512), ("--heads", 8), ("--ffn", 2048),
                 ("--seq-len", 128), ("--batch", 8), ("--vocab", 50260), ("--steps", 3),
                 ("--threads", 2)):
        ap.add_argument(f, type=int, default=d)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--variant", default="best", choices=("best", "masked", "baddbmm"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    names = ("masked", "baddbmm") if a.variant == "best" else (a.variant,)
    figures, best = {}, None
    for n in names:
        dt, tokens, params = run(a, n == "baddbmm")
        figures[n] = round(tokens / dt, 2)
        if best is None or dt < best[1]:
            best = (n, dt, tokens, params)
    n, dt, tokens, params = best
    print(json.dumps({"tokens_per_s": tokens / dt, "step_ms": dt * 1e3, "params": params,
                      "variant": n, "variants": figures, "timed": len(figures),
                      "threads": a.threads,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
