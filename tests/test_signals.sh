#!/usr/bin/env bash
# Clean shutdown (src/train/stop.h) and the stall watchdog (src/comm/comm.h)
# on a 4-rank dp2 x tp2 job:
# - SIGTERM to every rank (what Slurm does at the time limit): each finishes
#   its step, a checkpoint is saved, one line says so, mpirun exits 75, and
#   --resume continues bit for bit (log and checkpoint against a run that
#   was never stopped);
# - SIGUSR1 (the default --exit-signal) to one rank only: all stop alike;
# - a second SIGINT during the save abandons at once (130), no .tmp left,
#   and the previous checkpoint resumes;
# - one rank stopped with SIGSTOP and --stall-timeout 10: the job ends
#   within 30 s with status 6 and names the collective and the stopped rank.
set -u
. "$(dirname "$0")/ops_common.sh"
TP=(--dp 2 --tp 2)
logged_step() { local l; l=$(tail -n 1 "$1" 2>/dev/null); l=${l#\{\"step\":}; echo "${l%%,*}" | grep -E '^[0-9]+$' || echo 0; }
wait_step() { # log step pid: until the log reaches step (20 s at most)
    local t=0
    while [ "$(logged_step "$1")" -lt "$2" ] && [ $t -lt 2000 ] && kill -0 "$3" 2>/dev/null; do sleep 0.01; t=$((t + 1)); done
}
rank_of() { tr '\0' '\n' < "/proc/$1/environ" | sed -nE 's/^(OMPI_COMM_WORLD_RANK|PMI_RANK)=//p' | head -n 1; }

# --- SIGTERM to every rank, then resume
"${launch[@]}" -np 4 "$C" train "${TINY[@]}" "${TP[@]}" --steps 400 --save ck/ --log s.jsonl 2>s.err &
m=$!
wait_step s.jsonl 3 $m
kill -TERM $(ranks_of $m)
wait $m; rc=$?
n=$(logged_step s.jsonl)
ck=$(printf 'ck/step-%08d.safetensors' "$n")
if [ $rc = 75 ] && [ -f "$ck.state" ] && [ "$(grep -c 'stopped by SIGTERM after step' s.err)" = 1 ]; then
    pass "SIGTERM to 4 ranks: exit 75 after step $n, $ck saved: $(grep stopped s.err)"
else
    fail "SIGTERM to 4 ranks: exit $rc, $(ls ck 2>&1 | tr '\n' ' '), stderr: $(head -c 400 s.err)"
fi
timeout "$(tmo 120)" "${launch[@]}" -np 4 "$C" train "${TINY[@]}" "${TP[@]}" --steps 400 --save ck/ --log s.jsonl \
    --resume ck --exit-after 4 2>r.err || fail "resume after SIGTERM: $(head -c 300 r.err)"
timeout "$(tmo 120)" "${launch[@]}" -np 4 "$C" train "${TINY[@]}" "${TP[@]}" --steps 400 --save ref/ --log ref.jsonl \
    --exit-after $((n + 4)) 2>/dev/null || fail "reference run"
last=$(printf 'step-%08d.safetensors' $((n + 4)))
if diff <(fields ref.jsonl) <(fields s.jsonl) >/dev/null && same_ckpt "ref/$last" "ck/$last"; then
    pass "SIGTERM, then --resume: $((n + 4)) logged steps and the checkpoint equal the run never stopped, bit for bit"
else
    fail "SIGTERM, then --resume: differs from the run never stopped: $(diff <(fields ref.jsonl) <(fields s.jsonl) | head -3 | tr '\n' '|')"
fi

# --- SIGUSR1 to one rank: the others agree after the step
"${launch[@]}" -np 4 "$C" train "${TINY[@]}" "${TP[@]}" --steps 400 --save one/ --log u.jsonl 2>u.err &
m=$!
wait_step u.jsonl 2 $m
kill -USR1 $(ranks_of $m | tail -n 1)
wait $m; rc=$?
if [ $rc = 75 ] && compgen -G "one/step-*.safetensors.state" >/dev/null && grep -q 'stopped by SIGUSR1' u.err; then
    pass "SIGUSR1 to one of 4 ranks: every rank stopped, saved, exit 75"
else
    fail "SIGUSR1 to one rank: exit $rc: $(head -c 300 u.err)"
fi

# --- a second SIGINT during the save: writes to temporary files slowed
# (tests/fs_shim.c, 50 ms a write) so the signal lands inside one
caught=0
for try in 1 2 3; do
    rm -rf big b.jsonl
    LD_PRELOAD=$PRELOAD CUBIST_SHIM_PATH=.tmp CUBIST_SHIM_DELAY_US=50000 \
        "$C" train "${TINY[@]}" --steps 1000 --save big/ --save-every 2 --log b.jsonl 2>b.err &
    p=$!
    wait_step b.jsonl 3 $p
    kill -INT $p
    sleep 0.3 # handled (two signals sent at once would merge into one)
    t=0
    while ! compgen -G "big/*.tmp" >/dev/null && [ $t -lt 2000 ] && kill -0 $p 2>/dev/null; do sleep 0.001; t=$((t + 1)); done
    kill -INT $p 2>/dev/null
    wait $p; rc=$?
    [ $rc = 130 ] && { caught=1; break; }
done
if [ $caught = 1 ] && ! compgen -G "big/*.tmp" >/dev/null; then
    pass "second SIGINT inside a save (try $try): exit 130 at once, no .tmp left: $(ls big | tr '\n' ' ')"
    if "$C" train "${TINY[@]}" --steps 1000 --resume big --exit-after 1 2>br.err; then
        pass "second SIGINT: the previous checkpoint resumes"
    else
        fail "second SIGINT: resume failed: $(head -c 300 br.err)"
    fi
else
    fail "second SIGINT: exit $rc after $try tries, files: $(ls big | tr '\n' ' ')"
fi

# --- a stopped rank: the watchdog names the collective and the rank
t0=$SECONDS
"${launch[@]}" -np 4 "$C" train "${TINY[@]}" "${TP[@]}" --steps 100000 --stall-timeout 10 --log w.jsonl 2>w.err &
m=$!
wait_step w.jsonl 2 $m
victim=$(ranks_of $m | tail -n 1)
vr=$(rank_of "$victim")
kill -STOP "$victim"
( sleep 60; kill -9 $m 2>/dev/null ) & guard=$!
wait $m; rc=$?
kill $guard 2>/dev/null
kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null
el=$((SECONDS - t0))
if [ $rc = 6 ] && [ $el -le 30 ] && grep -qE "stalled [0-9]+ s \(--stall-timeout 10\) in (all-reduce|receive|send|broadcast|all-gather|reduce-scatter|gather|reduce|barrier) '" w.err \
        && grep -q "not arrived.*world rank $vr" w.err; then
    pass "SIGSTOP of world rank $vr with --stall-timeout 10: job ended in $el s, exit 6: $(grep -m1 stalled w.err | head -c 300)"
else
    fail "SIGSTOP of rank $vr: exit $rc after $el s: $(head -c 600 w.err)"
fi
finish
