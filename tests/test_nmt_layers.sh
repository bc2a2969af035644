#!/usr/bin/env bash
# Issue 13's layers through the engine, with tests/test_nmt_layers.c:
#
# --model sinusoid: fixed sinusoidal positions (cb_layer_set_sinusoidal) in
# an MLP language model, weight decay on embeddings on: the table in the
# saved file equals PyTorch's sinusoids of Vaswani et al.; 30 AdamW steps
# leave it exactly as drawn while the token embedding trains.
#
# --model smooth: the same with label smoothing 0.1 and padding targets
# left out (cb_layer_set_loss): the step-1 loss against PyTorch's
# cross_entropy(label_smoothing, ignore_index) in fp64; under dp 2 each rank
# holds a different number of real targets, so the mean over the step's
# real targets is checked too.
#
# --model lengths: two length sets (cb_model_set_lengths_set,
# cb_layer_use_lengths) in a toy encoder-decoder whose encoder
# self-attention is padded by the source lengths (set 0), the decoder's
# causal self-attention by the target lengths (set 1), and whose
# cross-attention masks target queries and source keys: the step-1 loss
# against PyTorch in fp64 on the same initial weights and batch (PyTorch
# with the two sets swapped must differ, so the check sees the sets).
#
# Both under dp 2 (and ZeRO-1), 1-D 2, 2-D 4, 3-D 8 and pp 2 (1F1B, 4
# micro-batches) against one process over 30 steps (loss, gradient norm
# and final weights to 1e-5 relative: sums regroup across ranks); the
# sinusoid table unchanged under each, 1-D 4 (padded vocabulary) too; the
# encoder-decoder also under pp 4 (1F1B and interleaved), pp 2 x 2-D 4 and
# dp 2 with --embed-grad split and sparse.
set -u
. "$(dirname "$0")/dp_common.sh"
P="$BUILD/tests/test_nmt_layers"
PY=/usr/bin/python3
"$C" prepare --input text.txt --output train.bin >/dev/null || { fail "prepare"; finish; exit; }
for model in sinusoid smooth lengths shared; do
    "$P" --model $model --data train.bin --steps 0 --save $model.init.st >/dev/null &&
        "$P" --model $model --data train.bin --steps 30 --save $model.serial.st > $model.serial.log 2>&1 ||
        { fail "$model serial runs: $(tail -n 2 $model.serial.log)"; finish; exit; }
done

# ---------------------------------------------------------------- against PyTorch (tests/torch/nmt_layers_ref.py)
REF="$HERE/torch/nmt_layers_ref.py"
# ref_q LABEL ARGS...: a check of nmt_layers_ref.py, queued; ref_flush runs
# the queue in one Python process (one torch start, about 1.5 s of CPU, instead
# of one per check) and prints a PASS or FAIL line per label
labels=()
ref_q() { labels+=("$1"); shift; local IFS=$'\t'; echo "$*" >> ref.queue; }
ref_flush() {
    local out i=0 label line
    mapfile -t out < <("$PY" "$REF" batch ref.queue 2>&1)
    for label in "${labels[@]}"; do
        line=${out[i]:-"no result line: ${out[*]: -2}"}; i=$((i + 1))
        [[ $line == OK* ]] && pass "$label: $line" || fail "$label: $line"
    done
}
table() { ref_q "$1" table "$2" sinusoid.init.st; } # LABEL FILE: the table equals PyTorch's, and the initial one bit for bit
table "sinusoid initial" sinusoid.init.st
table "sinusoid after 30 steps, decay on embeddings" sinusoid.serial.st
for model in smooth lengths shared; do
    ref_q "$model vs PyTorch" $model $model.init.st train.bin $model.serial.log
done

# ---------------------------------------------------------------- layouts against one process
. "$HERE/compare_queue.sh" # cmp_q: compare.py's comparisons, queued
run() { # MODEL LABEL NP flags...
    local model=$1 label=$2 np=$3; shift 3
    if timeout "$TMO" "${launch[@]}" -np "$np" "$P" --model $model --data train.bin --steps 30 \
            --save "$model.$label.st" "$@" > "$model.$label.log" 2>&1; then
        cmp_q logs "$model.$label.log" $model.serial.log --label "$model $label loss"
        cmp_q st "$model.$label.st" $model.serial.st --label "$model $label weights"
        [ $model = lengths ] || table "$model $label table" "$model.$label.st"
    else
        fail "$model $label: $(tail -n 2 "$model.$label.log" | tr '\n' ' ')"
    fi
}
for model in sinusoid smooth lengths shared; do
    run $model dp2 2 --dp 2
    run $model dp2_zero 2 --dp 2 --zero 1
    run $model tp1d2 2 --tp 2 --tp-mode 1d
    run $model tp2d4 4 --tp 4 --tp-mode 2d
    run $model tp3d8 8 --tp 8 --tp-mode 3d
    run $model pp2_1f1b 2 --pp 2 --schedule 1f1b --micro-batches 4
done
run sinusoid tp1d4 4 --tp 4 --tp-mode 1d
# the encoder-decoder under the issue's other pipeline layouts
run shared pp4_1f1b 4 --pp 4 --schedule 1f1b --micro-batches 4
run shared pp4_interleaved 4 --pp 4 --schedule interleaved --micro-batches 4
run shared pp2_tp2d4 8 --pp 2 --tp 4 --tp-mode 2d --micro-batches 2
# the shared table's two lookups and tied head under the split and sparse
# embedding-gradient paths (every lookup's rows gathered or reduced)
run shared dp2_split 2 --dp 2 --embed-grad split
run shared dp2_sparse 2 --dp 2 --embed-grad sparse
ref_flush
cmp_flush
finish
