#!/usr/bin/env bash
# The cost of polling every blocking wait (src/comm/comm.c's stall watchdog
# and back-off) against a reference build with MPI's own blocking calls:
# median step_ms of `cubist train` under mpirun, the two builds alternated
# ROUNDS times on the same machine, and their ratio.
#   bench/comm_wait.sh REF_CUBIST [NEW_CUBIST] [ROUNDS] [-- train flags]
# e.g. bench/comm_wait.sh /path/to/main/build/cubist build/cubist 3
set -u
ref=$1 new=${2:-build/cubist} rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 )); [ "${1:-}" = -- ] && shift
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
head -c 400000 /dev/urandom | base64 > "$d/t.txt"
"$new" prepare --input "$d/t.txt" --output "$d/t.bin" >/dev/null
flags=(--data "$d/t.bin" --layers 2 --d-model 128 --heads 4 --seq-len 64 --batch 8 --steps 40 --quiet
       --peak-gflops 100 "$@")
median_ms() { /usr/bin/python3 -c "import json,sys,statistics; print(statistics.median(json.loads(l)['step_ms'] for l in open(sys.argv[1]).readlines()[5:]))" "$1"; }
for grid in "--tp 2" "--dp 2" "--dp 2 --tp 2"; do
    np=$(( $(echo "$grid" | grep -o '[0-9]' | paste -sd'*' | bc) ))
    r=() n=()
    for i in $(seq "$rounds"); do
        mpirun.openmpi --oversubscribe -q -np $np "$ref" train "${flags[@]}" $grid --log "$d/r.jsonl" && r+=("$(median_ms "$d/r.jsonl")")
        mpirun.openmpi --oversubscribe -q -np $np "$new" train "${flags[@]}" $grid --log "$d/n.jsonl" && n+=("$(median_ms "$d/n.jsonl")")
    done
    /usr/bin/python3 -c "import sys,statistics as s; r=[float(x) for x in sys.argv[2].split()]; n=[float(x) for x in sys.argv[3].split()]; print(f'{sys.argv[1]:>14}: reference {s.median(r):8.2f} ms/step, polling {s.median(n):8.2f} ms/step, ratio {s.median(n)/s.median(r):.3f} (medians of {len(r)} runs)')" "$grid" "${r[*]}" "${n[*]}"
done
