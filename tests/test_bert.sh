#!/usr/bin/env bash
# BERT and RoBERTa (`cubist train --model bert|roberta`):
# 1. One process against tests/torch/bert_ref.py (the same network in
#    PyTorch, float64) from the same initial weights on the same rows (masks,
#    lengths and token types dumped by cubist): the loss at each of 10 AdamW
#    steps (warm-up, cosine, clipping active) within 1e-5 relative and every
#    gradient of step 1 within 1e-4 (||a-b||/||b||): float32 against float64
#    sums of a few thousand terms (measured ~1e-7 and ~4e-7). Dropout 0.1 is
#    on, hidden and on the attention probabilities: the reference draws
#    cubist's counter-based masks; the same reference without dropout, and
#    without the attention-probability masks only, must fail (the masks
#    matter). The layout runs below keep both dropouts at their default 0.1. scripts/bert_to_hf.py's
#    conversion of the initial weights into Hugging Face's layout gives the
#    same first-batch loss through a forward written for that layout
#    (separate query/key/value, [out, in] weights, the decoder's own
#    tensors) to 1e-12 (both float64; measured equal).
# 2. Layouts: dp 2, dp 2 x ZeRO-1, dp 2 with the sparse and split
#    embedding-gradient paths, pp 2 (1f1b, 4 micro-batches against one
#    process with --grad-accum 4), pp 2 x dp 2, tensor parallelism 1d 2,
#    2d 4, 3d 8 and pp 2 x 3d 8 (the MLM head through the layouts' tied
#    head with the decoder bias and the ignored targets; 3d 8 also with a
#    vocabulary it pads): 30 steps of loss and
#    gradient norm and the final weights equal the one process to 1e-5
#    relative (tests/compare.py; the sums regroup across ranks, a few ulp a
#    step); recompute block and selective equal none bit for bit.
# 3. Bad input: special ids that collide with the text vocabulary,
#    --fill without held-out tokens,
#    a file shorter than a sequence:
#    exit 2 with one line, on every rank.
# 4. The one training loop's checkpoints (tests/loop_common.sh), bert and
#    roberta with dropout: SIGKILL and --resume, SIGTERM (exit 75, a
#    checkpoint) and --resume, each equal to the uninterrupted run bit for
#    bit (log, checkpoint): masks, lengths and dropout follow from the step.
set -u
. "$(dirname "$0")/launcher.sh"
. "$(dirname "$0")/loop_common.sh"
C="$BUILD/cubist"
PY=/usr/bin/python3
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
cd "$d" || exit 1
"$PY" "$ROOT/tests/gen_text.py" 160000 > text.txt
"$C" prepare --input text.txt --output train.bin >/dev/null || { fail "prepare"; exit 1; }

# ---------------------------------------------------------------- against PyTorch
# tests/torch/bert_ref.py's three runs per model are queued and run in one
# process (one torch start) after both models' cubist runs; ref K prints its
# lines after '@@ K'
ref_q() { local IFS=$'\t'; echo "$*" >> ref.queue; }
ref() { awk -v k="$1" '/^@@ / { on = ($2 == k); next } on' ref.out; }
refs=()
for model in bert roberta; do
    # roberta with --max-predictions 3 below round(32 x 0.15) = 5: every row capped, 3 decoder slots
    mp=$([ "$model" = roberta ] && echo 3 || echo 0)
    O=(--model "$model" --data train.bin --batch 4 --seq-len 32 --layers 2 --d-model 32 --heads 4 --quiet
       --max-predictions "$mp")
    T=(--lr 2e-3 --min-lr 2e-4 --warmup 2 --clip 1.0 --dropout 0.1 --attn-dropout 0.1 --seed 1337)
    if "$C" train "${O[@]}" --steps 0 --save "$model.init.st" &&
       "$C" train "${O[@]}" "${T[@]}" --steps 10 --init "$model.init.st" --log "$model.jsonl" \
           --dump-grads "$model.grads.st" --dump-batches "$model.bin" &&
       "$PY" "$ROOT/scripts/bert_to_hf.py" "$model.init.st" "$model.hf.st"; then
        R=(--model "$model" --init "$model.init.st" --batches "$model.bin" --log "$model.jsonl"
           --grads "$model.grads.st" --batch 4 --seq-len 32 --layers 2 --heads 4 --steps 10 --lr 2e-3
           --min-lr 2e-4 --warmup 2 --clip 1.0 --max-predictions "$mp")
        ref_q "${R[@]}" --hf "$model.hf.st" --dropout 0.1 --attn-dropout 0.1 --seed 1337
        ref_q "${R[@]}" --dropout 0 --attn-dropout 0
        ref_q "${R[@]}" --dropout 0.1 --attn-dropout 0 --seed 1337
        refs+=("$model")
    else fail "$model one-process run for the PyTorch test"; fi
