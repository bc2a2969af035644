#!/usr/bin/python3
"""Compares a run with its reference, for the data-parallel tests.

    dp_compare.py NAME REF.jsonl GOT.jsonl[,MORE.jsonl...] [REF.st GOT.st] [--tol 1e-5]

Prints one PASS/FAIL line for the loss trajectory (every step's loss within
tol relative, the gradient norm too, and the same steps) and, given two safetensors files, one for
the final parameters (max |got - ref| over every tensor within tol, also
relative to the tensor's largest magnitude when that is above 1)."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import read_st  # noqa: E402


def read_log(paths):
    rows = []
    for p in paths.split(","):
        with open(p) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def main(argv):
    tol = 1e-5
    if "--tol" in argv:
        i = argv.index("--tol")
        tol = float(argv[i + 1])
        del argv[i:i + 2]
    name, ref_log, got_log = argv[1:4]
    bad = 0
    ref, got = read_log(ref_log), read_log(got_log)
    steps_ok = [r["step"] for r in ref] == [g["step"] for g in got]
    err = max((abs(g["loss"] - r["loss"]) / max(abs(r["loss"]), 1e-30)
               for r, g in zip(ref, got)), default=float("inf"))
    gn = max((abs(g["grad_norm"] - r["grad_norm"]) / max(abs(r["grad_norm"]), 1e-30)
              for r, g in zip(ref, got)), default=float("inf"))
    ok = steps_ok and err <= tol and gn <= tol and len(ref) > 0
    bad += not ok
    print("%s %s: %d-step loss trajectory, max rel err %.2e (tol %g; grad_norm %.2e)%s"
          % ("PASS" if ok else "FAIL", name, len(ref), err, tol, gn,
             "" if steps_ok else "; steps differ: %d vs %d lines" % (len(ref), len(got))))
    if len(argv) >= 6:
        a, b = read_st(argv[4]), read_st(argv[5])
        worst, where = 0.0, ""
        same = sorted(a) == sorted(b)
        for k in a:
            if k not in b or a[k].shape != b[k].shape:
                same = False
                continue
            d = float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) / max(1.0, float(np.max(np.abs(a[k]))))
            if d > worst:
                worst, where = d, k
        ok = same and worst <= tol
        bad += not ok
        print("%s %s: final parameters, max err %.2e in %s (tol %g)%s"
              % ("PASS" if ok else "FAIL", name, worst, where or "-", tol,
                 "" if same else "; tensor names or shapes differ"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
