# Sourced by test_ncf.sh and test_bert.sh: the one training loop's
# checkpoint protocol (src/train/run.c) under a graph model's trainer, in
# one process, against a run of the same flags that was never stopped:
# 1. --save DIR/ --save-every 3, the process SIGKILLed after step 5 is
#    logged, --resume DIR: the log (every step's loss, lr, grad norm and
#    evaluation) and the final checkpoint equal the uninterrupted run bit
#    for bit (the checkpoint but for its random id);
# 2. SIGTERM mid-run: exit 75, one line naming the step and the saved
#    checkpoint, which exists whole; --resume equals the uninterrupted run.
# loop_checks LABEL STEPS train-flags...; needs $C, pass and fail.
_loop_step() { local l; l=$(tail -n 1 "$1" 2>/dev/null); l=${l#\{\"step\":}; echo "${l%%,*}" | grep -E '^[0-9]+$' || echo 0; }
_loop_wait() { # log step pid: until the log reaches step (20 s at most)
    local t=0
    while [ "$(_loop_step "$1")" -lt "$2" ] && [ $t -lt 2000 ] && kill -0 "$3" 2>/dev/null; do sleep 0.01; t=$((t + 1)); done
}
# the log without its timings (step_ms and the rate, the communication's ms)
_loop_fields() {
    sed -E 's/"step_ms":[^,]*,"[a-z]+_per_s":[0-9.]+//; s/"ms":(\[[^]]*\]|[0-9.]+)/"ms":-/g; s/"comm_ms":[0-9.]+/"comm_ms":-/' "$1"
}
_loop_noid() { sed -E 's/"ckpt_id":"[0-9a-f]{16}"/"ckpt_id":"-"/' "$1"; }
_loop_same() { # a b: weights and state byte for byte but for the id
    cmp -s <(_loop_noid "$1") <(_loop_noid "$2") && cmp -s <(_loop_noid "$1.state") <(_loop_noid "$2.state")
}
loop_checks() {
    local label=$1 steps=$2 last rc n ck; shift 2
    last=$(printf 'step-%08d.safetensors' "$steps")
    rm -rf lref lkill lterm; rm -f lref.jsonl lkill.jsonl lterm.jsonl
    "$C" train "$@" --steps "$steps" --save lref/ --log lref.jsonl --quiet > /dev/null 2>lref.err \
        || { fail "$label loop: the uninterrupted run: $(head -c 300 lref.err)"; return; }
    # 1. SIGKILL after step 5, resume from the newest complete checkpoint
    "$C" train "$@" --steps "$steps" --save lkill/ --save-every 3 --log lkill.jsonl --quiet > /dev/null 2>&1 &
    local p=$!
    _loop_wait lkill.jsonl 5 $p
    { kill -KILL $p; wait $p; } 2>/dev/null; rc=$?
    n=$(_loop_step lkill.jsonl)
    if [ "$rc" != 137 ] || [ "$n" -ge "$steps" ]; then
        fail "$label loop: SIGKILL landed after the run ended (exit $rc, step $n of $steps)"
    else
        "$C" train "$@" --steps "$steps" --save lkill/ --save-every 3 --log lkill.jsonl --resume lkill \
            --quiet > /dev/null 2>lkill.err || fail "$label loop: resume after SIGKILL: $(head -c 300 lkill.err)"
        if [ "$(_loop_fields lref.jsonl)" = "$(_loop_fields lkill.jsonl)" ] && _loop_same "lref/$last" "lkill/$last"; then
            pass "$label loop: SIGKILL after step $n, --resume: the $steps logged steps and the final checkpoint equal the uninterrupted run, bit for bit"
        else
            fail "$label loop: SIGKILL + --resume differs: $(diff <(_loop_fields lref.jsonl) <(_loop_fields lkill.jsonl) | head -3 | tr '\n' '|')"
        fi
    fi
    # 2. SIGTERM: save, exit 75, resume
    "$C" train "$@" --steps "$steps" --save lterm/ --log lterm.jsonl --quiet > /dev/null 2>lterm.err &
    p=$!
    _loop_wait lterm.jsonl 5 $p
    kill -TERM $p 2>/dev/null; wait $p; rc=$?
    n=$(_loop_step lterm.jsonl)
    ck=$(printf 'lterm/step-%08d.safetensors' "$n")
    if [ "$rc" = 75 ] && [ -f "$ck.state" ] && [ "$(grep -c . lterm.err)" = 1 ] &&
       grep -q "stopped by SIGTERM after step $n; checkpoint $ck saved" lterm.err; then
        pass "$label loop: SIGTERM: exit 75 after step $n, one line: $(cat lterm.err)"
    else
        fail "$label loop: SIGTERM: exit $rc, step $n, stderr: $(head -c 300 lterm.err)"
    fi
    "$C" train "$@" --steps "$steps" --save lterm/ --log lterm.jsonl --resume lterm --quiet \
        > /dev/null 2>lterm.err || fail "$label loop: resume after SIGTERM: $(head -c 300 lterm.err)"
    if [ "$(_loop_fields lref.jsonl)" = "$(_loop_fields lterm.jsonl)" ] && _loop_same "lref/$last" "lterm/$last"; then
        pass "$label loop: SIGTERM, then --resume: the log and the final checkpoint equal the uninterrupted run, bit for bit"
    else
        fail "$label loop: SIGTERM + --resume differs: $(diff <(_loop_fields lref.jsonl) <(_loop_fields lterm.jsonl) | head -3 | tr '\n' '|')"
    fi
}
