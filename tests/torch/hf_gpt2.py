#!/usr/bin/python3
"""Published GPT-2 weights: files shaped as Hugging Face publishes them,
written here by PyTorch, loaded by cubist, logits compared with PyTorch's.

  /usr/bin/python3 tests/torch/hf_gpt2.py BUILD_DIR WORK_DIR

The files: GPT2LMHeadModel's state dict ("transformer." prefix, lm_head.weight
tied to wte), the attn.bias causal-mask buffers (1,1,T,T) and attn.masked_bias
scalars that older files carry, GPT-2's 50,257-token vocabulary, no cubist
metadata; as F32, F16 and BF16 (every tensor in that dtype). A small model
(2 layers, d_model 64, 4 heads, context 32) keeps the test fast; every
parameter is random, LayerNorm gains and biases too, so none is a no-op, and
wte has std 0.3 so that logits spread over several units as a trained
model's do (at 0.02 they would all sit within 0.2 of each other).

cubist (build/tests/test_hf_load: the GPT graph behind `cubist train
--init` and `cubist sample`, loaded with cb_model_load) writes the
next-token probabilities of a 32-token sequence (the full context). Softmax
discards each row's shift of the logits, so we compare centred logits:
log-probabilities minus their row mean (= logits minus their row mean,
exactly), as max|cubist - torch| / max|torch|.

Tolerances:
- EXACT 1e-5, for every dtype against PyTorch run in float32 on the weights as
  the file holds them (F16/BF16 widened to float32, which is exact): the same
  model in float32 both sides, differing only in summation order (measured
  ~1e-7 relative). This is the check that the conversion is exact.
- Against PyTorch on the original float32 weights, the half files carry the
  rounding of every weight: |dw| <= u|w|, u = 2^-8 (BF16, 8 significant bits)
  or 2^-11 (F16, 11 bits) for round to nearest. To first order a product of k
  perturbed linear maps has relative error <= k u (norms multiply, each factor
  is off by at most u relative), and LayerNorm renormalises the residual
  stream, so errors do not compound across blocks beyond that. A logit passes
  through k = 2 + 4 L + 1 weight tensors on its longest path (wte/wpe, the
  four linears of each of L blocks, the tied head) plus the LayerNorm gains,
  so k = 2 + 4*2 + 1 + 2*2 + 1 = 16 for L = 2, and the tolerance is k u:
  BF16 6.3e-2, F16 7.8e-3 (centring is a projection: it adds no error).
  Random rounding errors add in quadrature rather than in line, so the
  measured error sits below the bound: printed with each check.
"""
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cbref  # noqa: E402

EXACT = 1e-5
L, C, NH, CTX, V = 2, 64, 4, 32, 50257
K = 2 + 4 * L + 1 + 2 * L + 1
HALF_TOL = {"f16": K * 2.0 ** -11, "bf16": K * 2.0 ** -8}


def random_params(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, shape in cbref.param_shapes(cfg):
        t = torch.randn(shape, generator=g) * 0.02
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            t = 1.0 + 5 * t
        if name == "wte.weight":
            t = t * 15
        P[name] = t
    return P


def to_bytes(t, dtype):
    """(safetensors dtype, little-endian bytes) of t in dtype."""
    if dtype == "bf16":
        return "BF16", t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().astype("<i2").tobytes()
    if dtype == "f16":
        return "F16", t.to(torch.float16).numpy().astype("<f2").tobytes()
    return "F32", t.to(torch.float32).numpy().astype("<f4").tobytes()


def write_hf(path, P, cfg, dtype):
    """GPT2LMHeadModel's state dict with its buffers, in dtype."""
    tensors = {}
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        tensors[p + "attn.bias"] = torch.ones(cfg.seq_len, cfg.seq_len).tril().view(1, 1, cfg.seq_len, cfg.seq_len)
        tensors[p + "attn.masked_bias"] = torch.tensor(-1e4)
    for name, _ in cbref.param_shapes(cfg):
        tensors["transformer." + name] = P[name]
    tensors["lm_head.weight"] = P["wte.weight"]
    import json
    import struct
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        dt, b = to_bytes(t, dtype)
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))


def rounded(P, dtype):
    """The weights as the file holds them, widened back to float32."""
    if dtype == "fp32":
        return P
    td = torch.bfloat16 if dtype == "bf16" else torch.float16
    return {k: v.to(td).to(torch.float32) for k, v in P.items()}


def centred(lp):
    """(T, V) log-probabilities -> logits less their row mean."""
    return lp - lp.mean(axis=-1, keepdims=True)


def main():
    build, work = sys.argv[1], sys.argv[2]
    chk = cbref.Checks()
    cfg = cbref.Config(L, C, NH, CTX, V)
    P = random_params(cfg, 15)
    ids = torch.randint(0, V, (1, CTX), generator=torch.Generator().manual_seed(7))
    ids[0, 5] = V - 1  # <|endoftext|>, the last row of wte
    arg = ",".join(str(int(i)) for i in ids[0])
    with torch.no_grad():
        ref_full = centred(torch.log_softmax(cbref.gpt2_logits(P, cfg, ids)[0].double(), dim=-1).numpy())
    for dtype in ("fp32", "f16", "bf16"):
        path = os.path.join(work, f"gpt2_hf_{dtype}.safetensors")
        out = os.path.join(work, f"probs_{dtype}.safetensors")
        write_hf(path, P, cfg, dtype)
        r = subprocess.run([os.path.join(build, "tests", "test_hf_load"), path, str(NH), out, arg],
                           capture_output=True, text=True)
        if not chk.check(r.returncode == 0, f"hf {dtype}: cubist loads the file",
                         (r.stderr or r.stdout).strip()[-300:]):
            continue
        got, _ = cbref.read_safetensors(out)
        with torch.no_grad():
            ref = centred(torch.log_softmax(cbref.gpt2_logits(rounded(P, dtype), cfg, ids)[0].double(), dim=-1).numpy())
        for path_name in ("graph",):
            lp = centred(np.log(got[path_name].astype(np.float64)))
            chk.rel_max(f"hf {dtype} {path_name}:", "logits vs torch on the file's weights", lp, ref, EXACT)
            if dtype != "fp32":
                chk.rel_max(f"hf {dtype} {path_name}:", "logits vs torch on fp32 weights", lp, ref_full,
                            HALF_TOL[dtype])
    sys.exit(chk.summary("hf_gpt2"))


if __name__ == "__main__":
    main()
