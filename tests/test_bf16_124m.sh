#!/usr/bin/env bash
# --precision bf16 trains like fp32 at GPT-2 124M's shape: 12 layers,
# d-model 768, 12 heads (85M parameters with the demo corpus's byte
# vocabulary), 200 steps of the KJV demo corpus at T=32, B=2, the
# learning rate of GPT-2 small (6e-4, warm-up 20, cosine to 6e-5).
# Tolerances, fp32 against bf16 on the same batches:
#  - every step's loss within 3%, the mean over the last 20 steps within
#    1%, the validation loss after step 200 within 1%;
#  - and bf16 must differ from fp32 somewhere (a run that ignored the flag
#    would pass the bounds).
# Why these hold: each product rounds its operands to 8 significant bits
# (2^-9 relative) and sums in fp32, so a step's gradient is fp32's up to a
# relative noise of about 2^-8, which AdamW's normalisation keeps from
# growing with the depth; a single B=2 step's loss moves by several percent
# from batch to batch, so the trajectories stay within the minibatch noise
# while the runs share their batches. The small model's measurements
# (test_bf16_train) are 0.5% per step and 0.01% at the end; this shape
# measured the figures the check prints (docs/precision.md).
# Cost: 2 x 200 steps of 85M parameters, about 2 minutes on 2 quiet cores.
set -u
. "$(dirname "$0")/dp_common.sh"
command -v bible >/dev/null || { echo "FAIL bf16 124m: the bible command (bible-kjv, make deps) is missing"; exit 1; }
bible gen1:1-rev22:21 > kjv.txt
"$C" prepare --input kjv.txt --output train.bin --val-output val.bin --val-fraction 0.02 >/dev/null ||
    { echo "FAIL bf16 124m: prepare"; exit 1; }
common=(--data train.bin --val-data val.bin --layers 12 --d-model 768 --heads 12 --seq-len 32
        --batch 2 --steps 200 --lr 6e-4 --min-lr 6e-5 --warmup 20 --eval-every 200
        --eval-batches 10 --peak-gflops 100 --threads 2 --quiet)
for p in fp32 bf16; do
    "$C" train "${common[@]}" --precision $p --log $p.jsonl 2>$p.err ||
        { echo "FAIL bf16 124m: $p run: $(head -c 300 $p.err)"; exit 1; }
done
/usr/bin/python3 - <<'PY' && pass "124M-shaped bf16 tracks fp32 over 200 steps (above)" || fail "124M-shaped bf16 vs fp32 (above)"
import json, sys
def rows(p): return [json.loads(l) for l in open(p) if l.strip()]
f, b = rows("fp32.jsonl"), rows("bf16.jsonl")
rel = [abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(f, b)]
tail = lambda r: sum(x["loss"] for x in r[-20:]) / 20
end = abs(tail(f) - tail(b)) / tail(f)
vf = [x["val_loss"] for x in f if "val_loss" in x][-1]
vb = [x["val_loss"] for x in b if "val_loss" in x][-1]
val = abs(vf - vb) / vf
print("# losses %.4f -> %.4f (fp32); per-step max rel %.2e at step %d (tol 3e-2), last-20 mean %.2e "
      "(tol 1e-2), val %.5f vs %.5f rel %.2e (tol 1e-2)"
      % (f[0]["loss"], tail(f), max(rel), rel.index(max(rel)) + 1, end, vb, vf, val))
ok = len(f) == len(b) == 200 and max(rel) <= 3e-2 and end <= 1e-2 and val <= 1e-2 and max(rel) > 0
sys.exit(not ok)
PY
finish
