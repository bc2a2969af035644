#!/usr/bin/env bash
# The longer translation run (docs/nmt.md, "A longer run"): English to
# Spanish on the whole Bible, every verse of at most LONG_MAX_BYTES (256)
# bytes a side (30,008 of the 30,926 training pairs; every step pays rows x
# the longest verse's tokens, so the 3% longest would cost more than they
# teach), GPT-2 BPE over the compact vocabulary of the training pairs, a
# pre-LN 3 + 3 block model of d 256. It trains for LONG_WALL seconds (SIGTERM
# then: the step in flight finishes, the checkpoint is saved; an hour) or LONG_STEPS
# (2,400) steps, whichever comes first, with val_loss and val_bleu (all of Jonah) in
# the log, then translates Ruth (held out) with beam search of 4 and scores
# it with `cubist bleu`. One thread (a shared machine); THREADS= changes it.
#   nice -n 10 scripts/nmt_long.sh > out/nmt_long.txt 2>&1 &
set -u
BUILD=${BUILD:-build}
C=$BUILD/cubist
PY=/usr/bin/python3
MAXB=${LONG_MAX_BYTES:-256}
D=${LONG_DIR:-out/long}
mkdir -p data "$D"
[ -s data/bible_train.tsv ] || $PY scripts/bible_pairs.py --out-dir data/ || exit 1
for s in train val test; do # both sides within MAXB bytes (Jonah and Ruth: every verse)
    awk -F '\t' -v m="$MAXB" 'length($1) <= m && length($2) <= m' data/bible_$s.tsv > "$D/$s.tsv"
done
$C prepare --pairs "$D/train.tsv" --output "$D/train.bin" --val-pairs "$D/val.tsv" \
    --val-output "$D/val.bin" --tokenizer gpt2 --compact-vocab || exit 1
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1
start=$(date +%s)
timeout --preserve-status -s TERM "${LONG_WALL:-3600}" $C train --model nmt --data "$D/train.bin" --val-data "$D/val.bin" \
    --pre-ln --layers 3 --d-model 256 --heads 4 --ffn 1024 --batch 32 --smoothing 0.1 \
    --steps "${LONG_STEPS:-2400}" --lr 1e-3 --min-lr 1e-4 --warmup 300 --eval-every 250 \
    --eval-batches 4 --bleu-pairs 47 --threads "${THREADS:-1}" --save "$D/nmt.safetensors" \
    --log "$D/nmt.jsonl"
rc=$?
echo "train: exit $rc after $(( $(date +%s) - start )) s wall" # 75: stopped by the wall time, saved
[ $rc = 0 ] || [ $rc = 75 ] || exit $rc
cut -f1 "$D/test.tsv" > "$D/test.src"
cut -f2 "$D/test.tsv" > "$D/test.ref"
$C translate --model "$D/nmt.safetensors" --input "$D/test.src" --beam 4 > "$D/test.hyp" || exit 1
paste "$D/test.src" "$D/test.ref" "$D/test.hyp" | head -n 5 |
    awk -F '\t' '{ printf "source:    %s\nreference: %s\noutput:    %s\n\n", $1, $2, $3 }'
echo "test-book BLEU (Ruth, $(wc -l < "$D/test.src") verses, beam 4):"
$C bleu --hyp "$D/test.hyp" --ref "$D/test.ref"
