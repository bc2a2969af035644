#!/usr/bin/env bash
# `cubist bench --pipeline` on a tiny model: the sweep runs (one mpirun job
# per row), its JSON holds every schedule's row (interleaved at M=1 < p too)
# with the bubble formula (p-1)/(v*M+p-1) (1 - vM/(vp+M-1) for interleaved
# at M < p) and a measured bubble in [0, 1), 1f1b plans less
# activation memory on stage 0 than gpipe at M=8 (it keeps at most p
# micro-batches in flight there, gpipe all 8), and --recompute block and
# selective each plan less than none on stage 0 of the comparison point
# (selective keeping more than block there); bad input exits 2.
set -u
. "$(dirname "$0")/launcher.sh"
C="$BUILD/cubist"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
TINY=(--layers 6 --d-model 32 --heads 4 --vocab 256 --seq-len 16 --batch 2)
if ! timeout 180 "$C" bench --pipeline "${TINY[@]}" --pp-list 2,4 --mb-list 1,8 \
        --recompute-at 4:1f1b:8 --json >"$d/b.json" 2>"$d/err.txt"; then
    echo "FAIL pp bench runs: $(head -c 300 "$d/err.txt")"; exit 1
fi
/usr/bin/python3 - "$d/b.json" <<'EOF'
import json, sys
fails = 0
def check(ok, name, detail):
    global fails
    print(("PASS " if ok else "FAIL ") + name + ": " + detail)
    fails += not ok
d = json.load(open(sys.argv[1]))
runs = {(r["pp"], r["schedule"], r["M"]): r for r in d["runs"]}
want = [(p, s, M) for p in (2, 4) for s in ("gpipe", "1f1b", "interleaved") for M in (1, 8)]
missing = [w for w in want if w not in runs]
check(not missing and len(d["runs"]) == len(want), "pp bench rows",
      "%d rows, missing %s" % (len(d["runs"]), missing))
bad = []
for r in d["runs"]:
    p, v, M = r["pp"], r["v"], r["M"]
    f = 1 - v * M / max(v * M + p - 1, v * p + M - 1)  # (p-1)/(vM+p-1) unless M < p
    if abs(r["bubble_formula"] - f) > 1e-4 or not 0 <= r["bubble"] < 1 or \
       len(r["act_bytes"]) != p or min(r["act_bytes"]) <= 0 or r["tokens_per_s"] <= 0:
        bad.append((p, r["schedule"], M, r["bubble"], r["bubble_formula"], f))
check(not bad, "pp bench formula and ranges",
      "formula 1 - vM/max(vM+p-1, vp+M-1) to 1e-4, bubble in [0,1), act > 0 per stage; bad %s" % bad)
for p in (2, 4):
    g, o = runs.get((p, "gpipe", 8)), runs.get((p, "1f1b", 8))
    if g and o:
        check(o["act_bytes"][0] < g["act_bytes"][0], "pp%d M=8 1f1b act < gpipe act, stage 0" % p,
              "1f1b %d bytes, gpipe %d bytes" % (o["act_bytes"][0], g["act_bytes"][0]))
rc = d.get("recompute", {})
if all(k in rc for k in ("none", "block", "selective", "against_none")):
    a = rc["none"]["act_bytes"][0]
    for mode in ("block", "selective"):
        b, r = rc[mode]["act_bytes"][0], rc["against_none"][mode]
        t = r["step_time_ratio"]
        check(b < a and abs(r["act_ratio"][0] - b / a) < 1e-3 and
              abs(t / (rc[mode]["step_ms"] / rc["none"]["step_ms"]) - 1) < 1e-2,  # ms to 0.01
              "recompute %s act < none, stage 0" % mode,
              "pp4 1f1b M=8: %s %d bytes, none %d, ratio %.3f; step time ratio %.2f"
              % (mode, b, a, r["act_ratio"][0], t))
    s, k = rc["selective"]["act_bytes"][0], rc["block"]["act_bytes"][0]
    check(k < s, "recompute block act < selective act, stage 0",
          "block %d bytes, selective %d (block keeps block inputs only)" % (k, s))
else:
    check(False, "recompute comparison present",
          "no recompute object with none, block, selective, against_none in the JSON")
sys.exit(1 if fails else 0)
EOF
py=$?
# the text table: one row per job and the checkpointing summary
if timeout 60 "$C" bench --recompute-compare "${TINY[@]}" --recompute-at 2:gpipe:4 >"$d/t.txt" 2>"$d/err.txt" &&
   [ "$(grep -c '^  2 gpipe ' "$d/t.txt")" -eq 3 ] && grep -q 'step time: none .*block .*selective' "$d/t.txt"; then
    echo "PASS pp bench text: $(grep 'stage 0:' "$d/t.txt" | tr -s ' ')"
else
    echo "FAIL pp bench text: $(head -c 300 "$d/t.txt" "$d/err.txt")"; py=1
fi
timeout 30 "$C" bench --pipeline --pp-list 1 >"$d/bad.txt" 2>&1
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$d/bad.txt")" -eq 1 ]; then echo "PASS pp bench bad --pp-list: exit 2, $(cat "$d/bad.txt")"
else echo "FAIL pp bench bad --pp-list: exit $rc: $(head -c 300 "$d/bad.txt")"; py=1; fi
exit $py
