#!/usr/bin/env bash
# make demo MODEL=bert (or roberta): a small BERT trained by masked-language
# modelling on the King James Bible (GPT-2's BPE, the GPT demo's token
# files), scored on held-out verses against two guesses that ignore
# context, then one word masked in each of a few held-out verses, printed
# with the model's five best guesses. docs/bert.md (Demo) has the recipe's
# measurements.
set -eu
BUILD=${BUILD:-build}
C=$BUILD/cubist
M=${MODEL:-bert}
STEPS=${DEMO_STEPS:-5000}
mkdir -p data out
if [ ! -s data/kjv_bpe_train.bin ]; then
    bible gen1:1-rev22:21 > data/kjv.txt
    $C prepare --tokenizer gpt2 --input data/kjv.txt --output data/kjv_bpe_train.bin \
        --val-output data/kjv_bpe_val.bin --val-fraction 0.02
fi
# docs/bert.md (Demo): short sequences, no dropout and a few thousand
# steps got a model this small past guessing by frequency in one run of
# several (when it does is not steady)
$C train --model "$M" --data data/kjv_bpe_train.bin --val-data data/kjv_bpe_val.bin \
    --layers 2 --d-model 128 --heads 4 --seq-len 32 --batch 32 --dropout 0 --attn-dropout 0 \
    --steps "$STEPS" --lr 1e-3 --min-lr 1e-4 --warmup 100 --eval-every $(((STEPS + 3) / 4)) \
    --save out/"$M".safetensors --log out/"$M".jsonl --fill ${DEMO_FILL:-8} |
    awk -v every=$(((STEPS + 9) / 10)) '/^step/ { if ($2 % every == 0) print; next }
        /^eval/ { next }
        !head { print "--- one word masked in each of the first held-out verses: the answer, the model'"'"'s five best guesses"; head = 1 }
        { print }'
/usr/bin/python3 - out/"$M".jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"val_acc"' in l]
print("--- held-out masked tokens (every 7th of the held-out verses' tokens, each [MASK]):")
print(f"{'step':>6}  {'model top-1':>11} {'top-5':>6} {'loss':>5}   most frequent top-1 {'top-5':>6}   "
      f"unigram guess top-1  loss")
for r in rows:
    print(f"{r['step']:>6}  {100 * r['val_acc']:10.1f}% {100 * r['val_top5']:5.1f}% {r['val_loss']:5.2f}"
          f"   {100 * r['freq_acc']:18.1f}% {100 * r['freq_top5']:5.1f}%   {100 * r['unigram_acc']:18.1f}%"
          f" {r['unigram_loss']:5.2f}")
PY
