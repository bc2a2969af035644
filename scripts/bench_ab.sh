#!/usr/bin/env bash
# The no-regression pair of issue 11, alternated in one session so that a
# busy machine slows every side alike:
#   old    `cubist bench` of git revision REV (the tree before the change),
#          built into a temporary directory;
#   new    `cubist bench` of this checkout (build/, made first);
#   api    examples/tiny_gpt --bench: GPT-2 124M declared through the public
#          API by the example's own code;
#   builtin examples/tiny_gpt --bench --builtin: the library's declaration
#          (cb_model_declare_gpt) of the same model in the same program.
# Each round runs old, new, api, builtin back to back at every T; the
# ratios printed are of median tokens/s over the rounds (best in brackets):
# new/old (the issue: within 3%) and api/builtin (the issue: equal within
# noise; both with wpe of T rows, where `cubist bench` keeps 1024, so
# api/new is printed for reference only). GPT-2 124M, B = 4, --threads 2.
# Usage: scripts/bench_ab.sh REV [rounds (3)] [seq-lens (64,1024)] [steps (3)]
#   e.g. scripts/bench_ab.sh 6dabf82~1 5
set -eu
rev=$1 rounds=${2:-3} lens=${3:-64,1024} steps=${4:-3}
root=$(git rev-parse --show-toplevel)
old=$(mktemp -d)
out=$(mktemp -d)
trap 'rm -rf "$old" "$out"' EXIT
git -C "$root" archive "$rev" | tar -x -C "$old"
echo "building $rev in $old ..." >&2
make -C "$old" -j2 build/cubist >/dev/null
make -C "$root" -j2 build/cubist build/examples/tiny_gpt >/dev/null
export OMP_NUM_THREADS=2
bench=(bench --json --no-torch --threads 2 --steps "$steps")
for r in $(seq "$rounds"); do
    for T in ${lens//,/ }; do
        echo "round $r/$rounds T=$T ..." >&2
        "$old/build/cubist" "${bench[@]}" --seq-lens "$T" >"$out/old.$T.$r"
        "$root/build/cubist" "${bench[@]}" --seq-lens "$T" >"$out/new.$T.$r"
        "$root/build/examples/tiny_gpt" --bench --seq-len "$T" --steps "$steps" >"$out/api.$T.$r"
        "$root/build/examples/tiny_gpt" --bench --builtin --seq-len "$T" --steps "$steps" \
            >"$out/builtin.$T.$r"
    done
done
/usr/bin/python3 - "$out" "$rounds" "$lens" "$rev" <<'PY'
import json, statistics, sys
d, n, lens, rev = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
def tps(side, T):
    v = []
    for r in range(1, n + 1):
        line = [l for l in open(f"{d}/{side}.{T}.{r}") if l.startswith("{")][-1]
        v.append(json.loads(line)["tokens_per_s"])
    return statistics.median(v), max(v)
for T in lens:
    s = {k: tps(k, T) for k in ("old", "new", "api", "builtin")}
    print(f"T={T:<5} tokens/s median (best) of {n}: " +
          "  ".join(f"{k} {m:.1f} ({b:.1f})" for k, (m, b) in s.items()))
    for a, b, what in (("new", "old", f"new/old ({rev})"), ("api", "builtin", "api/builtin"),
                       ("api", "new", "api/new (wpe rows differ)")):
        print(f"T={T:<5} {what:28s} {s[a][0] / s[b][0]:.3f}  (best {s[a][1] / s[b][1]:.3f})")
PY
