#!/usr/bin/python3
"""Per-op check of cubist's kernels against PyTorch autograd in float64.

  build/tests/test_ops --dump DIR && /usr/bin/python3 tests/torch/ops_ref.py DIR
  /usr/bin/python3 tests/torch/ops_ref.py --self-test     # checks this script alone

DIR holds one safetensors file per op case, named for the op (`layernorm.safetensors`,
`matmul_nobias.safetensors`, ...: the name starts with the op, or `__metadata__`
has "op"). Each holds
  in.<name>    the op's inputs (token ids / targets may be F32 holding integers)
  in.dout      the random upstream gradient of the op's main output (or `dout`)
  out.<name>   what cubist's forward produced
  grad.<name>  what cubist's backward produced for input <name>, starting from zeroed
               buffers (no accumulation into earlier contents)
and the sizes in `__metadata__` (strings: B T C NH N V IC OC dloss). Tensors may be
stored flat: they are reshaped from those sizes. The names this script knows, per op:
  encoder       in.inp (B,T) ids, in.wte (V,C), in.wpe (>=T,C) -> out.out (B,T,C);
                grad.wte, grad.wpe
  layernorm     in.inp (N,C), in.w, in.b -> out.out (N,C), out.mean (N), out.rstd (N);
                grad.inp, grad.w, grad.b   (eps 1e-5, biased variance)
  matmul        in.inp (N,IC), in.w (IC,OC), [in.bias (OC)] -> out.out (N,OC);
                grad.inp, grad.w, grad.bias
  head          in.inp (N,C), in.w (V,C) -> out.out (N,V) = inp @ w^T; grad.inp, grad.w
  attention     in.qkv (B,T,3C), meta NH -> out.out (B,T,C), [out.att (B,NH,T,T)];
                grad.qkv
  attention_padded  bidirectional: in.qkv (B,T,3C), in.lens (B) -> out.out, out.att;
                grad.qkv (rows at or past a sequence's length masked and zero)
  attention_cross   causal: in.q (B,Tq,C), in.kv (B,Tk,2C) = [k | v], in.qlen, in.klen (B)
                -> out.out (B,Tq,C), out.att (B,NH,Tq,Tk); grad.q, grad.kv
  gelu          in.inp -> out.out (tanh approximation); grad.inp
  residual      in.a, in.b -> out.out; grad.a, grad.b
  crossentropy  in.logits (N,V), in.targets (N) -> out.losses (N), [out.probs (N,V)
                softmax]; grad.logits of sum(losses * dloss): dloss is `dout` (N) or the
                scalar meta "dloss" (alias "dloss_scale")
  crossentropy_smooth  the same with label smoothing SMOOTH_EPS, rows whose target is
                SMOOTH_IGNORE weighted 0 and the others SMOOTH_SCALE
  mul           in.a, in.b -> out.out = a * b; grad.a, grad.b
  relu          in.inp -> out.out; grad.inp
  lookup        in.ids (N), in.table (V,C) -> out.out (N,C) = table[ids]; grad.table
  logistic      in.logits (N), in.labels (N) in {0,1} -> out.losses (N), binary
                cross-entropy with logits; grad.logits of sum(losses * dloss)
  adamw         in.p, in.g, in.m, in.v, meta lr beta1 beta2 eps wd t -> out.p, out.m,
                out.v (torch.optim.AdamW step t, 1-based)
Outputs other than the main one (mean, rstd, att, probs) are compared but receive
no upstream gradient. Every out.* and grad.* in a file gets a PASS/FAIL line; one
the script cannot recompute is a FAIL, so a misnamed tensor is not silently skipped.
"""
import argparse
import contextlib
import glob
import io
import math
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cbref  # noqa: E402

# Tolerance on max|cubist - ref| / max|ref| per tensor, ref in float64. A float32
# kernel's error is a few ulps (6e-8) times the growth of a sum of K terms
# (~sqrt(K)..K for K up to a few thousand): torch's own float32 error is printed
# beside each figure and stays below ~2e-6 at test sizes. 1e-5 (forward) and 5e-5
# (backward: longer chains, cancelling sums in layernorm/softmax backward) leave a
# decade of room; a wrong index, scale or missing term gives 1e-2 or more.
FWD_TOL = 1e-5
BWD_TOL = 5e-5
ADAMW_TOL = 1e-5


def meta_int(meta, *keys):
    for k in keys:
        if k in meta:
            return int(float(meta[k]))
    raise KeyError(f"__metadata__ lacks {' / '.join(keys)}")


