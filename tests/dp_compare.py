#!/usr/bin/python3
"""Compares a run with its reference, for the data- and tensor-parallel tests.

    dp_compare.py NAME REF.jsonl GOT.jsonl[,MORE.jsonl...] [REF.st GOT.st]
                  [--tol 1e-5] [--grads REF_GRADS.st]

Prints one PASS/FAIL line for the loss trajectory (every step's loss and
gradient norm within tol relative, the same steps) and, given two
safetensors files, the lines of compare.py st for the final parameters:
every tensor within tol as ||got - ref|| / ||ref||, the key third of a GPT
attn.c_attn.bias exempt (its gradient is rounding noise; the reason is
printed) and instead checked in REF_GRADS.st, the reference's step-1
gradients (cubist train --dump-grads): see compare.py."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import compare_st  # noqa: E402


def read_log(paths):
    rows = []
    for p in paths.split(","):
        with open(p) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def option(argv, name):
    if name not in argv:
        return None
    i = argv.index(name)
    v = argv[i + 1]
    del argv[i:i + 2]
    return v


def main(argv):
    tol = float(option(argv, "--tol") or 1e-5)
    grads = option(argv, "--grads")
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
        ok, lines = compare_st(argv[5], argv[4], tol, grads, name + ": final parameters, ")
        bad += not ok
        print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
