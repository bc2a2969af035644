#!/usr/bin/python3
"""Compares what two runs wrote, printing one PASS/FAIL line per check.

  compare.py logs A B [--tol 1e-5] [--label L] [--keys loss,grad_norm]
      A, B: JSONL logs (cubist train --log) or text lines "step N key value ..."
      (examples/); every step's values within tol relative.
  compare.py st A B [--tol 1e-5] [--label L] [--grads G]
      two safetensors files: same tensor names and shapes, every tensor within
      tol as ||a - b|| / ||b|| (L2 over the tensor; ||a - b|| alone for a
      tensor that is zero in B). The element-wise max |a-b| / max |b| is
      printed too, for information: after 30 AdamW steps a few elements
      whose gradients sit near Adam's eps carry last-bit differences of
      regrouped fp32 sums as visibly different steps, while a real error
      moves whole tensors.
  compare.py batch FILE
      one of the above per line of FILE, its arguments tab-separated: one
      Python start for a test's many comparisons, run after its runs.

The key third of a GPT attn.c_attn.bias is exempt, and the line says why:
its gradient is zero in exact arithmetic (softmax ignores a constant added
to a row of scores, and q . b_k is one), so its fp32 gradient is rounding
noise that depends on the order of sums across ranks, and Adam's
normalisation turns that noise into steps of up to lr. Instead G, the
step-1 gradients of the run that wrote B (cubist train --dump-grads), must
show that noise: ||g_key|| / ||g_q, g_v|| <= 1e-4 in every layer. Files
with such a tensor need --grads; a comparison without it fails. --tol 0
asks for identical files: then nothing is exempt and no --grads is needed.
"""
import argparse, json, struct, sys
import numpy as np

KEY_TOL = 1e-4
KEY_WHY = ('key third of attn.c_attn.bias exempt: its gradient is zero in exact arithmetic '
           '(softmax ignores a per-row constant), so its values are rounding noise amplified by Adam')


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


def is_qkv_bias(name):
    return name.endswith('attn.c_attn.bias')


def split_key(v):
    """(q and v thirds, key third) of a c_attn.bias"""
    C = v.shape[0] // 3
    return np.concatenate([v[:C], v[2 * C:]]), v[C:2 * C]


def key_grad_check(grads_path, names, lab):
    """One line: the key third's step-1 gradient against the rest of its bias."""
    if grads_path is None:
        return False, f'FAIL {lab}{KEY_WHY}; but no --grads file to check that its gradient is noise'
    g = read_st(grads_path)
    worst, where = 0.0, '-'
    for k in names:
        if k not in g:
            return False, f'FAIL {lab}{grads_path} has no gradient {k}'
        qv, key = split_key(g[k].astype(np.float64))
        r = float(np.linalg.norm(key)) / max(float(np.linalg.norm(qv)), 1e-30)
        if r >= worst:
            worst, where = r, k
    ok = worst <= KEY_TOL
    return ok, (f'{"PASS" if ok else "FAIL"} {lab}{KEY_WHY}; instead its step-1 gradient: max '
                f'||g_key||/||g_q,v|| {worst:.2e} ({where}, tol {KEY_TOL:g})')


def compare_st(pa, pb, tol, grads, lab):
    """(ok, lines): per-tensor L2 relative, the key third exempt and checked."""
    a, b = read_st(pa), read_st(pb)
    if sorted(a) != sorted(b) or any(a[k].shape != b[k].shape for k in a):
        return False, [f'FAIL {lab}tensor names or shapes differ']
    lines, ok = [], True
    # --tol 0 asks for identical files: nothing is exempt, nothing to explain
    qkv = [k for k in a if is_qkv_bias(k)] if tol > 0 else []
    if qkv:
        kok, line = key_grad_check(grads, qkv, lab)
        ok &= kok
        lines.append(line)
    worst, where, emax = 0.0, '', 0.0
    for k in a:
        x, y = a[k].astype(np.float64).ravel(), b[k].astype(np.float64).ravel()
        if k in qkv:
            x, y = split_key(x)[0], split_key(y)[0]
        if not y.size:
            continue
        den = float(np.linalg.norm(y))
        r = float(np.linalg.norm(x - y)) / (den if den > 0 else 1.0)
        m = float(np.max(np.abs(y)))
        emax = max(emax, float(np.max(np.abs(x - y))) / (m if m > 0 else 1.0))
        if r > worst:
            worst, where = r, k
    tok = worst <= tol
    ok &= tok
    lines.append(f'{"PASS" if tok else "FAIL"} {lab}{len(a)} tensors: max ||a-b||/||b|| '
                 f'{worst:.2e} ({where or "-"}, tol {tol:g}; element-wise max/max {emax:.1e})')
    return ok, lines


def compare_logs(pa, pb, tol, keys, lab):
    a, b = read_log(pa, keys), read_log(pb, keys)
    if not a or [s for s, _ in a] != [s for s, _ in b]:
        return False, f'FAIL {lab}steps differ: {len(a)} vs {len(b)} logged steps'
    worst = max(abs(x - y) / max(abs(y), 1e-30)
                for (_, va), (_, vb) in zip(a, b) for x, y in zip(va, vb))
    ok = worst <= tol
    return ok, (f'{"PASS" if ok else "FAIL"} {lab}{len(a)} steps of {",".join(keys)}: '
                f'max rel diff {worst:.2e} (tol {tol:g})')


def parser():
    ap = argparse.ArgumentParser()
    ap.add_argument('kind', choices=['logs', 'st'])
    ap.add_argument('a')
    ap.add_argument('b')
    ap.add_argument('--tol', type=float, default=1e-5)
    ap.add_argument('--label', default='')
    ap.add_argument('--keys', default='loss,grad_norm')
    ap.add_argument('--grads', default=None)
    return ap


def compare(argv):
    """(ok, lines) of one comparison given its command-line arguments"""
    o = parser().parse_args(argv)
    lab = o.label + ': ' if o.label else ''
    if o.kind == 'logs':
        ok, line = compare_logs(o.a, o.b, o.tol, o.keys.split(','), lab)
        return ok, [line]
    return compare_st(o.a, o.b, o.tol, o.grads, lab)


def batch(path):
    """Every line of PATH one comparison's arguments, tab-separated; a
    comparison that cannot run (a missing file, bad arguments) is a FAIL
    line naming it, and the others still run."""
    ok = True
    for line in open(path):
        argv = line.rstrip('\n').split('\t')
        try:
            cok, lines = compare(argv)
        except (Exception, SystemExit) as e:
            cok, lines = False, [f'FAIL compare.py {" ".join(argv)}: {type(e).__name__}: {e}']
        ok &= cok
        print('\n'.join(lines), flush=True)
    return 0 if ok else 1


def main():
    if sys.argv[1:2] == ['batch'] and len(sys.argv) == 3:
        return batch(sys.argv[2])
    ok, lines = compare(sys.argv[1:])
    print('\n'.join(lines))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
