#!/usr/bin/env bash
# `cubist bench --tp-compare` keeps its formulas true: on a small GPT (one
# layer, d 128, 8 heads, B=16, T=63 and vocabulary 250 so that every layout
# pads its vocabulary and 2-D and 3-D their position rows) at 1d:8, 2d:4
# and 3d:8 (X^/W^ kept, and re-gathered with --tp3d-save shard), the
# measured bytes sent, collectives (also per layer type), parameter bytes
# and peak activation bytes of every rank (max over ranks
# and rank 0) equal the analytic formulas of cli/bench_tp.c within 5%.
# A layout that changes what it sends, or how much it allocates, fails here
# until the formulas (and the README) follow. Also: a bad configuration
# exits 2 with one line naming it.
#   BUILD=build-mpich tests/test_tp_compare.sh     (MPIRUN overrides the launcher)
set -u
. "$(dirname "$0")/launcher.sh"
C="$BUILD/cubist"
TMO=${TEST_TP_TIMEOUT:-$(tmo 120)}
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
small=(--layers 1 --d-model 128 --heads 8 --batch 16 --seq-len 63 --vocab 250 --tp-timeout "$TMO")

# run name, then bench flags; leaves $d/name.json
run() {
    local name=$1; shift
    if ! timeout "$TMO" "$C" bench --json "${small[@]}" "$@" >"$d/$name.json" 2>"$d/$name.err"; then
        fail "$name: bench --tp-compare-only $* exited non-zero: $(head -c 400 "$d/$name.err")"
        return 1
    fi
}

# every figure with a formula, max over ranks and rank 0, within 5%
check() {
    /usr/bin/python3 - "$d/$1.json" "$1" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
tol = 0.05
keys = ["sent_bytes", "calls", "param_bytes", "act_bytes"]
kinds = ["linear", "norm", "embed", "head", "attn", "other"]
bad = 0
for c in doc["configs"]:
    for who in ("max", "rank0"):
        m, f = c[who]["measured"], c[who]["formula"]
        parts = []
        for k in keys + ["sent_" + x for x in kinds] + ["calls_" + x for x in kinds]:
            mv, fv = m[k], f[k]
            ok = abs(mv - fv) <= tol * abs(fv) if fv else mv == 0
            if k in keys or not ok:
                parts.append("%s %.6g/%.6g" % (k, mv, fv))
            if not ok:
                bad += 1
                parts[-1] += " OFF"
        st = "PASS" if all(not p.endswith("OFF") for p in parts) else "FAIL"
        print("%s %s %s (%s, %s) measured/formula within 5%%: %s" %
              (st, sys.argv[2], c["config"], c["save"], who, ", ".join(parts)))
sys.exit(1 if bad else 0)
EOF
    [ $? = 0 ] || failed=$((failed + 1))
}

if run layouts --tp-compare-only 1d:8,2d:4,3d:8; then
    check layouts
    # 3-D moves less than 1-D at the same P, and the ratio printed is the counters'
    /usr/bin/python3 - "$d/layouts.json" <<'EOF' || failed=$((failed + 1))
import json, sys
doc = json.load(open(sys.argv[1]))
r = doc["ratios"]["3d:8/1d:8"]
cf = {c["config"]: c for c in doc["configs"]}
want = cf["3d:8"]["max"]["measured"]["sent_bytes"] / cf["1d:8"]["max"]["measured"]["sent_bytes"]
ok = abs(r["sent_measured"] - want) < 1e-3 and abs(r["sent_formula"] - r["sent_measured"]) < 0.05
print("%s ratio 3d:8/1d:8 bytes sent: printed %.4f, counters %.4f, formula %.4f" %
      ("PASS" if ok else "FAIL", r["sent_measured"], want, r["sent_formula"]))
sys.exit(0 if ok else 1)
EOF
fi
run shard --tp-compare-only 3d:8 --tp3d-save shard && check shard

# a configuration that cannot run: exit 2, the reason in one line
timeout "$TMO" "$C" bench --tp-compare-only 3d:4 "${small[@]}" >/dev/null 2>"$d/bad.err"
rc=$?
if [ $rc = 2 ] && grep -q "cube" "$d/bad.err"; then
    pass "bad configuration 3d:4: exit 2, '$(grep -m1 cube "$d/bad.err")'"
else
    fail "bad configuration 3d:4: exit $rc (want 2), stderr '$(head -c 300 "$d/bad.err")'"
fi
[ "$failed" = 0 ]
