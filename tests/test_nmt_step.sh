#!/usr/bin/env bash
# The translation model's dropout and embedding scale under the layouts, its
# dropout in evaluation, and `cubist bench --model nmt`:
# 0. With dropout 0.1 and the sqrt(d) scale (the defaults), 2-D 4 and 3-D 8
#    against one process and pp 4 (interleaved, 2 virtual stages, 4
#    micro-batches) against --grad-accum 4 over 20 steps: loss, gradient
#    norm and final weights to 1e-5 (tests/compare.py; measured at most
#    2.5e-7): each rank divides its shard of the position table by the
#    scale and draws the masks of its elements only.
# 1. Dropout is off in evaluation: one step at learning rate 0 (the weights
#    stay as drawn) with --dropout 0.5 and with --dropout 0 gives the same
#    val_loss to the log's 7 digits, while the training losses differ (in
#    the third digit: the masks act in training only).
# 2. `cubist bench --model nmt --quick`: both programs run, PyTorch's
#    parameter count equals cubist's (the benchmark refuses otherwise), and
#    the lines of the result are there with positive rates.
# 3. Bad input: --heads not dividing --d-model, exit 2, one line.
set -u
. "$(dirname "$0")/launcher.sh"
C="$BUILD/cubist"
PY=/usr/bin/python3
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
cd "$d" || exit 1
"$PY" - <<'PYEOF'
import random
r = random.Random(3)
w = "in the beginning god created heaven and earth light day night".split()
for name, n in (("train", 60), ("val", 16)):
    with open(name + ".tsv", "w") as f:
        for i in range(n):
            s = " ".join(r.choice(w) for _ in range(r.randint(1, 4)))
            f.write(s + "\t" + s.upper() + "\n")
PYEOF
"$C" prepare --pairs train.tsv --output train.bin --val-pairs val.tsv --val-output val.bin \
    --context 40 >/dev/null || { fail "prepare --pairs"; exit 1; }

# ---------------------------------------------------------------- layouts
S=(--model nmt --data train.bin --layers 2 --d-model 32 --heads 4 --ffn 64 --batch 8 --steps 20
   --lr 2e-3 --warmup 3 --eps 1e-3 --dropout 0.1)
run() { # NAME NP flags...
    local name=$1 np=$2; shift 2
    timeout "$(tmo 300)" "${launch[@]}" -np "$np" "$C" train "${S[@]}" "$@" --save "$name.st" \
        --log "$name.jsonl" > "$name.log" 2>&1 || { fail "$name: $(tail -n 2 "$name.log" | tr '\n' ' ')"; return 1; }
}
cmp_() { # LABEL GOT REF
    local out
    out=$("$PY" "$ROOT/tests/compare.py" logs "$2.jsonl" "$3.jsonl" --label "$1 loss" 2>&1
          "$PY" "$ROOT/tests/compare.py" st "$2.st" "$3.st" --label "$1 weights" 2>&1)
    grep '^PASS\|^FAIL' <<<"$out"
    failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
    [ "$(grep -c '^PASS' <<<"$out")" = 2 ] || [ "$(grep -c '^FAIL' <<<"$out")" != 0 ] || fail "$1: $out"
}
if run one 1 && run ga4 1 --grad-accum 4; then
    run tp2d4 4 --tp 4 --tp-mode 2d && cmp_ "nmt (dropout, scale) tp 2d4" tp2d4 one
    run tp3d8 8 --tp 8 --tp-mode 3d && cmp_ "nmt (dropout, scale) tp 3d8" tp3d8 one
    run pp4 4 --pp 4 --schedule interleaved --virtual-stages 2 --micro-batches 4 &&
        cmp_ "nmt (dropout, scale) pp4 interleaved M4 (vs --grad-accum 4)" pp4 ga4
fi

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
"$C" bench --model nmt --quick --heads 3 > bad.out 2> bad.err
rc=$?
if [ "$rc" = 2 ] && [ "$(grep -c . bad.err)" = 1 ] && grep -q "does not divide --d-model" bad.err; then
    pass "bench --model nmt --heads 3: exit 2, \"$(cat bad.err)\""
else fail "bench --model nmt --heads 3: exit $rc, $(head -c 300 bad.err)"; fi
[ "$failed" = 0 ]
