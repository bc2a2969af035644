#!/usr/bin/env bash
# 3-D tensor parallelism (the cube of Bian et al.), whole model:
# 1. tests/test_layout_3d.c at tp=8 (q=2) and tp=27 (q=3, oversubscribed):
#    every operator against the serial one (both --tp3d-save modes), two
#    micro-batches in flight, the linears' bytes per layer equal to
#    (q-1)/q^3 (32 N h + 24 h^2) elements in 24 collectives, check()
#    messages, and the GPT on the layout against the serial GPT (30 SGD
#    steps: losses, gradients, final parameters to 1e-5).
# 2. cubist train --tp 8 --tp-mode 3d (gathered and shard saves, x dp=2 with
#    ZeRO-1) and --tp 27 on a one-layer model against the single process:
#    30-step loss trajectory and final parameters to 1e-5, vocabulary padded.
#    (Divisibility errors: tests/test_tp_errors.sh.)
#   BUILD=build-mpich tests/test_tp3d.sh     (MPICH build; MPIRUN overrides)
# AdamW eps 1e-6, as tests/test_dp.sh: with 1e-8 Adam turns last-bit
# differences of near-zero gradients (sums regrouped across ranks) into steps
# of up to lr (measured: 1d tp=2 ends with h.0.ln_1.bias 2.5e-5 from the
# single process, per-tensor L2, while every loss agrees to 1e-7).
set -u
. "$(dirname "$0")/dp_common.sh"
T3D="$(dirname "$C")/tests/test_layout_3d"

op() { # np
    local np=$1 out; shift
    out=$(timeout "$TMO" "${launch[@]}" -np "$np" "$T3D" 2>&1)
    local rc=$?
    grep '^PASS\|^FAIL' <<<"$out"
    failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
    [ $rc = 0 ] || fail "test_layout_3d np=$np exited $rc: $(grep -v '^PASS\|^#' <<<"$out" | head -c 300)"
}
op 8
op 27

"$C" prepare --input text.txt --output train.bin >/dev/null || { fail "tp3d: prepare"; finish; exit; }
common=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --vocab 257 --batch 8
        --steps 30 --lr 3e-3 --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --quiet
        --peak-gflops 100)
tiny=(--data train.bin --layers 1 --d-model 18 --heads 3 --seq-len 4 --vocab 257 --batch 9
      --steps 30 --lr 3e-3 --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --quiet
      --peak-gflops 100)
"$C" train "${common[@]}" --log ref.jsonl --save ref.st --dump-grads ref.grads.st &&
    "$C" train "${tiny[@]}" --log reft.jsonl --save reft.st --dump-grads reft.grads.st ||
    { fail "tp3d: single-process reference"; finish; exit; }

case_() { # name, np, reference, train flags
    local name=$1 np=$2 ref=$3; shift 3
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" train \
            --log "$name.jsonl" --save "$name.st" "$@" 2>"$name.err"; then
        fail "$name: run failed: $(head -c 300 "$name.err")"; return
    fi
    check "$name" "$ref.jsonl" "$name.jsonl" "$ref.st" "$name.st" --grads "$ref.grads.st"
}
case_ "train 3d tp=8"                    8 ref "${common[@]}" --tp 8 --tp-mode 3d
case_ "train 3d tp=8 --tp3d-save shard"  8 ref "${common[@]}" --tp 8 --tp-mode 3d --tp3d-save shard
case_ "train 3d tp=8 x dp=2 zero"       16 ref "${common[@]}" --tp 8 --tp-mode 3d --dp 2 --zero 1
case_ "train 3d tp=27 one layer"        27 reft "${tiny[@]}" --tp 27 --tp-mode 3d

finish
