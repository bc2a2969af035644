#!/usr/bin/env bash
# Sharded data: training over three shards (--data as a glob, --val-data as
# a comma list) equals training over their concatenation, bit for bit (every
# logged loss, lr, grad_norm, val_loss and the final checkpoint), in the
# shuffled and the sequential mode, and across a save / resume that falls in
# the middle of the second shard. Headerless (nanoGPT) shards too. Bad
# input: a pattern that matches nothing, shards of different formats: one
# line, exit 2.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) C=$BUILD/cubist ;; *) C="$(pwd)/$BUILD/cubist" ;; esac
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
fixture_fail() { echo "FAIL shards: fixture: $*"; exit 1; }
head -c 30000 /dev/urandom | base64 > text.txt
"$C" prepare --input text.txt --output all.bin --val-output val.bin --val-fraction 0.2 >/dev/null || fixture_fail prepare
# shards of 1000, 700 and the rest of the training tokens (and the validation
# tokens in two), llm.c format with the tokenizer tag, and headerless copies
/usr/bin/python3 - <<'PY' || fixture_fail "python shards"
import struct
def read(p):
    b = open(p, 'rb').read(); n = struct.unpack('<3i', b[:12])[2]
    return b[1024:1024 + 2 * n]
def llmc(p, t):
    open(p, 'wb').write(struct.pack('<256i', *([20240520, 1, len(t) // 2, 1] + [0] * 252)) + t)
a, v = read('all.bin'), read('val.bin')
cuts = [0, 2000, 3400, len(a)]
for i in range(3):
    llmc(f'train_{i}.bin', a[cuts[i]:cuts[i + 1]])
    open(f'nano_{i}.bin', 'wb').write(a[cuts[i]:cuts[i + 1]])
open('nano_all.bin', 'wb').write(a)
h = len(v) // 4 * 2
llmc('val_a.bin', v[:h]); llmc('val_b.bin', v[h:])
PY
M=(--layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 4 --grad-accum 2 --steps 20 --warmup 3
   --lr 3e-3 --min-lr 1e-4 --seed 5 --eval-every 5 --eval-batches 2 --quiet --peak-gflops 100)
fields() { sed -E 's/.*"step":([0-9]+),"loss":([^,]*),"lr":([^,]*),"grad_norm":([^,]*),"tokens":([0-9]+),.*/\1 \2 \3 \4 \5/;s/^(.*)$/\1/' "$@"; }
vals() { grep -ho '"val_loss":[^,}]*' "$@"; }
noid() { sed -E 's/"ckpt_id":"[0-9a-f]{16}"/"ckpt_id":"-"/' "$1"; }
same_run() { # name, log A, ckpt A, log(s) B..., ckpt B (last)
    local name=$1 la=$2 ca=$3; shift 3
    local cb=${*: -1} lb=("${@:1:$#-1}")
    if diff <(fields "$la") <(fields "${lb[@]}") >/dev/null && diff <(vals "$la") <(vals "${lb[@]}") >/dev/null \
        && [ -n "$(vals "$la")" ] && cmp -s <(noid "$ca") <(noid "$cb") && cmp -s <(noid "$ca.state") <(noid "$cb.state"); then
        echo "PASS shards: $name: $(wc -l < "$la") steps (loss, lr, grad_norm, tokens, val_loss) and the checkpoint identical"
    else echo "FAIL shards: $name: differs from the concatenation"; diff <(fields "$la") <(fields "${lb[@]}") | head -4; fi
}
for shuffle in 1 0; do
    "$C" train "${M[@]}" --shuffle $shuffle --data all.bin --val-data val.bin --log a.jsonl --save a.st || fixture_fail "concatenation run"
    "$C" train "${M[@]}" --shuffle $shuffle --data 'train_*.bin' --val-data val_a.bin,val_b.bin --log b.jsonl --save b.st \
        || { echo "FAIL shards: shuffle=$shuffle: three shards did not train"; continue; }
    same_run "shuffle=$shuffle, three shards" a.jsonl a.st b.jsonl b.st
    # 10 steps x 2 micro-batches x 65 tokens: sequential reading stops at token 1300, inside the second shard
    "$C" train "${M[@]}" --shuffle $shuffle --data 'train_*.bin' --val-data 'val_?.bin' --log c1.jsonl --save c.st --exit-after 10 \
        && "$C" train "${M[@]}" --shuffle $shuffle --data 'train_*.bin' --val-data 'val_?.bin' --log c2.jsonl --save c.st --resume c.st \
        || { echo "FAIL shards: shuffle=$shuffle: save/resume over shards did not train"; continue; }
    same_run "shuffle=$shuffle, three shards, saved at step 10 (mid second shard) and resumed" a.jsonl a.st c1.jsonl c2.jsonl c.st
    "$C" train "${M[@]}" --shuffle $shuffle --data nano_all.bin --val-data val.bin --log n.jsonl --save n.st || fixture_fail "nano run"
    "$C" train "${M[@]}" --shuffle $shuffle --data nano_0.bin,nano_1.bin,nano_2.bin --val-data val.bin --log m.jsonl --save m.st \
        || { echo "FAIL shards: headerless shards did not train"; continue; }
    same_run "shuffle=$shuffle, three headerless (nanoGPT) shards" n.jsonl n.st m.jsonl m.st
done

bad() { # name, expected text, train args...
    local name=$1 want=$2; shift 2
    "$C" train "${M[@]}" --steps 2 --eval-every 0 "$@" >/dev/null 2>err.txt
    local rc=$? lines; lines=$(wc -l < err.txt)
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" err.txt; then echo "PASS shards: $name: exit 2, one line: $(cat err.txt)"
    else echo "FAIL shards: $name: exit $rc, $lines lines: $(head -c 300 err.txt)"; fi
}
bad "--data glob matching nothing" "'nothere_\*.bin' matches no file" --data 'nothere_*.bin'
bad "--val-data glob matching nothing" "'val_z\*' matches no file" --data all.bin --val-data 'val_z*' --eval-every 1
bad "shards of different formats" "train_0.bin is an llm.c token file but nano_1.bin is headerless" --data train_0.bin,nano_1.bin
bad "a missing file in a list" "missing.bin" --data train_0.bin,missing.bin
