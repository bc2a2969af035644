#!/usr/bin/env bash
# make demo MODEL=nmt: English to Spanish on the Bible. Build the verse pairs
# (World English Bible x Reina-Valera 1909, scripts/bible_pairs.py; Jonah held
# out for validation, Ruth for test), keep the verses of at most DEMO_MAX_BYTES
# (120) bytes a side (every step pays rows x the longest verse's tokens, so
# short verses mean more steps in a few minutes on two cores), tokenise them
# with GPT-2's BPE over the compact vocabulary of the training pairs (an
# output layer of about 11,700 rows instead of 50,260; words instead of bytes,
# so sequences 3-4x shorter), train a pre-LN 2 + 2 block model of d 256 with
# val_bleu in the log, then translate held-out verses of Ruth, printing
# source, reference and output, and score the test book (its short verses)
# with BLEU. Docs: docs/nmt.md, "The demo".
set -eu
BUILD=${BUILD:-build}
C=$BUILD/cubist
PY=/usr/bin/python3
MAXB=${DEMO_MAX_BYTES:-120}
export OMP_WAIT_POLICY=PASSIVE # spinning OpenMP threads lose their cores at every barrier on a shared
                               # machine (beam search under load: 45 s for 5 verses, passive 2 s)
mkdir -p data out
[ -s data/bible_train.tsv ] || $PY scripts/bible_pairs.py --out-dir data/
for s in train val test; do # both sides within MAXB bytes
    awk -F '\t' -v m="$MAXB" 'length($1) <= m && length($2) <= m' data/bible_$s.tsv > out/nmt_$s.tsv
done
$C prepare --pairs out/nmt_train.tsv --output out/nmt_train.bin --val-pairs out/nmt_val.tsv \
    --val-output out/nmt_val.bin --tokenizer gpt2 --compact-vocab
echo "data: $(wc -l < out/nmt_train.tsv) training pairs, $(wc -l < out/nmt_val.tsv) validation (Jonah), $(wc -l < out/nmt_test.tsv) test (Ruth), at most $MAXB bytes a side"
M=(--model nmt --data out/nmt_train.bin --val-data out/nmt_val.bin --pre-ln --layers 2
   --d-model 256 --heads 4 --ffn 1024 --batch 32 --smoothing 0.1)
$C train "${M[@]}" --steps ${DEMO_STEPS:-1500} --lr 1e-3 --min-lr 1e-4 \
    --warmup 100 --eval-every ${DEMO_EVAL_EVERY:-250} --eval-batches 4 --bleu-pairs 15 \
    --save out/nmt.safetensors --log out/nmt.jsonl | grep '^eval'
cut -f1 out/nmt_test.tsv > out/nmt_test.src
cut -f2 out/nmt_test.tsv > out/nmt_test.ref
$C translate --model out/nmt.safetensors --input out/nmt_test.src --beam 4 > out/nmt_test.hyp
echo "--- five verses of Ruth (held out), beam search of 4:"
paste out/nmt_test.src out/nmt_test.ref out/nmt_test.hyp | head -n 5 |
    awk -F '\t' '{ printf "source:    %s\nreference: %s\noutput:    %s\n\n", $1, $2, $3 }'
echo "test-book BLEU (Ruth, $(wc -l < out/nmt_test.src) verses, beam 4):"
$C bleu --hyp out/nmt_test.hyp --ref out/nmt_test.ref
