#!/usr/bin/env bash
# examples/mlp_lm (a user's own model and training loop on cubist's layers)
# under every layout and data parallelism, unchanged: the loss and gradient
# norm of 30 steps and the saved weights equal the single-process run to
# 1e-5 relative (fp32 sums regrouped across ranks differ by a few ulp).
set -u
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
root=$(pwd)
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
# deterministic text, so a failure reproduces
if command -v bible >/dev/null; then bible gen1:1-rev22:21 | head -c 200000 > "$d/text.txt"; else seq 1 40000 > "$d/text.txt"; fi
"$BUILD/cubist" prepare --input "$d/text.txt" --output "$d/train.bin" >/dev/null
EX="$BUILD/examples/mlp_lm"
"$EX" --data "$d/train.bin" --steps 30 --save "$d/serial.st" > "$d/serial.log" || { echo "FAIL example serial run"; exit 1; }
run() { # label np flags...
    local label=$1 np=$2; shift 2
    local mf=(-np "$np"); case "$MPIRUN" in *mpich*) ;; *) mf=(-q --oversubscribe "${mf[@]}") ;; esac
    if timeout 180 "$MPIRUN" "${mf[@]}" "$EX" --data "$d/train.bin" --steps 30 --save "$d/$label.st" "$@" > "$d/$label.log" 2>&1; then
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
