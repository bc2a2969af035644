#!/usr/bin/env bash
# NCF (cubist train --model ncf) end to end on the Debian dependency graph
# (scripts/debian_deps.py: the first 300 packages with two or more
# dependencies, from apt's lists on this machine):
# 1. prepare --interactions: the maps beside the output, one id per line.
# 2. One process against tests/torch/ncf_ref.py (PyTorch NeuMF, float64) on
#    cubist's initial weights and rows (negatives included): the loss of
#    each of 10 AdamW steps within 1e-5 relative, every step-1 gradient
#    within 1e-4 (||a - b|| / ||b||).
# 3. tp 1d2, 2d4, 3d8 and dp 2 x ZeRO-1 against the one-process run, pp 2
#    (1F1B, 4 micro-batches) and pp 2 x 3d 8 against the one-process run
#    with --grad-accum 4: 30 steps of loss and gradient norm and the final
#    weights within 1e-5 relative (fp32 sums regrouped across ranks; the
#    layers exchange whole tensors, so measured ~1e-7).
# 4. Bad input, one line and exit 2 (on every rank under mpirun): a pair
#    file line that is not user<TAB>item (named by file and line, nothing
#    written), --negatives over the item count, a file that is not a pair
#    file, a bad --mlp, an unknown --model.
# 5. The one training loop's checkpoints (tests/loop_common.sh): SIGKILL and
#    --resume, SIGTERM (exit 75, a checkpoint) and --resume, each equal to
#    the uninterrupted run bit for bit (log with evaluations, checkpoint).
set -u
. "$(dirname "$0")/launcher.sh"
. "$(dirname "$0")/loop_common.sh"
C="$BUILD/cubist"
PY=/usr/bin/python3
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d" || exit 1

# ---------------------------------------------------------------- data
if ! "$PY" "$ROOT/scripts/debian_deps.py" --users 300 > deps.tsv 2> deps.err; then
    fail "ncf data: $(cat deps.err)"; exit 1
fi
"$C" prepare --interactions deps.tsv --output deps.bin || { fail "ncf prepare"; exit 1; }
nu=$(cut -f1 deps.tsv | awk '!s[$0]++' | wc -l); ni=$(cut -f2 deps.tsv | awk '!s[$0]++' | wc -l)
if cmp -s <(cut -f1 deps.tsv | awk '!s[$0]++') deps.bin.users &&
   cmp -s <(cut -f2 deps.tsv | awk '!s[$0]++') deps.bin.items &&
   [ "$(stat -c %s deps.bin)" = $((24 + 8 * $(wc -l < deps.tsv))) ]; then
    pass "ncf prepare: $(wc -l < deps.tsv) pairs, $nu users, $ni items; maps in first-seen order"
else
    fail "ncf prepare: maps or pair file size differ from the tsv"
fi

# ---------------------------------------------------------------- against PyTorch
O=(--model ncf --data deps.bin --batch 64 --factors 16 --mlp 64,32,16 --eval-users 20 --quiet)
T=(--lr 3e-3 --min-lr 3e-4 --warmup 2 --weight-decay 0.01)
if "$C" train "${O[@]}" --steps 0 --save init.st && "$C" train "${O[@]}" "${T[@]}" --steps 10 \
        --init init.st --log t.jsonl --dump-grads g.st --dump-batches b.bin; then
    out=$("$PY" "$ROOT/tests/torch/ncf_ref.py" train --init init.st --batches b.bin --log t.jsonl \
          --grads g.st --batch 64 --steps 10 --mlp 64,32,16 --lr 3e-3 --min-lr 3e-4 --warmup 2 \
          --weight-decay 0.01 2>&1)
    echo "$out" | grep -v '^PASS' | grep -v '^# ncf against'
    np=$(grep -c '^PASS' <<<"$out"); nf=$(grep -c '^FAIL' <<<"$out")
    [ "$nf" = 0 ] && grep -q '^# ncf against PyTorch: 20 passed' <<<"$out" \
        && pass "ncf against PyTorch: $np checks (10 losses, 9 step-1 gradients, batches)" \
        || { fail "ncf against PyTorch: $nf failed"; echo "$out" | grep '^FAIL\|Error'; }
else
    fail "ncf one-process training for the PyTorch test"
fi

