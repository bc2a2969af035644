#!/usr/bin/env bash
# 10 steps + save + resume 10 steps == 20 straight steps, bit for bit: the
# logged loss, learning rate and gradient norm of every step, and the final
# weights and optimizer state files byte for byte. Shuffled batches, so the
# data RNG travels through the checkpoint too; warm-up and cosine decay, so
# the schedule does.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) C=$BUILD/cubist ;; *) C="$(pwd)/$BUILD/cubist" ;; esac
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
head -c 300000 /dev/urandom | base64 > text.txt
"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL resume: prepare"; exit 1; }
common=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 4 --grad-accum 2
        --steps 20 --warmup 3 --lr 3e-3 --min-lr 1e-4 --clip 0.5 --seed 5 --quiet --peak-gflops 100)
for shuffle in 1 0; do
    "$C" train "${common[@]}" --shuffle $shuffle --log a.jsonl --save a.st || { echo "FAIL resume: straight run"; exit 1; }
    "$C" train "${common[@]}" --shuffle $shuffle --log b1.jsonl --save b.st --exit-after 10 || { echo "FAIL resume: first half"; exit 1; }
    "$C" train "${common[@]}" --shuffle $shuffle --log b2.jsonl --save b.st --resume b.st || { echo "FAIL resume: second half"; exit 1; }
    fields() { sed -E 's/.*"step":([0-9]+),"loss":([^,]*),"lr":([^,]*),"grad_norm":([^,]*),.*/\1 \2 \3 \4/' "$@"; }
    if diff <(fields a.jsonl) <(fields b1.jsonl b2.jsonl) >/dev/null; then
        echo "PASS resume shuffle=$shuffle: 20 logged steps (loss, lr, grad_norm) identical"
    else
        echo "FAIL resume shuffle=$shuffle: logged steps differ"; diff <(fields a.jsonl) <(fields b1.jsonl b2.jsonl) | head
    fi
    if cmp -s a.st b.st && cmp -s a.st.state b.st.state; then
        echo "PASS resume shuffle=$shuffle: final weights and optimizer state byte-identical"
    else
        echo "FAIL resume shuffle=$shuffle: final checkpoint differs"
    fi
    [ "$(wc -l < b2.jsonl)" -eq 10 ] && echo "PASS resume shuffle=$shuffle: resumed run did 10 steps" \
        || echo "FAIL resume shuffle=$shuffle: resumed run did $(wc -l < b2.jsonl) steps"
done
