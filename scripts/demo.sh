#!/usr/bin/env bash
# make demo: the whole path on the King James Bible. Prepare it with GPT-2's
# BPE tokenizer (vocab 50257), train a small GPT for a few minutes on this
# machine's cores, plot the run (out/demo.png), and sample text back (the
# checkpoint records the tokenizer, so `cubist sample` decodes BPE).
set -eu
# make demo MODEL=ncf: the recommendation demo instead
[ "${MODEL:-gpt}" = ncf ] && exec "$(dirname "$0")/demo_ncf.sh"
# make demo MODEL=bert | roberta: masked-word guessing instead
case ${MODEL:-gpt} in bert | roberta) exec "$(dirname "$0")/demo_bert.sh" ;; esac
# make demo MODEL=nmt: English to Spanish translation of Bible verses
[ "${MODEL:-gpt}" = nmt ] && exec "$(dirname "$0")/demo_nmt.sh"
[ "${MODEL:-gpt}" = gpt ] || { echo "demo: MODEL=$MODEL is not a demo; use MODEL=gpt, ncf, bert, roberta or nmt" >&2; exit 2; }
BUILD=${BUILD:-build}
C=$BUILD/cubist
mkdir -p data out
if [ ! -s data/kjv_bpe_train.bin ]; then
    bible gen1:1-rev22:21 > data/kjv.txt
    $C prepare --tokenizer gpt2 --input data/kjv.txt --output data/kjv_bpe_train.bin \
        --val-output data/kjv_bpe_val.bin --val-fraction 0.02
fi
$C train --data data/kjv_bpe_train.bin --val-data data/kjv_bpe_val.bin --vocab 50257 \
    --layers 2 --d-model 128 --heads 4 --seq-len 64 --batch 8 \
    --steps ${DEMO_STEPS:-500} --lr 3e-3 --min-lr 1e-4 --warmup 30 --weight-decay 0.1 \
    --eval-every 100 --save out/demo.safetensors --log out/demo.jsonl
$C plot out/demo.jsonl --out out/demo.png
echo "--- plot: out/demo.png; sample (out/demo.safetensors):"
$C sample --ckpt out/demo.safetensors --prompt "And God said" --tokens 80 --temperature 0.8 --top-k 40
