#!/usr/bin/env bash
# The pipeline trainer step equals the single process (tests/test_pipeline_train.c):
# 30 steps, loss and gradient norm to 1e-5, final parameters from the
# checkpoint saved under the pipeline and loaded at pp=1. pp = 2 and 4 with
# gpipe, 1f1b, interleaved (v=2) and M = 1, 4, 8 (interleaved at M < pp
# too); recompute block, and selective on pp2 and pp2 x 1d2; pp2 x dp2 (with
# ZeRO-1), pp2 x 1d2 x dp2, pp2 x 2d4, pp2 x 3d8 (16 ranks). Mapping: --pp N
# --micro-batches M --batch B follows the one process's --batch B
# --grad-accum M.
set -u
. "$(dirname "$0")/launcher.sh"
T="$BUILD/tests/test_pipeline_train"
TMO=${TEST_PP_TIMEOUT:-$(tmo 120)}
failed=0
case_() { # np dp pp tp mode schedule M zero recompute
    local np=$1; shift
    local out rc
    out=$(timeout "$TMO" "${launch[@]}" -np "$np" "$T" "$@" 2>&1); rc=$?
    grep -E '^(PASS|FAIL)' <<<"$out"
    if grep -q '^FAIL' <<<"$out"; then failed=$((failed + 1))
    elif [ "$rc" -ne 0 ]; then echo "FAIL pipeline trainer $*: exited $rc: $(tail -c 300 <<<"$out")"; failed=$((failed + 1)); fi
}
for pp in 2 4; do
    for s in gpipe 1f1b interleaved; do
        for M in 1 4 8; do
            case_ $pp 1 $pp 1 1d $s $M 0 none
        done
    done
done
case_ 4 1 4 1 1d interleaved 6 0 none # M > p, not a multiple: last group of 6
case_ 2 1 2 1 1d 1f1b 4 0 block
case_ 4 1 4 1 1d interleaved 8 0 block
case_ 2 1 2 1 1d 1f1b 4 0 selective
case_ 4 1 2 2 1d 1f1b 4 0 selective
case_ 4 2 2 1 1d 1f1b 4 0 none
case_ 4 2 2 1 1d 1f1b 8 1 none
case_ 8 2 2 2 1d 1f1b 4 0 none
case_ 8 1 2 4 2d gpipe 4 0 none
case_ 16 1 2 8 3d interleaved 4 0 none
[ "$failed" = 0 ]
