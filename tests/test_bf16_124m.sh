#!/usr/bin/env bash
# --precision bf16 trains like fp32 at GPT-2 124M's shape: 12 layers,
# d-model 768, 12 heads (85M parameters with the demo corpus's byte
# vocabulary), 200 steps of the KJV demo corpus at T=32, B=2 (fp32 and bf16
# side by side, one thread each, on the same batches).
# The learning rate is 2e-4 (warm-up 20, cosine to 2e-5), not GPT-2
# small's 6e-4: at 6e-4 with 64 tokens a step, fp32 itself spikes (a
# batch at step 24 gives loss 8.79 in both precisions, fp32's gradient
# norm reaches 36.7 at step 33) and after such a spike the two runs part
# (bf16's norm 69.6 at step 26, loss 6.60 against 3.34 at step 35):
# the trajectories of an unstable run separate whatever the rounding.
# Tolerances, fp32 against bf16:
#  - every step's loss within 3%, the mean over the last 20 steps within
#    1%, the validation loss after step 200 within 1%;
#  - and bf16 must differ from fp32 somewhere (a run that ignored the flag
#    would pass the bounds).
# Why these hold: each product rounds its operands to 8 significant bits
# (2^-9 relative) and sums in fp32, so a step's gradient is fp32's up to a
# relative noise of about 2^-8 (measured: losses equal to 4 digits over
# the first 23 steps above), far below a B=2 step's batch-to-batch
# movement of its loss; the runs share their batches, so on a stable run
# they stay within that noise. Measured: per step at most 1.36e-2 (step
# 22, where both gradient norms spike to 335-356; median 1.3e-4), last 20 steps 6.7e-5,
# validation 2.44698 against 2.44694 (1.9e-5).
# Cost: 2 x 200 steps of 85M parameters on one thread each, side by side:
# 249 s of CPU time in all (2026-11-27, under a load average of 10-20), over
# two minutes of wall time on 2 quiet cores: the suite's longest test, so
# tests/run.sh starts it first.
set -u
. "$(dirname "$0")/dp_common.sh"
kjv_tokens "bf16 124m"
common=(--data train.bin --val-data val.bin --layers 12 --d-model 768 --heads 12 --seq-len 32
        --batch 2 --steps 200 --lr 2e-4 --min-lr 2e-5 --warmup 20 --eval-every 200
        --eval-batches 10 --peak-gflops 100 --threads 1 --quiet)
for p in fp32 bf16; do # side by side, one thread each
    "$C" train "${common[@]}" --precision $p --log $p.jsonl 2>$p.err &
done
for p in fp32 bf16; do
    wait -n || { echo "FAIL bf16 124m: a run failed: $(head -c 300 fp32.err bf16.err)"; exit 1; }
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
