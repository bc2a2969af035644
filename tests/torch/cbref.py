"""Shared helpers for cubist's PyTorch references (run with /usr/bin/python3).

safetensors and llm.c token files are read and written by hand (no
`safetensors` package on the machine); the GPT-2 here is written out op by op
so that it states exactly the model cubist implements: HF GPT-2 names, Conv1D
weights [in, out], tied head, LayerNorm eps 1e-5, GELU tanh, no dropout.
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

LN_EPS = 1e-5

# ------------------------------------------------------------------ reporting
class Checks:
    """Counts PASS/FAIL lines; the scripts exit non-zero if any failed."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, name, detail=""):
        ok = bool(ok)
        print(("PASS " if ok else "FAIL ") + name + ("  " + detail if detail else ""), flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok

    def rel_max(self, kind, name, got, ref, tol):
        """max|got-ref| / max|ref| over the tensor, the figure llm.c-style tests print."""
        got = np.asarray(got, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if got.shape != ref.shape:
            return self.check(False, f"{kind} {name}", f"shape {list(got.shape)} != reference {list(ref.shape)}")
        if not np.all(np.isfinite(got)):
            return self.check(False, f"{kind} {name}", "non-finite values")
        err = float(np.max(np.abs(got - ref))) if got.size else 0.0
        mref = float(np.max(np.abs(ref))) if ref.size else 0.0
        rel = err / mref if mref > 0 else err
        return self.check(rel <= tol, f"{kind} {name:<28s}",
                          f"max|err| {err:.3e}  max|ref| {mref:.3e}  rel {rel:.3e}  tol {tol:.0e}")

    def summary(self, what):
        print(f"# {what}: {self.passed} passed, {self.failed} failed", flush=True)
        return 0 if self.failed == 0 else 1


# ------------------------------------------------------------------ safetensors
_DT = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64,
       "U16": np.uint16, "F16": np.float16}
_DT_NAME = {np.dtype(v): k for k, v in _DT.items()}


def read_safetensors(path):
    """Returns ({name: np.ndarray}, {metadata key: str})."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte safetensors header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, h in header.items():
        dt = np.dtype(_DT[h["dtype"]]).newbyteorder("<")
        b, e = h["data_offsets"]
        shape = tuple(int(s) for s in h["shape"])
        a = np.frombuffer(raw, dtype=dt, count=(e - b) // dt.itemsize, offset=base + b)
        out[name] = a.reshape(shape).astype(dt.newbyteorder("="))
    return out, meta


def write_safetensors(path, tensors, meta=None):
    """tensors: ordered {name: array}; written as F32 unless already another known dtype."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.asarray(a)
        if a.dtype not in _DT_NAME:
            a = a.astype(np.float32)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _DT_NAME[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)  # data section aligned to 8 bytes, as the spec suggests
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


# ------------------------------------------------------------------ token files
LLMC_MAGIC = 20240520


def read_tokens(path):
    """llm.c format (256 x int32 header, magic, version 1, count, uint16 tokens) or headerless uint16."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size >= 1024:
        hdr = raw[:1024].view("<i4")
        if hdr[0] == LLMC_MAGIC:
            if hdr[1] != 1:
                raise ValueError(f"{path}: llm.c token file version {hdr[1]}, expected 1")
            n = int(hdr[2])
            if 1024 + 2 * n > raw.size:
                raise ValueError(f"{path}: header says {n} tokens but the file holds fewer")
            return raw[1024:1024 + 2 * n].view("<u2").astype(np.int64)
    if raw.size % 2:
        raise ValueError(f"{path}: odd size for a headerless uint16 token file")
    return raw.view("<u2").astype(np.int64)


def write_tokens(path, tok):
    hdr = np.zeros(256, dtype="<i4")
    hdr[0], hdr[1], hdr[2] = LLMC_MAGIC, 1, len(tok)
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(np.asarray(tok, dtype="<u2").tobytes())


def sequential_batch(tok, k, B, T):
    """Micro-batch k (0-based over every micro-batch of every step): the k-th run of B*T+1 tokens,
    k taken modulo the number of whole runs in the file."""
    span = B * T + 1
    nchunks = len(tok) // span
    if nchunks < 1:
        raise ValueError(f"token file holds {len(tok)} tokens, fewer than one micro-batch ({span})")
    k %= nchunks
    c = tok[k * span:(k + 1) * span]
    x = c[:B * T].reshape(B, T)
    y = c[1:B * T + 1].reshape(B, T)
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(y))


# ------------------------------------------------------------------ GPT-2
class Config:
    def __init__(self, n_layer, d_model, n_head, seq_len, vocab):
        self.n_layer, self.d_model, self.n_head = int(n_layer), int(d_model), int(n_head)
        self.seq_len, self.vocab = int(seq_len), int(vocab)
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {d_model} is not a multiple of n_head {n_head}")

    def meta(self):
        return {"n_layer": self.n_layer, "d_model": self.d_model, "n_head": self.n_head,
                "seq_len": self.seq_len, "vocab": self.vocab}

    def __repr__(self):
        return "L={n_layer} C={d_model} NH={n_head} seq_len={seq_len} V={vocab}".format(**self.meta())


MATMUL_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def param_shapes(cfg):
    """Ordered (name, shape) in cubist's parameter-block order."""
    C, V, T = cfg.d_model, cfg.vocab, cfg.seq_len
    out = [("wte.weight", (V, C)), ("wpe.weight", (T, C))]
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        out += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                (p + "attn.c_attn.weight", (C, 3 * C)), (p + "attn.c_attn.bias", (3 * C,)),
                (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
                (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                (p + "mlp.c_fc.weight", (C, 4 * C)), (p + "mlp.c_fc.bias", (4 * C,)),
                (p + "mlp.c_proj.weight", (4 * C, C)), (p + "mlp.c_proj.bias", (C,))]
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return out


def decays(name, embed=False):
    """AdamW weight decay applies to the four matmul weights of each block, and with
    embed (cubist train --decay-embed 1) to wte and wpe too."""
    if embed and name in ("wte.weight", "wpe.weight"):
        return True
    return name.startswith("h.") and name.split(".", 2)[2] in MATMUL_WEIGHTS


def num_params(cfg):
    return sum(int(np.prod(s)) for _, s in param_shapes(cfg))


def flops_per_token(cfg, T):
    """Model FLOPs of one training step per token: 6*N + 12*L*C*T (as cb_gpt_flops_per_token)."""
    return 6.0 * num_params(cfg) + 12.0 * cfg.n_layer * cfg.d_model * T


def init_random(cfg, seed):
    """GPT-2 init (N(0,0.02), residual projections / sqrt(2L), zero biases, unit LN weights).
    Only for testing the Python side alone: its random stream is not cubist's."""
    g = torch.Generator().manual_seed(int(seed))
    P = {}
    for name, shape in param_shapes(cfg):
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t = torch.ones(shape)
        elif name.endswith(".bias"):
            t = torch.zeros(shape)
        else:
            std = 0.02
            if name.endswith("c_proj.weight"):
                std /= math.sqrt(2 * cfg.n_layer)
            t = torch.randn(shape, generator=g) * std
        P[name] = t
    return P


def load_weights(path, dtype=torch.float32):
    """Returns (Config from __metadata__, {name: tensor}) and checks every expected tensor is there."""
    arrs, meta = read_safetensors(path)
    missing = [k for k in ("n_layer", "d_model", "n_head", "seq_len", "vocab") if k not in meta]
    if missing:
        raise ValueError(f"{path}: __metadata__ lacks {missing}")
    cfg = Config(meta["n_layer"], meta["d_model"], meta["n_head"], meta["seq_len"], meta["vocab"])
    P = {}
    for name, shape in param_shapes(cfg):
        if name not in arrs:
            raise ValueError(f"{path}: tensor {name} missing")
        if tuple(arrs[name].shape) != tuple(shape):
            raise ValueError(f"{path}: {name} has shape {list(arrs[name].shape)}, expected {list(shape)}")
        P[name] = torch.from_numpy(arrs[name].astype(np.float64)).to(dtype)
    return cfg, P


def save_weights(path, cfg, P):
    write_safetensors(path, {n: P[n].detach().to(torch.float32).numpy() for n, _ in param_shapes(cfg)},
                      cfg.meta())


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS)


def attention(qkv, n_head):
    """qkv (B,T,3C) -> (B,T,C): causal, scale 1/sqrt(hs), head outputs concatenated."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = qkv.split(C, dim=2)
    q = q.reshape(B, T, n_head, hs).transpose(1, 2)
    k = k.reshape(B, T, n_head, hs).transpose(1, 2)
    v = v.reshape(B, T, n_head, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C)


def gelu_fused(x):
    """The same tanh approximation as gelu(), as one torch kernel (for benchmarks)."""
    return F.gelu(x, approximate="tanh")


def gpt2_logits(P, cfg, x, gelu_fn=gelu):
    """x (B,T) token ids -> logits (B,T,V) of the next token."""
    B, T = x.shape
    h = P["wte.weight"][x] + P["wpe.weight"][:T]
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        a = layernorm(h, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
        a = attention(a @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"], cfg.n_head)
        h = h + a @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        m = layernorm(h, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
        m = gelu_fn(m @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
        h = h + m @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    h = layernorm(h, P["ln_f.weight"], P["ln_f.bias"])
    return h @ P["wte.weight"].t()


def gpt2_loss(P, cfg, x, y, gelu_fn=gelu):
    """x, y (B,T) token ids -> mean cross-entropy over the B*T tokens."""
    B, T = x.shape
    logits = gpt2_logits(P, cfg, x, gelu_fn)
    return F.cross_entropy(logits.reshape(B * T, cfg.vocab), y.reshape(B * T))


# ------------------------------------------------------------------ optimizer
def lr_at(s, lr, min_lr, warmup, steps):
    """0-based step s: linear warmup, then cosine from lr to min_lr at step `steps`."""
    if s < warmup:
        return lr * (s + 1) / warmup
    p = (s - warmup) / max(1, steps - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


def make_adamw(cfg, P, beta1, beta2, eps, weight_decay, decay_embed=False):
    """torch.optim.AdamW with decay only on the per-block matmul weights (and wte, wpe
    with decay_embed)."""
    names = [n for n, _ in param_shapes(cfg)]
    dec = [P[n] for n in names if decays(n, decay_embed)]
    nodec = [P[n] for n in names if not decays(n, decay_embed)]
    return torch.optim.AdamW([{"params": dec, "weight_decay": weight_decay},
                              {"params": nodec, "weight_decay": 0.0}],
                             lr=0.0, betas=(beta1, beta2), eps=eps)


def clip_grads(grads, clip):
    """Returns the total L2 norm before clipping; scales grads in place by min(1, clip/(norm+1e-6))."""
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
    if clip > 0:
        scale = min(1.0, clip / (norm + 1e-6))
        if scale < 1.0:
            for g in grads:
                g.mul_(scale)
    return norm


def warn_env_for_bench():
    """torch's OpenMP threads spin after each op unless OMP_WAIT_POLICY=PASSIVE, stealing the
    shared cores from everything else. OpenBLAS's kernels: `cubist bench` hands this script the
    OPENBLAS_CORETYPE that cubist chose for itself (src/kernels/cpu.c), so both sides run the
    same GEMM kernels; run by hand, set it to the core cubist's startup line names. Benchmarks
    are only comparable with both set so."""
    import os
    bad = []
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        bad.append("OMP_WAIT_POLICY is not PASSIVE")
    if "OPENBLAS_CORETYPE" not in os.environ:
        bad.append("OPENBLAS_CORETYPE is not set (OpenBLAS's own detection may pick slow kernels)")
    for b in bad:
        print(f"warning: {b}; run as `OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=CORE ...` with "
              "the core cubist's startup line names, for figures comparable with cubist's bench",
              file=sys.stderr)
    return not bad


def run_lines(path, main):
    """main(args) once per line of PATH (its arguments, tab-separated), in one
    process (one torch start): run K's lines follow a line '@@ K', and an
    exception ends that run with a FAIL line."""
    for k, line in enumerate(open(path)):
        print(f"@@ {k}", flush=True)
        try:
            main(line.rstrip("\n").split("\t"))
        except (Exception, SystemExit) as e:
            print(f"FAIL run {k}: {type(e).__name__}: {e}", flush=True)
    return 0
