#!/usr/bin/env bash
# cubist train under the launcher: bad grids and bad input end every rank
# with status 2 and one message; a rank that exits mid-step (test-only
# CUBIST_TEST_EXIT_RANK/STEP) or is killed by a signal makes the launcher
# exit non-zero promptly; --print-grid and --comm-report print their tables.
set -u
. "$(dirname "$0")/dp_common.sh"

"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL dp: prepare"; exit 1; }
M=(--data train.bin --layers 1 --d-model 16 --heads 2 --seq-len 8 --batch 4 --steps 3 --quiet --peak-gflops 100)

# name, want status, message pattern, np, train flags: exactly one line on
# stderr matching, the status, and every rank exiting with it. Each rank
# runs in its own session (setsid) and records its status there: the
# launcher's clean-up after the first non-zero exit kills its direct
# children, which must not stop a rank's status from being written.
cat >rank_rc.sh <<'SH'
#!/bin/sh
setsid sh -c '"$@"; r=$?; echo "rc=$r" >>"$RCFILE"; exit $r' sh "$@" &
wait $!
SH
drill() {
    local name=$1 want=$2 pattern=$3 np=$4; shift 4
    : >rcs
    RCFILE=$d/rcs timeout "$TMO" "${launch[@]}" -np "$np" sh "$d/rank_rc.sh" \
        "$C" train "${M[@]}" "$@" >out 2>err
    local rc=$? lines=$(wc -l <err)
    for _ in $(seq 50); do [ "$(wc -l <rcs)" -ge "$np" ] && break; sleep 0.1; done
    local ranks=$(grep -c "^rc=$want\$" rcs)
    if [ "$rc" = "$want" ] && [ "$lines" = 1 ] && grep -q -- "$pattern" err && [ "$ranks" = "$np" ]; then
        pass "$name: exit $rc on all $np ranks, $(cat err)"
    else
        fail "$name: want exit $want on $np ranks and one line matching '$pattern'; got exit $rc, $ranks ranks, $lines lines: $(head -c 300 err | tr '\n' '|')"
    fi
}
drill "dp x pp x tp != world (np=4 --dp 3)" 2 "needs 3 processes but the job has 4" 4 --dp 3
drill "sparse embedding with tp=2 (np=2)" 2 "needs the whole embedding" 2 --tp 2 --embed-grad sparse
drill "split embedding with pp=2 (np=2)" 2 "split needs the whole embedding" 2 --pp 2 --embed-grad split
drill "dp=2 x tp=2 on 2 processes" 2 "needs 4 processes but the job has 2" 2 --dp 2 --tp 2
drill "--comm-dtype fp16 (np=2)" 2 "comm-dtype 'fp16' is unknown; use fp32 (default) or bf16" 2 --comm-dtype fp16
drill "tp=2 is not a square for 2d (np=2)" 2 "needs --tp to be a square" 2 --tp 2 --tp-mode 2d
drill "unknown --tp-mode (np=2)" 2 "'4d' is unknown" 2 --tp-mode 4d
drill "batch 4 over dp=3 (np=3)" 2 "does not split over 3" 3 --batch 4 --dp 3
drill "missing data on every rank (np=2)" 2 "nothere.bin" 2 --data nothere.bin
drill "--zero 2 (np=2)" 2 "--zero 2 is unknown" 2 --zero 2
drill "--embed-grad bogus (np=2)" 2 "'bogus' is unknown" 2 --embed-grad bogus
drill "unwritable log (np=2)" 2 "--log /nonexistent/dir/x.jsonl: cannot write there" 2 --log /nonexistent/dir/x.jsonl
drill "unwritable checkpoint, refused before training (np=2)" 2 "--save /nonexistent/dir/x.st: cannot write there" 2 --save /nonexistent/dir/x.st

# a rank exits mid-step: the job must end non-zero, promptly, not hang
t0=$(date +%s.%N)
CUBIST_TEST_EXIT_RANK=1 CUBIST_TEST_EXIT_STEP=2 timeout "$TMO" "${launch[@]}" -np 4 "$C" train "${M[@]}" --steps 50 >out 2>&1
rc=$? secs=$(echo "$(date +%s.%N) - $t0" | bc)
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$(echo "$secs < 15" | bc)" = 1 ]; then
    pass "rank 1 of 4 exits mid-step 2: launcher exit $rc after ${secs%???????}s"
else
    fail "rank 1 of 4 exits mid-step 2: launcher exit $rc (124 = hang) after ${secs}s: $(head -c 300 out | tr '\n' '|')"
fi

# a rank killed by SIGKILL while the others are in the gradient all-reduce
"${launch[@]}" -np 2 "$C" train "${M[@]}" --steps 1000000 --layers 2 --d-model 64 >out 2>&1 &
mpid=$!
# a rank: a descendant of our launcher (OpenMPI forks ranks, MPICH's hydra
# forks a proxy that forks them) running the binary
rank_of() {
    local kids=$(pgrep -P "$1") k
    for k in $kids; do
        if tr '\0' ' ' </proc/$k/cmdline 2>/dev/null | grep -q "^$C train"; then echo "$k"; return; fi
        rank_of "$k"
    done
}
victim=""
for _ in $(seq 50); do
    victim=$(rank_of "$mpid" | tail -1)
    [ -n "$victim" ] && break
    sleep 0.1
done
sleep 1
t0=$(date +%s.%N)
[ -n "$victim" ] && kill -9 "$victim"
# the watchdog takes its sleep with it when killed (no orphan holding the
# caller's output open for $TMO seconds)
( s=; trap 'kill $s 2>/dev/null; exit 0' TERM; sleep "$TMO" & s=$!; wait $s; kill -9 "$mpid" 2>/dev/null ) & watchdog=$!
wait "$mpid"; rc=$?
kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
secs=$(echo "$(date +%s.%N) - $t0" | bc)
if [ -n "$victim" ] && [ "$rc" != 0 ] && [ "$(echo "$secs < 15" | bc)" = 1 ]; then
    pass "rank killed by SIGKILL: launcher exit $rc after ${secs%???????}s"
else
    fail "rank killed by SIGKILL: victim '$victim', launcher exit $rc after ${secs}s"
fi

timeout "$TMO" "${launch[@]}" -np 4 "$C" train "${M[@]}" --print-grid --comm-report >out 2>err
if [ "$(grep -c '^rank ' out)" = 4 ] && grep -q '^rank    3  d=3 p=0 t=0' out && grep -q '^dp  *grad ' out \
        && grep -q 'communication seconds over the 4 ranks' out; then
    pass "--print-grid (4 rank lines) and --comm-report (dp/grad row) at np=4"
else
    fail "--print-grid/--comm-report at np=4: $(head -c 600 out | tr '\n' '|') $(head -c 200 err)"
fi

finish
