#!/usr/bin/python3
"""PyTorch references for tests/test_nmt_layers.sh (tests/test_nmt_layers.c), in
float64 from cubist's saved weights; each prints one line starting OK or BAD.

  nmt_layers_ref.py table FILE.st INIT.st       the fixed sinusoidal table: PyTorch's,
                                                and unchanged since INIT.st
  nmt_layers_ref.py MODEL INIT.st TOKENS.bin LOG
      MODEL smooth | lengths | shared: the step-1 loss of the program's LOG against
      the model recomputed on the same initial weights and batch (1e-5 relative),
      and a variant that must differ (so the check sees what it checks)
  nmt_layers_ref.py batch FILE
      one of the above per line of FILE, its arguments tab-separated, a result
      line each: one start of torch for the test's checks
The batches, lengths and padding repeat test_nmt_layers.c's: row r of step 0 has
source length (5 r) % (T + 1), target length (3 r + 1) % (T + 1); --model smooth
ends row r in r % 8 padding targets."""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nmt_ref  # noqa: E402

F = torch.nn.functional
B, T, C, NH, V, PAD = 8, 16, 32, 4, 256, 0


def read(path, dtype=torch.float64):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: torch.frombuffer(bytearray(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
                                dtype=torch.float32).reshape(v["shape"]).to(dtype)
            for k, v in h.items() if k != "__metadata__"}


def tokens(path):
    b = open(path, "rb").read()
    n = struct.unpack("<3i", b[:12])[2]
    return torch.tensor(struct.unpack(f"<{n}H", b[1024:1024 + 2 * n]), dtype=torch.long)


def sinusoid(T_, C_):
    t = torch.arange(T_, dtype=torch.float64)[:, None]
    j = torch.arange(C_, dtype=torch.float64)[None, :]
    a = t / torch.pow(10000.0, (j - j % 2) / C_)
    return torch.where(j % 2 == 0, torch.sin(a), torch.cos(a))


def table(path, init_path):
    got, init = read(path, torch.float32), read(init_path, torch.float32)
    T_, C_ = got["emb.pos"].shape
    # glibc's and PyTorch's sin/cos are within an ulp of the double result: one float ulp at 1
    d = (got["emb.pos"] - sinusoid(T_, C_).float()).abs().max().item()
    same = torch.equal(got["emb.pos"], init["emb.pos"])
    moved = (got["emb.weight"] - init["emb.weight"]).abs().max().item()
    ok = d <= 6e-8 and same and (moved > 0 or path == init_path)
    return (("OK" if ok else "BAD") + f" table [{T_}, {C_}] vs PyTorch max |diff| {d:.2g} (tol 6e-8), "
            f"unchanged since the start {same}, token embedding moved by up to {moved:.3g}")


class Model:
    def __init__(self, W):
        self.W = W

    def ln(self, x, p):
        return F.layer_norm(x, (C,), self.W[p + ".weight"], self.W[p + ".bias"], 1e-5)

    def lin(self, x, p):
        return x @ self.W[p + ".weight"] + self.W[p + ".bias"]

    def block(self, x, p, qlen, causal):
        qkv = self.lin(self.ln(x, p + ".ln"), p + ".qkv")
        return x + self.lin(attend(*qkv.split(C, -1), qlen, qlen, causal), p + ".proj")

    def cross(self, y, enc, qlen, klen):
        q = self.lin(self.ln(y, "x.ln"), "x.q")
        k, v = self.lin(enc, "x.kv").split(C, -1)
        return y + self.lin(attend(q, k, v, qlen, klen, False), "x.proj")

    def logits(self, y):
        return (self.ln(y, "ln_f") @ self.W["emb.weight"].T).view(-1, V)


def attend(q, k, v, qlen, klen, causal):
    return nmt_ref.attend(q, k, v, NH, qlen, klen, causal)


def lengths():
    return (torch.tensor([(5 * r) % (T + 1) for r in range(B)]),
            torch.tensor([(3 * r + 1) % (T + 1) for r in range(B)]))


