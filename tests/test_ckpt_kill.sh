#!/usr/bin/env bash
# Checkpoints commit as one unit (src/train/ckpt.h): a --save-every 1 run is
# killed with SIGKILL 30 times, at random moments and (every other kill) as
# soon as a save is in flight (pending .next or .tmp files seen), and resumed
# with --resume DIR after each kill. Every resume must succeed, and the log
# and the final checkpoint must equal those of the uninterrupted run bit for
# bit (the log is trimmed to the resumed step and appended to). The same
# with 4 ranks (dp2 x tp2) under mpirun, 30 kills.
set -u
. "$(dirname "$0")/ops_common.sh"
RANDOM=16
logged_step() { local l; l=$(tail -n 1 run.jsonl 2>/dev/null); l=${l#\{\"step\":}; echo "${l%%,*}" | grep -E '^[0-9]+$' || echo 0; }

# kill_loop NAME KILLS STEPS LAUNCH...: runs LAUNCH cubist train until done
kill_loop() {
    local name=$1 kills=$2 steps=$3; shift 3
    local k=0 inside=0 resumes=0 bad=0 rc
    rm -rf ck run.jsonl
    while :; do
        local res=()
        compgen -G "ck/step-*.safetensors.state" >/dev/null && res=(--resume ck) && resumes=$((resumes + 1))
        # writes of the checkpoints' temporary files slowed (tests/fs_shim.c, 3 ms
        # a write), so a step lasts long enough for the kills to land in time,
        # and inside a save, however fast the machine
        LD_PRELOAD=$PRELOAD CUBIST_SHIM_PATH=.tmp CUBIST_SHIM_DELAY_US=3000 \
            "$@" "$C" train "${TINY[@]}" --steps "$steps" --save ck/ --save-every 1 --keep-last 2 \
            --log run.jsonl "${res[@]}" 2>err.txt &
        local pid=$!
        if [ $k -ge "$kills" ]; then wait $pid; rc=$?; break; fi
        # a random moment 1 to 3 steps on (so 30 kills fit one short run), then
        # every other kill as soon as a save is in flight (at most 3 s)
        local target=$(( $(logged_step) + 1 + RANDOM % 3 )) t=0
        while [ "$(logged_step)" -lt $target ] && [ $t -lt 20000 ] && kill -0 $pid 2>/dev/null; do
            sleep 0.005; t=$((t + 5))
        done
        if [ $((k % 2)) = 1 ]; then
            t=0
            while ! pending ck && [ $t -lt 3000 ] && kill -0 $pid 2>/dev/null; do sleep 0.002; t=$((t + 2)); done
        else
            sleep "0.0$((RANDOM % 10))"
        fi
        if [ "$#" -gt 0 ]; then kill -9 $(ranks_of $pid) $pid 2>/dev/null; else kill -9 $pid 2>/dev/null; fi
        wait $pid 2>/dev/null; rc=$?
        pending ck && inside=$((inside + 1))
        if [ $rc -ne 137 ] && [ $rc -ne 0 ]; then bad=$((bad + 1)); echo "  run $k exited $rc: $(head -c 300 err.txt)"; fi
        [ $rc = 0 ] && break # finished before the kill
        k=$((k + 1))
    done
    if [ $rc = 0 ] && [ $bad = 0 ]; then
        pass "$name: $k SIGKILLs ($inside inside a save), $resumes resumes, every one succeeded"
    else
        fail "$name: last run exited $rc, $bad runs failed on their own: $(head -c 300 err.txt)"
    fi
    [ $inside -gt 0 ] || fail "$name: no kill landed inside a save (pending files never seen)"
    if diff <(fields ref.jsonl) <(fields run.jsonl) >/dev/null; then
        pass "$name: the resumed log equals the uninterrupted one ($(wc -l <run.jsonl) steps: loss, lr, grad_norm, tokens)"
    else
        fail "$name: logs differ: $(diff <(fields ref.jsonl) <(fields run.jsonl) | head -4 | tr '\n' '|')"
    fi
    local last; last=$(printf 'ck/step-%08d.safetensors' "$steps")
    if same_ckpt "ref/$(basename "$last")" "$last"; then
        pass "$name: final weights and optimizer state byte-identical to the uninterrupted run"
    else
        fail "$name: final checkpoint differs from the uninterrupted run"
    fi
    local n; n=$(ls ck | grep -c '\.state$')
    [ "$n" = 2 ] && pass "$name: --keep-last 2 left 2 checkpoints" || fail "$name: --keep-last 2 left $n: $(ls ck | tr '\n' ' ')"
}

"$C" train "${TINY[@]}" --steps 160 --save ref/ --log ref.jsonl || fail "uninterrupted run"
kill_loop "1 process" 30 160

rm -rf ref
TP=(--dp 2 --tp 2)
TINY+=("${TP[@]}")
timeout "$(tmo 120)" "${launch[@]}" -np 4 "$C" train "${TINY[@]}" --steps 160 --save ref/ --log ref.jsonl \
    || fail "dp2 x tp2 uninterrupted run"
kill_loop "dp2 x tp2" 30 160 "${launch[@]}" -np 4
finish
