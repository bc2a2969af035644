#!/usr/bin/env bash
# Data-parallel training of the translation model (`cubist train --model
# nmt`) on this machine, one thread a rank: weak scaling (the rows per
# rank fixed: 1 rank x B pairs against 2 ranks x B each) and strong scaling
# (the step fixed: 1 rank x 2B against 2 ranks x B each, the same batches),
# the 2-rank runs under each embedding-gradient path (dense, sparse,
# split). Every step is padded to B x T tokens a rank (--max-tokens
# default), so step times compare; the mean step time leaves out step 1.
# ROUNDS > 1 runs every configuration that many times, the rounds
# interleaved, and keeps each one's fastest: ratios that hold better on a
# busy machine.
#   scripts/bench_nmt_dp.sh TRAIN.bin [B=8 STEPS=12 ROUNDS=1 MODEL="--layers 2 --d-model 128 --heads 4 --ffn 512"]
# TRAIN.bin: a pair file of `cubist prepare --pairs` (docs/nmt.md: the
# Bible pairs; with --tokenizer gpt2 the table has 50,260 rows, the
# seed's large shared vocabulary). Prints each run's mean step time and
# tokens/s (padded) and the efficiencies: weak = t(1 x B) / t(2 x B),
# ideal 1; strong = t(1 x 2B) / t(2 x B), ideal 2.
set -eu
cd "$(dirname "$0")/.."
[ $# = 1 ] || { echo "usage: scripts/bench_nmt_dp.sh TRAIN.bin" >&2; exit 2; }
BUILD=${BUILD:-build}
C=$BUILD/cubist
if ldd "$C" | grep -q libmpich; then MPIRUN=${MPIRUN:-mpirun.mpich}; else MPIRUN=${MPIRUN:-mpirun.openmpi}; fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
B=${B:-8} STEPS=${STEPS:-12} ROUNDS=${ROUNDS:-1}
read -r -a model <<<"${MODEL:---layers 2 --d-model 128 --heads 4 --ffn 512}"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
run() { # NAME NP flags...: the mean step_ms after step 1, and tokens/s
    local name=$1 np=$2; shift 2
    "$MPIRUN" -np "$np" "$C" train --model nmt --data "$1" "${model[@]}" --steps "$STEPS" \
        --quiet --log "$d/$name.jsonl" "${@:2}" >/dev/null
    /usr/bin/python3 -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][1:]
ms = sum(x['step_ms'] for x in r) / len(r)
print(f'{ms:.1f} {sum(x[\"tokens_per_s\"] for x in r) / len(r):.0f}')" "$d/$name.jsonl"
}
echo "uptime: $(uptime)"
declare -A t tps
cfgs=("one_B 1 --batch $B" "one_2B 1 --batch $((2 * B))"
      "dp2_dense 2 --batch $((2 * B)) --dp 2 --embed-grad dense"
      "dp2_sparse 2 --batch $((2 * B)) --dp 2 --embed-grad sparse"
      "dp2_split 2 --batch $((2 * B)) --dp 2 --embed-grad split")
for ((r = 0; r < ROUNDS; r++)); do
    for cfg in "${cfgs[@]}"; do
        read -r -a a <<<"$cfg"
        out=$(run "${a[0]}" "${a[1]}" "$1" "${a[@]:2}")
        if [ -z "${t[${a[0]}]:-}" ] || awk -v x="${out%% *}" -v y="${t[${a[0]}]}" 'BEGIN { exit !(x < y) }'; then
            t[${a[0]}]=${out%% *} tps[${a[0]}]=${out##* }
        fi
    done
done
for cfg in "${cfgs[@]}"; do
    read -r -a a <<<"$cfg"
    printf "%-11s %s ranks, %-40s step %8s ms, %8s tokens/s\n" "${a[0]}" "${a[1]}" "${a[*]:2}" \
        "${t[${a[0]}]}" "${tps[${a[0]}]}"
done
for p in dense sparse split; do
    awk -v b="${t[one_B]}" -v b2="${t[one_2B]}" -v x="${t[dp2_$p]}" -v p=$p 'BEGIN {
        printf "2 ranks, --embed-grad %-6s: weak scaling efficiency %.2f (ideal 1), strong speed-up %.2fx (ideal 2)\n", p, b / x, b2 / x }'
done
