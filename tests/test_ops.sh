#!/usr/bin/env bash
# Every kernel against finite differences (in C), then the same inputs,
# outputs and gradients recomputed by PyTorch in fp64 (tests/torch/ops_ref.py);
# then once more with causal attention in blocks of 2 query rows
# (CB_CPU_BLOCK_ROWS; by default 128, more than the test's T), so that the
# blocked products meet the same checks.
set -u
BUILD=${BUILD:-build}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
"$BUILD/tests/test_ops" --dump "$d" || rc=1
/usr/bin/python3 tests/torch/ops_ref.py "$d" || rc=1
mkdir "$d/blocks"
CB_CPU_BLOCK_ROWS=2 "$BUILD/tests/test_ops" --dump "$d/blocks" 2>&1 | sed 's/^\(PASS\|FAIL\) /\1 blocks of 2 rows: /' ; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
/usr/bin/python3 tests/torch/ops_ref.py "$d/blocks" 2>&1 | sed 's/^\(PASS\|FAIL\) /\1 blocks of 2 rows: /'; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
exit ${rc:-0}
