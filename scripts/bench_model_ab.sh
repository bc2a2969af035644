#!/usr/bin/env bash
# `cubist bench --model MODEL` (bert, roberta, ncf) of git revision REV and
# of this checkout, alternated round by round so that a busy machine slows
# both sides alike. Each run times cubist and PyTorch in the same
# invocation; printed per side: the median cubist / PyTorch ratio over the
# rounds and cubist's median ms per step of each kernel class. Extra flags
# go to both sides; NEW_FLAGS="..." to this checkout's only (a flag the old
# side does not know).
# Usage: scripts/bench_model_ab.sh REV MODEL [rounds (2)] [bench flags...]
#   e.g. NEW_FLAGS="--attn-dropout 0" scripts/bench_model_ab.sh e7aded3 bert 3
# OLD=DIR: use DIR/build/cubist, a tree already built at REV, instead.
set -eu
rev=$1 model=$2 rounds=${3:-2}
shift $(($# < 3 ? $# : 3))
root=$(git rev-parse --show-toplevel)
out=$(mktemp -d)
old=${OLD:-}
if [ -z "$old" ]; then
    old=$(mktemp -d)
    trap 'rm -rf "$old" "$out"' EXIT
    git -C "$root" archive "$rev" | tar -x -C "$old"
    echo "building $rev in $old ..." >&2
    make -C "$old" -j2 build/cubist >/dev/null
else trap 'rm -rf "$out"' EXIT; fi
make -C "$root" -j2 build/cubist >/dev/null
for r in $(seq "$rounds"); do
    echo "round $r/$rounds ..." >&2
    "$old/build/cubist" bench --model "$model" "$@" >"$out/old.$r"
    # shellcheck disable=SC2086 # NEW_FLAGS is a list of words
    "$root/build/cubist" bench --model "$model" "$@" ${NEW_FLAGS:-} >"$out/new.$r"
done
/usr/bin/python3 - "$out" "$rounds" "$rev" <<'PY'
import re, statistics, sys
d, n, rev = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for side in ("old", "new"):
    ratios, ms = [], {}
    for r in range(1, n + 1):
        text = open(f"{d}/{side}.{r}").read()
        ratios.append(float(re.search(r"cubist / PyTorch = ([0-9.]+)", text).group(1)))
        for k, v in re.findall(r" ([a-z_]+) ([0-9]+)", text.split("ms per step:")[1].split("\n")[0]):
            ms.setdefault(k, []).append(float(v))
    print(f"{side} ({rev if side == 'old' else 'this tree'}): cubist / PyTorch median "
          f"{statistics.median(ratios):.2f} (rounds: {', '.join(f'{x:.2f}' for x in ratios)})")
    print("  ms per step (median): " + " ".join(f"{k} {statistics.median(v):.0f}" for k, v in ms.items()))
PY
