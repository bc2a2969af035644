#!/usr/bin/env bash
# 2-D tensor parallelism (SUMMA), whole model:
# 1. tests/test_layout_2d.c: the GPT built on the 2-D layout against the
#    serial GPT, no trainer: 30 steps x 2 micro-batches of SGD at tp=4
#    (q=2, 2 layers) and 10 at tp=9 (q=3, 1 layer); losses, step-1
#    gradients and final parameters to 1e-5; linear bytes per block equal
#    to docs/parallelism.md's formula; check() errors.
# 2. cubist train --tp 4 --tp-mode 2d (and x dp=2) against the single
#    process: 30-step loss trajectory and final parameters to 1e-5.
#    (Divisibility errors: tests/test_tp_errors.sh.)
# AdamW eps 1e-6, as tests/test_dp.sh: with 1e-8 Adam turns last-bit
# differences of near-zero gradients (sums regrouped across ranks) into steps
# of up to lr (measured: 1d tp=2 ends with h.0.ln_1.bias 2.5e-5 from the
# single process, per-tensor L2, while every loss agrees to 1e-7).
set -u
. "$(dirname "$0")/dp_common.sh"
T2D="$(dirname "$C")/tests/test_layout_2d"

op() { # np, args
    local np=$1 out; shift
    out=$(timeout "$TMO" "${launch[@]}" -np "$np" "$T2D" "$@" 2>&1)
    local rc=$?
    grep '^PASS\|^FAIL\|^#' <<<"$out"
    failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
    [ $rc = 0 ] || fail "test_layout_2d np=$np $* exited $rc: $(grep -v '^PASS\|^#' <<<"$out" | head -c 300)"
}
op 4 --steps 30 --layers 2
op 9 --steps 10 --layers 1

"$C" prepare --input text.txt --output train.bin >/dev/null || { fail "tp2d: prepare"; finish; exit; }
common=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 8 --steps 30
        --lr 3e-3 --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --quiet --peak-gflops 100)
"$C" train "${common[@]}" --log ref.jsonl --save ref.st --dump-grads ref.grads.st &&
    "$C" train "${common[@]}" --batch 4 --grad-accum 2 --log refa.jsonl --save refa.st --dump-grads refa.grads.st ||
    { fail "tp2d: single-process reference"; finish; exit; }

case_() { # name, np, reference, train flags
    local name=$1 np=$2 ref=$3; shift 3
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" train "${common[@]}" \
            --log "$name.jsonl" --save "$name.st" "$@" 2>"$name.err"; then
        fail "$name: run failed: $(head -c 300 "$name.err")"; return
    fi
    check "$name" "$ref.jsonl" "$name.jsonl" "$ref.st" "$name.st" --grads "$ref.grads.st"
}
case_ "train 2d tp=4" 4 ref --tp 4 --tp-mode 2d
case_ "train 2d tp=4 x dp=2" 8 ref --tp 4 --tp-mode 2d --dp 2
case_ "train 2d tp=4 grad-accum 2" 4 refa --tp 4 --tp-mode 2d --grad-accum 2 --batch 4

finish
