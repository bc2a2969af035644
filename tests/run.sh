#!/usr/bin/env bash
# Runs the whole suite: every tests/test_*.sh, and every test program in
# $BUILD/tests without a script of its own. Each prints PASS/FAIL lines; a
# program that exits non-zero without a FAIL line counts as one failure.
# The closing line is "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the MFU peak cache (cubist train, cubist bench --peak) goes to a scratch
# directory, never the user's ~/.cache
XDG_CACHE_HOME=$(mktemp -d); export XDG_CACHE_HOME
trap 'rm -rf "$XDG_CACHE_HOME"' EXIT
only=${1:-}
# FAST=1 (make check): only the tests listed in tests/fast.txt, the fast tier
fast=()
[ "${FAST:-0}" = 1 ] && mapfile -t fast < <(grep -v '^#' tests/fast.txt)
pass=0 fail=0 failed=()
run_one() { # name, command...
    local name=$1; shift
    [ -n "$only" ] && [[ "$name" != *"$only"* ]] && return
    [ ${#fast[@]} -gt 0 ] && [[ " ${fast[*]} " != *" $name "* ]] && return
    local log; log=$(mktemp)
    local t0=$SECONDS
    # CPU time (user + sys of the test and every process it waited for)
    /usr/bin/time -f '%U %S' -o "$log.cpu" "$@" >"$log" 2>&1
    local rc=$?
    local cpu; cpu=$(awk '{ printf "%d", $1 + $2 + 0.5 }' "$log.cpu" 2>/dev/null)
    local p f
    p=$(grep -c '^PASS' "$log"); f=$(grep -c '^FAIL' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name exited with status $rc" >>"$log"; fi
    grep -E '^(PASS|FAIL)' "$log" | sed "s|^|  |"
    if [ "$f" -gt 0 ]; then failed+=("$name"); echo "--- $name output (failed):"; tail -n 40 "$log"; fi
    printf '%-28s %3d passed %3d failed  (%ds, cpu %ss)\n' "$name" "$p" "$f" $((SECONDS - t0)) "${cpu:-?}"
    pass=$((pass + p)); fail=$((fail + f))
    rm -f "$log" "$log.cpu"
}
for s in tests/test_*.sh; do run_one "$(basename "$s" .sh)" bash "$s"; done
# a program that a script runs (under mpirun, with arguments) is left to it
for b in "$BUILD"/tests/test_*; do
    n=$(basename "$b")
    [ -x "$b" ] || continue
    [ -f "tests/$n.c" ] || continue # left in the build by a test since deleted
    # run by a script or a Python driver (tests/torch), with its arguments
    grep -qE "tests/$n( |\"|$)|\"$n\"" tests/*.sh tests/torch/*.py && continue
    run_one "$n" "$b"
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
