#!/usr/bin/env bash
# --comm-dtype bf16: the data-parallel gradient buckets travel in bf16.
#  - bytes: over 30 steps of dp 2, every step's "grad" tag carries exactly
#    half the fp32 run's bytes in the same calls (all-reduce; and with
#    ZeRO-1 the reduce-scatter, while its fp32 "params" all-gather keeps its
#    bytes); the startup line says the dtype applies to the buckets only
#  - numerics, dp 2, 30 steps, against the fp32 run:
#    bf16 keeps 8 significant bits, so rounding to nearest even errs by at
#    most u = 2^-8 relative. A reduced element is a + b with a and b rounded
#    (u each) and the fp32 sum rounded once more (u): within
#    d = 2u + u^2 < 2^-7 of |a| + |b|. Step 1's loss comes before any
#    update, so it is the fp32 run's exactly. AdamW's step m / sqrt(v) does
#    not depend on the gradient's scale, so a relative error d in every
#    gradient moves each update by at most about 2d; to first order the
#    loss gap after k steps is then at most 2d x the loss already gained,
#    L_1 - L_k, plus the 1e-5 relative of summation order (test_dp.sh):
#    |L_bf16(k) - L_fp32(k)| <= 2^-6 (L_1 - L_k) + 1e-5 L_fp32(k)
#    at every step. The run must also differ from fp32 somewhere (else no
#    bf16 was sent).
#  - dp 2 x 1-D tp 2 (4 ranks, 10 steps): the grad tag halved, and the
#    1-D activation sums (embed.fwd, linear.fwd, linear.bwd, head.bwd) too;
#    every other tensor-parallel tag's bytes the fp32 run's (the loss's
#    statistics and LayerNorm's stay fp32), and the startup lines say so
#    (tests/test_comm_dtype_tp.sh: every tensor-parallel layout)
#  - ZeRO-1 with odd buckets against plain dp 2, both bf16: at 2 ranks
#    each element is round(a + b) either way, so they agree to test_dp.sh's
#    1e-5 (summation order elsewhere)
# A bad value (exit 2, one line, every rank) is test_dp_fail.sh's drill for
# train, test_pp_user.sh's for cb_dist_init and test_dp_comm.sh's for bench;
# cubist plan's figures with bf16 are test_plan.sh's.
set -u
. "$(dirname "$0")/dp_common.sh"

"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL comm dtype: prepare"; exit 1; }
common=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 8 --steps 30
        --lr 3e-3 --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --peak-gflops 100)

run() { # name, then train flags (NP ranks, 2)
    local name=$1; shift
    timeout "$TMO" "${launch[@]}" -np "${NP:-2}" "$C" train "${common[@]}" --log "$name.jsonl" "$@" \
        >"$name.out" 2>"$name.err" || { fail "$name: run failed: $(grep -v '^step' "$name.err" | head -c 300)"; return 1; }
}
run fp32 && run bf16 --comm-dtype bf16 && run fp32z --zero 1 --bucket-mb 0.0123 &&
    run bf16z --zero 1 --bucket-mb 0.0123 --comm-dtype bf16 &&
    NP=4 run fp32tp --dp 2 --tp 2 --steps 10 && NP=4 run bf16tp --dp 2 --tp 2 --steps 10 --comm-dtype bf16 ||
    { finish; exit; }

if grep -q '| comm bf16 (gradient buckets only)$' bf16.err && grep -q '| comm fp32$' fp32.err; then
    pass "startup line: $(grep -o 'comm bf16.*' bf16.err)"
else
    fail "startup line: $(grep 'data parallel' bf16.err fp32.err | tr '\n' '|')"
fi
if grep -q '| comm bf16 (gradient buckets and tensor-parallel activations; pipeline traffic fp32)$' bf16tp.err &&
    grep -q '^cubist: tensor parallel 1d over 2 ranks (layout 1d) | activation collectives in bf16 (--comm-dtype bf16)$' bf16tp.err &&
    grep -q '^cubist: tensor parallel 1d over 2 ranks (layout 1d)$' fp32tp.err; then
    pass "startup lines, dp 2 x tp 2: $(grep -o 'comm bf16.*' bf16tp.err)"
