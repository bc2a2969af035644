#!/usr/bin/env bash
# Users' own models and training loops on cubist's public layers, run
# unchanged under every layout and data parallelism:
# 1. examples/mlp_lm (a residual MLP language model) under dp 2, 1-D 2 and
#    4, 2-D 4, 3-D 8, dp 2 x 1-D 2, dp 2 x 2-D 4, dp 2 x 3-D 8 and pipeline
#    parallelism: the loss and gradient norm of 30 steps and the saved
#    weights equal the single-process run to 1e-5 relative (per tensor,
#    ||a-b||/||b||; fp32 sums regrouped across ranks differ by a few ulp).
# 2. examples/tiny_gpt (a user-built pre-LN transformer with attention,
#    GPT-2's layer names) under dp 2 (with and without ZeRO-1), 1-D 2,
#    2-D 4, 3-D 8, dp 2 x 2-D 4, dp 2 x 3-D 8 with ZeRO-1 and pp 2, against
#    its serial run the same way; its serial run against `cubist train
#    --init` of the weights it starts from (the built-in GPT): the same
#    losses (1e-6; measured identical), gradient norms and final weights to
#    1e-5; and ZeRO-1 keeps 1/dp of the AdamW moments per rank.
# Every comparison line comes from tests/compare.py; a comparison that
# crashes or exits non-zero without a FAIL line is a FAIL here too.
set -u
. "$(dirname "$0")/launcher.sh"
root=$ROOT
C="$BUILD/cubist"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
# deterministic text, so a failure reproduces
/usr/bin/python3 "$root/tests/gen_text.py" 160000 > "$d/text.txt"
"$C" prepare --input "$d/text.txt" --output "$d/train.bin" >/dev/null || { fail "example: prepare"; exit 1; }

# compare.py's lines; its crash or a non-zero exit without a FAIL line fails too
cmp_() {
    local out rc
    out=$(/usr/bin/python3 "$root/tests/compare.py" "$@" 2>&1)
    rc=$?
    grep '^PASS\|^FAIL' <<<"$out"
    failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
    if [ $rc != 0 ] && ! grep -q '^FAIL' <<<"$out"; then
        fail "compare.py $1 ${*: -1}: exit $rc: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
    fi
}

# run EXAMPLE LABEL NP flags...: 30 steps against the example's serial run
run() {
    local ex=$1 label=$2 np=$3; shift 3
    local g=(); [ "$ex" = tiny_gpt ] && g=(--grads "$d/gpt.grads.st")
    if timeout "$(tmo 240)" "${launch[@]}" -np "$np" "$BUILD/examples/$ex" --data "$d/train.bin" \
            --steps 30 --save "$d/$ex.$label.st" "$@" > "$d/$ex.$label.log" 2>&1; then
        cmp_ logs "$d/$ex.$label.log" "$d/$ex.serial.log" --label "$ex $label loss"
        cmp_ st "$d/$ex.$label.st" "$d/$ex.serial.st" --label "$ex $label weights" "${g[@]}"
    else
        fail "$ex $label: $(tail -n 2 "$d/$ex.$label.log" | tr '\n' ' ')"
    fi
}

serial() { # EXAMPLE: the reference run, no launcher
    "$BUILD/examples/$1" --data "$d/train.bin" --steps 30 --save "$d/$1.serial.st" \
        > "$d/$1.serial.log" 2>&1 || { fail "$1 serial run: $(tail -n 2 "$d/$1.serial.log")"; return 1; }
}

if serial mlp_lm; then
    run mlp_lm dp2 2 --dp 2
    run mlp_lm tp1d2 2 --tp 2 --tp-mode 1d
    run mlp_lm tp1d4 4 --tp 4 --tp-mode 1d
    run mlp_lm tp2d4 4 --tp 4 --tp-mode 2d
    run mlp_lm tp3d8 8 --tp 8 --tp-mode 3d
    run mlp_lm dp2_tp1d2 4 --dp 2 --tp 2 --tp-mode 1d
    run mlp_lm dp2_tp2d4 8 --dp 2 --tp 4 --tp-mode 2d
    run mlp_lm dp2_tp3d8 16 --dp 2 --tp 8 --tp-mode 3d
    # pipeline: the same binary, its operators recorded and run stage by
    # stage over micro-batches (GPipe order); sums regroup over micro-batches only
    run mlp_lm pp2 2 --pp 2
    run mlp_lm pp2_m8 2 --pp 2 --micro-batches 8
    run mlp_lm pp4_m4 4 --pp 4 --micro-batches 4
    run mlp_lm pp3_m1 3 --pp 3 --micro-batches 1
    run mlp_lm pp2_manual 2 --pp 2 --partition 0,2,9
    run mlp_lm pp2_dp2 4 --pp 2 --dp 2 --micro-batches 2
    run mlp_lm pp2_tp1d2 4 --pp 2 --tp 2 --tp-mode 1d --micro-batches 4
    run mlp_lm pp2_dp2_tp1d2 8 --pp 2 --dp 2 --tp 2 --tp-mode 1d
