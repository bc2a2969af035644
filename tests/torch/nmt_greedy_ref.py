#!/usr/bin/python3
"""PyTorch reference greedy decoder for tests/test_translate.sh: the model of
a `cubist train --model nmt` checkpoint (config from its metadata, weights from
its tensors) in float64, tests/torch/nmt_ref.py's network, decoding each line
of --input (byte tokens) by recomputing the whole model for every new token and
taking the most likely id among the tokenizer's and EOS (cubist translate's
choice). Prints one line of output ids per source, and to stderr the smallest
gap between the two most likely ids seen (how far from a tie the choices were)."""
import argparse
import sys
import os
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cbref import read_safetensors  # noqa: E402
from nmt_ref import decode_logits  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--max-len", type=int, default=0)
    o = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    W, meta = read_safetensors(o.model)
    P = {k: torch.tensor(np.asarray(v), dtype=torch.float64) for k, v in W.items()}
    a = types.SimpleNamespace(heads=int(meta["n_head"]), layers=int(meta["enc_layers"]),
                              dec_layers=int(meta["dec_layers"]), pre_ln=meta["pre_ln"] == "1",
                              vocab=int(meta["vocab"]), no_emb_scale=meta["emb_scale"] == "0",
                              dropout=0.0, seed=0)  # decoding: no dropout
    T, V = int(meta["seq_len"]), a.vocab
    pad, bos, eos = V - 3, V - 2, V - 1
    max_len = o.max_len or T - 1
    gap = float("inf")
    for line in open(o.input, "rb").read().split(b"\n")[:-1]:
        src = list(line) + [eos] + [pad] * (T - len(line) - 1)
        dec, out = [bos], []
        with torch.no_grad():
            for t in range(max_len):
                d = dec + [pad] * (T - len(dec))
                z = decode_logits(P, a, torch.tensor([src]), torch.tensor([d]),
                                  torch.tensor([len(line) + 1]), torch.tensor([T]))[0, t]
                z = torch.cat([z[:pad], z[eos:]])  # the choosable ids: the bytes, EOS
                top = torch.topk(z, 2).values
                gap = min(gap, float(top[0] - top[1]))
                k = int(torch.argmax(z))
                tok = eos if k == pad else k
                if tok == eos:
                    break
                out.append(tok)
                dec.append(tok)
        print(" ".join(map(str, out)))
    print(f"smallest logit gap between the two most likely ids: {gap:.3g}", file=sys.stderr)


if __name__ == "__main__":
    main()
