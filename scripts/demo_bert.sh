#!/usr/bin/env bash
# make demo MODEL=bert (or roberta): a small BERT trained by masked-language
# modelling on the King James Bible (GPT-2's BPE, the GPT demo's token
# files), then one word masked in each of a few held-out verses, printed
# with the model's five best guesses and their probabilities.
set -eu
BUILD=${BUILD:-build}
C=$BUILD/cubist
mkdir -p data out
if [ ! -s data/kjv_bpe_train.bin ]; then
    bible gen1:1-rev22:21 > data/kjv.txt
    $C prepare --tokenizer gpt2 --input data/kjv.txt --output data/kjv_bpe_train.bin \
        --val-output data/kjv_bpe_val.bin --val-fraction 0.02
fi
$C train --model "${MODEL:-bert}" --data data/kjv_bpe_train.bin --val-data data/kjv_bpe_val.bin \
    --layers 2 --d-model 128 --heads 4 --seq-len 64 --batch 16 \
    --steps ${DEMO_STEPS:-600} --lr 2e-3 --min-lr 1e-4 --warmup 30 \
    --save out/${MODEL:-bert}.safetensors --log out/${MODEL:-bert}.jsonl --fill ${DEMO_FILL:-12} |
    awk '/^step/ { if ($2 % 100 == 0) print; next } { print }'