fi

# tiny_gpt: its initial weights, the built-in GPT trained from them (the
# reference's step-1 gradients for the key-bias check), its serial run
gpt=(--data "$d/train.bin" --layers 2 --d-model 32 --heads 4 --seq-len 16 --vocab 256 --batch 8
     --steps 30 --shuffle 0 --lr 1e-3 --min-lr 1e-4 --warmup 3 --clip 1 --eps 1e-6
     --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --quiet --peak-gflops 100 --threads 1)
if "$BUILD/examples/tiny_gpt" --data "$d/train.bin" --steps 0 --save "$d/init.st" >/dev/null &&
   "$C" train "${gpt[@]}" --init "$d/init.st" --log "$d/gpt.jsonl" --save "$d/gpt.st" \
        --dump-grads "$d/gpt.grads.st" 2>"$d/gpt.err" && serial tiny_gpt; then
    cmp_ logs "$d/tiny_gpt.serial.log" "$d/gpt.jsonl" --keys loss --tol 1e-6 \
        --label "tiny_gpt = cubist train's GPT from the same weights file: loss"
    cmp_ logs "$d/tiny_gpt.serial.log" "$d/gpt.jsonl" --keys grad_norm \
        --label "tiny_gpt = cubist train's GPT: gradient norm"
    cmp_ st "$d/tiny_gpt.serial.st" "$d/gpt.st" --grads "$d/gpt.grads.st" \
        --label "tiny_gpt = cubist train's GPT: final weights"
    run tiny_gpt dp2 2 --dp 2
    run tiny_gpt dp2_zero 2 --dp 2 --zero 1
    run tiny_gpt tp1d2 2 --tp 2 --tp-mode 1d
    run tiny_gpt tp2d4 4 --tp 4 --tp-mode 2d
    run tiny_gpt tp3d8 8 --tp 8 --tp-mode 3d
    run tiny_gpt dp2_tp2d4 8 --dp 2 --tp 4 --tp-mode 2d
    run tiny_gpt dp2_zero_tp3d8 16 --dp 2 --zero 1 --tp 8 --tp-mode 3d
    run tiny_gpt pp2 2 --pp 2 --micro-batches 2
    # ZeRO-1: each of the dp 2 ranks keeps half the AdamW moments
    moments() { sed -nE 's/^# rank 0: ([0-9]+) parameters, ([0-9]+) AdamW moments/\1 \2/p' "$1"; }
    read -r p1 m1 <<<"$(moments "$d/tiny_gpt.serial.log")"
    read -r p2 m2 <<<"$(moments "$d/tiny_gpt.dp2_zero.log")"
    if [ -n "${m2:-}" ] && [ "$p2" = "$p1" ] && [ $((2 * m2)) -ge $((m1 - 2)) ] && [ $((2 * m2)) -le $((m1 + 2)) ]; then
        pass "tiny_gpt --dp 2 --zero 1: rank 0 keeps $m2 AdamW moments of $m1 (1/2), all $p2 parameters"
    else
        fail "tiny_gpt --dp 2 --zero 1: AdamW moments '${m2:-?}' on rank 0, want half of '${m1:-?}'"
    fi
else
    fail "tiny_gpt reference runs: $(head -c 300 "$d/gpt.err")"
fi

# refusals: one line, exit 2, every rank
refuse() { # label np pattern flags...
    local label=$1 np=$2 pat=$3; shift 3
    timeout "$(tmo 60)" "${launch[@]}" -np "$np" "$BUILD/examples/mlp_lm" --data "$d/train.bin" --steps 2 "$@" > "$d/$label.out" 2>&1
    local rc=$? n
    n=$(grep -c "$pat" "$d/$label.out")
    if [ "$rc" = 2 ] && [ "$n" -ge 1 ]; then pass "example refuses $label: $(grep -m1 "$pat" "$d/$label.out")"
    else fail "example refuses $label: exit $rc, $n lines matching '$pat': $(tail -n 2 "$d/$label.out" | tr '\n' ' ')"; fi
}
refuse pp2_tp2d 8 "takes --tp-mode 1d only" --pp 2 --tp 4 --tp-mode 2d
refuse pp2_m3 2 "does not divide" --pp 2 --micro-batches 3
refuse pp2_badpart 2 "partition" --pp 2 --partition 0,9,2
[ "$failed" = 0 ]