done
[ -s ref.queue ] && "$PY" "$ROOT/tests/torch/bert_ref.py" --runs ref.queue > ref.out 2>&1
k=0
for model in "${refs[@]}"; do
    out=$(ref $k)
    grep '^#' <<<"$out"
    np=$(grep -c '^PASS' <<<"$out"); nf=$(grep -c '^FAIL' <<<"$out")
    if [ "$nf" = 0 ] && grep -q "^# $model against PyTorch: 48 passed" <<<"$out"; then
        pass "$model against PyTorch: $np checks (10 losses, 34 step-1 gradients, names, batches, masking, the Hugging Face layout's loss)"
    else fail "$model against PyTorch: $nf failed"; grep '^FAIL\|Error' <<<"$out"; fi
    nodrop=$(ref $((k + 1)) | grep -c '^FAIL')
    [ "$nodrop" -gt 0 ] && pass "$model: the reference without cubist's dropout masks fails ($nodrop checks)" ||
        fail "$model: the reference without dropout passes too: the test does not see the masks"
    noattn=$(ref $((k + 2)) | grep -c '^FAIL')
    [ "$noattn" -gt 0 ] && pass "$model: the reference without the attention-probability masks fails ($noattn checks)" ||
        fail "$model: the reference without attention dropout passes too: the test does not see its masks"
    k=$((k + 3))
done

# ---------------------------------------------------------------- layouts
S=(--data train.bin --batch 8 --seq-len 32 --layers 2 --d-model 32 --heads 4 --steps 30
   --lr 2e-3 --warmup 3 --seed 7)
. "$ROOT/tests/compare_queue.sh" # cmp_q: compare.py's comparisons, queued, run by cmp_flush
cmp_() { # LABEL GOT REF [compare.py flags]: loss, grad norm and weights
    local label=$1 got=$2 ref=$3; shift 3
    cmp_q logs "$got.log" "$ref.log" --label "$label loss" "$@"
    cmp_q st "$got.st" "$ref.st" --label "$label weights" "$@"
}
run() { # NAME NP flags...
    local name=$1 np=$2; shift 2
    timeout "$(tmo 300)" "${launch[@]}" -np "$np" "$C" train "${S[@]}" "$@" --save "$name.st" \
        > "$name.log" 2>&1 || { fail "$name: $(tail -n 2 "$name.log" | tr '\n' ' ')"; return 1; }
}
for model in bert roberta; do
    run "$model.one" 1 --model "$model" || continue
    run "$model.ga4" 1 --model "$model" --grad-accum 4 || continue
    run "$model.dp2" 2 --model "$model" --dp 2 && cmp_ "$model dp2" "$model.dp2" "$model.one"
    run "$model.dp2z" 2 --model "$model" --dp 2 --zero 1 && cmp_ "$model dp2 ZeRO-1" "$model.dp2z" "$model.one"
    for eg in sparse split; do # the word embeddings' lookup rows from id field 0
        run "$model.dp2_$eg" 2 --model "$model" --dp 2 --embed-grad "$eg" &&
            cmp_ "$model dp2 --embed-grad $eg" "$model.dp2_$eg" "$model.one"
    done
    run "$model.pp2" 2 --model "$model" --pp 2 --schedule 1f1b --micro-batches 4 &&
        cmp_ "$model pp2 1f1b M4 (vs --grad-accum 4)" "$model.pp2" "$model.ga4"
    run "$model.pp2dp2" 4 --model "$model" --pp 2 --dp 2 --micro-batches 2 --zero 1 &&
        cmp_ "$model pp2 x dp2 ZeRO-1" "$model.pp2dp2" "$model.one"
    run "$model.tp1d" 2 --model "$model" --tp 2 --tp-mode 1d && cmp_ "$model tp 1d2" "$model.tp1d" "$model.one"
    run "$model.tp2d" 4 --model "$model" --tp 4 --tp-mode 2d && cmp_ "$model tp 2d4" "$model.tp2d" "$model.one"
    run "$model.tp3d" 8 --model "$model" --tp 8 --tp-mode 3d && cmp_ "$model tp 3d8" "$model.tp3d" "$model.one"
    run "$model.pp2tp3d" 16 --model "$model" --pp 2 --tp 8 --tp-mode 3d --micro-batches 2 &&
        cmp_ "$model pp2 x tp 3d8" "$model.pp2tp3d" "$model.one"
    for rc in block selective; do
        run "$model.rc_$rc" 1 --model "$model" --recompute "$rc" &&
            cmp_ "$model --recompute $rc (bit for bit)" "$model.rc_$rc" "$model.one" --tol 0
    done
