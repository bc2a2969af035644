#!/usr/bin/env bash
# Pipeline engine under mpirun: build/tests/test_pipeline on pp = 2 and 4
# (every schedule, M = 1, 4, 6, 8, recompute, auto / equal / uneven
# partitions, interleaved v = 2) and composed with tensor layouts: pp2 x
# 1d2, pp2 x 2d4, pp2 x 3d8 (16 ranks, oversubscribed). Each run compares
# one step's loss, every gradient and the global norm with the whole model
# to 1e-5 (see tests/test_pipeline.c).
set -u
. "$(dirname "$0")/launcher.sh"
T="$BUILD/tests/test_pipeline"
TMO=${TEST_PP_TIMEOUT:-$(tmo 120)}
failed=0
case_() { # name np [tp mode]
    local name=$1 np=$2; shift 2
    local out rc
    out=$(timeout "$TMO" "${launch[@]}" -np "$np" "$T" "$@" 2>&1); rc=$?
    grep -E '^(PASS|FAIL)' <<<"$out" | sed "s|^\(PASS\|FAIL\) |\1 $name: |"
    if grep -q '^FAIL' <<<"$out"; then failed=$((failed + 1))
    elif [ "$rc" -ne 0 ]; then echo "FAIL $name: exited $rc: $(tail -c 300 <<<"$out")"; failed=$((failed + 1)); fi
}
case_ "pp2"         2
case_ "pp4"         4
case_ "pp2 x 1d2"   4 2 1d
case_ "pp2 x 2d4"   8 4 2d
case_ "pp2 x 3d8"  16 8 3d
[ "$failed" = 0 ]
