#!/usr/bin/env bash
# `cubist plot`: two training logs (one with validation loss) drawn to a PNG
# of the size asked for (PNG signature, IHDR width and height, non-empty);
# bad input (no log, a missing or non-JSON log, a bad --size, no --out):
# one line, exit 2, no image left behind.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) C=$BUILD/cubist ;; *) C="$(pwd)/$BUILD/cubist" ;; esac
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
fixture_fail() { echo "FAIL plot: fixture: $*"; exit 1; }
head -c 40000 /dev/urandom | base64 > text.txt
"$C" prepare --input text.txt --output train.bin --val-output val.bin --val-fraction 0.1 >/dev/null || fixture_fail prepare
M=(--data train.bin --layers 1 --d-model 16 --heads 2 --seq-len 16 --batch 2 --steps 12 --quiet --peak-gflops 100)
"$C" train "${M[@]}" --lr 1e-3 --val-data val.bin --eval-every 4 --log run_a.jsonl || fixture_fail "train a"
"$C" train "${M[@]}" --lr 3e-3 --warmup 4 --log run_b.jsonl || fixture_fail "train b"
png_size() { /usr/bin/python3 -c "
import struct, sys
b = open(sys.argv[1], 'rb').read()
print(*struct.unpack('>II', b[16:24]) if b[:8] == b'\x89PNG\r\n\x1a\n' and b[12:16] == b'IHDR' else 'not-a-png')" "$1"; }
for size in 640x480 1200x900; do
    "$C" plot run_a.jsonl run_b.jsonl --out "p_$size.png" --size $size 2>err.txt \
        || { echo "FAIL plot: --size $size: $(cat err.txt)"; continue; }
    got=$(png_size "p_$size.png")
    [ -s "p_$size.png" ] && [ "$got" = "${size/x/ }" ] && [ "$(stat -c %s "p_$size.png")" -gt 5000 ] \
        && echo "PASS plot: two runs, --size $size: a PNG of $got pixels, $(stat -c %s "p_$size.png") bytes" \
        || echo "FAIL plot: --size $size: got '$got', $(stat -c %s "p_$size.png" 2>/dev/null) bytes"
done
"$C" plot run_b.jsonl --out default.png 2>err.txt && [ "$(png_size default.png)" = "1200 900" ] \
    && echo "PASS plot: one run, default size 1200x900" || echo "FAIL plot: default size: $(cat err.txt)"
echo '{"step":1,' > broken.jsonl
bad() { # name, expected, args...
    local name=$1 want=$2; shift 2
    rm -f out.png out.png.tmp
    "$C" plot "$@" >/dev/null 2>err.txt
    local rc=$? lines; lines=$(wc -l < err.txt)
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" err.txt && ! ls out.png* >/dev/null 2>&1; then
        echo "PASS plot: $name: exit 2, one line: $(cat err.txt)"
    else echo "FAIL plot: $name: exit $rc, $lines lines: $(head -c 300 err.txt)"; fi
}
bad "no log" "at least one LOG.jsonl" --out out.png
bad "missing log" "nothere.jsonl: cannot open" nothere.jsonl --out out.png
bad "log not JSON" "broken.jsonl: line 1 is not a JSON object" run_a.jsonl broken.jsonl --out out.png
bad "bad --size" "--size '0x10' is not WxH" run_a.jsonl --out out.png --size 0x10
bad "no --out" "needs --out" run_a.jsonl
