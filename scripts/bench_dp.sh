#!/usr/bin/env bash
# Data-parallel scaling on this machine: GPT-2 124M training steps (global
# batch B x T fixed) as 1 rank x 1 thread, 1 rank x 2 threads and 2 ranks x
# 1 thread, then the fused-bucket all-reduce against a raw MPI_Allreduce.
#   scripts/bench_dp.sh                 B=4 T=1024 STEPS=2 BUILD=build (the T of `cubist bench`)
# Prints each run's JSON line (cubist bench --dp-step) and a summary:
# speed-ups over 1 rank x 1 thread and the share of the gradient reduction
# hidden behind backward in the 2-rank run.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
C=$BUILD/cubist
if ldd "$C" | grep -q libmpich; then MPIRUN=${MPIRUN:-mpirun.mpich}; else MPIRUN=${MPIRUN:-mpirun.openmpi}; fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(bench --dp-step --batch "${B:-4}" --seq-len "${T:-1024}" --steps "${STEPS:-2}")
field() { sed -E "s/.*\"$2\":([0-9.e+-]+).*/\1/" <<<"$1"; }

echo "uptime: $(uptime)"
r11=$(OMP_NUM_THREADS=1 "$C" "${args[@]}" --threads 1); echo "1 rank  x 1 thread : $r11"
r12=$(OMP_NUM_THREADS=2 "$C" "${args[@]}" --threads 2); echo "1 rank  x 2 threads: $r12"
r21=$(OMP_NUM_THREADS=1 "$MPIRUN" -np 2 "$C" "${args[@]}" --threads 1); echo "2 ranks x 1 thread : $r21"
t11=$(field "$r11" tokens_per_s) t12=$(field "$r12" tokens_per_s) t21=$(field "$r21" tokens_per_s)
awk -v a="$t11" -v b="$t12" -v c="$t21" -v h="$(field "$r21" hidden)" 'BEGIN {
    printf "speed-up over 1 rank x 1 thread: 1x2 %.2fx, 2x1 %.2fx (target >= 1.85x); 2x1 / 1x2 %.2f\n", b / a, c / a, c / b
    printf "gradient reduction hidden behind backward (2 ranks): %.0f%%\n", 100 * h }'
OMP_NUM_THREADS=1 "$MPIRUN" -np 2 "$C" bench --allreduce