def meta_float(meta, *keys):
    for k in keys:
        if k in meta:
            return float(meta[k])
    raise KeyError(f"__metadata__ lacks {' / '.join(keys)}")


# Each op: f(ins: {name: tensor}, meta) -> ({out name: tensor}, main output name, differentiable inputs)
def op_encoder(x, meta):
    inp = x["inp"].long()
    T = inp.shape[1]
    return {"out": x["wte"][inp] + x["wpe"][:T]}, "out", ["wte", "wpe"]


def op_layernorm(x, meta):
    inp = x["inp"]
    mean = inp.mean(-1)
    rstd = 1.0 / torch.sqrt(((inp - mean[..., None]) ** 2).mean(-1) + cbref.LN_EPS)
    out = cbref.layernorm(inp, x["w"], x["b"])
    return {"out": out, "mean": mean, "rstd": rstd}, "out", ["inp", "w", "b"]


def op_matmul(x, meta):
    out = x["inp"] @ x["w"]
    diff = ["inp", "w"]
    if "bias" in x:
        out = out + x["bias"]
        diff.append("bias")
    return {"out": out}, "out", diff


def op_head(x, meta):
    return {"out": x["inp"] @ x["w"].t()}, "out", ["inp", "w"]


def attention_probs(qkv, NH):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // NH
    q = qkv[..., :C].reshape(B, T, NH, hs).transpose(1, 2)
    k = qkv[..., C:2 * C].reshape(B, T, NH, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return att.masked_fill(~mask, float("-inf")).softmax(-1)


def op_attention(x, meta):
    NH = meta_int(meta, "NH", "n_head", "nh")
    out = cbref.attention(x["qkv"], NH)
    return {"out": out, "att": attention_probs(x["qkv"], NH)}, "out", ["qkv"]


def masked_attention(q, k, v, NH, causal, qlen, klen):
    """q (B,Tq,C), k, v (B,Tk,C): query i of sequence b sees key j < klen[b] (and j <= i
    when causal); rows i >= qlen[b] (and rows that see no key) are zero. Returns the
    output (B,Tq,C) and the probabilities (B,NH,Tq,Tk), zero where masked."""
    B, Tq, C = q.shape
    Tk, hs = k.shape[1], C // NH
    heads = lambda x, T: x.reshape(B, T, NH, hs).transpose(1, 2)  # noqa: E731
    s = heads(q, Tq) @ heads(k, Tk).transpose(-2, -1) / math.sqrt(hs)
    i, j = torch.arange(Tq)[:, None], torch.arange(Tk)[None, :]
    mask = (j < klen[:, None, None]) & (i < qlen[:, None, None])
    if causal:
        mask = mask & (j <= i)
    mask = mask[:, None]
    # a finite fill, so a row with no key is a uniform softmax that the where zeroes
    # (its gradient too), where -inf would give NaN
    p = torch.where(mask, s.masked_fill(~mask, -1e30).softmax(-1), torch.zeros_like(s))
    return (p @ heads(v, Tk)).transpose(1, 2).reshape(B, Tq, C), p


def op_attention_padded(x, meta):
    """Bidirectional self-attention on in.qkv (B,T,3C) with key and query lengths in.lens."""
    NH = meta_int(meta, "NH")
    qkv = x["qkv"]
    C = qkv.shape[-1] // 3
    q, k, v = qkv.split(C, dim=-1)
    out, p = masked_attention(q, k, v, NH, False, x["lens"], x["lens"])
    return {"out": out, "att": p}, "out", ["qkv"]


def op_attention_cross(x, meta):
    """Causal cross-attention of in.q (B,Tq,C) over in.kv (B,Tk,2C) = [k | v], lengths
    in.qlen and in.klen."""
    NH, B, C = meta_int(meta, "NH"), meta_int(meta, "B"), meta_int(meta, "C")
    q, kv = x["q"].reshape(B, -1, C), x["kv"].reshape(B, -1, 2 * C)
    k, v = kv.split(C, dim=-1)
    out, p = masked_attention(q, k, v, NH, True, x["qlen"], x["klen"])
    return {"out": out, "att": p}, "out", ["q", "kv"]


def op_gelu(x, meta):
    return {"out": cbref.gelu(x["inp"])}, "out", ["inp"]


def op_residual(x, meta):
    return {"out": x["a"] + x["b"]}, "out", ["a", "b"]


def op_crossentropy(x, meta):
    logits, tgt = x["logits"], x["targets"].long()
    losses = torch.nn.functional.cross_entropy(logits, tgt, reduction="none")
    return {"losses": losses, "probs": logits.softmax(-1)}, "losses", ["logits"]


# test_ops's crossentropy_smooth case (cb_layer_set_loss): label smoothing 0.1,
# targets equal to 3 weighted 0 and the others 1.3 (the engine's rows / real rows)
SMOOTH_EPS, SMOOTH_IGNORE, SMOOTH_SCALE = 0.1, 3, 1.3


def op_crossentropy_smooth(x, meta):
    logits, tgt = x["logits"], x["targets"].long()
    losses = torch.nn.functional.cross_entropy(logits, tgt, reduction="none", label_smoothing=SMOOTH_EPS)
    w = torch.where(tgt == SMOOTH_IGNORE, 0.0, SMOOTH_SCALE).to(logits.dtype)
    return {"losses": losses * w, "probs": logits.softmax(-1)}, "losses", ["logits"]


def op_mul(x, meta):
    return {"out": x["a"] * x["b"]}, "out", ["a", "b"]


def op_relu(x, meta):
    return {"out": torch.relu(x["inp"])}, "out", ["inp"]


def op_lookup(x, meta):
    return {"out": x["table"][x["ids"]]}, "out", ["table"]


def op_logistic(x, meta):
    z, y = x["logits"], x["labels"].to(x["logits"].dtype)
    losses = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
    return {"losses": losses}, "losses", ["logits"]


OPS = {"encoder": op_encoder, "layernorm": op_layernorm, "matmul": op_matmul, "head": op_head,
       "attention": op_attention, "gelu": op_gelu, "residual": op_residual,
       "crossentropy": op_crossentropy, "mul": op_mul, "relu": op_relu, "lookup": op_lookup,
       "logistic": op_logistic, "attention_padded": op_attention_padded,
       "attention_cross": op_attention_cross, "crossentropy_smooth": op_crossentropy_smooth}
INTEGER_INPUTS = {"inp": ("encoder",), "targets": ("crossentropy", "crossentropy_smooth"), "ids": ("lookup",),
                  "labels": ("logistic",), "lens": ("attention_padded",),
                  "qlen": ("attention_cross",), "klen": ("attention_cross",)}
# test_ops writes every tensor flat (1-D); the op's shapes come from the sizes in
# __metadata__. -1 is inferred, so flat and shaped dumps both load.
SHAPES = {
    "encoder": {"inp": ("B", "T"), "wte": (-1, "C"), "wpe": (-1, "C")},
    "layernorm": {"inp": (-1, "C")},
    "matmul": {"inp": (-1, "IC"), "w": ("IC", "OC")},
    "head": {"inp": (-1, "C"), "w": (-1, "C")},
    "attention": {"qkv": ("B", "T", -1)},
    "attention_padded": {"qkv": ("B", "T", -1)},
    "crossentropy": {"logits": (-1, "V")},
    "crossentropy_smooth": {"logits": (-1, "V")},
    "lookup": {"table": (-1, "C")},
}


def shaped(op, name, a, meta):
    spec = SHAPES.get(op, {}).get(name)
    if spec is None:
        return a
    return a.reshape(tuple(d if isinstance(d, int) else meta_int(meta, d) for d in spec))


def upstream(op, arrs, meta, out, dtype):
    """The gradient of the main output: tensor `in.dout` (or `dout`), any shape holding
    out's elements; crossentropy may give the scalar meta "dloss" instead."""
    for k in ("in.dout", "dout"):
        if k in arrs:
            return torch.from_numpy(arrs[k].astype(np.float64)).to(dtype).reshape(out.shape)
    if op in ("crossentropy", "logistic") and ("dloss" in meta or "dloss_scale" in meta):
        return meta_float(meta, "dloss", "dloss_scale")
    raise KeyError("no upstream gradient: add an `in.dout` tensor (crossentropy: or meta \"dloss\")")


def reference(op, arrs, meta, dtype):
    """Recomputes forward and backward of one dumped case; returns {"out.x": np, "grad.x": np}."""
    ins = {}
    for k, a in arrs.items():
        if not k.startswith("in.") or k == "in.dout":
            continue
        n = k[3:]
        a = shaped(op, n, a, meta)
        if op in INTEGER_INPUTS.get(n, ()):
            ins[n] = torch.from_numpy(np.rint(a.astype(np.float64)).astype(np.int64))
        else:
            ins[n] = torch.from_numpy(a.astype(np.float64)).to(dtype)
    outs, main, diff = OPS[op](dict(ins), meta)
    for n in diff:
        if n not in ins:
            raise KeyError(f"input in.{n} missing")
    leaves = {n: ins[n].clone().requires_grad_(True) for n in diff}
    outs, main, _ = OPS[op]({**ins, **leaves}, meta)
    dout = upstream(op, arrs, meta, outs[main], dtype)
    (outs[main] * dout).sum().backward()
    res = {f"out.{k}": v.detach().double().numpy() for k, v in outs.items()}
    res.update({f"grad.{n}": t.grad.double().numpy() for n, t in leaves.items()})
    return res


def adamw_reference(arrs, meta, dtype):
    """One torch.optim.AdamW step from state (m, v) at 1-based step t."""
    t = meta_int(meta, "t", "step")
    lr, b1, b2 = meta_float(meta, "lr"), meta_float(meta, "beta1"), meta_float(meta, "beta2")
    eps, wd = meta_float(meta, "eps"), meta_float(meta, "wd", "weight_decay")
    get = lambda n: torch.from_numpy(arrs["in." + n].astype(np.float64)).to(dtype)  # noqa: E731
    p, g, m, v = get("p"), get("g"), get("m"), get("v")
    p = p * (1 - lr * wd)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    p = p - lr * mhat / (vhat.sqrt() + eps)
    return {"out.p": p.double().numpy(), "out.m": m.double().numpy(), "out.v": v.double().numpy()}


def op_of(path, meta):
    if "op" in meta:
        return meta["op"]
    base = os.path.basename(path)
    for name in sorted(list(OPS) + ["adamw"], key=len, reverse=True):
        if base.startswith(name):
            return name
    return None


def check_file(ck, path):
    case = os.path.basename(path).rsplit(".safetensors", 1)[0]
    try:
        arrs, meta = cbref.read_safetensors(path)
    except Exception as ex:  # noqa: BLE001 - a broken dump is one FAIL line, not a traceback
        ck.check(False, f"{case} read", f"{path}: {ex}")
        return
    op = op_of(path, meta)
    if op is None:
        ck.check(False, f"{case} op", f"{path}: unknown op; name the file for one of {sorted(OPS) + ['adamw']}")
        return
    try:
        if op == "adamw":
            ref, ref32 = adamw_reference(arrs, meta, torch.float64), adamw_reference(arrs, meta, torch.float32)
        else:
            ref, ref32 = reference(op, arrs, meta, torch.float64), reference(op, arrs, meta, torch.float32)
    except Exception as ex:  # noqa: BLE001
        ck.check(False, f"{case} recompute", f"{type(ex).__name__}: {ex}")
        return
    sizes = " ".join(f"{k}={v}" for k, v in sorted(meta.items()))
    print(f"# {case}: op {op}  {sizes}", flush=True)
    for k in sorted(arrs):
        if not (k.startswith("out.") or k.startswith("grad.")):
            continue
        name = f"{case} {k}"
        if k not in ref:
            ck.check(False, name, f"no reference for it; expected names: {sorted(ref)}")
            continue
        tol = ADAMW_TOL if op == "adamw" else (FWD_TOL if k.startswith("out.") else BWD_TOL)
        got, r = arrs[k], ref[k]
        if got.shape != r.shape:
            # the same data in a flattened shape (e.g. (N,C) vs (B,T,C)) is fine
            if got.size == r.size:
                got = got.reshape(r.shape)
            else:
                ck.check(False, name, f"shape {list(got.shape)} vs reference {list(r.shape)}")
                continue
        base = float(np.max(np.abs(ref32[k] - r)) / max(np.max(np.abs(r)), 1e-300)) if r.size else 0.0
        ok = np.all(np.isfinite(got))
        err = float(np.max(np.abs(got - r))) if r.size else 0.0
        mref = float(np.max(np.abs(r))) if r.size else 0.0
        rel = err / mref if mref > 0 else err
        ck.check(ok and rel <= tol, f"{name:<36s}",
                 f"max|err| {err:.3e}  max|ref| {mref:.3e}  rel {rel:.2e}  (torch fp32 {base:.1e})  tol {tol:.0e}")
    missing = [k for k in ref if k.startswith("grad.") and k not in arrs]
    if missing:
        ck.check(False, f"{case} gradients present", f"dump lacks {missing}")


# ------------------------------------------------------------------ self test
def write_case(path, op, ins, meta, dout=None, corrupt=None):
    """A dump as test_ops writes it, with torch float32 standing in for cubist."""
    arrs = {f"in.{k}": v for k, v in ins.items()}
    if dout is not None:
        arrs["in.dout"] = dout
    arrs = {k: np.asarray(v, dtype=np.float32) for k, v in arrs.items()}
    ref = adamw_reference(arrs, meta, torch.float32) if op == "adamw" else reference(op, arrs, meta, torch.float32)
    if corrupt and corrupt in ref:
        ref[corrupt] = ref[corrupt].copy()
        ref[corrupt].flat[0] += 0.01 * np.max(np.abs(ref[corrupt])) + 1e-3
    arrs.update(ref)
    # flat, as test_ops writes them
    cbref.write_safetensors(path, {k: np.asarray(v, np.float32).reshape(-1) for k, v in arrs.items()}, meta)


def self_test():
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    B, T, C, V, NH, N = 2, 8, 32, 50, 4, 16
    cases = [
        ("encoder", {"inp": rng.integers(0, V, (B, T)), "wte": r(V, C), "wpe": r(T, C)}, {"B": B, "T": T, "C": C, "V": V}, r(B, T, C)),
        ("layernorm", {"inp": r(N, C) * 3 + 1, "w": r(C), "b": r(C)}, {"N": N, "C": C}, r(N, C)),
        ("matmul", {"inp": r(N, C), "w": r(C, 3 * C), "bias": r(3 * C)}, {"N": N, "IC": C, "OC": 3 * C}, r(N, 3 * C)),
        ("matmul_nobias", {"inp": r(N, C), "w": r(C, C)}, {"N": N, "IC": C, "OC": C}, r(N, C)),
        ("head", {"inp": r(N, C), "w": r(V, C)}, {"N": N, "C": C, "V": V}, r(N, V)),
        ("attention", {"qkv": r(B, T, 3 * C)}, {"B": B, "T": T, "C": C, "NH": NH}, r(B, T, C)),
        ("gelu", {"inp": r(N, 4 * C) * 3}, {"n": N * 4 * C}, r(N, 4 * C)),
        ("residual", {"a": r(N, C), "b": r(N, C)}, {"n": N * C}, r(N, C)),
        ("crossentropy", {"logits": r(N, V) * 4, "targets": rng.integers(0, V, N)}, {"N": N, "V": V, "dloss": 1.0 / N}, None),
        ("adamw", {"p": r(1000), "g": r(1000), "m": r(1000) * 0.1, "v": np.abs(r(1000))},
         {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "wd": 0.1, "t": 3}, None),
    ]
    ck = cbref.Checks()
    with tempfile.TemporaryDirectory() as d:
        for name, ins, meta, dout in cases:
            op = op_of(name, {})
            write_case(os.path.join(d, name + ".safetensors"), op, ins, meta, dout)
        inner, buf = cbref.Checks(), io.StringIO()
        with contextlib.redirect_stdout(buf):
            for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
                check_file(inner, f)
        if not ck.check(inner.failed == 0 and inner.passed > 20, "self-test: float32 torch dumps pass",
                        f"{inner.passed} tensors passed, {inner.failed} failed"):
            print(buf.getvalue(), end="")
        # every corrupted tensor must fail
        missed = []
        for name, ins, meta, dout in cases:
            op = op_of(name, {})
            keys = list(adamw_reference({f"in.{k}": np.asarray(v, np.float32) for k, v in ins.items()}, meta, torch.float32)
                        if op == "adamw" else
                        reference(op, {**{f"in.{k}": np.asarray(v, np.float32) for k, v in ins.items()},
                                       **({"in.dout": dout} if dout is not None else {})}, meta, torch.float32))
            for key in keys:
                p = os.path.join(d, "bad", name + ".safetensors")
                os.makedirs(os.path.dirname(p), exist_ok=True)
                write_case(p, op, ins, meta, dout, corrupt=key)
                c = cbref.Checks()
                with contextlib.redirect_stdout(io.StringIO()):
                    check_file(c, p)
                if c.failed == 0:
                    missed.append(f"{name}:{key}")
        ck.check(not missed, "self-test: a 1% error in any one tensor fails", f"missed {missed}" if missed else "all caught")
    return ck.summary("ops_ref self-test")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", help="directory written by `test_ops --dump DIR`")
    ap.add_argument("--self-test", action="store_true", help="check this script on torch-made dumps")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.self_test:
        return self_test()
    if not a.dir:
        ap.error("give the dump directory or --self-test")
    files = sorted(glob.glob(os.path.join(a.dir, "*.safetensors")))
    ck = cbref.Checks()
    if not ck.check(bool(files), "ops_ref dumps found", f"{len(files)} files in {a.dir}"):
        return 1
    for f in files:
        check_file(ck, f)
    return ck.summary("ops_ref")


if __name__ == "__main__":
    sys.exit(main())
