#!/usr/bin/env bash
# The translation encoder-decoder (`cubist train --model nmt`,
# cb_model_declare_nmt) on a small synthetic pair file (each target is its
# source's characters reversed; lengths 1..5 words, so batches by token
# count hold from 2 to 8 pairs and the rest of the rows is padding):
# 1. One process against tests/torch/nmt_ref.py (the same network in
#    PyTorch, float64) from the same initial weights on the rows cubist
#    dumped, post-LN and --pre-ln with dropout 0.1 (the reference draws
#    cubist's counter-based masks) and the sqrt(d) embedding scale, and
#    post-LN without either: the loss at each of 10 AdamW steps
#    (warm-up, cosine, clipping) within 1e-5 relative and every gradient of
#    step 1 within 1e-4 (||a-b||/||b||): float32 against float64 sums of a
#    few hundred terms (measured at most 5e-8 and 6e-7).
# 2. Layouts: dp 2 and tp 2 (1-D) against one process, pp 2 (1F1B, 2
#    micro-batches) against --grad-accum 2, over 30 steps: loss,
#    gradient norm, val_loss and the final weights to 1e-5 relative
#    (tests/compare.py; the sums regroup across ranks). AdamW eps 1e-3: the
#    key biases' gradient is zero in exact arithmetic (docs/nmt.md), and a
#    small eps turns their layout-dependent rounding noise into full steps.
# 3. Bad input: --heads not dividing --d-model, --seq-len shorter than the
#    pairs, --max-tokens below the longest pair, a token file that is not
#    pairs: exit 2, one line, every rank.
# 4. The one training loop's checkpoints (tests/loop_common.sh): SIGKILL
#    and --resume, SIGTERM (exit 75) and --resume, bit for bit.
set -u
. "$(dirname "$0")/nmt_common.sh"
. "$ROOT/tests/loop_common.sh"

# ---------------------------------------------------------------- against PyTorch
# tests/torch/nmt_ref.py's runs are queued and run in one process (one torch
# start) after cubist's; ref K prints its lines after '@@ K'
ref_q() { local IFS=$'\t'; echo "$*" >> ref.queue; }
ref() { awk -v k="$1" '/^@@ / { on = ($2 == k); next } on' ref.out; }
T=24 # the longest side (23 bytes) + its EOS
done_ln=()
for ln in post pre plain; do
    f=(--dropout 0.1); [ "$ln" = pre ] && f+=(--pre-ln)
    [ "$ln" = plain ] && f=(--dropout 0 --no-emb-scale)
    O=(--model nmt --data train.bin --layers 2 --d-model 32 --heads 4 --ffn 64 --batch 8
       --seq-len $T --quiet "${f[@]}")
    R=(--lr 2e-3 --min-lr 2e-4 --warmup 2 --clip 1.0 --seed 1337)
    if "$C" train "${O[@]}" --steps 0 --save "$ln.init.st" &&
       "$C" train "${O[@]}" "${R[@]}" --steps 10 --init "$ln.init.st" --log "$ln.jsonl" \
           --dump-grads "$ln.grads.st" --dump-batches "$ln.bin" > /dev/null; then
        X=(--init "$ln.init.st" --batches "$ln.bin" --log "$ln.jsonl" --grads "$ln.grads.st" --batch 8
           --seq-len $T --layers 2 --dec-layers 2 --heads 4 --steps 10 --vocab 259 "${R[@]}" "${f[@]}")
        ref_q "${X[@]}" --label "nmt $ln-LN"
        # the check sees the masks and the scale: a reference without either fails
        # shellcheck disable=SC2086
        [ "$ln" = post ] && for miss in "--dropout 0" "--no-emb-scale"; do ref_q "${X[@]}" $miss; done
        done_ln+=("$ln")
    else fail "nmt $ln-LN one-process run for the PyTorch test"; fi
done
[ -s ref.queue ] && "$PY" "$ROOT/tests/torch/nmt_ref.py" --runs ref.queue > ref.out 2>&1
k=0
for ln in "${done_ln[@]}"; do
    out=$(ref $k); k=$((k + 1))
    grep '^#' <<<"$out"
    np=$(grep -c '^PASS' <<<"$out"); nf=$(grep -c '^FAIL' <<<"$out")
    if [ "$nf" = 0 ] && [ "$np" -ge 70 ] && grep -q "against PyTorch: $np passed" <<<"$out"; then
        pass "nmt $ln-LN against PyTorch: $np checks (10 losses, the step-1 gradients, names, batches)"
    else fail "nmt $ln-LN against PyTorch: $nf failed"; grep '^FAIL\|Error' <<<"$out"; fi
    [ "$ln" = post ] || continue
    for miss in "--dropout 0" "--no-emb-scale"; do
        nf=$(ref $k | grep -c '^FAIL'); k=$((k + 1))
        if [ "$nf" -gt 0 ]; then pass "nmt: the reference with $miss fails ($nf checks)"
        else fail "nmt: the reference with $miss passes too: the test does not see it"; fi
    done
