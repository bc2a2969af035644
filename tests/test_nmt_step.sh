#!/usr/bin/env bash
# The translation model's dropout in evaluation and `cubist bench --model nmt`
# (its dropout and sqrt(d) embedding scale under every layout are
# test_nmt_layouts.sh's runs, which take the defaults: dropout 0.1, scaled):
# 1. Dropout is off in evaluation: one step at learning rate 0 (the weights
#    stay as drawn) with --dropout 0.5 and with --dropout 0 gives the same
#    val_loss to the log's 7 digits, while the training losses differ (in
#    the third digit: the masks act in training only).
# 2. `cubist bench --model nmt --quick`: both programs run, PyTorch's
#    parameter count equals cubist's (the benchmark refuses otherwise), and
#    the lines of the result are there with positive rates.
# 3. Bad input: --heads not dividing --d-model, exit 2, one line.
set -u
. "$(dirname "$0")/nmt_common.sh"

# ---------------------------------------------------------------- dropout off in evaluation
O=(--model nmt --data train.bin --val-data val.bin --layers 1 --d-model 32 --heads 4 --ffn 64
   --batch 8 --steps 1 --lr 0 --min-lr 0 --eval-every 1 --eval-batches 2 --quiet)
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | head -n 1 | sed 's/.*://'; }
if "$C" train "${O[@]}" --dropout 0.5 --log d5.jsonl >/dev/null &&
   "$C" train "${O[@]}" --dropout 0 --log d0.jsonl >/dev/null; then
    v5=$(field d5.jsonl val_loss) v0=$(field d0.jsonl val_loss)
    l5=$(field d5.jsonl loss) l0=$(field d0.jsonl loss)
    if [ -n "$v5" ] && [ "$v5" = "$v0" ] && [ "$l5" != "$l0" ]; then
        pass "dropout off in evaluation: val_loss $v5 with --dropout 0.5 and 0; training loss $l5 vs $l0"
    else fail "dropout in evaluation: val_loss $v5 vs $v0, loss $l5 vs $l0"; fi
else fail "nmt train for the evaluation check"; fi

# ---------------------------------------------------------------- the benchmark
# passive OpenMP waits: spinning threads on a shared machine slow both programs
if out=$(OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE timeout "$(tmo 300)" "$C" bench --model nmt --quick --threads 2 2>&1); then
    echo "$out" | sed 's/^/# /'
    if grep -q '^nmt: 2 + 2 layers, d 128.*parameters$' <<<"$out" &&
       grep -q '^cubist: *[1-9][0-9]* tokens/s.*MFU' <<<"$out" &&
       grep -q '^cubist kernels, ms per step: gemm' <<<"$out" &&
       grep -q '^PyTorch: *[1-9][0-9]* tokens/s.*cubist / PyTorch = [0-9.]*$' <<<"$out"; then
        pass "bench --model nmt --quick: the same parameter count in both, tokens/s, MFU and the ratio"
    else fail "bench --model nmt --quick output: $out"; fi
else fail "bench --model nmt --quick: $(tail -n 2 <<<"$out")"; fi
out=$(OMP_NUM_THREADS=1 timeout "$(tmo 300)" "$C" bench --model nmt --quick --threads 1 --no-torch --rounds 2 2>&1)
if grep -q "^the best of 2 rounds" <<<"$out" && grep -q '^cubist: *[1-9][0-9]* tokens/s' <<<"$out"; then
    pass "bench --model nmt --quick --rounds 2: runs both rounds and keeps the best"
else fail "bench --model nmt --quick --rounds 2: $out"; fi
"$C" bench --model nmt --quick --heads 3 > bad.out 2> bad.err
rc=$?
if [ "$rc" = 2 ] && [ "$(grep -c . bad.err)" = 1 ] && grep -q "does not divide --d-model" bad.err; then
    pass "bench --model nmt --heads 3: exit 2, \"$(cat bad.err)\""
else fail "bench --model nmt --heads 3: exit $rc, $(head -c 300 bad.err)"; fi
finish
