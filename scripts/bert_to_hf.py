#!/usr/bin/python3
"""Converts a cubist BERT / RoBERTa weights file (`cubist train --model bert
--save F`) into Hugging Face's BertForMaskedLM / RobertaForMaskedLM layout:

  scripts/bert_to_hf.py IN.safetensors OUT.safetensors

cubist keeps Hugging Face's tensor names but stores linear weights [in, out]
and fuses query, key and value into one `attention.self.qkv` linear; this
splits the fusion into `attention.self.query|key|value`, transposes every
linear weight to nn.Linear's [out, in], writes the tied decoder
(`cls.predictions.decoder.weight` = the word embeddings, `.decoder.bias` =
`cls.predictions.bias`; RoBERTa's `lm_head.decoder.*`), and for RoBERTa
shifts the position table by padding_idx + 1 = 2 rows (Hugging Face's
positions start at 2). The LayerNorm epsilon to set in the config is 1e-5.
"""
import json
import struct
import sys

import numpy as np


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    data = b[8 + n:]
    out = {}
    for k, v in h.items():
        if v["dtype"] != "F32":
            raise SystemExit(f"{path}: {k} is {v['dtype']}; save with --save-dtype fp32")
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(data[s:e], dtype="<f4").reshape(v["shape"])
    return out, meta


def write(path, tensors, meta):
    header, off, blobs = {"__metadata__": meta}, 0, []
    for k, v in tensors.items():
        b = np.ascontiguousarray(v, dtype="<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    import os
    os.replace(path + ".tmp", path)


def convert(P):
    roberta = any(k.startswith("roberta.") for k in P)
    out = {}
    for k, v in P.items():
        if k.endswith("attention.self.qkv.weight"):
            base = k[:-len("qkv.weight")]
            for name, part in zip(("query", "key", "value"), np.split(v, 3, axis=1)):
                out[base + name + ".weight"] = part.T
        elif k.endswith("attention.self.qkv.bias"):
            base = k[:-len("qkv.bias")]
            for name, part in zip(("query", "key", "value"), np.split(v, 3)):
                out[base + name + ".bias"] = part
        elif k.endswith("dense.weight"):
            out[k] = v.T
        elif roberta and k.endswith("embeddings.position_embeddings.weight"):
            out[k] = np.concatenate([np.zeros((2, v.shape[1]), v.dtype), v])
        else:
            out[k] = v
    enc, head = ("roberta", "lm_head") if roberta else ("bert", "cls.predictions")
    out[head + ".decoder.weight"] = P[enc + ".embeddings.word_embeddings.weight"]
    out[head + ".decoder.bias"] = P[head + ".bias"]
    return out


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    P, meta = read(sys.argv[1])
    write(sys.argv[2], convert(P), meta)


if __name__ == "__main__":
    main()
