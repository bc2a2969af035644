#!/usr/bin/env bash
# Bad input: each case must end with exactly one line on stderr naming the
# problem, exit status 2, no crash, and no output file (not even a .tmp).
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) C=$BUILD/cubist ;; *) C="$(pwd)/$BUILD/cubist" ;; esac
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
head -c 100000 /dev/urandom | base64 > text.txt
"$C" prepare --input text.txt --output good.bin >/dev/null
M=(--layers 1 --d-model 16 --heads 2 --seq-len 8 --batch 2 --steps 2 --quiet --peak-gflops 100)
"$C" train --data good.bin "${M[@]}" --steps 0 --save good.st || exit 1

# crafted files
: > empty.bin
printf 'garbage!x' > garbage.bin
/usr/bin/python3 - <<'PY'
import json, struct
hdr = struct.pack('<256i', *([20240520, 1, 1000] + [0] * 253))
open('trunc.bin', 'wb').write(hdr + struct.pack('<10H', *range(10)))
open('bigtok.bin', 'wb').write(struct.pack('<64H', *([1] * 63 + [300])))
def st(name, hdr_obj, data=b'', raw=None):
    h = raw if raw is not None else json.dumps(hdr_obj).encode()
    open(name, 'wb').write(struct.pack('<Q', len(h)) + h + data)
st('badlen.st', None, raw=b'{}')
open('badlen.st', 'r+b').write(struct.pack('<Q', 1 << 40))
st('badjson.st', None, raw=b'{"wte.weight": {"dtype": "F32", "shape": [2,')
st('dtype.st', {"wte.weight": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b'\0' * 4)
st('offsets.st', {"wte.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b'\0' * 8)
# a well-formed file whose wte has the wrong shape for the model its metadata describes
meta = {"n_layer": "1", "d_model": "16", "n_head": "2", "seq_len": "8", "vocab": "256"}
st('shape.st', {"__metadata__": meta, "wte.weight": {"dtype": "F32", "shape": [256, 8], "data_offsets": [0, 8192]}}, b'\0' * 8192)
PY

n=0
case_() { # name, expected-substring, cubist args...
    local name=$1 want=$2; shift 2
    rm -f out.st out.st.tmp out.st.state out.st.state.tmp err
    timeout 60 "$C" "$@" 2>err >/dev/null
    local rc=$? lines; lines=$(wc -l < err)
    local left; left=$(ls out.st* 2>/dev/null)
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" err && [ -z "$left" ]; then
        echo "PASS bad input: $name -> $(cat err)"
    else
        echo "FAIL bad input: $name: exit $rc, $lines stderr lines, leftover '$left': $(head -c 300 err)"
    fi
}
T=(train "${M[@]}" --save out.st)
case_ "missing token file"      "missing.bin"        "${T[@]}" --data missing.bin
case_ "empty token file"        "empty"              "${T[@]}" --data empty.bin
case_ "truncated llm.c file"    "trunc.bin"          "${T[@]}" --data trunc.bin
case_ "garbage token file"      "garbage.bin"        "${T[@]}" --data garbage.bin
case_ "token >= vocab"          "300"                "${T[@]}" --data bigtok.bin
case_ "header length past end"  "badlen.st"          "${T[@]}" --data good.bin --init badlen.st
case_ "bad JSON header"         "badjson.st"         "${T[@]}" --data good.bin --init badjson.st
case_ "wrong dtype"             "F16"                "${T[@]}" --data good.bin --init dtype.st
case_ "offsets past the end"    "offsets.st"         "${T[@]}" --data good.bin --init offsets.st
case_ "wrong tensor shape"      "wte.weight"         "${T[@]}" --data good.bin --init shape.st
case_ "missing checkpoint"      "nothere.st"         "${T[@]}" --data good.bin --resume nothere.st
case_ "heads not dividing"      "--heads 3"          train --data good.bin --layers 1 --d-model 16 --heads 3 --seq-len 8 --save out.st
case_ "seq-len over context"    "context"            "${T[@]}" --data good.bin --init good.st --seq-len 16
case_ "flag contradicts ckpt"   "--d-model 32"       "${T[@]}" --data good.bin --init good.st --d-model 32
case_ "unknown flag"            "--bogus"            "${T[@]}" --data good.bin --bogus 1
case_ "bad number"              "--lr"               "${T[@]}" --data good.bin --lr fast
case_ "flag without value"      "--steps"            train --data good.bin --steps
case_ "unknown command"         "frobnicate"         frobnicate
case_ "sample without ckpt"     "--ckpt"             sample
case_ "sample bad ckpt"         "badjson.st"         sample --ckpt badjson.st
case_ "prepare missing input"   "missing.txt"        prepare --input missing.txt --output out.st
case_ "batch too big for data"  "tokens"             "${T[@]}" --data bigtok.bin --vocab 512 --batch 64
