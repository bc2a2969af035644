#!/usr/bin/env bash
# Runs the whole suite: every tests/test_*.sh, and every test program in
# $BUILD/tests without a script of its own. Each prints PASS/FAIL lines; a
# program that exits non-zero without a FAIL line counts as one failure.
# The closing line is "N passed, M failed".
# TEST_JOBS tests run at a time (default 2, the cores here): most tests are
# chains of one-thread processes, tiny MPI runs and Python checks that keep
# one core busy, so two side by side fill both (every test has its own
# scratch directory; no check measures speed: a neighbour only brings the
# hang timeouts, each several times a run's time, nearer). Each test's
# lines are printed as one block when it ends, with its wall time (longer
# beside another test) and its CPU time (user + sys of every process it
# waited for).
# TEST_JOBS=1 runs them one after another.
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the MFU peak cache (cubist train, cubist bench --peak) goes to a scratch
# directory, never the user's ~/.cache; the results of the running tests too
XDG_CACHE_HOME=$(mktemp -d); export XDG_CACHE_HOME
res=$(mktemp -d)
trap 'rm -rf "$XDG_CACHE_HOME" "$res"' EXIT
only=${1:-}
jobs_max=${TEST_JOBS:-2}
# FAST=1 (make check): only the tests listed in tests/fast.txt, the fast tier
fast=()
[ "${FAST:-0}" = 1 ] && mapfile -t fast < <(grep -v '^#' tests/fast.txt)
# the longest tests start first, so that no long one is left running alone
# at the end (quiet seconds on 2 cores, one at a time, before the queued
# comparisons: 132 94 90 75 70 57 44 42)
first=(test_bf16_124m test_example test_ckpt_kill test_pp_cli test_nmt_layers test_bert test_cli
       test_pp_user)

# run_one NAME COMMAND...: the test's block into $res/NAME.out, then its
# counts into $res/NAME.sum (written last: the test has ended)
run_one() {
    local name=$1; shift
    local log="$res/$name.log" t0=$SECONDS
    /usr/bin/time -f '%U %S' -o "$log.cpu" "$@" >"$log" 2>&1
    local rc=$?
    local p f cpu
    cpu=$(awk '{ u = $1; s = $2 } END { printf "%d", u + s + 0.5 }' "$log.cpu" 2>/dev/null)
    p=$(grep -c '^PASS' "$log"); f=$(grep -c '^FAIL' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name exited with status $rc" >>"$log"; fi
    {
        grep -E '^(PASS|FAIL)' "$log" | sed "s|^|  |"
        [ "$f" -gt 0 ] && { echo "--- $name output (failed):"; tail -n 40 "$log"; }
        printf '%-28s %3d passed %3d failed  (%ds, cpu %ss)\n' "$name" "$p" "$f" $((SECONDS - t0)) "${cpu:-?}"
    } >"$res/$name.out"
    echo "$p $f" >"$res/$name.sum"
}

# the tests, by name: each script, then each program that no script runs
names=() cmds=()
want() { # NAME: selected by the NAME argument and the fast tier
    [ -n "$only" ] && [[ "$1" != *"$only"* ]] && return 1
    [ ${#fast[@]} -gt 0 ] && [[ " ${fast[*]} " != *" $1 "* ]] && return 1
    return 0
}
for s in tests/test_*.sh; do
    n=$(basename "$s" .sh)
    want "$n" && names+=("$n") && cmds+=("bash $s")
done
# a program that a script runs (under mpirun, with arguments) is left to it
for b in "$BUILD"/tests/test_*; do
    n=$(basename "$b")
    [ -x "$b" ] || continue
    [ -f "tests/$n.c" ] || continue # left in the build by a test since deleted
    # run by a script or a Python driver (tests/torch), with its arguments
    grep -qE "tests/$n( |\"|$)|\"$n\"" tests/*.sh tests/torch/*.py && continue
    want "$n" && names+=("$n") && cmds+=("$b")
done
order=()
for n in "${first[@]}"; do
    for i in "${!names[@]}"; do [ "${names[i]}" = "$n" ] && order+=("$i"); done
done
for i in "${!names[@]}"; do [[ " ${first[*]} " == *" ${names[i]} "* ]] || order+=("$i"); done

pass=0 fail=0 failed=() running=()
collect() { # print the blocks of the tests that have ended
    local n p f still=()
    for n in "${running[@]}"; do
        if [ -f "$res/$n.sum" ]; then
            cat "$res/$n.out"
            read -r p f <"$res/$n.sum"
            pass=$((pass + p)); fail=$((fail + f))
            [ "$f" -gt 0 ] && failed+=("$n")
        else still+=("$n"); fi
    done
    running=("${still[@]}")
}
wait_one() { # until a test ends; a test gone without its counts fails
    local n
    wait -n && return
    [ $? = 127 ] || return # 127: no test left running
    collect
    for n in "${running[@]}"; do
        echo "FAIL $n ended without its counts"; fail=$((fail + 1)); failed+=("$n")
    done
    running=()
}
for i in "${order[@]}"; do
    while [ ${#running[@]} -ge "$jobs_max" ]; do wait_one; collect; done
    # shellcheck disable=SC2086 # a command is a program and its words
    run_one "${names[i]}" ${cmds[i]} &
    running+=("${names[i]}")
done
while [ ${#running[@]} -gt 0 ]; do wait_one; collect; done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