done

# ---------------------------------------------------------------- layouts
S=(--model nmt --data train.bin --val-data val.bin --layers 2 --d-model 32 --heads 4 --ffn 64
   --batch 8 --seq-len $T --steps 30 --lr 2e-3 --warmup 3 --eps 1e-3 --eval-every 10
   --eval-batches 2)
run() { # NAME NP flags...
    local name=$1 np=$2; shift 2
    timeout "$(tmo 300)" "${launch[@]}" -np "$np" "$C" train "${S[@]}" "$@" --save "$name.st" \
        --log "$name.jsonl" > "$name.log" 2>&1 || { fail "$name: $(tail -n 2 "$name.log" | tr '\n' ' ')"; return 1; }
}
vals() { grep -o '"val_loss":[0-9.e+-]*' "$1.jsonl" | sed 's/.*://'; }
cmp_() { # LABEL GOT REF
    local out label=$1 got=$2 ref=$3
    out=$("$PY" "$ROOT/tests/compare.py" logs "$got.jsonl" "$ref.jsonl" --label "$label loss" 2>&1
          "$PY" "$ROOT/tests/compare.py" st "$got.st" "$ref.st" --label "$label weights" 2>&1)
    grep '^PASS\|^FAIL' <<<"$out"
    failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
    [ "$(grep -c '^PASS' <<<"$out")" = 2 ] || [ "$(grep -c '^FAIL' <<<"$out")" != 0 ] || fail "$label: $out"
    if "$PY" -c "import sys; a, b = (list(map(float, s.split())) for s in sys.argv[1:3]); \
sys.exit(not (len(a) == len(b) == 3 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b))))" \
        "$(vals "$got")" "$(vals "$ref")"; then
        pass "$label val_loss at steps 10, 20, 30 within 1e-5: $(vals "$got" | tr '\n' ' ')"
    else fail "$label val_loss: $(vals "$got" | tr '\n' ' ') vs $(vals "$ref" | tr '\n' ' ')"; fi
}
if run one 1; then
    run dp2 2 --dp 2 && cmp_ "nmt dp2" dp2 one
    run tp2 2 --tp 2 --tp-mode 1d && cmp_ "nmt tp 1d2" tp2 one
    run ga2 1 --grad-accum 2 &&
        run pp2 2 --pp 2 --schedule 1f1b --micro-batches 2 && cmp_ "nmt pp2 1f1b M2 (vs --grad-accum 2)" pp2 ga2
fi

# ---------------------------------------------------------------- bad input
bad() { # LABEL NP WANT flags...: exit 2, one line naming WANT on every rank's stderr
    local label=$1 np=$2 want=$3; shift 3
    timeout "$(tmo 60)" "${launch[@]}" -np "$np" "$C" train --model nmt --steps 2 "$@" \
        > bad.out 2> bad.err
    local rc=$? lines
    lines=$(grep -c . bad.err)
    if [ "$rc" = 2 ] && [ "$lines" -ge 1 ] && grep -q -- "$want" bad.err && [ "$(sort -u bad.err | grep -c .)" = 1 ]; then
        pass "bad input $label: exit 2, \"$(head -n 1 bad.err)\""
    else fail "bad input $label: exit $rc, stderr: $(head -c 300 bad.err)"; fi
}
bad "--heads not dividing --d-model" 1 "does not divide" --data train.bin --d-model 32 --heads 5
bad "--seq-len shorter than the pairs (2 ranks)" 2 "pass --seq-len >= 24" --data train.bin --seq-len 10 --dp 2
bad "--max-tokens below the longest pair" 1 "cannot hold the longest pair" --data train.bin --max-tokens 5
"$C" prepare --input train.tsv --output plain.bin > /dev/null
bad "a token file that is not pairs" 1 "not of translation pairs" --data plain.bin

# ---------------------------------------------------------------- kill, signal, resume
loop_checks nmt 120 --model nmt --data train.bin --val-data val.bin --eval-every 7 --eval-batches 1 \
    --layers 1 --d-model 32 --heads 4 --ffn 64 --batch 8 --seq-len $T --lr 2e-3 --warmup 3 --seed 7
[ "$failed" = 0 ]
