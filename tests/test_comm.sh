#!/usr/bin/env bash
# Runs $BUILD/tests/test_comm alone and under the MPI launcher (1, 2, 4, 8
# ranks, oversubscribed), then the failure drills: a bad grid, bad input seen
# by one rank, a rank that dies, a rank that aborts. Each must end the whole
# job, every rank with the same status and one message, within the timeout.
#   BUILD=build-mpich MPI=mpich tests/test_comm.sh
# MPIRUN overrides the launcher; by default it matches the MPI library the
# binary links (tests/launcher.sh). TEST_COMM_TIMEOUT (seconds, default 60) bounds every run.
set -u
. "$(dirname "$0")/launcher.sh"
BIN=$BUILD/tests/test_comm
TMO=${TEST_COMM_TIMEOUT:-$(tmo 60)}
failed=0

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

if [ ! -x "$BIN" ]; then
    fail "test_comm: $BIN not built; run make (BUILD=$BUILD)"
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# test_comm: $BIN ($flavour), launcher: ${launch[*]}, timeout ${TMO}s"

# Forwards the program's PASS/FAIL lines tagged with the run, and checks the
# run itself: finished in time, exit 0, some PASS, no FAIL.
suite() {
    local label=$1; shift
    local out=$tmp/out rc
    timeout "$TMO" "$@" >"$out" 2>"$tmp/err"; rc=$?
    sed -n 's/^\(PASS\|FAIL\) /\1 ['"$label"'] /p' "$out"
    local np=$(grep -c '^PASS' "$out") nf=$(grep -c '^FAIL' "$out")
    failed=$((failed + nf))
    if [ "$rc" = 0 ] && [ "$np" -gt 0 ] && [ "$nf" = 0 ]; then
        pass "[$label] run: exit 0, $np checks passed"
    else
        fail "[$label] run: exit $rc (124 = timeout), $np passed, $nf failed; stderr: $(head -c 300 "$tmp/err" | tr '\n' ' ')"
    fi
}

suite "np=1 no launcher" "$BIN"
for np in 1 2 4 8; do suite "np=$np" "${launch[@]}" -np "$np" "$BIN"; done

# One drill: runs the job, then checks its exit status (want_rc, a regex; a
# hang would give 124) and how many lines of cubist's own messages it printed
# (each must match pattern).
drill() {
    local name=$1 want_rc=$2 want_msgs=$3 pattern=$4; shift 4
    local rc
    timeout "$TMO" "$@" >"$tmp/d.out" 2>&1; rc=$?
    local msgs=$(grep -c '^cubist: ' "$tmp/d.out") hit=$(grep -c -- "$pattern" "$tmp/d.out")
    local ok=1
    [[ $rc =~ ^($want_rc)$ ]] || ok=0
    [ "$msgs" != "$want_msgs" ] || [ "$hit" != "$want_msgs" ] && ok=0
    local got="exit $rc, $msgs message(s): $(grep '^cubist: ' "$tmp/d.out" | head -2 | tr '\n' ' ')"
    if [ $ok = 1 ]; then pass "$name: $got"; else fail "$name: want exit $want_rc and $want_msgs message(s) matching '$pattern'; got $got"; fi
}

# Every rank's own exit status: each rank runs under a shell that records it.
per_rank() {
    local name=$1 np=$2 want=$3; shift 3
    : >"$tmp/rcs"
    RCFILE=$tmp/rcs timeout "$TMO" "${launch[@]}" -np "$np" sh -c '"$0" "$@"; echo "rc=$?" >>"$RCFILE"' "$@" >/dev/null 2>&1
    local n=$(grep -c "^rc=$want\$" "$tmp/rcs")
    if [ "$n" = "$np" ]; then pass "$name: all $np ranks exited $want"
    else fail "$name: $n of $np ranks exited $want ($(sort "$tmp/rcs" | uniq -c | tr '\n' ' '))"; fi
}

drill "bad grid, no launcher" 2 1 "needs 2 processes but the job has 1" "$BIN" --tp 2
drill "bad grid np=4 (dp=3)" 2 1 "needs 3 processes but the job has 4" "${launch[@]}" -np 4 "$BIN" --dp 3
per_rank "bad grid np=4 (dp=3)" 4 2 "$BIN" --dp 3
drill "bad grid np=2 (tp=2 2d)" 2 1 "needs --tp to be a square" "${launch[@]}" -np 2 "$BIN" --tp 2 --tp-mode 2d
drill "bad grid np=8 (tp=4 3d)" 2 1 "needs --tp to be a cube" "${launch[@]}" -np 8 "$BIN" --dp 2 --tp 4 --tp-mode 3d
drill "bad mode np=2" 2 1 "'4d' is unknown" "${launch[@]}" -np 2 "$BIN" --tp-mode 4d
drill "bad input on rank 2 of 4" 2 1 "seen by rank 2 is empty" "${launch[@]}" -np 4 "$BIN" --local-error 2
per_rank "bad input on rank 2 of 4" 4 2 "$BIN" --local-error 2
# The dead rank's status 3 (OpenMPI) or the SIGKILL hydra sends the rest (9).
drill "rank 1 of 4 dies, the job ends" "3|9" 0 "^cubist: " "${launch[@]}" -np 4 "$BIN" --die 1
drill "rank 3 of 4 calls cb_comm_fatal, the job ends" 2 1 "^cubist: rank 3: drill" "${launch[@]}" -np 4 "$BIN" --fatal 3
# The watchdog of a root waiting in a gather asks every member, not the
# root alone (it had named no one: "every rank involved is waiting too").
drill "rank 3 of 4 stays away from a gather: root 0's watchdog names it" 6 1 \
    "^cubist: rank 0: stalled [0-9]* s (--stall-timeout 2) in gather 'drill'.*not arrived.*world rank 3;" \
    "${launch[@]}" -np 4 "$BIN" --stall 3

timeout "$TMO" "${launch[@]}" -np 8 "$BIN" --tp 8 --tp-mode 3d --print-grid >"$tmp/g.out" 2>&1
if [ "$(grep -c '^rank ' "$tmp/g.out")" = 8 ] && grep -q '^rank    5  d=0 p=0 t=5  (i,j,k)=(1,0,1) ' "$tmp/g.out"; then
    pass "--print-grid np=8 tp=8 3d: 8 rank lines, rank 5 at (i,j,k)=(1,0,1)"
else
    fail "--print-grid np=8 tp=8 3d: $(head -c 400 "$tmp/g.out" | tr '\n' '|')"
fi

[ "$failed" = 0 ]
