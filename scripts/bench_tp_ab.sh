#!/usr/bin/env bash
# Tensor-parallel step time of two cubist builds, alternated in one session
# (A B A B ...), so a contended machine affects both alike: per layout, the
# median over rounds of one step's wall time and of its time in kernels
# (forward + backward, max over ranks), B over A. With more ranks than
# cores the wall time is mostly MPI polling: compare the kernel times there. Usage: scripts/bench_tp_ab.sh A/cubist B/cubist [rounds] [bench flags]
#   e.g. scripts/bench_tp_ab.sh /tmp/main/build/cubist build/cubist 5
set -eu
a=$1 b=$2 rounds=${3:-5}
shift $(($# < 3 ? $# : 3))
flags=(--json --tp-compare-only 1d:2,2d:4,3d:8 --layers 2 --d-model 256 --heads 8 --batch 16
       --seq-len 64 --vocab 2048 --steps 5 "$@")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
    "$a" bench "${flags[@]}" >"$out/a$r.json" 2>/dev/null
    "$b" bench "${flags[@]}" >"$out/b$r.json" 2>/dev/null
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
def times(side, key):
    w = {}
    for r in range(1, n + 1):
        for c in json.load(open(f"{d}/{side}{r}.json"))["configs"]:
            w.setdefault(c["config"], []).append(c["max"]["measured"][key])
    return w
for key, what in (("wall_s", "step wall"), ("kernel_cpu_s", "in kernels")):
    A, B = times("a", key), times("b", key)
    for k in A:
        ma, mb = statistics.median(A[k]), statistics.median(B[k])
        print(f"{k:6s} {what:10s} A {ma*1e3:8.2f} ms  B {mb*1e3:8.2f} ms  B/A {mb/ma:.3f}  "
              f"(median of {n} each)")
PY