# ---------------------------------------------------------------- layouts
S=(--model ncf --data deps.bin --batch 64 --factors 16 --mlp 64,32,16 --eval-users 20 --steps 30
   --lr 3e-3 --weight-decay 0.01 --seed 7)
cmp_() { # LABEL GOT REF: loss, grad norm and weights
    local out
    out=$("$PY" "$ROOT/tests/compare.py" logs "$2.log" "$3.log" --label "ncf $1 loss" 2>&1
          "$PY" "$ROOT/tests/compare.py" st "$2.st" "$3.st" --label "ncf $1 weights" 2>&1)
    grep '^PASS\|^FAIL' <<<"$out"
    failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
    [ "$(grep -c '^PASS' <<<"$out")" = 2 ] || { [ "$(grep -c '^FAIL' <<<"$out")" != 0 ] || fail "ncf $1: $out"; }
}
"$C" train "${S[@]}" --save serial.st > serial.log 2>&1 || fail "ncf serial: $(tail -n 2 serial.log)"
"$C" train "${S[@]}" --grad-accum 4 --save accum.st > accum.log 2>&1 || fail "ncf --grad-accum 4"
layout() { # LABEL REF NP flags...
    local label=$1 ref=$2 np=$3; shift 3
    if timeout "$(tmo 240)" "${launch[@]}" -np "$np" "$C" train "${S[@]}" --save "$label.st" "$@" \
            > "$label.log" 2>&1; then
        cmp_ "$label" "$label" "$ref"
    else
        fail "ncf $label: $(tail -n 2 "$label.log" | tr '\n' ' ')"
    fi
}
layout tp1d2 serial 2 --tp 2 --tp-mode 1d
layout tp2d4 serial 4 --tp 4 --tp-mode 2d
layout tp3d8 serial 8 --tp 8 --tp-mode 3d
layout dp2_zero1 serial 2 --dp 2 --zero 1
# the embedding-gradient paths (--embed-grad, src/dp/dp.h) on NCF's four untied tables; each
# run's startup line names the path it took, so a run that fell back to dense fails
layout dp2_sparse serial 2 --dp 2 --embed-grad sparse
layout dp2_split serial 2 --dp 2 --embed-grad split
layout dp2_split_zero1 serial 2 --dp 2 --zero 1 --embed-grad split
layout dp2_sparse_accum4 accum 2 --dp 2 --embed-grad sparse --grad-accum 4
layout dp2_split_accum4 accum 2 --dp 2 --embed-grad split --grad-accum 4
for label in dp2_sparse dp2_split dp2_split_zero1 dp2_sparse_accum4 dp2_split_accum4; do
    want=${label#dp2_}; want=${want%%_*}
    grep -q "embedding gradient $want\$" "$label.log" && pass "ncf $label: took the $want path" \
        || fail "ncf $label: the startup line names another path: $(grep '^ncf:' "$label.log")"
done
grep -q 'embedding gradient split$' dp2_zero1.log && pass "ncf dp2 auto: split (p x rows x 4 <= each table's rows)" \
    || fail "ncf dp2 auto: $(grep '^ncf:' dp2_zero1.log)"
layout pp2_1f1b_m4 accum 2 --pp 2 --schedule 1f1b --micro-batches 4
layout pp2_tp3d8 accum 16 --pp 2 --tp 8 --tp-mode 3d --schedule 1f1b --micro-batches 4
# --precision bf16: the bf16 kernel table (products in bf16 with fp32 accumulation; NCF's
# element-wise kernels are its copies of the CPU ones) under tp 1d2 and dp 2 (split) against
# the one-process bf16 run: loss and grad norm within 2e-4, test_bf16_layouts' tolerance and
# reasons (sums regrouped, an operand near a bf16 rounding boundary rounds the other way);
# the fp32 run must fall outside it, so the runs did take the bf16 table
B16=(--precision bf16 --steps 10)
"$C" train "${S[@]}" "${B16[@]}" > bf16.log 2>&1 || fail "ncf bf16: $(tail -n 2 bf16.log)"
"$C" train "${S[@]}" --steps 10 > fp32_10.log 2>&1 || fail "ncf fp32 10 steps"
for v in "tp1d2 2 --tp 2 --tp-mode 1d" "dp2 2 --dp 2 --embed-grad split"; do
    set -- $v; label=bf16_$1 np=$2; shift 2
    if timeout "$(tmo 240)" "${launch[@]}" -np "$np" "$C" train "${S[@]}" "${B16[@]}" "$@" > "$label.log" 2>&1; then
        out=$("$PY" "$ROOT/tests/compare.py" logs "$label.log" bf16.log --tol 2e-4 --label "ncf $label" 2>&1)
        grep '^PASS\|^FAIL' <<<"$out"; failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
        grep -q '^PASS' <<<"$out" || grep -q '^FAIL' <<<"$out" || fail "ncf $label: $out"
    else
        fail "ncf $label: $(tail -n 2 "$label.log" | tr '\n' ' ')"
    fi
done
out=$("$PY" "$ROOT/tests/compare.py" logs fp32_10.log bf16.log --tol 2e-4 --label x 2>&1)
grep -q '^FAIL' <<<"$out" && pass "ncf bf16 differs from fp32 beyond 2e-4: $(sed 's/^FAIL x //' <<<"$out" | head -c 120)" \
    || fail "ncf bf16 run equals fp32 within 2e-4: did it use the bf16 table? $out"
# the build-time workspace plan covers NCF's operators: no layout's slot grew during a step
missed=$(grep -l 'workspace plan missed' ./*.log)
[ -z "$missed" ] && pass "ncf workspace planned at build under every layout (no slot grew)" \
    || fail "ncf workspace plan missed a use: $missed"
# the evaluation is the same under a layout (scores gathered from the logistic head)
ev() { grep '^eval' "$1.log" | sed 's/ users.*//'; }
[ -n "$(ev serial)" ] && [ "$(ev serial)" = "$(ev tp3d8)" ] && [ "$(ev accum)" = "$(ev pp2_tp3d8)" ] \
    && pass "ncf evaluation under 3d8 and pp2 x 3d8 equals one process: $(ev serial)" \
    || fail "ncf evaluation differs: '$(ev serial)' / '$(ev tp3d8)'"

# ---------------------------------------------------------------- bad input
bad() { # LABEL PATTERN NP cmd...: exit 2, one line on stderr matching PATTERN
    local label=$1 pat=$2 np=$3; shift 3
    local pre=(); [ "$np" -gt 1 ] && pre=(timeout "$(tmo 60)" "${launch[@]}" -np "$np")
    "${pre[@]}" "$@" > bad.out 2> bad.err
    local rc=$? n
    n=$(grep -c . bad.err)
    [ $rc = 2 ] && [ "$n" = 1 ] && grep -q -- "$pat" bad.err \
        && pass "ncf bad input, $label: exit 2, one line: $(cat bad.err)" \
        || fail "ncf bad input, $label: exit $rc, $n lines: $(head -c 300 bad.err)"
}
printf 'a\tb\nc d\n' > bad.tsv
bad "pair line without a tab" 'bad.tsv:2: expected user<TAB>item' 1 \
    "$C" prepare --interactions bad.tsv --output bad.bin
ls bad.bin* >/dev/null 2>&1 && fail "ncf bad input: prepare left a file behind" \
    || pass "ncf bad input: the refused prepare wrote nothing"
printf 'a\tb\tc\n' > bad3.tsv
bad "three fields" 'bad3.tsv:1:' 1 "$C" prepare --interactions bad3.tsv --output bad.bin
bad "--negatives over the items" "--negatives $((ni + 1))" 2 \
    "$C" train --model ncf --data deps.bin --negatives $((ni + 1)) --steps 1 --dp 2
bad "not a pair file" 'is not a pair file' 2 "$C" train --model ncf --data deps.tsv --steps 1 --dp 2
bad "--mlp" 'give 2 to 8 widths' 1 "$C" train --model ncf --data deps.bin --mlp 64,x
bad "--model" 'is not a model' 1 "$C" train --model transformer-xl --data deps.bin

# ---------------------------------------------------------------- kill, signal, resume
loop_checks ncf 1500 --model ncf --data deps.bin --batch 64 --factors 16 --mlp 64,32,16 \
    --eval-users 20 --eval-every 50 --lr 3e-3 --warmup 5 --weight-decay 0.01 --seed 7

echo "# test_ncf: $failed failed"
[ "$failed" = 0 ]
