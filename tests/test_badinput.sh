#!/usr/bin/env bash
# Bad input: each case must end with exactly one line on stderr that names
# the problem (a per-case text) and the fix (a per-case text, after "; " or
# in the sentence), exit status 2, no crash, and no output file (not even a
# .tmp). Fixtures are made first; if making them fails, the test fails.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) C=$BUILD/cubist ;; *) C="$(pwd)/$BUILD/cubist" ;; esac
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
fixture_fail() { echo "FAIL bad input: fixture: $*"; exit 1; }
head -c 100000 /dev/urandom | base64 > text.txt
"$C" prepare --input text.txt --output good.bin --val-output val.bin --val-fraction 0.01 >/dev/null \
    || fixture_fail "prepare"
M=(--layers 1 --d-model 16 --heads 2 --seq-len 8 --batch 2 --steps 2 --quiet --peak-gflops 100)
"$C" train --data good.bin "${M[@]}" --steps 0 --save good.st || fixture_fail "train --steps 0 --save good.st"
: > empty.bin || fixture_fail "empty.bin"
printf '\001\002\003' > odd.bin || fixture_fail "odd.bin"
head -c 4096 text.txt > textual.bin || fixture_fail "textual.bin"
head -c 100000 /dev/urandom > random.bin || fixture_fail "random.bin"
/usr/bin/python3 - <<'PY' || fixture_fail "python fixtures"
import json, struct
hdr = struct.pack('<256i', *([20240520, 1, 1000] + [0] * 253))
open('trunc.bin', 'wb').write(hdr + struct.pack('<10H', *range(10)))
open('shorthdr.bin', 'wb').write(hdr[:200])
open('bigtok.bin', 'wb').write(struct.pack('<64H', *([1] * 63 + [300])))
def st(name, hdr_obj, data=b'', raw=None):
    h = raw if raw is not None else json.dumps(hdr_obj).encode()
    open(name, 'wb').write(struct.pack('<Q', len(h)) + h + data)
