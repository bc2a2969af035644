#!/usr/bin/env bash
# Data-parallel scaling on this machine: GPT-2 124M training steps (global
# batch B x T fixed) as 1 rank x 1 thread, 1 rank x 2 threads, 2 ranks x 1
# thread with the default embedding path (auto: split here) and with the
# dense one, and the reference for the 2-rank runs: the same 2 ranks, same
# launcher, each training alone on B/2 sequences with no communication at
# all (--no-comm), i.e. the most 2 data-parallel ranks can reach on these
# cores, caches and memory. Then the fused-bucket all-reduce against a raw
# MPI_Allreduce.
#   scripts/bench_dp.sh                 B=4 T=1024 STEPS=2 BUILD=build (the T of `cubist bench`)
# Prints each run's JSON line (cubist bench --dp-step) and a summary:
# speed-ups over 1 rank x 1 thread, the 2-rank runs as a fraction of the
# no-communication ceiling, and the share of the gradient reduction hidden
# behind backward.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
C=$BUILD/cubist
if ldd "$C" | grep -q libmpich; then MPIRUN=${MPIRUN:-mpirun.mpich}; else MPIRUN=${MPIRUN:-mpirun.openmpi}; fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(bench --dp-step --batch "${B:-4}" --seq-len "${T:-1024}" --steps "${STEPS:-2}")
field() { sed -E "s/.*\"$2\":([0-9.e+-]+).*/\1/" <<<"$1"; }
two() { OMP_NUM_THREADS=1 "$MPIRUN" -np 2 "$C" "${args[@]}" --threads 1 "$@"; }

echo "uptime: $(uptime)"
r11=$(OMP_NUM_THREADS=1 "$C" "${args[@]}" --threads 1); echo "1 rank  x 1 thread          : $r11"
r12=$(OMP_NUM_THREADS=2 "$C" "${args[@]}" --threads 2); echo "1 rank  x 2 threads         : $r12"
rnc=$(two --no-comm);                                 echo "2 ranks x 1, no comm (ceil) : $rnc"
r21=$(two);                                           echo "2 ranks x 1 thread (auto)   : $r21"
r2d=$(two --embed-mode dense);                        echo "2 ranks x 1 thread (dense)  : $r2d"
t11=$(field "$r11" tokens_per_s) t12=$(field "$r12" tokens_per_s) tnc=$(field "$rnc" tokens_per_s)
t21=$(field "$r21" tokens_per_s) t2d=$(field "$r2d" tokens_per_s)
awk -v a="$t11" -v b="$t12" -v c="$t21" -v d="$t2d" -v n="$tnc" -v h="$(field "$r21" hidden)" \
    -v hd="$(field "$r2d" hidden)" -v e="$(sed -E 's/.*"embed":"([a-z]+)".*/\1/' <<<"$r21")" 'BEGIN {
    printf "speed-up over 1 rank x 1 thread: 1x2 %.2fx, 2x1 %s %.2fx, 2x1 dense %.2fx (target >= 1.85x); no-comm ceiling %.2fx\n", b / a, e, c / a, d / a, n / a
    printf "2 ranks as a fraction of the no-comm ceiling: %s %.3f, dense %.3f; 2x1 %s / 1x2 %.2f\n", e, c / n, d / n, e, c / b
    printf "gradient reduction hidden behind backward (2 ranks): %s %.0f%%, dense %.0f%%\n", e, 100 * h, 100 * hd }'
OMP_NUM_THREADS=1 "$MPIRUN" -np 2 "$C" bench --allreduce
