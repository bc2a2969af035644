#!/usr/bin/python3
"""Compares what two runs wrote, printing one PASS/FAIL line per check.

  compare.py logs A B [--tol 1e-5] [--label L] [--keys loss,grad_norm]
      A, B: JSONL logs (cubist train --log) or text lines "step N key value ..."
      (examples/mlp_lm); every step's values within tol relative.
  compare.py st A B [--tol 1e-5] [--label L] [--key-bias-abs X]
      two safetensors files: same tensor names and shapes, every tensor within
      tol as ||a - b|| / ||b|| (L2 over the tensor). Element-wise max ratios
      are printed too: after 30 AdamW steps a few elements whose gradients
      sit near Adam's eps carry last-bit differences of regrouped fp32 sums
      as visibly different steps, while any real error moves whole tensors.
      --key-bias-abs X: the key third of each GPT attn.c_attn.bias is compared
      against the absolute bound X instead. Its gradient is zero in exact
      arithmetic (softmax ignores a constant added to a row of scores), so
      its fp32 gradient is rounding noise, which differs with the order of
      sums across ranks, and Adam's normalisation turns noise into steps of up
      to lr * |g| / (|g| + eps). X = the sum of the learning rates bounds it.
"""
import argparse, json, struct, sys
import numpy as np


def read_log(path, keys):
    rows = []
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        if line.startswith('{'):
            o = json.loads(line)
            rows.append((o['step'], [float(o[k]) for k in keys]))
        elif line.startswith('step '):
            w = line.split()
            kv = dict(zip(w[2::2], w[3::2]))
            rows.append((int(w[1]), [float(kv[k]) for k in keys]))
    return rows


def read_st(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in hdr.items():
        if name == '__metadata__':
            continue
        b, e = t['data_offsets']
        out[name] = np.frombuffer(data[b:e], dtype='<f4').reshape(t['shape'])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('kind', choices=['logs', 'st'])
    ap.add_argument('a')
    ap.add_argument('b')
    ap.add_argument('--tol', type=float, default=1e-5)
    ap.add_argument('--label', default='')
    ap.add_argument('--keys', default='loss,grad_norm')
    ap.add_argument('--key-bias-abs', type=float, default=None)
    o = ap.parse_args()
    lab = o.label + ': ' if o.label else ''
    if o.kind == 'logs':
        keys = o.keys.split(',')
        a, b = read_log(o.a, keys), read_log(o.b, keys)
        if not a or [s for s, _ in a] != [s for s, _ in b]:
            print(f'FAIL {lab}steps differ: {len(a)} vs {len(b)} logged steps')
            return 1
        worst = max(abs(x - y) / max(abs(y), 1e-30)
                    for (_, va), (_, vb) in zip(a, b) for x, y in zip(va, vb))
        ok = worst <= o.tol
        print(f'{"PASS" if ok else "FAIL"} {lab}{len(a)} steps of {",".join(keys)}: '
              f'max rel diff {worst:.2e} (tol {o.tol:g})')
        return 0 if ok else 1
    a, b = read_st(o.a), read_st(o.b)
    if sorted(a) != sorted(b) or any(a[k].shape != b[k].shape for k in a):
        print(f'FAIL {lab}tensor names or shapes differ')
        return 1
    worst, where, emax = 0.0, '', 0.0
    if o.key_bias_abs is not None:
        for k in list(a):
            if k.endswith('attn.c_attn.bias'):
                C = a[k].shape[0] // 3
                dk = float(np.max(np.abs(a[k][C:2 * C] - b[k][C:2 * C])))
                if dk > o.key_bias_abs:
                    print(f'FAIL {lab}{k} key third: max abs diff {dk:.2e} > {o.key_bias_abs:g}')
                    return 1
                a[k] = np.concatenate([a[k][:C], a[k][2 * C:]])
                b[k] = np.concatenate([b[k][:C], b[k][2 * C:]])
    for k in a:
        if not b[k].size:
            continue
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        den = float(np.linalg.norm(y))
        r = float(np.linalg.norm(x - y)) / (den if den > 0 else 1.0)
        m = float(np.max(np.abs(y)))
        emax = max(emax, float(np.max(np.abs(x - y))) / (m if m > 0 else 1.0))
        if r > worst:
            worst, where = r, k
    ok = worst <= o.tol
    print(f'{"PASS" if ok else "FAIL"} {lab}{len(a)} tensors: max ||a-b||/||b|| {worst:.2e} '
          f'({where or "-"}, tol {o.tol:g}; element-wise max/max {emax:.1e})')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