st('badlen.st', None, raw=b'{}')
open('badlen.st', 'r+b').write(struct.pack('<Q', 1 << 40))
st('badjson.st', None, raw=b'{"wte.weight": {"dtype": "F32", "shape": [2,')
st('dtype.st', {"wte.weight": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}}, b'\0' * 4)
st('offsets.st', {"wte.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b'\0' * 8)
# a well-formed file whose wte has the wrong shape for the model its metadata describes
meta = {"n_layer": "1", "d_model": "16", "n_head": "2", "seq_len": "8", "vocab": "256"}
st('shape.st', {"__metadata__": meta, "wte.weight": {"dtype": "F32", "shape": [256, 8], "data_offsets": [0, 8192]}}, b'\0' * 8192)
PY
for f in trunc.bin shorthdr.bin bigtok.bin badlen.st badjson.st dtype.st offsets.st shape.st; do
    [ -s "$f" ] || fixture_fail "$f not written"
done

case_() { # name, problem text, fix text, cubist args...
    local name=$1 want=$2 fix=$3; shift 3
    rm -f out.* err
    timeout 60 "$C" "$@" 2>err >/dev/null
    local rc=$? lines; lines=$(wc -l < err)
    local left; left=$(ls out.* 2>/dev/null | tr '\n' ' ')
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" err && grep -qF -- "$fix" err \
        && [ -z "$left" ]; then
        echo "PASS bad input: $name -> $(cat err)"
    else
        echo "FAIL bad input: $name: exit $rc, $lines stderr lines, leftover '$left', want '$want' and fix '$fix': $(head -c 300 err)"
    fi
}
T=(train "${M[@]}" --save out.st --log out.jsonl)
# token files
case_ "missing token file"     "missing.bin: cannot open"   "cubist prepare"  "${T[@]}" --data missing.bin
case_ "empty token file"       "empty.bin: file is empty"   "cubist prepare"  "${T[@]}" --data empty.bin
case_ "truncated llm.c file"   "truncated: the header says 1000 tokens" "copy it again" "${T[@]}" --data trunc.bin
case_ "truncated llm.c header" "truncated llm.c header"     "copy it again"   "${T[@]}" --data shorthdr.bin --vocab 65536
case_ "odd-sized token file"   "is odd"                     "cubist prepare"  "${T[@]}" --data odd.bin
case_ "text as token file"     "looks like a text file"     "cubist prepare --input textual.bin" "${T[@]}" --data textual.bin
case_ "random bytes as tokens" "not a token file"           "cubist prepare"  "${T[@]}" --data random.bin --vocab 50304
case_ "token >= vocab"         "token 63 is 300, not below the vocab size 256" "pass \`--vocab N\` with N > 300" "${T[@]}" --data bigtok.bin
case_ "batch too big for data" "64 tokens, but one batch needs B*T+1 = 513" "lower --batch" "${T[@]}" --data bigtok.bin --vocab 512 --batch 64
case_ "validation file too short" "one validation batch needs B*T+1" "longer validation file" "${T[@]}" --data good.bin --val-data val.bin --eval-every 1 --batch 512
# safetensors
case_ "header length past end" "runs past the end of the file" "truncated or not safetensors" "${T[@]}" --data good.bin --init badlen.st
case_ "bad JSON header"        "header is not valid JSON"   "corrupt or not safetensors" "${T[@]}" --data good.bin --init badjson.st
case_ "wrong dtype"            "has dtype I8"              "convert the file to float32" "${T[@]}" --data good.bin --init dtype.st
case_ "offsets past the end"   "data ends at byte 16 but the data section holds 8 bytes" "copy or save it again" "${T[@]}" --data good.bin --init offsets.st
case_ "wrong tensor shape"     "wte.weight has shape [256,8], the model expects [256,16]" "pass the model sizes" "${T[@]}" --data good.bin --init shape.st
case_ "missing checkpoint"     "nothere.st: cannot open"    "check the path"  "${T[@]}" --data good.bin --resume nothere.st
# config
case_ "heads not dividing"     "--heads 3 does not divide --d-model 16" "e.g. --heads 2" train --data good.bin --layers 1 --d-model 16 --heads 3 --seq-len 8 --save out.st
case_ "seq-len over context"   "over the context of good.st (8)" "use --seq-len 8 or less" "${T[@]}" --data good.bin --init good.st --seq-len 16
case_ "flag contradicts ckpt"  "--d-model 32 differs from good.st" "drop the flag" "${T[@]}" --data good.bin --init good.st --d-model 32
# flags: unknown, malformed, out of range, inconsistent
case_ "unknown flag"           "unknown flag --bogus"       "cubist train --help" "${T[@]}" --data good.bin --bogus 1
case_ "bad number"             "--lr: 'fast' is not a valid" "cubist train --help" "${T[@]}" --data good.bin --lr fast
case_ "not a finite number"    "--lr: 'nan' is not a valid finite number" "cubist train --help" "${T[@]}" --data good.bin --lr nan
case_ "negative seed"          "--seed: '-1' is not a valid non-negative integer" "cubist train --help" "${T[@]}" --data good.bin --seed -1
case_ "flag without value"     "--steps needs a value"      "cubist train --help" train --data good.bin --steps
case_ "unknown command"        "unknown command 'frobnicate'" "cubist --help" frobnicate
for bad in "steps -1" "batch 0" "grad-accum 0" "lr -1" "min-lr -1" "warmup -1" "weight-decay -1" "clip -1" \
           "save-every -3" "eval-every -1" "eval-batches 0" "exit-after -1" "peak-gflops -1" "threads -2" \
           "eps 0" "beta1 -0.5" "bucket-mb 0"; do
    set -- $bad
    case_ "--$1 $2"            "--$1 $2 is out of range"    "pass --$1 >"     "${T[@]}" --data good.bin --$1 $2
done
for bad in "layers 0" "d-model 0" "heads -2" "seq-len 0" "vocab 0"; do
    set -- $bad
    case_ "--$1 $2"            "--$1 $2 must be >= 1"       "pass a positive size" "${T[@]}" --data good.bin --$1 $2
done
case_ "--beta2 1"              "must be below 1"            "e.g. 0.9 and 0.95" "${T[@]}" --data good.bin --beta2 1
case_ "--shuffle 7"            "--shuffle: '7' is not 0 or 1" "--shuffle 0 to switch it off" "${T[@]}" --data good.bin --shuffle 7
case_ "--decay-embed 2"        "--decay-embed: '2' is not 0 or 1" "--decay-embed 1" "${T[@]}" --data good.bin --decay-embed 2
case_ "--eval-every without --val-data" "--eval-every 5 needs --val-data" "validation token file" "${T[@]}" --data good.bin --eval-every 5
case_ "--val-data without --eval-every" "--val-data val.bin is only read with --eval-every" "add --eval-every N" "${T[@]}" --data good.bin --val-data val.bin
case_ "--save-every without --save" "--save-every 2 needs --save" "where to write" train "${M[@]}" --data good.bin --save-every 2
case_ "--init and --resume"    "both give the weights"      "drop one of them" "${T[@]}" --data good.bin --init good.st --resume good.st
case_ "no training data"       "no training data"           "pass --data FILE" "${T[@]}"
# output paths, refused before training
case_ "unwritable --save"      "--save /nonexistent/dir/x.st: cannot write there" "create it first" train "${M[@]}" --data good.bin --save /nonexistent/dir/x.st
case_ "unwritable --log"       "--log /nonexistent/dir/x.jsonl: cannot write there" "create it first" train "${M[@]}" --data good.bin --log /nonexistent/dir/x.jsonl
case_ "unwritable --dump-grads" "--dump-grads /nonexistent/dir/g.st: cannot write there" "create it first" "${T[@]}" --data good.bin --dump-grads /nonexistent/dir/g.st
# an existing directory is --save DIR/ (docs/operations.md); --keep-last needs that form
case_ "--keep-last with --save FILE" "--keep-last 2 needs --save DIR/" "--save FILE keeps one" train "${M[@]}" --data good.bin --save out.st --keep-last 2
case_ "--exit-signal unknown"  "--exit-signal BOGUS is not one cubist handles" "use USR1" "${T[@]}" --data good.bin --exit-signal BOGUS
mkdir -p emptyck
case_ "--resume an empty directory" "emptyck: no complete checkpoint" "pass another --resume" "${T[@]}" --data good.bin --resume emptyck
case_ "--save under a file"    "good.bin is not a directory" "fix the path" train "${M[@]}" --data good.bin --save good.bin/out.st
# sample
case_ "sample without ckpt"    "sample needs --ckpt FILE"   "cubist train --save" sample
case_ "sample bad ckpt"        "badjson.st: header is not valid JSON" "corrupt or not safetensors" sample --ckpt badjson.st
case_ "sample --heads contradicts ckpt" "--heads 4 differs from good.st, which has 2" "drop the flag" sample --ckpt good.st --heads 4
case_ "sample --temperature 0" "--temperature 0 must be > 0" "lower is greedier" sample --ckpt good.st --temperature 0
case_ "sample --tokens -1"     "--tokens -1 is negative"    "how many tokens" sample --ckpt good.st --tokens -1
case_ "sample --top-k -1"      "--top-k -1 is negative"     "pass 0 (all tokens)" sample --ckpt good.st --top-k -1
# prepare
case_ "prepare missing input"  "missing.txt: cannot open"   "check the path"  prepare --input missing.txt --output out.bin
case_ "prepare unwritable val" "--val-output /nonexistent/dir/v.bin: cannot write there" "create it first" prepare --input text.txt --output out.bin --val-output /nonexistent/dir/v.bin
case_ "prepare val fraction 0" "--val-fraction 0 must be in (0, 1)" "drop --val-output" prepare --input text.txt --output out.bin --val-output out.val --val-fraction 0
case_ "prepare fraction without val" "--val-fraction 0.1 needs --val-output" "where the validation tokens go" prepare --input text.txt --output out.bin --val-fraction 0.1
case_ "prepare output = input" "must be three different files" "name the outputs differently" prepare --input text.txt --output text.txt
# prepare --pairs (translation pairs): the file and line named, nothing written
printf 'In the beginning\tEn el principio\nGod said\tY dijo Dios\n' > pairs.tsv
printf 'one\tuno\ntwo\tdos\nno tab here\nfour\tcuatro\n' > notab.tsv
printf 'one\tuno\n\tdos\n' > nosrc.tsv
printf 'one\tuno\ntwo\tdos\nthree\t\n' > notgt.tsv
printf 'one\tuno\ttres\n' > twotabs.tsv
printf 'short\tcorto\nthis source is longer than sixteen bytes\tlargo\n' > long.tsv
case_ "pairs: line without tab" "notab.tsv:3: no tab" "one \`source<TAB>target\` pair a line" prepare --pairs notab.tsv --output out.bin
case_ "pairs: empty source"     "nosrc.tsv:2: the source side is empty" "or drop the line" prepare --pairs nosrc.tsv --output out.bin
case_ "pairs: empty target"     "notgt.tsv:3: the target side is empty" "or drop the line" prepare --pairs notgt.tsv --output out.bin
case_ "pairs: two tabs"         "twotabs.tsv:1: more than one tab" "no tab inside the text" prepare --pairs twotabs.tsv --output out.bin
case_ "pairs: source over context" "long.tsv:2: the source is 41 tokens with its end token, longer than the context of 16" "pass --context 41 or more" prepare --pairs long.tsv --output out.bin --context 16
case_ "pairs: bad held-out file" "notab.tsv:3: no tab" "pair a line" prepare --pairs pairs.tsv --output out.bin --val-pairs notab.tsv --val-output out.val
case_ "pairs: val without output" "--val-pairs and --val-output go together" "or neither" prepare --pairs pairs.tsv --output out.bin --val-pairs pairs.tsv
case_ "pairs: --val-fraction"   "--pairs takes no --input or --val-fraction" "--val-pairs FILE.tsv" prepare --pairs pairs.tsv --output out.bin --val-fraction 0.1
case_ "pairs: --context 1"      "--context 1 is outside [2, 65535]" "pass e.g. 512" prepare --pairs pairs.tsv --output out.bin --context 1
case_ "pairs: empty file"       "empty.bin: file is empty" "source<TAB>target" prepare --pairs empty.bin --output out.bin
# bleu
printf 'a b c\n' > hyp1.txt
case_ "bleu: line counts differ" "hyp1.txt has 1 lines but pairs.tsv has 2" "one hypothesis for each reference" bleu --hyp hyp1.txt --ref pairs.tsv
case_ "bleu: missing file"      "nothere.txt: cannot open"   "check the reference file's path" bleu --hyp hyp1.txt --ref nothere.txt
