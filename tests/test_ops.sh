#!/usr/bin/env bash
# Every kernel against finite differences (in C), then the same inputs,
# outputs and gradients recomputed by PyTorch in fp64 (tests/torch/ops_ref.py).
set -u
BUILD=${BUILD:-build}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
"$BUILD/tests/test_ops" --dump "$d" || rc=1
/usr/bin/python3 tests/torch/ops_ref.py "$d" || rc=1
exit ${rc:-0}
