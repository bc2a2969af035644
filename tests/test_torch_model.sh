#!/bin/bash
# Whole-model test: cubist trains a small GPT-2 and tests/torch/gpt2_ref.py
# retrains it in PyTorch from the same initial weights and token file, then
# checks cubist's per-step loss, lr and grad norm, its step-1 gradients and its
# final weights (one PASS/FAIL line each). Needs /usr/bin/python3 with torch.
#   BUILD=build tests/test_torch_model.sh
set -u
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=${PY:-/usr/bin/python3}
REF=$ROOT/tests/torch/gpt2_ref.py
CUBIST=$BUILD/cubist

if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "FAIL torch_model: $PY cannot import torch; apt-get install python3-torch"
    exit 1
fi
if [ ! -x "$CUBIST" ]; then
    echo "FAIL torch_model: $CUBIST not built; run make"
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0

# run NAME CMD...: runs a cubist command; a failure is one FAIL line with its stderr.
run() {
    local name=$1; shift
    "$@" >"$name.out" 2>"$name.err"
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL torch_model $name: exit $rc from: $*  ($(tail -n 3 "$name.err" | tr '\n' ' '))"
        fails=$((fails + 1))
        return 1
    fi
}

# Corpus: the first ~200 KB of the KJV Bible when the `bible` program is there,
# else generated text with the same byte-level character (deterministic).
if command -v bible >/dev/null 2>&1; then
    bible gen1:1-rev22:21 2>/dev/null | head -c 200000 >corpus.txt
fi
if [ ! -s corpus.txt ]; then
    "$PY" - <<'EOF' >corpus.txt
import random
r = random.Random(7)
words = "in the beginning god created heaven and earth was without form void darkness upon face of deep spirit moved waters said let there be light".split()
out = []
while sum(len(w) + 1 for w in out) < 200000:
    s = " ".join(r.choice(words) for _ in range(r.randint(4, 14)))
    out.append(s.capitalize() + ".\n")
print("".join(out)[:200000], end="")
EOF
fi
head -c 3000 corpus.txt >small.txt

run prepare "$CUBIST" prepare --input corpus.txt --output train.bin || exit 1
run prepare_small "$CUBIST" prepare --input small.txt --output small.bin || exit 1

MODEL="--layers 2 --d-model 64 --heads 4 --seq-len 32 --vocab 256"

# check NAME DATA EXTRA_REF_FLAGS -- TRAIN_FLAGS: init with seed, train, compare.
check() {
    local name=$1 data=$2 extra=$3; shift 4
    local flags="--data $data $MODEL $* --seed 1 --shuffle 0"
    run "${name}_init" "$CUBIST" train $flags --steps 0 --save "$name.init.safetensors" || return
    run "${name}_train" "$CUBIST" train $flags --init "$name.init.safetensors" \
        --log "$name.log.jsonl" --dump-grads "$name.grads.safetensors" \
        --save "$name.final.safetensors" || return
    echo "# torch_model $name: cubist train $flags"
    if ! "$PY" "$REF" $flags --init "$name.init.safetensors" $extra \
        --compare-log "$name.log.jsonl" --compare-grads "$name.grads.safetensors" \
        --compare-final "$name.final.safetensors"; then
        fails=$((fails + 1))
    fi
}

COMMON="--batch 4 --grad-accum 2 --lr 1e-3 --min-lr 1e-4 --beta1 0.9 --beta2 0.95 --eps 1e-8"
# 1: warmup then cosine, weight decay on, clipping enabled at a norm above the
# gradients' (~2-4 here), so the min(1, ...) keeps them unscaled.
check base train.bin "" -- $COMMON --steps 20 --warmup 5 --weight-decay 0.1 --clip 5.0
# 2: a clip far below the gradient norm, so every step is scaled; the 3000-byte
# corpus holds 23 micro-batches of 129 tokens, so the 40 micro-batches wrap.
check clip small.bin --expect-clip -- $COMMON --steps 20 --warmup 3 --weight-decay 0.1 --clip 0.05

[ "$fails" -eq 0 ]
