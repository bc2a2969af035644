#!/usr/bin/env bash
# 1-D (Megatron) tensor parallelism equals the single process: 30 steps of a
# 2-layer GPT whose vocabulary needs padding (257 -> 258 at tp 2, 260 at
# tp 4); the JSONL loss trajectory and the final parameters match the run
# without a launcher to 1e-5 relative, for tp = 2, 4, tp = 2 x dp = 2 (with
# and without ZeRO-1, with gradient accumulation). Checkpoints: saved under
# tp 2, resumed under tp 4 and then one process, the trajectory is the
# uninterrupted one. Bad divisibility: one message, exit status 2.
#   BUILD=build-mpich tests/test_tp1d.sh     (MPICH build; MPIRUN overrides)
# AdamW eps 1e-6, as tests/test_dp.sh: with 1e-8 Adam turns last-bit
# differences of near-zero gradients (sums regrouped across ranks) into steps
# of up to lr (measured: 1d tp=2 ends with h.0.ln_1.bias 2.5e-5 from the
# single process, per-tensor L2, while every loss agrees to 1e-7).
set -u
. "$(dirname "$0")/dp_common.sh"

"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL tp1d: prepare"; exit 1; }
common=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --vocab 257 --batch 8
        --steps 30 --lr 3e-3 --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --quiet
        --peak-gflops 100)

for acc in 1 2; do
    "$C" train "${common[@]}" --grad-accum $acc --log ref$acc.jsonl --save ref$acc.st \
        --dump-grads ref$acc.grads.st \
        || { echo "FAIL tp1d: single-process reference (accum $acc)"; exit 1; }
done

# name, np, accum, then train flags
case_() {
    local name=$1 np=$2 acc=$3; shift 3
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" train "${common[@]}" --grad-accum "$acc" \
            --tp-mode 1d --log "$name.jsonl" --save "$name.st" "$@" 2>"$name.err"; then
        fail "$name: run failed: $(head -c 300 "$name.err")"; return
    fi
    check "$name" ref$acc.jsonl "$name.jsonl" ref$acc.st "$name.st" --grads ref$acc.grads.st
}

case_ "1d tp=2"                     2 1 --tp 2
case_ "1d tp=4"                     4 1 --tp 4
case_ "1d tp=2 x dp=2"              4 1 --tp 2 --dp 2
case_ "1d tp=2 x dp=2 zero accum 2" 4 2 --tp 2 --dp 2 --zero 1

# tensor-parallel traffic moves bytes: a run with tp moves more than without
bytes() { sed -E 's/.*"comm_bytes":([0-9]+).*/\1/' "$1" | head -1; }
b2=$(bytes "1d tp=2.jsonl")
if [ "${b2:-0}" -gt 0 ] 2>/dev/null; then
    pass "1d tp=2 comm_bytes per step $b2 > 0"
else
    fail "1d tp=2 comm_bytes per step '$b2' (want > 0)"
fi

# save under tp 2, resume under tp 4, then finish in one process
run() { local np=$1; shift; timeout "$TMO" "${launch[@]}" -np "$np" "$C" train "${common[@]}" "$@" 2>>resume.err; }
run 2 --tp 2 --tp-mode 1d --save r.st --log r1.jsonl --exit-after 10 &&
    run 4 --tp 4 --tp-mode 1d --resume r.st --save r.st --log r2.jsonl --exit-after 10 &&
    "$C" train "${common[@]}" --resume r.st --save r.st --log r3.jsonl 2>>resume.err \
    && check "resume 1d tp=2 -> 1d tp=4 -> single process" ref1.jsonl r1.jsonl,r2.jsonl,r3.jsonl ref1.st r.st --grads ref1.grads.st \
    || fail "resume 1d tp=2 -> tp=4 -> 1: a run failed: $(head -c 300 resume.err)"

# heads % tp: one line naming the constraint, exit 2, no hang
timeout "$TMO" "${launch[@]}" -np 3 "$C" train "${common[@]}" --tp 3 --tp-mode 1d >bad.out 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q "heads divisible by 3" bad.out; then
    pass "1d tp=3 with 4 heads: exit 2, $(grep -m1 'heads' bad.out)"
else
    fail "1d tp=3 with 4 heads: exit $rc (want 2 and a heads message): $(head -c 300 bad.out)"
fi

finish
