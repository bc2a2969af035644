#!/usr/bin/env bash
# --comm-dtype bf16 for the tensor-parallel activation collectives, every
# layout: 1-D tp 2, 2-D tp 4, 3-D tp 8, and 1-D tp 2 inside a 2-stage
# pipeline; 30 steps of a 2-layer GPT each, against the same run with
# --comm-dtype fp32.
#  - startup line: the tensor line ends "| activation collectives in bf16
#    (--comm-dtype bf16)"; the fp32 run's does not
#  - bytes: every tag makes the same calls as in fp32. 1-D: its four
#    activation sums (embed.fwd, linear.fwd, linear.bwd, head.bwd) carry
#    exactly half the bytes at every step. 2-D and 3-D: the tags that mix
#    activations with fp32 weights (the weight panels and gathers, the
#    weight-gradient reductions stay fp32) carry fewer bytes than in fp32
#    and at least half of them. Tags of statistics and parameter gradients
#    (norm.*, bias.bwd, the loss's) keep their fp32 bytes. That each bf16
#    message is exactly half its fp32 form is test_comm's check.
#  - loss, every step: a rounded sum is within d = 2u + u^2 < 2^-7 of
#    |a| + |b| (u = 2^-8; a gather or broadcast errs by u), so the
#    activations on the wire are off by at most 2^-7 relative. Backward:
#    the activation gradients are off by as much, so each AdamW update by
#    about 2^-6 (test_comm_dtype.sh's argument for the gradient buckets),
#    at most 2^-6 (L_1 - L_k) on the loss after k steps. Forward: the loss
#    is recomputed from activations off by at most 2^-7 relative; to first
#    order, with unit elasticity of the loss in them, that moves it by at
#    most 2^-7 L_k. So |L_bf16(k) - L_fp32(k)| <= 2^-6 (L_1 - L_k) + 2^-7 L_k.
#    The runs must also differ somewhere (else nothing travelled in bf16).
#    The collectives' own values are held exactly (2 ranks) or to a
#    derived bound (more) by test_comm.
set -u
. "$(dirname "$0")/dp_common.sh"

"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL comm dtype tp: prepare"; exit 1; }
common=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 8 --steps 30
        --lr 3e-3 --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --peak-gflops 100)

run() { # name, ranks, then train flags
    local name=$1 np=$2; shift 2
    timeout "$TMO" "${launch[@]}" -np "$np" "$C" train "${common[@]}" --log "$name.jsonl" "$@" \
        >"$name.out" 2>"$name.err" || { fail "$name: run failed: $(grep -v '^step' "$name.err" | head -c 300)"; return 1; }
}
cases=("1d 2 --tp 2" "2d 4 --tp 4 --tp-mode 2d" "3d 8 --tp 8 --tp-mode 3d" "pp 4 --pp 2 --tp 2")
for c in "${cases[@]}"; do
    set -- $c
    name=$1 np=$2; shift 2
    run "f$name" "$np" "$@" && run "b$name" "$np" "$@" --comm-dtype bf16 || { finish; exit; }
    if grep -q '| activation collectives in bf16 (--comm-dtype bf16)$' "b$name.err" &&
        ! grep -q 'activation collectives' "f$name.err"; then
        pass "$name: startup line: $(grep 'activation collectives' "b$name.err" | head -1)"
    else
        fail "$name: startup line: $(grep 'parallel\|pipeline' "b$name.err" | tr '\n' '|')"
    fi
done

out=$(/usr/bin/python3 - <<'EOF' 2>&1
import json
def log(n): return [json.loads(l) for l in open(n + ".jsonl") if l.strip()]
def tag(r, t, k): return r["comm_by_tag"].get(t, {}).get(k, 0)
act = ["embed.fwd", "embed.bwd", "linear.fwd", "linear.bwd", "head.fwd", "head.bwd"]
sums = ["embed.fwd", "linear.fwd", "linear.bwd", "head.bwd"] # 1-D's, all activation
half, mixed = {"1d": sums, "pp": sums}, {"2d": act, "3d": act}
for name in ["1d", "2d", "3d", "pp"]:
    f, b = log("f" + name), log("b" + name)
    tags = sorted(set(k for r in f + b for k in r["comm_by_tag"]))
    bad = []
    for p, q in zip(f, b):
        for t in tags:
            x, y = tag(p, t, "bytes"), tag(q, t, "bytes")
            if tag(p, t, "calls") != tag(q, t, "calls"): bad.append("%s calls" % t)
            elif t in half.get(name, []) and x > 0: bad += [] if x == 2 * y else ["%s %d not half of %d" % (t, y, x)]
            elif t in mixed.get(name, []) and x > 0: bad += [] if 2 * y >= x > y else ["%s %d vs %d" % (t, y, x)]
            elif x != y: bad.append("%s %d != %d" % (t, y, x))
    moved = sorted(t for t in tags if tag(b[-1], t, "bytes") != tag(f[-1], t, "bytes"))
    print("%s %s bytes over %d steps: calls equal; in bf16: %s; %s" % ("FAIL" if bad or len(f) != 30 or len(b) != 30 else "PASS",
          name, len(b), ", ".join("%s %d/%d" % (t, tag(b[-1], t, "bytes"), tag(f[-1], t, "bytes")) for t in moved),
          "first mismatch: " + bad[0] if bad else "every other tag as fp32's"))
    L1, worst, ratio, over = f[0]["loss"], 0.0, 0.0, []
    for p, q in zip(f, b):
        gap, bound = abs(q["loss"] - p["loss"]), 2 ** -6 * (L1 - p["loss"]) + 2 ** -7 * p["loss"]
        worst, ratio = max(worst, gap / p["loss"]), max(ratio, gap / bound)
        if gap > bound: over.append(p["step"])
    ok = not over and any(p["loss"] != q["loss"] for p, q in zip(f, b))
    print("%s %s loss, bf16 vs fp32 wire over 30 steps: largest relative gap %.3g (at most %.3g of the bound "
          "2^-6 (L_1 - L_k) + 2^-7 L_k), final %.6f against %.6f%s" % ("PASS" if ok else "FAIL", name, worst, ratio,
          b[-1]["loss"], f[-1]["loss"], ", over at steps %s" % over if over else ""))
EOF
)
echo "$out"
grep -q '^FAIL\|Traceback' <<<"$out" && failed=$((failed + 1))
finish