else
    fail "startup lines, dp 2 x tp 2: $(grep 'parallel' bf16tp.err fp32tp.err | tr '\n' '|')"
fi

out=$(/usr/bin/python3 - <<'EOF' 2>&1
import json
def log(n): return [json.loads(l) for l in open(n + ".jsonl") if l.strip()]
f, b, fz, bz = log("fp32"), log("bf16"), log("fp32z"), log("bf16z")
def tag(r, t, k): return r["comm_by_tag"].get(t, {}).get(k, 0)
def halved(x, y, t, steps=30):
    return len(x) == len(y) == steps and all(tag(q, t, "bytes") == 2 * tag(p, t, "bytes") > 0 and
        tag(q, t, "bytes_recv") == 2 * tag(p, t, "bytes_recv") and tag(q, t, "calls") == tag(p, t, "calls")
        for p, q in zip(x, y))
ok = halved(b, f, "grad")
print("%s bytes: grad %d B per step in bf16, fp32 %d B, %d call(s), every one of 30 steps halved exactly"
      % ("PASS" if ok else "FAIL", tag(b[-1], "grad", "bytes"), tag(f[-1], "grad", "bytes"), tag(b[-1], "grad", "calls")))
ok = halved(bz, fz, "grad") and all(tag(p, "params", "bytes") == tag(q, "params", "bytes") > 0 for p, q in zip(bz, fz))
print("%s bytes, ZeRO-1: reduce-scatter %d B in bf16 against %d, %d calls; the fp32 parameter all-gather keeps %d B"
      % ("PASS" if ok else "FAIL", tag(bz[-1], "grad", "bytes"), tag(fz[-1], "grad", "bytes"),
         tag(bz[-1], "grad", "calls"), tag(bz[-1], "params", "bytes")))
ft, bt = log("fp32tp"), log("bf16tp")
act = ["embed.fwd", "linear.fwd", "linear.bwd", "head.bwd"]
tp = sorted(set(k for r in ft for k in r["comm_by_tag"]) - {"grad", "loss", "norm"} - set(act))
ok = halved(bt, ft, "grad", 10) and all(halved(bt, ft, t, 10) for t in act) and all(
    tag(p, t, "bytes") == tag(q, t, "bytes") for p, q in zip(ft, bt) for t in tp) and len(tp) > 0
print("%s bytes, dp 2 x tp 2: grad halved, %d B against %d, every step; activation sums %s halved; %s as fp32's"
      % ("PASS" if ok else "FAIL", tag(bt[-1], "grad", "bytes"), tag(ft[-1], "grad", "bytes"), ", ".join(act),
         ", ".join(tp)))
L1, worst, ratio, bad = f[0]["loss"], 0.0, 0.0, []
for p, q in zip(f, b):
    gap, bound = abs(q["loss"] - p["loss"]), 2 ** -6 * (L1 - p["loss"]) + 1e-5 * p["loss"]
    worst = max(worst, gap)
    ratio = max(ratio, gap / bound)
    if gap > bound: bad.append(p["step"])
ok = not bad and b[0]["loss"] == f[0]["loss"] and any(p["loss"] != q["loss"] for p, q in zip(f, b))
print("%s loss, bf16 vs fp32 over 30 steps: step 1 equal, largest gap %.3g (at most %.3g of the bound "
      "2^-6 (L_1 - L_k) + 1e-5 L_k), final %.6f against %.6f%s" % ("PASS" if ok else "FAIL", worst, ratio,
      b[-1]["loss"], f[-1]["loss"], ", over at steps %s" % bad if bad else ""))
rel = max(abs(p["loss"] - q["loss"]) / abs(p["loss"]) for p, q in zip(b, bz))
print("%s loss, bf16 ZeRO-1 bucket 0.0123 MB vs bf16 dp 2: largest relative gap %.3g (tolerance 1e-5)"
      % ("PASS" if rel <= 1e-5 and len(bz) == 30 else "FAIL", rel))
EOF
)
echo "$out"
grep -q '^FAIL\|Traceback' <<<"$out" && failed=$((failed + 1))
finish
