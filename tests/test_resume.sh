#!/usr/bin/env bash
# 10 steps + save + resume 10 steps == 20 straight steps, bit for bit: the
# logged loss, learning rate, gradient norm and cumulative token count of
# every step, and the final weights and optimizer state files byte for byte
# (but for the checkpoint id, a fresh random value per save). A weights file
# and a .state file from different saves are refused. Shuffled batches, so the
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
    fields() { sed -E 's/.*"step":([0-9]+),"loss":([^,]*),"lr":([^,]*),"grad_norm":([^,]*),"tokens":([0-9]+),.*/\1 \2 \3 \4 \5/' "$@"; }
    if diff <(fields a.jsonl) <(fields b1.jsonl b2.jsonl) >/dev/null; then
        echo "PASS resume shuffle=$shuffle: 20 logged steps (loss, lr, grad_norm, tokens) identical"
    else
        echo "FAIL resume shuffle=$shuffle: logged steps differ"; diff <(fields a.jsonl) <(fields b1.jsonl b2.jsonl) | head
    fi
    # the checkpoint id (16 hex digits, the same length in both) differs by design
    noid() { sed -E 's/"ckpt_id":"[0-9a-f]{16}"/"ckpt_id":"-"/' "$1"; }
    if cmp -s <(noid a.st) <(noid b.st) && cmp -s <(noid a.st.state) <(noid b.st.state); then
        echo "PASS resume shuffle=$shuffle: final weights and optimizer state byte-identical"
    else
        echo "FAIL resume shuffle=$shuffle: final checkpoint differs"
    fi
    [ "$(wc -l < b2.jsonl)" -eq 10 ] && echo "PASS resume shuffle=$shuffle: resumed run did 10 steps" \
        || echo "FAIL resume shuffle=$shuffle: resumed run did $(wc -l < b2.jsonl) steps"
done

# the token count after the resume continues: step 20 of 20 at 4 x 16 x 2 tokens a step
last=$(tail -n 1 b2.jsonl | sed -E 's/.*"step":([0-9]+),.*"tokens":([0-9]+),.*/\1 \2/')
[ "$last" = "20 2560" ] && echo "PASS resume: the resumed log ends at step 20 with 2560 tokens" \
    || echo "FAIL resume: the resumed log ends with step/tokens '$last', want '20 2560'"

# a pair from two saves (a.st from the 20-step run, b.st.state from the
# 10-step one) is refused with one line naming both files; nothing is trained
cp a.st mixed.st && cp b.st.state mixed.st.state
"$C" train "${common[@]}" --resume mixed.st --log mixed.jsonl 2>err >/dev/null
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q "mixed.st (checkpoint id [0-9a-f]*) and mixed.st.state (id [0-9a-f]*) are not one checkpoint" err \
    && [ ! -s mixed.jsonl ]; then
    echo "PASS resume: mismatched weights/state pair refused: $(cat err)"
else
    echo "FAIL resume: mismatched pair: exit $rc, $(wc -l <err) lines: $(head -c 300 err)"
fi
