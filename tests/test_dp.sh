#!/usr/bin/env bash
# Data parallelism equals the single process: for dp = 1, 2, 4, with and
# without ZeRO-1, grad-accum 1 and 3, odd bucket sizes (tensors straddle
# buckets), dense, split and sparse embedding gradients, the 30-step JSONL loss
# trajectory matches the run without a launcher to 1e-5 relative and so do
# the final parameters. Checkpoints: saved at dp=4 with ZeRO, resumed at
# dp=2 and at dp=1, the trajectory is the uninterrupted one. The log's
# communication fields (tests/comm_log_check.py): per-rank arrays whose rank
# 0 entry is the totals, totals = sum over tags, received = sent for these
# symmetric collectives; grad-accum 3 makes the same calls per step as 1;
# ZeRO-1's opt_state_bytes is rank 0's shard of the dense figure.
# AdamW eps is 1e-6: with 1e-8, Adam's normalisation turns last-bit
# differences of near-zero gradients (summation order across ranks) into
# steps of up to lr, and on some data the parameters then differ by 4e-5
# while every loss still agrees to 1e-7.
#   BUILD=build-mpich tests/test_dp.sh     (MPICH build; MPIRUN overrides)
set -u
. "$(dirname "$0")/dp_common.sh"

"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL dp: prepare"; exit 1; }
common=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 8 --steps 30
        --lr 3e-3 --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --quiet --peak-gflops 100)

for acc in 1 3; do
    "$C" train "${common[@]}" --grad-accum $acc --log ref$acc.jsonl --save ref$acc.st \
        --dump-grads ref$acc.grads.st \
        || { echo "FAIL dp: single-process reference (accum $acc)"; exit 1; }
done

# name, np, accum, then train flags
case_() {
    local name=$1 np=$2 acc=$3; shift 3
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" train "${common[@]}" --grad-accum "$acc" \
            --log "$name.jsonl" --save "$name.st" "$@" 2>"$name.err"; then
        fail "$name: run failed: $(head -c 300 "$name.err")"; return
    fi
    check "$name" ref$acc.jsonl "$name.jsonl" ref$acc.st "$name.st" --grads ref$acc.grads.st
}

case_ "dp=1"                          1 1
case_ "dp=2"                          2 1
case_ "dp=2 bucket 0.01MB"            2 1 --bucket-mb 0.01
case_ "dp=2 zero bucket 0.0123MB"     2 1 --zero 1 --bucket-mb 0.0123
case_ "dp=2 accum 3"                  2 3 --bucket-mb 0.01
case_ "dp=2 zero accum 3 bucket 0.0123MB" 2 3 --zero 1 --bucket-mb 0.0123
case_ "dp=4"                          4 1
case_ "dp=4 zero"                     4 1 --zero 1
case_ "dp=4 zero bucket 0.01MB"       4 1 --zero 1 --bucket-mb 0.01
case_ "dp=4 accum 3 bucket 0.01MB"    4 3 --bucket-mb 0.01
case_ "dp=4 zero accum 3 bucket 0.007MB" 4 3 --zero 1 --bucket-mb 0.007
case_ "dp=1 zero accum 3"             1 3 --zero 1
case_ "dp=2 sparse embed"             2 1 --embed-grad sparse
case_ "dp=4 sparse embed accum 3"     4 3 --embed-grad sparse --bucket-mb 0.01
case_ "dp=4 sparse embed zero"        4 1 --embed-grad sparse --zero 1
case_ "dp=2 split embed"              2 1 --embed-grad split
case_ "dp=2 split embed accum 3 bucket 0.01MB" 2 3 --embed-grad split --bucket-mb 0.01
case_ "dp=4 split embed zero accum 3 bucket 0.007MB" 4 3 --embed-grad split --zero 1 --bucket-mb 0.007
case_ "dp=4 split embed zero"         4 1 --embed-grad split --zero 1
# (dp=4 computes the reference's gradients: its step-1 dump is ref1's)
check "sparse = dense embedding gradient (dp=4)" "dp=4.jsonl" "dp=4 sparse embed zero.jsonl" "dp=4.st" "dp=4 sparse embed zero.st" --grads ref1.grads.st

# the counters: dp>1 moves bytes, and the sparse path more than the dense one
bytes() { sed -E 's/.*"comm_bytes":([0-9]+).*/\1/' "$1" | head -1; }
bd=$(bytes "dp=4.jsonl") bs=$(bytes "dp=4 sparse embed zero.jsonl") b1=$(bytes "dp=1.jsonl")
if [ "$b1" = 0 ] && [ "${bd:-0}" -gt 0 ] && [ "${bs:-0}" -gt "$bd" ]; then
    pass "comm_bytes per step: dp=1 $b1, dp=4 dense $bd, dp=4 sparse+zero $bs"
else
    fail "comm_bytes per step: dp=1 '$b1' (want 0), dp=4 dense '$bd' (> 0), sparse '$bs' (> dense)"
fi

# the log's communication fields: per-rank arrays, totals = rank 0 = sum of
# tags, and every collective here symmetric (received = sent, per rank)
for name in "dp=1" "dp=2" "dp=4" "dp=4 zero bucket 0.01MB" "dp=4 sparse embed zero" "dp=4 split embed zero"; do
    np=${name#dp=}; np=${np%% *}
    logcheck fields "log fields: $name" "$name.jsonl" "$np" --symmetric
done
# accumulation reduces once per step: the same calls (per tag too) per step
logcheck same-calls "grad-accum 3 communicates as grad-accum 1 (dp=2, 0.01 MB buckets)" \
    "dp=2 bucket 0.01MB.jsonl" "dp=2 accum 3.jsonl"
logcheck same-calls "grad-accum 3 communicates as grad-accum 1 (dp=2 ZeRO)" \
    "dp=2 zero bucket 0.0123MB.jsonl" "dp=2 zero accum 3 bucket 0.0123MB.jsonl"
# ZeRO-1: rank 0 holds AdamW state for its shard only
logcheck opt "opt_state_bytes, dp=4: ZeRO-1 keeps rank 0's shard" "dp=4.jsonl" "dp=4 zero.jsonl" 4

# save at dp=4 with ZeRO; resume at dp=2 (ZeRO) then dp=1, and at dp=1 directly
run() { local np=$1; shift; timeout "$TMO" "${launch[@]}" -np "$np" "$C" train "${common[@]}" "$@" 2>>resume.err; }
run 4 --zero 1 --save r.st --log r1.jsonl --exit-after 10 &&
    run 2 --zero 1 --resume r.st --save r.st --log r2.jsonl --exit-after 10 &&
    run 1 --resume r.st --save r.st --log r3.jsonl \
    && check "resume dp=4 zero -> dp=2 zero -> dp=1" ref1.jsonl r1.jsonl,r2.jsonl,r3.jsonl ref1.st r.st --grads ref1.grads.st \
    || fail "resume dp=4 -> 2 -> 1: a run failed: $(head -c 300 resume.err)"
run 4 --zero 1 --save s.st --log s1.jsonl --exit-after 10 &&
    "$C" train "${common[@]}" --resume s.st --save s.st --log s2.jsonl 2>>resume.err \
    && check "resume dp=4 zero -> single process" ref1.jsonl s1.jsonl,s2.jsonl ref1.st s.st --grads ref1.grads.st \
    || fail "resume dp=4 -> 1: a run failed: $(head -c 300 resume.err)"

finish
