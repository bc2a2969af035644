#!/usr/bin/env bash
# make demo: the King James Bible as byte tokens, a small GPT trained for a
# few minutes on this machine's cores, then a sample from it.
set -eu
# make demo MODEL=ncf: the recommendation demo instead
[ "${MODEL:-gpt}" = ncf ] && exec "$(dirname "$0")/demo_ncf.sh"
[ "${MODEL:-gpt}" = gpt ] || { echo "demo: MODEL=$MODEL is not a demo; use MODEL=gpt or MODEL=ncf" >&2; exit 2; }
BUILD=${BUILD:-build}
C=$BUILD/cubist
mkdir -p data out
if [ ! -s data/kjv_train.bin ]; then
    bible gen1:1-rev22:21 > data/kjv.txt
    $C prepare --input data/kjv.txt --output data/kjv_train.bin --val-output data/kjv_val.bin --val-fraction 0.02
fi
$C train --data data/kjv_train.bin --val-data data/kjv_val.bin \
    --layers 4 --d-model 192 --heads 6 --seq-len 128 --batch 16 \
    --steps ${DEMO_STEPS:-1200} --lr 2e-3 --min-lr 1e-4 --warmup 50 --weight-decay 0.1 \
    --eval-every 200 --save out/demo.safetensors --log out/demo.jsonl
echo "--- sample (out/demo.safetensors):"
$C sample --ckpt out/demo.safetensors --prompt "And God said" --tokens 400 --temperature 0.8 --top-k 40