def loss_smooth(W, tok, variant):
    """MLP language model, fixed sinusoids, smoothing 0.1, padding targets left out;
    variant: the plain mean of every target."""
    m = Model(W)
    ids, tg = tok[:B * T].view(B, T), tok[1:B * T + 1].view(B, T).clone()
    for r in range(B):
        tg[r, T - r % 8:] = PAD
    x = W["emb.weight"][ids] + W["emb.pos"][:T]
    for l in range(2):
        x = x + m.lin(F.gelu(m.lin(m.ln(x, f"b.{l}.ln"), f"b.{l}.fc"), approximate="tanh"), f"b.{l}.proj")
    if variant:
        return F.cross_entropy(m.logits(x), tg.view(-1)).item()
    return F.cross_entropy(m.logits(x), tg.view(-1), label_smoothing=0.1, ignore_index=PAD).item()


def loss_lengths(W, tok, variant):
    """One stream: encoder padded by the source lengths, decoder by the target lengths,
    cross-attention target queries over source keys; variant: the two sets swapped."""
    m = Model(W)
    ids, tg = tok[:B * T].view(B, T), tok[1:B * T + 1].view(B, T)
    src, tgt = lengths()
    s, t = (tgt, src) if variant else (src, tgt)
    x = W["emb.weight"][ids] + W["emb.pos"][:T]
    y = m.cross(m.block(x, "dec", t, True), m.block(x, "enc", s, False), t, s)
    return F.cross_entropy(m.logits(y), tg.view(-1)).item()


def shared_batch(tok):
    """test_nmt_layers.c --model shared, step 0: field 0 the source, field 1 the decoder's
    input, both padded past their lengths, targets padded past the target length."""
    run = tok[:B * T + 2]
    src_ids, dec_ids, tg = (run[o:o + B * T].view(B, T).clone() for o in (0, 1, 2))
    src, tgt = lengths()
    pos = torch.arange(T)[None, :]
    src_ids[pos >= src[:, None]] = PAD
    dec_ids[pos >= tgt[:, None]] = PAD
    tg[pos >= tgt[:, None]] = PAD
    return src_ids, dec_ids, tg, src, tgt


def loss_shared(W, tok, variant):
    """The encoder-decoder: one table (fixed sinusoids) looks up the source and the
    decoder's input and projects the output; smoothing 0.1, padding left out;
    variant: the decoder's input looked up as the source (one id field)."""
    m = Model(W)
    src_ids, dec_ids, tg, src, tgt = shared_batch(tok)
    emb = lambda ids: W["emb.weight"][ids] + W["emb.pos"][:T]  # noqa: E731
    enc = m.block(emb(src_ids), "enc", src, False)
    y = m.cross(m.block(emb(src_ids if variant else dec_ids), "dec", tgt, True), enc, tgt, src)
    return F.cross_entropy(m.logits(y), tg.view(-1), label_smoothing=0.1, ignore_index=PAD).item()


LOSSES = {"smooth": loss_smooth, "lengths": loss_lengths, "shared": loss_shared}


def step1(model, init_path, tok_path, log_path):
    W, tok = read(init_path), tokens(tok_path)
    got = float(open(log_path).read().split("\n")[0].split()[3])
    want, other = LOSSES[model](W, tok, False), LOSSES[model](W, tok, True)
    rel = abs(got - want) / abs(want)
    # fp32 forward against fp64: ~1e-7 (measured 1e-8 to 3e-8); the variant is >= 1e-3 away
    ok = rel <= 1e-5 and abs(other - want) / abs(want) > 1e-3
    return (("OK" if ok else "BAD") + f" step-1 loss {got:.9g}, PyTorch fp64 {want:.9g}: rel {rel:.2g} "
            f"(tol 1e-5); the variant that must differ: {other:.9g}")


def check(a):
    return table(a[1], a[2]) if a[0] == "table" else step1(*a)


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] != "batch":
        print(check(a))
        sys.exit(0)
    for line in open(a[1]):  # one torch start for a test's checks
        try:
            print(check(line.rstrip("\n").split("\t")), flush=True)
        except Exception as e:
            print(f"BAD {line.strip()}: {type(e).__name__}: {e}", flush=True)
