#!/usr/bin/env bash
# The general attention (bidirectional and causal, padding masks, cross-
# attention) through the graph engine under every layout: examples/tiny_gpt
# --masked (padded bidirectional self-attention and a causal padded cross-
# attention in each block, sequence lengths 0..T that change every step,
# dropout 0.1 on the cross-attention's output: the counter-based masks)
# under dp 2 (and ZeRO-1), 1-D 2, 2-D 4, 3-D 8, pp 2 (1f1b, 4 micro-batches),
# pp 2 x 3-D 8 and recompute block and selective, each against its serial
# run: 30 steps' loss and gradient norm and the final weights to 1e-5
# relative (tests/compare.py: sums regroup across ranks, a few ulp per
# step); recompute against no recompute bit for bit (the same arithmetic).
set -u
. "$(dirname "$0")/launcher.sh"
root=$ROOT
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
/usr/bin/python3 "$root/tests/gen_text.py" 160000 > "$d/text.txt"
"$BUILD/cubist" prepare --input "$d/text.txt" --output "$d/train.bin" >/dev/null || { fail "prepare"; exit 1; }
cmp_() { # compare.py's lines; a crash without a FAIL line fails too
    local out rc
    out=$(/usr/bin/python3 "$root/tests/compare.py" "$@" 2>&1)
    rc=$?
    grep '^PASS\|^FAIL' <<<"$out"
    failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
    if [ $rc != 0 ] && ! grep -q '^FAIL' <<<"$out"; then fail "compare.py $*: exit $rc: $(tail -n 2 <<<"$out" | tr '\n' ' ')"; fi
}
ex() { # label np flags...
    local label=$1 np=$2; shift 2
    timeout "$(tmo 240)" "${launch[@]}" -np "$np" "$BUILD/examples/tiny_gpt" --masked --data "$d/train.bin" \
        --steps 30 --save "$d/$label.st" "$@" > "$d/$label.log" 2>&1 || { fail "tiny_gpt --masked $label: $(tail -n 2 "$d/$label.log" | tr '\n' ' ')"; return 1; }
}
run() { # label np flags...: against the serial run to 1e-5
    ex "$@" || return
    cmp_ logs "$d/$1.log" "$d/serial.log" --label "masked attention $1 loss"
    cmp_ st "$d/$1.st" "$d/serial.st" --label "masked attention $1 weights"
}
"$BUILD/examples/tiny_gpt" --masked --data "$d/train.bin" --steps 30 --save "$d/serial.st" > "$d/serial.log" 2>&1 ||
    { fail "serial run: $(tail -n 2 "$d/serial.log")"; exit 1; }
for rc in block selective; do
    ex "rc_$rc" 1 --recompute "$rc" &&
        cmp_ logs "$d/rc_$rc.log" "$d/serial.log" --tol 0 --label "masked attention --recompute $rc: the serial losses bit for bit"
done
run dp2 2 --dp 2
run dp2_zero 2 --dp 2 --zero 1
run tp1d2 2 --tp 2 --tp-mode 1d
run tp2d4 4 --tp 4 --tp-mode 2d
run tp3d8 8 --tp 8 --tp-mode 3d
run pp2_1f1b_m4 2 --pp 2 --schedule 1f1b --micro-batches 4
run pp2_tp3d8 16 --pp 2 --tp 8 --tp-mode 3d --micro-batches 2
[ "$failed" = 0 ]
