#!/usr/bin/env bash
# examples/mlp_lm (a user's own model and training loop on cubist's layers)
# under every layout and data parallelism, unchanged: the loss and gradient
# norm of 30 steps and the saved weights equal the single-process run to
# 1e-5 relative (fp32 sums regrouped across ranks differ by a few ulp).
set -u
. "$(dirname "$0")/launcher.sh"
root=$ROOT
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
# deterministic text, so a failure reproduces
if command -v bible >/dev/null; then bible gen1:1-rev22:21 | head -c 200000 > "$d/text.txt"; else seq 1 40000 > "$d/text.txt"; fi
"$BUILD/cubist" prepare --input "$d/text.txt" --output "$d/train.bin" >/dev/null
EX="$BUILD/examples/mlp_lm"
"$EX" --data "$d/train.bin" --steps 30 --save "$d/serial.st" > "$d/serial.log" || { echo "FAIL example serial run"; exit 1; }
run() { # label np flags...
    local label=$1 np=$2; shift 2
    if timeout "$(tmo 180)" "${launch[@]}" -np "$np" "$EX" --data "$d/train.bin" --steps 30 --save "$d/$label.st" "$@" > "$d/$label.log" 2>&1; then
        /usr/bin/python3 "$root/tests/compare.py" logs "$d/$label.log" "$d/serial.log" --label "example $label loss"
        /usr/bin/python3 "$root/tests/compare.py" st "$d/$label.st" "$d/serial.st" --label "example $label weights"
    else
        echo "FAIL example $label: $(tail -n 2 "$d/$label.log" | tr '\n' ' ')"
    fi
}
run dp2 2 --dp 2
run tp1d2 2 --tp 2 --tp-mode 1d
run tp1d4 4 --tp 4 --tp-mode 1d
run tp2d4 4 --tp 4 --tp-mode 2d
run tp3d8 8 --tp 8 --tp-mode 3d
run dp2_tp1d2 4 --dp 2 --tp 2 --tp-mode 1d
# pipeline: the same binary, its operators recorded and run stage by stage
# over micro-batches (GPipe order); sums regroup over micro-batches only
run pp2 2 --pp 2
run pp2_m8 2 --pp 2 --micro-batches 8
run pp4_m4 4 --pp 4 --micro-batches 4
run pp3_m1 3 --pp 3 --micro-batches 1
run pp2_manual 2 --pp 2 --partition 0,2,9
run pp2_dp2 4 --pp 2 --dp 2 --micro-batches 2
run pp2_tp1d2 4 --pp 2 --tp 2 --tp-mode 1d --micro-batches 4
run pp2_dp2_tp1d2 8 --pp 2 --dp 2 --tp 2 --tp-mode 1d
# refusals: one line, exit 2, every rank
refuse() { # label np pattern flags...
    local label=$1 np=$2 pat=$3; shift 3
    timeout "$(tmo 60)" "${launch[@]}" -np "$np" "$EX" --data "$d/train.bin" --steps 2 "$@" > "$d/$label.out" 2>&1
    local rc=$? n
    n=$(grep -c "$pat" "$d/$label.out")
    if [ "$rc" = 2 ] && [ "$n" -ge 1 ]; then echo "PASS example refuses $label: $(grep -m1 "$pat" "$d/$label.out")"
    else echo "FAIL example refuses $label: exit $rc, $n lines matching '$pat': $(tail -n 2 "$d/$label.out" | tr '\n' ' ')"; fi
}
refuse pp2_tp2d 8 "takes --tp-mode 1d only" --pp 2 --tp 4 --tp-mode 2d
refuse pp2_m3 2 "does not divide" --pp 2 --micro-batches 3
refuse pp2_badpart 2 "partition" --pp 2 --partition 0,9,2