done

# a vocabulary that 3-D pads (261 to 264): the decoder bias stops at the
# true vocabulary in the last block
run bert.one261 1 --model bert --special-base 257 &&
    run bert.tp3d261 8 --model bert --special-base 257 --tp 8 --tp-mode 3d &&
    cmp_ "bert tp 3d8, vocabulary 261 padded to 264" bert.tp3d261 bert.one261
# the decoder bias is split like the head's vocabulary (CB_P_VOCAB): the
# trained checkpoint (its bias nonzero) loaded and saved under each tensor
# mode, the whole bias under its Hugging Face name, equals it bit for bit
for tpm in "1d 2" "2d 4" "3d 8"; do
    set -- $tpm
    if timeout "$(tmo 120)" "${launch[@]}" -np "$2" "$C" train --model bert --data train.bin \
            --batch 8 --seq-len 32 --layers 2 --d-model 32 --heads 4 --special-base 257 --tp "$2" \
            --tp-mode "$1" --steps 0 --init bert.one261.st --save "rt$1.st" > rt.log 2>&1; then
        cmp_q st "rt$1.st" bert.one261.st --tol 0 --label "bert checkpoint through tp $1 $2 (decoder bias split)"
    else fail "bert checkpoint through tp $1 $2: $(tail -n 2 rt.log | tr '\n' ' ')"; fi
done

# ---------------------------------------------------------------- bad input
bad() { # LABEL NP WANT flags...: exit 2, one line naming WANT on every rank's stderr
    local label=$1 np=$2 want=$3; shift 3
    timeout "$(tmo 60)" "${launch[@]}" -np "$np" "$C" train --data train.bin --steps 2 "$@" \
        > bad.out 2> bad.err
    local rc=$? lines
    lines=$(grep -c . bad.err)
    if [ "$rc" = 2 ] && [ "$lines" -ge 1 ] && grep -q -- "$want" bad.err && [ "$(sort -u bad.err | grep -c .)" = 1 ]; then
        pass "bad input $label: exit 2, \"$(head -n 1 bad.err)\""
    else fail "bad input $label: exit $rc, stderr: $(head -c 300 bad.err)"; fi
}
bad "special ids collide with the text vocabulary" 1 "collide with the text vocabulary" --model bert --special-base 200
bad "special ids collide (2 ranks)" 2 "collide with the text vocabulary" --model roberta --special-base 255 --dp 2
bad "--heads not dividing --d-model" 1 "does not divide" --model bert --heads 5
bad "--fill without --val-data" 1 "needs --val-data" --model bert --fill 2
bad "--attn-dropout 1" 2 "attn-dropout in \[0, 1)" --model bert --attn-dropout 1 --dp 2
bad "--max-predictions above --seq-len" 1 "max-predictions in \[0, --seq-len\]" --model bert --seq-len 32 --max-predictions 33
"$PY" -c "import sys; sys.stdout.buffer.write(bytes(range(65, 85)))" > tiny.txt
"$C" prepare --input tiny.txt --output tiny.bin >/dev/null
timeout "$(tmo 60)" "$C" train --model bert --data tiny.bin --steps 1 > bad.out 2> bad.err
rc=$?
if [ "$rc" = 2 ] && [ "$(grep -c . bad.err)" = 1 ] && grep -q "fewer than one sequence" bad.err; then
    pass "bad input a file shorter than one sequence: exit 2, \"$(cat bad.err)\""
else fail "bad input a file shorter than one sequence: exit $rc: $(head -c 300 bad.err)"; fi

# ---------------------------------------------------------------- kill, signal, resume
for model in bert roberta; do
    loop_checks "$model" 120 --model "$model" --data train.bin --batch 4 --seq-len 32 --layers 2 \
        --d-model 32 --heads 4 --lr 2e-3 --warmup 3 --dropout 0.1 --seed 7
done
cmp_flush
[ "$failed" = 0 ]
