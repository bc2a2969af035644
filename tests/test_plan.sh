#!/usr/bin/env bash
# `cubist plan`'s exact figures equal the counters of real runs, and its
# inputs are checked:
# - tensor layouts of tests/test_tp_compare.sh (1d:8, 2d:4, 3d:8 gathered and
#   shard; a padded vocabulary and position rows): the bytes sent, calls,
#   parameter + gradient bytes and activation + workspace bytes (of the GPT
#   graph that bench --tp-step runs) the planner predicts equal `bench
#   --tp-step`'s maximum over ranks, exactly (==);
# - dp 2 (with and without ZeRO-1, --comm-dtype fp32 and bf16;
#   --embed-grad sparse with and without ZeRO-1; --embed-grad split, whose all-reduced rows are the data's
#   union of tokens: the prediction is its bound, and the measured bytes
#   fall short of it by whole rows), tp 1d 2, pp 2 (1f1b, 4 micro-batches),
#   one rank with --recompute block, and --comm-dtype bf16 under 1-D tp 2,
#   2-D tp 4 (rank 0 on the diagonal: the plan's off-diagonal maximum less
#   the transpose swaps) and 3-D tp 8 (the activation collectives in bf16)
#   under `cubist train`: rank 0's bytes and calls of the groups the model
#   covers (gradient buckets and loss, tensor tags, pipeline activations and
#   gradients), the graph engine's planned activations and the AdamW state,
#   exactly;
# - per pipeline stage, the activations the engine plans (pp 2 and 4,
#   GPipe and 1F1B, recompute, pp 2 x tp 1d 2), the plan's stage
#   boundaries given to train (--partition), exactly;
# - calibration on a fake timer (CUBIST_PLAN_FAKE) writes the rates it was
#   fed (peak, the efficiency knee, bandwidth, attention by head size and
#   by sequence length, the element-wise
#   kernels, alpha and beta of every collective) to 1e-5 (the file keeps 6 significant digits);
#   with --precision bf16 also the bf16 rates (device.bf16, the weights' reorder
#   rate among them), and a plan in
#   bf16 on them runs its GEMMs and attention at their ratio to fp32's;
# - --precision bf16 under `cubist train` (one rank at T 16 and T 256, dp 2,
#   tp 1d 2, 2d 4, 3d 8; BERT, the translation model and NCF on one rank
#   and under 1-D, 2-D or 3-D;
#   with CB_BF16_PACK=1 the weights' copies in oneDNN's layout that CPUs
#   without AMX keep, at 2048 rows a call and at 4 micro-batches of 512
#   rows): the engine's planned activations and the bf16
#   table's weight copies and operand staging, exactly; --precision bf16 on a cluster without bf16
#   rates, an unknown precision: exit 2, one line;
# - a cluster file with a missing, negative or non-numeric field, or bad
#   JSON: exit 2 and one line naming the field; every preset parses and
#   names a source for each of its fields;
# - an interleaved pipeline (2 chunks per stage): every stage's planned
#   activations, exactly;
# - BERT, RoBERTa, NMT and NCF planned from their declared graph: rank 0's
#   bytes and calls, the activation plan (per stage under a pipeline) and
#   the AdamW state under `cubist train --model X` (dp 2, ZeRO-1, pp 2,
#   tp 1d 2, 2d 4 (rank 0 on the diagonal, as above) and 3d 8 of BERT and
#   NMT, BERT pp 2 x tp 2d 4 (rank 0's tensor traffic: the first stage's), NMT dp 2 --embed-grad sparse and split (split: its bound, as
#   above), NCF tp 2d 4 and pp 2, one process), exactly; their bad flags exit
#   2 with one line;
# - --scaling (the translation model, this machine's fake calibration and
#   Stampede2): efficiencies in (0, 1], weak >= strong at equal ranks, the
#   sparse path's weak efficiency falling with ranks;
# - --reproduce prints the papers' figures beside the predictions; --plot
#   writes a PNG.
set -u
. "$(dirname "$0")/dp_common.sh"
P() { "$C" plan "$@"; }
small=(--layers 1 --d-model 128 --heads 8 --batch 16 --seq-len 63 --vocab 250)

# ---------------------------------------------------------------- tensor counts
tpcase() { # mode P [shard]
    local mode=$1 np=$2 save=${3:-gathered}
    local name="tp $1:$2 $save"
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" bench --tp-step --tp "$np" --tp-mode "$mode" \
            "${small[@]}" --steps 2 --tp3d-save "$save" >"tp.out" 2>"tp.err"; then
        fail "$name: bench --tp-step failed: $(head -c 300 tp.err)"; return
    fi
    P --cluster "$ROOT/clusters/h100.json" --devices "$np" --dp 1 --pp 1 --tp "$np" --tp-mode "$mode" \
        --micro-batches 1 --tp3d-save "$save" "${small[@]}" --top 0 --json >plan.json 2>plan.err \
        || { fail "$name: plan failed: $(head -c 300 plan.err)"; return; }
    /usr/bin/python3 - "$name" <<'PY' || failed=$((failed + 1))
import json, sys
m = json.loads(open("tp.out").read().split("tp-step ", 1)[1])["max"]["measured"]
ls = [l for l in json.load(open("plan.json"))["layouts"] if not l["recompute"] and not l["zero"]]
p = ls[0]
pairs = [("sent_bytes", p["tp_bytes"]), ("calls", p["tp_calls"]),
         ("param_bytes", p["tp_param_bytes"]),
         ("act_bytes", p["tp_act_model_bytes"] + p["tp_act_scratch_bytes"])]
bad = [k for k, v in pairs if m[k] != v]
print("%s %s: measured/predicted %s" % ("FAIL" if bad else "PASS", sys.argv[1],
      ", ".join("%s %.17g/%.17g" % (k, m[k], v) for k, v in pairs)))
sys.exit(1 if bad else 0)
PY
}
tpcase 1d 8
tpcase 2d 4
tpcase 3d 8
tpcase 3d 8 shard

# ---------------------------------------------------------------- train counters
"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL plan: prepare"; exit 1; }
tiny=(--layers 2 --d-model 32 --heads 4 --seq-len 16 --vocab 257)
trcase() { # name np M plan-filter... -- train flags...
    local name=$1 np=$2 M=$3; shift 3
    local pf=() tf=()
    while [ "$1" != -- ]; do pf+=("$1"); shift; done; shift; tf=("$@")
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" train --data train.bin "${tiny[@]}" --batch 8 \
            --steps 2 --quiet --embed-grad dense --log tr.jsonl "${tf[@]}" 2>tr.err; then
        fail "$name: train failed: $(head -c 300 tr.err)"; return
    fi
    P --cluster "$ROOT/clusters/h100.json" --devices "$np" "${tiny[@]}" --batch $((8 * M)) \
        --micro-batches "$M" "${pf[@]}" --top 0 --json >plan.json 2>plan.err \
        || { fail "$name: plan failed: $(head -c 300 plan.err)"; return; }
    /usr/bin/python3 - "$name" <<'PY' || failed=$((failed + 1))
import json, sys
name = sys.argv[1]
log = [json.loads(l) for l in open("tr.jsonl")][-1]
zero, rec = "zero" in name, "recompute" in name
p = [l for l in json.load(open("plan.json"))["layouts"] if l["recompute"] == rec and l["zero"] == zero][0]
tags = log.get("comm_by_tag", {})
skip = {"norm", "pp.tie", "pp.stats"}  # not in the model: tiny bookkeeping
mb = sum(t["bytes"] for k, t in tags.items() if k not in skip)
mc = sum(t["calls"] for k, t in tags.items() if k not in skip)
# 2-D: the plan gives the off-diagonal ranks' traffic (the maximum); rank 0
# sits on the diagonal, whose embedding block needs no transpose swap: two
# swaps of N C / q^2 floats (isend + irecv each) fewer, N = 8 x 16 tokens,
# C 32, q 2 (tiny)
diag = (8 * 128 * 32 / 4, 4) if "2d" in name else (0, 0)
pairs = [("bytes", mb, p["tp_bytes"] + p["pp_bytes"] + p["dp_bytes"] - diag[0]),
         ("calls", mc, p["tp_calls"] + p["pp_calls"] + p["dp_calls"] - diag[1])]
if p["pp"] == 1:
    pairs.append(("act_bytes", log["act_bytes"], p["mem_act"]))
    pairs.append(("opt_state_bytes", log["opt_state_bytes"], p["mem_opt"]))
bad = [k for k, a, b in pairs if a != b]
if "split" in name:
    # the union of the ranks' tokens is the data's: the model takes its
    # bound min(V, p x tokens) rows; a real step all-reduces whole rows fewer
    row = 2 * (p["dp"] - 1) / p["dp"] * 4 * 32  # one row of d-model 32 (tiny)
    short = pairs[0][2] - pairs[0][1]
    bad = [k for k in bad if k != "bytes"] + ([] if 0 <= short and short % row == 0 else ["bytes"])
print("%s %s: measured/predicted %s" % ("FAIL" if bad else "PASS", name,
      ", ".join("%s %.17g/%.17g" % (k, a, b) for k, a, b in pairs)))
sys.exit(1 if bad else 0)
PY
}
trcase "dp 2"          2 1 --dp 2 -- --dp 2
trcase "dp 2 zero"     2 1 --dp 2 -- --dp 2 --zero 1
trcase "dp 2 sparse"   2 1 --dp 2 --embed-grad sparse -- --dp 2 --embed-grad sparse
trcase "dp 2 zero sparse" 2 1 --dp 2 --embed-grad sparse -- --dp 2 --zero 1 --embed-grad sparse
trcase "dp 2 split"    2 1 --dp 2 --embed-grad split -- --dp 2 --embed-grad split
trcase "dp 2 bf16"     2 1 --dp 2 --comm-dtype bf16 -- --dp 2 --comm-dtype bf16
trcase "dp 2 zero bf16" 2 1 --dp 2 --comm-dtype bf16 -- --dp 2 --zero 1 --comm-dtype bf16
trcase "dp 2 zero sparse bf16" 2 1 --dp 2 --embed-grad sparse --comm-dtype bf16 -- --dp 2 --zero 1 --embed-grad sparse --comm-dtype bf16
trcase "tp 1d 2"       2 1 --tp 2 --tp-mode 1d -- --tp 2 --tp-mode 1d
trcase "tp 1d 2 bf16"  2 1 --tp 2 --tp-mode 1d --comm-dtype bf16 -- --tp 2 --tp-mode 1d --comm-dtype bf16
trcase "tp 2d 4 bf16"  4 1 --tp 4 --tp-mode 2d --comm-dtype bf16 -- --tp 4 --tp-mode 2d --comm-dtype bf16
trcase "tp 3d 8 bf16"  8 1 --tp 8 --tp-mode 3d --comm-dtype bf16 -- --tp 8 --tp-mode 3d --comm-dtype bf16
trcase "pp 2 1f1b M4"  2 4 --pp 2 --schedule 1f1b -- --pp 2 --schedule 1f1b --micro-batches 4
trcase "1 recompute"   1 1 -- --recompute block

# --precision bf16 (the h100 preset's bf16 rates; one thread, the preset's
# device): the engine's planned activations (at T 256 causal attention runs
# fused and keeps each query block's keys only) and what the bf16 table
# holds after the steps (the log's bf16_copies_bytes + bf16_staging_bytes:
# weight copies and operand staging) equal the plan's mem_act and
# mem_bf16, exactly, on every tensor mode (2-D and 3-D keep no weight
# copies and stage every weight panel they receive; the vocabulary of 257
# pads to 258 and 260 there)
bfcase() { # name np T plan-filter... -- train flags...
    local name=$1 np=$2 T=$3; shift 3
    local pf=() tf=() sz=(--layers 2 --d-model 32 --heads 4 --seq-len "$T" --vocab 257)
    while [ "$1" != -- ]; do pf+=("$1"); shift; done; shift; tf=("$@")
    if ! OMP_NUM_THREADS=1 timeout "$TMO" "${launch[@]}" -np "$np" "$C" train --data train.bin \
            "${sz[@]}" --batch 8 --steps 2 --quiet --threads 1 --precision bf16 --embed-grad dense \
            --log tr.jsonl "${tf[@]}" 2>tr.err; then
        fail "$name: train failed: $(head -c 300 tr.err)"; return
    fi
    P --cluster "$ROOT/clusters/h100.json" --devices "$np" "${sz[@]}" --batch 8 --micro-batches 1 \
        --precision bf16 "${pf[@]}" --top 0 --json >plan.json 2>plan.err \
        || { fail "$name: plan failed: $(head -c 300 plan.err)"; return; }
    /usr/bin/python3 - "$name" "$T" <<'PY' || failed=$((failed + 1))
import json, sys
name, T = sys.argv[1], int(sys.argv[2])
log = [json.loads(l) for l in open("tr.jsonl")][-1]
p = [l for l in json.load(open("plan.json"))["layouts"] if not l["recompute"] and not l["zero"]][0]
held = log["bf16_copies_bytes"] + log["bf16_staging_bytes"]
pairs = [("act_bytes", log["act_bytes"], p["mem_act"]), ("bf16 held", held, p["mem_bf16"])]
bad = [k for k, a, b in pairs if a != b]
# the weights' reorder after each update (docs/plan.md): 2 x bf16_packed
# bytes at the update's rate, which opt_s gives with its own bytes (wpe's
# T x 32 floats cleared, a 1/tp share under 2-D and 3-D; 28 a parameter,
# 4 more for the norm and 8 for the scale on more ranks than one)
ranks, dp = p["dp"] * p["pp"] * p["tp"], p["dp"]
upd = 4 * T * 32 / (1 if p["mode"] == "1d" else p["tp"]) + \
    ((4 if ranks > 1 else 0) + 28 + (8 if dp > 1 else 0)) * p["mem_params"] / 4
want = p["opt_s"] * 2 * p["bf16_packed"] / upd
forced = "oneDNN's layout" in name  # CB_BF16_PACK=1: the copies are kept
if abs(p["pack_s"] - want) > 2e-5 * want or (forced and p["bf16_packed"] <= 0):
    bad.append("pack_s")
print("%s %s: measured/predicted %s; reorder %.6g s of %.17g bytes (want %.6g)" % (
      "FAIL" if bad else "PASS", name,
      ", ".join("%s %.17g/%.17g" % (k, a, b) for k, a, b in pairs), p["pack_s"], p["bf16_packed"], want))
sys.exit(1 if bad else 0)
PY
}
# the first with an empty cache: train measures the bf16 MFU peak at its
# start, and the peak's 2048^2 operands must not stay in the table's
# staging (they did until 2026-11-28: 16,949,248 bytes held against 188,672)
mkdir -p empty-cache
XDG_CACHE_HOME=$PWD/empty-cache bfcase "bf16 1 rank T 16, the MFU peak measured at its start" 1 16 --
bfcase "bf16 1 rank T 256" 1 256 --
bfcase "bf16 dp 2 T 256"   2 256 --dp 2 -- --dp 2
bfcase "bf16 tp 1d 2 T 256" 2 256 --tp 2 --tp-mode 1d -- --tp 2 --tp-mode 1d
bfcase "bf16 tp 2d 4 T 256" 4 256 --tp 4 --tp-mode 2d -- --tp 4 --tp-mode 2d
bfcase "bf16 tp 3d 8 T 256" 8 256 --tp 8 --tp-mode 3d -- --tp 8 --tp-mode 3d
# two micro-batches: the second's weight-gradient products accumulate,
# which on a CPU without AMX stages blocks of the product in the slot that
# attention's P uses (gemm_dw); at T 16 the head's block (257 x 32 floats)
# is the larger, so the staging grows by it (the later --batch and
# --micro-batches override bfcase's)
bfcase "bf16 1 rank T 16, 2 micro-batches" 1 16 --batch 16 --micro-batches 2 -- --grad-accum 2
bfcase "bf16 tp 2d 4 T 16, 2 micro-batches" 4 16 --tp 4 --tp-mode 2d --batch 16 --micro-batches 2 -- --tp 4 --tp-mode 2d --grad-accum 2
# a CPU without AMX keeps the weights of products of 1024 rows or more in
# oneDNN's layout too (CB_BF16_PACK=1 does it here, for train and plan):
# the 2048 rows of T 256 are such products
CB_BF16_PACK=1 bfcase "bf16 1 rank T 256, weights in oneDNN's layout" 1 256 --
CB_BF16_PACK=1 bfcase "bf16 tp 1d 2 T 256, weights in oneDNN's layout" 2 256 --tp 2 --tp-mode 1d -- --tp 2 --tp-mode 1d
# the rows are those of an update: 4 micro-batches of 512 rows read each
# weight for 2048 rows between two updates, so it is kept in oneDNN's
# layout too (cubist train tells the table its micro-batches)
CB_BF16_PACK=1 bfcase "bf16 1 rank T 64, 4 micro-batches of 512 rows: weights in oneDNN's layout" 1 64 --batch 32 --micro-batches 4 -- --grad-accum 4
CB_BF16_PACK=1 bfcase "bf16 tp 1d 2 T 64, 4 micro-batches of 512 rows: weights in oneDNN's layout" 2 64 --tp 2 --tp-mode 1d --batch 32 --micro-batches 4 -- --tp 2 --tp-mode 1d --grad-accum 4

# ---------------------------------------------------------------- pipeline memory per stage
# the plan's stage boundaries given to train (--partition), so both split
# alike; every stage's planned activations (the log's pp_act_bytes) ==
ppcase() { # name np pp tp M schedule recompute
    local name=$1 np=$2 pp=$3 tp=$4 M=$5 sch=$6 rec=$7
    local four=(--layers 4 --d-model 32 --heads 4 --seq-len 16 --vocab 257)
    P --cluster "$ROOT/clusters/h100.json" --devices "$np" "${four[@]}" --batch $((8 * M)) \
        --micro-batches "$M" --pp "$pp" --tp "$tp" --tp-mode 1d --schedule "$sch" --top 0 --json \
        >plan.json 2>plan.err || { fail "$name: plan failed: $(head -c 300 plan.err)"; return; }
    local bounds
    bounds=$(/usr/bin/python3 -c "
import json; l = [l for l in json.load(open('plan.json'))['layouts'] if l['recompute'] == $rec and not l['zero']][0]
print(','.join(map(str, l['stage_bound'])))")
    local rf=(); [ "$rec" = 1 ] && rf=(--recompute block)
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" train --data train.bin "${four[@]}" --batch 8 \
            --steps 2 --quiet --embed-grad dense --log tr.jsonl --pp "$pp" --tp "$tp" --schedule "$sch" \
            --micro-batches "$M" --grad-accum "$M" --partition "$bounds" "${rf[@]}" 2>tr.err; then
        fail "$name: train failed: $(head -c 300 tr.err)"; return
    fi
    /usr/bin/python3 - "$name" "$rec" <<'PY' || failed=$((failed + 1))
import json, sys
name, rec = sys.argv[1], int(sys.argv[2])
log = [json.loads(l) for l in open("tr.jsonl")][-1]
p = [l for l in json.load(open("plan.json"))["layouts"] if l["recompute"] == rec and not l["zero"]][0]
m, q = log["pp_act_bytes"], p["stage_act_bytes"]
ok = m == q and p["mem_act"] == max(q)
print("%s %s (stages %s): planned activations per stage measured %s, predicted %s" %
      ("PASS" if ok else "FAIL", name, p["stage_bound"], m, q))
sys.exit(0 if ok else 1)
PY
}
ppcase "pp 2 1f1b M4"           2 2 1 4 1f1b 0
ppcase "pp 2 gpipe M4"          2 2 1 4 gpipe 0
ppcase "pp 4 1f1b M8"           4 4 1 8 1f1b 0
ppcase "pp 2 1f1b M4 recompute" 2 2 1 4 1f1b 1
ppcase "pp 2 x tp 1d 2 1f1b M4" 4 2 2 4 1f1b 0

# interleaved (2 chunks per rank): every stage's plan, the engine's
# partition from FLOP counts (--no-profile) on both sides
ilcase() { # name np M
    local name=$1 np=$2 M=$3 four=(--layers 4 --d-model 32 --heads 4 --seq-len 16 --vocab 257)
    P --cluster "$ROOT/clusters/h100.json" --devices "$np" "${four[@]}" --batch $((8 * M)) \
        --micro-batches "$M" --pp "$np" --schedule interleaved --top 0 --json >plan.json 2>plan.err \
        || { fail "$name: plan failed: $(head -c 300 plan.err)"; return; }
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" train --data train.bin "${four[@]}" --batch 8 \
            --steps 2 --quiet --log tr.jsonl --pp "$np" --schedule interleaved --virtual-stages 2 \
            --micro-batches "$M" --grad-accum "$M" --no-profile 2>tr.err; then
        fail "$name: train failed: $(head -c 300 tr.err)"; return
    fi
    /usr/bin/python3 - "$name" <<'PY' || failed=$((failed + 1))
import json, sys
log = [json.loads(l) for l in open("tr.jsonl")][-1]
p = [l for l in json.load(open("plan.json"))["layouts"] if not l["recompute"] and not l["zero"] and l["v"] == 2][0]
m, q = log["pp_act_bytes"], p["stage_act_bytes"]
ok = m == q and p["mem_act"] == max(q)
print("%s %s: planned activations per stage measured %s, predicted %s" % ("PASS" if ok else "FAIL", sys.argv[1], m, q))
sys.exit(0 if ok else 1)
PY
}
ilcase "pp 2 interleaved v2 M4" 2 4

# ---------------------------------------------------------------- the graph models
# BERT, the translation model and NCF planned from their declared graphs:
# rank 0's bytes and calls (gradient buckets, the loss and its counts,
# pipeline messages), the activation plan (per stage under a pipeline) and
# the AdamW state equal a real run's, exactly. Their --batch is the step's.
/usr/bin/python3 - <<'PY'
import random
r = random.Random(1)
w = "the a of and to in he she it is was god lord king man land house son".split()
with open("pairs.tsv", "w") as f:
    for i in range(200):
        s = " ".join(r.choice(w) for _ in range(r.randint(1, 5)))
        f.write(s + "\t" + s[::-1] + "\n")
r = random.Random(3)
with open("inter.tsv", "w") as f:
    seen = set()
    for u in range(50):
        for k in range(6):
            x = "u%d\ti%d" % (u, r.randrange(40))
            if x not in seen: seen.add(x), f.write(x + "\n")
PY
"$C" prepare --pairs pairs.tsv --output pairs.bin --context 40 >/dev/null \
    && "$C" prepare --interactions inter.tsv --output inter.bin >/dev/null \
    || { echo "FAIL plan: prepare (graph models)"; exit 1; }
nu=$(cut -f1 inter.tsv | sort -u | wc -l); ni=$(cut -f2 inter.tsv | sort -u | wc -l)
bertf=(--layers 2 --d-model 32 --heads 4 --seq-len 16)
nmtf=(--layers 1 --dec-layers 1 --d-model 32 --heads 4 --ffn 64 --seq-len 40)
ncff=(--factors 8 --mlp 32,16,8)
gcase() { # name np model "plan flags" -- train flags... (DIAG="bytes calls": see below)
    local name=$1 np=$2 model=$3 pf=($4); shift 5
    P --cluster "$ROOT/clusters/h100.json" --devices "$np" --model "$model" "${pf[@]}" --top 0 \
        --json >plan.json 2>plan.err || { fail "$name: plan failed: $(head -c 300 plan.err)"; return; }
    if ! timeout "$TMO" "${launch[@]}" -np "$np" "$C" train --model "$model" --steps 2 --quiet \
            --log tr.jsonl "$@" >/dev/null 2>tr.err; then
        fail "$name: train failed: $(head -c 300 tr.err)"; return
    fi
    /usr/bin/python3 - "$name" ${DIAG:-0 0} <<'PY' || failed=$((failed + 1))
import json, sys
name = sys.argv[1]
# 2-D: the plan gives the off-diagonal ranks' traffic (the maximum); rank 0
# sits on the diagonal, whose embedding needs no transpose swaps: per
# embedding node two swaps of N C / q^2 floats (isend + irecv each) fewer
diag = (float(sys.argv[2]), float(sys.argv[3]))
log = [json.loads(l) for l in open("tr.jsonl")][-1]
zero = "zero" in name
p = [l for l in json.load(open("plan.json"))["layouts"] if not l["recompute"] and l["zero"] == zero][0]
tags = log.get("comm_by_tag", {})
skip = {"norm", "pp.tie", "pp.stats"}
mb = sum(t["bytes"] for k, t in tags.items() if k not in skip)
mc = sum(t["calls"] for k, t in tags.items() if k not in skip)
# a pipeline with tensor parallelism: rank 0's tensor traffic is the first
# stage's (the plan's tp_bytes is the slowest stage's)
tb, tc = (p["stage_tp_bytes"][0], p["stage_tp_calls"][0]) if p["stage_tp_calls"] else (p["tp_bytes"], p["tp_calls"])
pairs = [("bytes", mb, tb + p["pp_bytes"] + p["dp_bytes"] - diag[0]),
         ("calls", mc, tc + p["pp_calls"] + p["dp_calls"] - diag[1])]
if p["pp"] == 1:  # the log's AdamW state is rank 0's, the plan's the largest stage's
    pairs.append(("act_bytes", log["act_bytes"], p["mem_act"]))
    pairs.append(("opt_state_bytes", log["opt_state_bytes"], p["mem_opt"]))
else:
    pairs.append(("pp_act_bytes", log["pp_act_bytes"], p["stage_act_bytes"]))
bad = [k for k, a, b in pairs if a != b]
if "split" in name:  # the union of tokens' bound, as above: whole rows of d-model 32 short
    row = 2 * (p["dp"] - 1) / p["dp"] * 4 * 32
    short = pairs[0][2] - pairs[0][1]
    bad = [k for k in bad if k != "bytes"] + ([] if 0 <= short and short % row == 0 else ["bytes"])
print("%s %s: measured/predicted %s" % ("FAIL" if bad else "PASS", name,
      ", ".join("%s %s/%s" % (k, a, b) for k, a, b in pairs)))
sys.exit(1 if bad else 0)
PY
}
# bert's vocabulary: the byte tokenizer's 256 + 4 specials
gcase "bert dp 2" 2 bert "${bertf[*]} --vocab 260 --batch 8 --dp 2 --micro-batches 1" -- \
    --data train.bin "${bertf[@]}" --batch 8 --dp 2
gcase "roberta dp 2 zero" 2 roberta "${bertf[*]} --vocab 260 --batch 8 --dp 2 --micro-batches 1" -- \
    --data train.bin "${bertf[@]}" --batch 8 --dp 2 --zero 1
gcase "bert pp 2 1f1b M4" 2 bert "${bertf[*]} --vocab 260 --batch 8 --pp 2 --schedule 1f1b --micro-batches 4" -- \
    --data train.bin "${bertf[@]}" --batch 8 --pp 2 --schedule 1f1b --micro-batches 4
gcase "bert tp 1d 2" 2 bert "${bertf[*]} --vocab 260 --batch 8 --tp 2 --tp-mode 1d --micro-batches 1" -- \
    --data train.bin "${bertf[@]}" --batch 8 --tp 2 --tp-mode 1d
# nmt's vocabulary: the pair files' 256 + 3 specials
gcase "nmt dp 2" 2 nmt "${nmtf[*]} --vocab 259 --batch 8 --dp 2 --micro-batches 1" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --dp 2
# the embedding paths of the shared table (its lookups by the encoder and
# the decoder, the head's dense share)
gcase "nmt dp 2 sparse" 2 nmt "${nmtf[*]} --vocab 259 --batch 8 --dp 2 --micro-batches 1 --embed-grad sparse" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --dp 2 --embed-grad sparse
gcase "nmt dp 2 split" 2 nmt "${nmtf[*]} --vocab 259 --batch 8 --dp 2 --micro-batches 1 --embed-grad split" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --dp 2 --embed-grad split
gcase "nmt pp 2 gpipe M2" 2 nmt "${nmtf[*]} --vocab 259 --batch 8 --pp 2 --schedule gpipe --micro-batches 2" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --pp 2 --schedule gpipe --micro-batches 2 --no-profile
gcase "nmt tp 1d 2" 2 nmt "${nmtf[*]} --vocab 259 --batch 8 --tp 2 --tp-mode 1d --micro-batches 1" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --tp 2 --tp-mode 1d
# 2-D and 3-D: one micro-batch of 8 rows; the diagonal's swaps are 8 N C / q^2
# bytes and 4 calls per embedding node (BERT one of N = 8 x 16 tokens, the
# translation model two, encoder and decoder, of N = 8 x 40), C 32, q 2
# --precision bf16: the graph models' activations and the bf16 table's
# memory (its copies, the staging, and with CB_BF16_PACK=1 the copies in
# oneDNN's layout: BERT at T 128, 1024 rows) against the log, one rank and
# under tensor parallelism (the vocabulary of 259 pads to 260 under 1-D)
bgcase() { # name np model "plan flags" -- train flags
    local name=$1 np=$2 model=$3 pf=($4); shift 5
    P --cluster "$ROOT/clusters/h100.json" --devices "$np" --model "$model" "${pf[@]}" --precision bf16 \
        --micro-batches 1 --top 0 --json >plan.json 2>plan.err \
        || { fail "$name: plan failed: $(head -c 300 plan.err)"; return; }
    if ! OMP_NUM_THREADS=1 timeout "$TMO" "${launch[@]}" -np "$np" "$C" train --model "$model" \
            --steps 2 --quiet --threads 1 --precision bf16 --log tr.jsonl "$@" >/dev/null 2>tr.err; then
        fail "$name: train failed: $(head -c 300 tr.err)"; return
    fi
    /usr/bin/python3 - "$name" <<'PY' || failed=$((failed + 1))
import json, sys
log = [json.loads(l) for l in open("tr.jsonl") if '"step"' in l][-1]
p = [l for l in json.load(open("plan.json"))["layouts"] if not l["recompute"] and not l["zero"]][0]
held = log["bf16_copies_bytes"] + log["bf16_staging_bytes"]
pairs = [("act_bytes", log["act_bytes"], p["mem_act"]), ("bf16 held", held, p["mem_bf16"])]
bad = [k for k, a, b in pairs if a != b]
print("%s %s: measured/predicted %s" % ("FAIL" if bad else "PASS", sys.argv[1],
      ", ".join("%s %.17g/%.17g" % (k, a, b) for k, a, b in pairs)))
sys.exit(1 if bad else 0)
PY
}
bertl=(--layers 2 --d-model 32 --heads 4 --seq-len 128)
bgcase "bf16 bert" 1 bert "${bertf[*]} --vocab 260 --batch 8" -- --data train.bin "${bertf[@]}" --batch 8
CB_BF16_PACK=1 bgcase "bf16 bert T 128, weights in oneDNN's layout" 1 bert "${bertl[*]} --vocab 260 --batch 8" -- \
    --data train.bin "${bertl[@]}" --batch 8
bgcase "bf16 bert tp 3d 8" 8 bert "${bertf[*]} --vocab 260 --batch 8 --tp 8 --tp-mode 3d" -- \
    --data train.bin "${bertf[@]}" --batch 8 --tp 8 --tp-mode 3d
bgcase "bf16 nmt" 1 nmt "${nmtf[*]} --vocab 259 --batch 8" -- --data pairs.bin "${nmtf[@]}" --batch 8
bgcase "bf16 nmt tp 1d 2" 2 nmt "${nmtf[*]} --vocab 259 --batch 8 --tp 2 --tp-mode 1d" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --tp 2 --tp-mode 1d
bgcase "bf16 nmt tp 2d 4" 4 nmt "${nmtf[*]} --vocab 259 --batch 8 --tp 4 --tp-mode 2d" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --tp 4 --tp-mode 2d
bgcase "bf16 ncf" 1 ncf "${ncff[*]} --users $nu --items $ni --batch 64" -- \
    --data inter.bin "${ncff[@]}" --batch 64 --eval-users 5
bgcase "bf16 ncf tp 1d 2" 2 ncf "${ncff[*]} --users $nu --items $ni --batch 64 --tp 2 --tp-mode 1d" -- \
    --data inter.bin "${ncff[@]}" --batch 64 --eval-users 5 --tp 2 --tp-mode 1d
bgcase "bf16 ncf tp 2d 4" 4 ncf "${ncff[*]} --users $nu --items $ni --batch 64 --tp 4 --tp-mode 2d" -- \
    --data inter.bin "${ncff[@]}" --batch 64 --eval-users 5 --tp 4 --tp-mode 2d
DIAG="8192 4" gcase "bert tp 2d 4" 4 bert "${bertf[*]} --vocab 260 --batch 8 --tp 4 --tp-mode 2d --micro-batches 1" -- \
    --data train.bin "${bertf[@]}" --batch 8 --tp 4 --tp-mode 2d
# pipeline x 2-D: rank 0 is the first stage's (r, r), 2 micro-batches of 4 rows (N 64)
DIAG="8192 8" gcase "bert pp 2 x tp 2d 4 1f1b M2" 8 bert "${bertf[*]} --vocab 260 --batch 8 --pp 2 --tp 4 --tp-mode 2d --schedule 1f1b --micro-batches 2" -- \
    --data train.bin "${bertf[@]}" --batch 8 --pp 2 --tp 4 --tp-mode 2d --schedule 1f1b --micro-batches 2
# 3-D with 4 MLM slots a sequence (the default at T 16 is 2): the head's rows follow the flag
gcase "bert tp 3d 8 max-predictions 4" 8 bert "${bertf[*]} --vocab 260 --batch 8 --tp 8 --tp-mode 3d --micro-batches 1 --max-predictions 4" -- \
    --data train.bin "${bertf[@]}" --batch 8 --tp 8 --tp-mode 3d --max-predictions 4
DIAG="40960 8" gcase "nmt tp 2d 4" 4 nmt "${nmtf[*]} --vocab 259 --batch 8 --tp 4 --tp-mode 2d --micro-batches 1" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --tp 4 --tp-mode 2d
gcase "nmt tp 3d 8" 8 nmt "${nmtf[*]} --vocab 259 --batch 8 --tp 8 --tp-mode 3d --micro-batches 1" -- \
    --data pairs.bin "${nmtf[@]}" --batch 8 --tp 8 --tp-mode 3d
gcase "ncf tp 2d 4" 4 ncf "${ncff[*]} --users $nu --items $ni --batch 64 --tp 4 --tp-mode 2d --micro-batches 1" -- \
    --data inter.bin "${ncff[@]}" --batch 64 --tp 4 --tp-mode 2d --eval-users 5
gcase "ncf pp 2" 2 ncf "${ncff[*]} --users $nu --items $ni --batch 64 --pp 2 --schedule 1f1b --micro-batches 2" -- \
    --data inter.bin "${ncff[@]}" --batch 64 --pp 2 --schedule 1f1b --micro-batches 2 --eval-users 5
gcase "ncf dp 2" 2 ncf "${ncff[*]} --users $nu --items $ni --batch 64 --dp 2 --micro-batches 1" -- \
    --data inter.bin "${ncff[@]}" --batch 64 --dp 2 --eval-users 5
gcase "ncf 1" 1 ncf "${ncff[*]} --users $nu --items $ni --batch 64 --micro-batches 1" -- \
    --data inter.bin "${ncff[@]}" --batch 64 --eval-users 5

for bad in bogus auto; do
    P --cluster "$ROOT/clusters/h100.json" --devices 2 "${tiny[@]}" --embed-grad $bad >/dev/null 2>bad.err
    rc=$?
    [ $rc = 2 ] && [ "$(wc -l <bad.err)" = 1 ] && grep -q "embed-grad '$bad'" bad.err \
        && pass "--embed-grad $bad: exit 2, '$(cat bad.err)'" \
        || fail "--embed-grad $bad: exit $rc (want 2, one line), stderr '$(head -c 300 bad.err)'"
done

# the graph models' flags: exit 2, one line naming the flag
for args in "--model bogus|--model bogus" "--model ncf --mlp 3|--mlp 3" \
            "--model bert --heads 5 --d-model 32|--heads" "--model ncf --users 0|--users" \
            "--model bert --seq-len 16 --max-predictions 17|--max-predictions"; do
    P --cluster "$ROOT/clusters/h100.json" --devices 2 ${args%|*} >/dev/null 2>bad.err
    rc=$?
    [ $rc = 2 ] && [ "$(wc -l <bad.err)" = 1 ] && grep -q -- "${args#*|}" bad.err \
        && pass "plan ${args%|*}: exit 2, '$(cat bad.err)'" \
        || fail "plan ${args%|*}: exit $rc (want 2, one line), stderr '$(head -c 300 bad.err)'"
done

# ---------------------------------------------------------------- calibration
CUBIST_PLAN_FAKE="gflops=100,gbs=20,attn=0.25,knee=256,alpha=2e-6,beta=3e9" \
    P --calibrate --repeat 2 --out fake.json >cal.out 2>cal.err || fail "fake calibration failed: $(head -c 300 cal.err)"
grep -q "best of 2 runs.*spread (max - min) / median: peak 0%" cal.out \
    && pass "calibrate --repeat 2: the best and its spread printed" \
    || fail "calibrate --repeat 2: no best/spread line in: $(head -c 300 cal.out)"
/usr/bin/python3 - <<'PY' || failed=$((failed + 1))
import json
c = json.load(open("fake.json"))
d = c["device"]
close = lambda a, b: abs(a - b) <= 1e-5 * abs(b)
want = [("peak_flops", d["peak_flops"], 100e9), ("mem_bandwidth", d["mem_bandwidth"], 20e9),
        ("attn_efficiency", d["attn_efficiency"], 0.25),
        # element-wise kernels: 8 bytes an element at the fake bandwidth
        ("gelu_erf_s", d["gelu_erf_s"], 8 / 20e9), ("dropout_s", d["dropout_s"], 8 / 20e9),
        # the fake's memory runs at gbs alone, shared and in its 8 MiB cache
        ("mem_bandwidth_shared", d["mem_bandwidth_shared"], 20e9),
        ("cache_bandwidth", d["cache_bandwidth"], 20e9), ("cache_bytes", d["cache_bytes"], 8 << 20),
        ("update_bandwidth", d["update_bandwidth"], 20e9),
        ("update_bandwidth_shared", d["update_bandwidth_shared"], 20e9)]
# attention by sequence length (the fake's rate is the same at every T)
for t, e in d["attn_seq_efficiency"]:
    want.append(("attn_seq_efficiency[%g]" % t, e, 0.25))
# shard shapes: efficiency min(1, min(m, k, n) / knee)
for m, k, n, e in d["gemm_shapes"]:
    want.append(("gemm_shapes[%g,%g,%g]" % (m, k, n), e, min(1.0, min(m, k, n) / 256)))
# square n: efficiency min(1, n / knee) at intensity n / 6
for i, (x, e) in enumerate(d["gemm_efficiency"]):
    want.append(("gemm_efficiency[%d]" % i, e, min(1.0, 6 * x / 256)))
for k in c["collectives"]:
    want += [(k["op"] + ".alpha", k["alpha"], 2e-6), (k["op"] + ".beta", k["beta"], 3e9)]
bad = [n for n, a, b in want if not close(a, b)]
# every collective the probe times, the data-parallel buckets' one included
ops = sorted(k["op"] for k in c["collectives"])
if ops != sorted(["allreduce", "allgather", "reduce_scatter", "bcast", "p2p", "iallreduce"]):
    bad.append("collectives %s" % ops)
print("%s fake-timer calibration: %d rates as fed%s" % ("FAIL" if bad else "PASS", len(want),
      (": off " + ", ".join(bad)) if bad else ""))
raise SystemExit(1 if bad else 0)
PY
# --precision bf16: the fake's bf16 rate (bf16=250) calibrated into
# device.bf16 (peak, curve, shapes, attention: the fake's shapes at that
# peak), the fp32 rates as before; a plan in bf16 on the file runs its
# GEMMs and attention at 2.5x the fp32 plan's rate, to 1e-5 (the JSON's
# 6 digits), and its memory-bound kernels at the same (one sequence of 16
# tokens: GEMMs of 16 rows, far from both files' shapes, so both read
# the same curve)
CUBIST_PLAN_FAKE="gflops=100,gbs=20,attn=0.25,knee=256,alpha=2e-6,beta=3e9,bf16=250" \
    P --calibrate --precision bf16 --out fakeb.json >calb.out 2>calb.err \
    || fail "fake bf16 calibration failed: $(head -c 300 calb.err)"
for pr in fp32 bf16; do
    P --cluster fakeb.json --devices 1 "${tiny[@]}" --batch 1 --micro-batches 1 --precision $pr \
        --json >"plan-$pr.json" 2>plan.err || fail "plan --precision $pr: $(head -c 300 plan.err)"
done
/usr/bin/python3 - <<'PY' || failed=$((failed + 1))
import json
c = json.load(open("fakeb.json"))
d, b = c["device"], c["device"].get("bf16", {})
close = lambda a, b, r=1e-5: abs(a - b) <= r * abs(b)
want = [("peak_flops", d["peak_flops"], 100e9), ("bf16.peak_flops", b.get("peak_flops", 0), 250e9),
        ("bf16.attn_efficiency", b.get("attn_efficiency", 0), 0.25),
        ("bf16.reorder_bandwidth", b.get("reorder_bandwidth", 0), 20e9)]
for i, (x, e) in enumerate(b.get("gemm_efficiency", [])):
    want.append(("bf16.gemm_efficiency[%d]" % i, e, min(1.0, 6 * x / 256)))
for m, k, n, e in b.get("gemm_shapes", []):
    want.append(("bf16.gemm_shapes[%g,%g,%g]" % (m, k, n), e, min(1.0, min(m, k, n) / 256)))
f, h = (json.load(open("plan-%s.json" % p))["layouts"][0] for p in ("fp32", "bf16"))
want += [("gemm_s fp32/bf16", f["gemm_s"] / h["gemm_s"], 2.5), ("attn_s fp32/bf16", f["attn_s"] / h["attn_s"], 2.5),
         ("mem_s fp32/bf16", f["mem_s"] / h["mem_s"], 1.0)]
bad = [n for n, a, x in want if not close(a, x)]
if not b.get("gemm_shapes") or len(b.get("gemm_efficiency", [])) < 6: bad.append("bf16 curve or shapes missing")
print("%s fake-timer bf16 calibration and plan: %d figures as fed%s" % ("FAIL" if bad else "PASS",
      len(want), (": off " + ", ".join(bad)) if bad else ""))
raise SystemExit(1 if bad else 0)
PY
# --precision bf16 on a cluster without bf16 rates, or an unknown precision: exit 2, one line
for args in "fake.json bf16|device.bf16" "fakeb.json fp16|fp16"; do
    set -- ${args%|*}
    P --cluster "$PWD/$1" --devices 2 "${tiny[@]}" --precision "$2" >/dev/null 2>bad.err
    rc=$?
    [ $rc = 2 ] && [ "$(wc -l <bad.err)" = 1 ] && grep -q -- "${args#*|}" bad.err \
        && pass "plan --precision $2 on $1: exit 2, '$(cat bad.err)'" \
        || fail "plan --precision $2 on $1: exit $rc (want 2, one line), stderr '$(head -c 300 bad.err)'"
done

# a calibrated iallreduce: the data-parallel buckets all exposed at its
# rate. dp 2 of L 2, C 512 (6,502,400 parameters: 26,009,600 ring bytes,
# 2 buckets of 25 MB): 2 x 2 us + 26009600 / 3e9 = 8.67 ms (the overlap
# rule would give 4.34, one bucket)
dpx=$(P --cluster fake.json --devices 2 --layers 2 --d-model 512 --heads 8 --seq-len 128 --batch 4 \
      --vocab 256 2>&1 | awk '$2 == "dp2" && $3 == "pp1" && $4 == "tp1" && $5 == "1d" && NF == 14 {print $12; exit}')
[ "$dpx" = "8.67" ] && pass "dp 2 with a calibrated iallreduce: the buckets exposed whole, $dpx ms" \
    || fail "dp 2 with a calibrated iallreduce: dp exposed '$dpx' ms, want 8.67"
CUBIST_PLAN_FAKE="gflops=-1" P --calibrate --out x.json >/dev/null 2>bad.err
rc=$?
[ $rc = 2 ] && [ "$(wc -l <bad.err)" = 1 ] && [ ! -e x.json ] \
    && pass "bad CUBIST_PLAN_FAKE: exit 2, '$(cat bad.err)'" \
    || fail "bad CUBIST_PLAN_FAKE: exit $rc, stderr '$(head -c 300 bad.err)'"

# ---------------------------------------------------------------- --scaling
# the translation model's predicted data-parallel scaling on this
# machine's calibration (the fake one above, as the cache) and Stampede2:
# every efficiency in (0, 1], weak >= strong at equal ranks (the strong
# batch is one rank's: each rank holds fewer sequences than under weak),
# and the sparse path's weak efficiency falling with ranks (its gather
# grows with them)
mkdir -p "$XDG_CACHE_HOME/cubist" && cp fake.json "$XDG_CACHE_HOME/cubist/cluster-T1.json"
P --scaling --model nmt --layers 2 --d-model 128 --heads 4 --ffn 512 --vocab 8192 --seq-len 32 \
    --batch 400 >scal.out 2>scal.err || fail "--scaling: $(head -c 300 scal.err)"
/usr/bin/python3 - <<'PY' || failed=$((failed + 1))
import re
tables, bad = [], []
for line in open("scal.out"):
    if line.startswith("cluster:"): tables.append([])
    m = re.match(r"\s+(\d+)\s+[\d.]+ \|((?:\s+[-\d.]+){3})\s+\|((?:\s+[-\d.]+){3})\s*$", line)
    if m and tables:
        w = [float(x) for x in m.group(2).split()]
        s = [None if x == "-" else float(x) for x in m.group(3).split()]
        tables[-1].append((int(m.group(1)), w, s))
for t in tables:
    for n, w, s in t:
        for x, v in enumerate(w + [v for v in s if v is not None]):
            if not 0 < v <= 1: bad.append("n %d efficiency %g outside (0, 1]" % (n, v))
        for x in range(3):
            if s[x] is not None and s[x] > w[x] + 5e-4: bad.append("n %d path %d strong %g > weak %g" % (n, x, s[x], w[x]))
    sp = [w[1] for n, w, s in t]
    if any(b > a + 5e-4 for a, b in zip(sp, sp[1:])): bad.append("sparse weak not falling: %s" % sp)
ranks = [t[-1][0] for t in tables if t]
if ranks != [64, 1200]: bad.append("tables up to %s ranks (want 64 and 1200)" % ranks)
print("%s --scaling: %d tables, %d rows, efficiencies in (0, 1], weak >= strong%s" % (
      "FAIL" if bad else "PASS", len(tables), sum(map(len, tables)), (": " + "; ".join(bad[:5])) if bad else ""))
raise SystemExit(1 if bad else 0)
PY

# ---------------------------------------------------------------- bad cluster files
badfile() { # name field python-edit
    /usr/bin/python3 -c "
import json; c = json.load(open('fake.json')); $3
open('bad.json', 'w').write(json.dumps(c))"
    P --cluster "$PWD/bad.json" --devices 2 "${tiny[@]}" >/dev/null 2>bad.err
    local rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <bad.err)" = 1 ] && grep -q "'$2'" bad.err; then
        pass "cluster file $1: exit 2, '$(cat bad.err)'"
    else
        fail "cluster file $1: exit $rc (want 2, one line naming '$2'), stderr '$(head -c 300 bad.err)'"
    fi
}
badfile "missing peak" device.peak_flops "del c['device']['peak_flops']"
badfile "negative inter bandwidth" links.inter.bandwidth "c['links']['inter']['bandwidth'] = -1"
badfile "zero nodes" nodes "c['nodes'] = 0"
badfile "string latency" links.intra.latency "c['links']['intra']['latency'] = 'fast'"
badfile "missing links" links "del c['links']"
badfile "efficiency above 1" device.gemm_efficiency "c['device']['gemm_efficiency'][0][1] = 2"
badfile "attention curve above 1" device.attn_head_efficiency "c['device']['attn_head_efficiency'][0][1] = 2"
badfile "sequence curve not increasing" device.attn_seq_efficiency "c['device']['attn_seq_efficiency'][1][0] = 1"
badfile "negative dropout rate" device.dropout_s "c['device']['dropout_s'] = -1"
badfile "negative shared bandwidth" device.mem_bandwidth_shared "c['device']['mem_bandwidth_shared'] = -1"
badfile "cache size without its rate" device.cache_bandwidth "del c['device']['cache_bandwidth']"
badfile "shard shape of 3 numbers" device.gemm_shapes "c['device']['gemm_shapes'][0] = [1, 2, 3]"
badfile "GEMM shared share above 1" device.gemm_shared "c['device']['gemm_shared'] = 1.5"
badfile "negative GEMM shared share" device.gemm_shared "c['device']['gemm_shared'] = -0.5"
badfile "bf16 rates without a peak" device.bf16.peak_flops \
    "c['device']['bf16'] = {'attn_efficiency': 0.3, 'gemm_efficiency': [[1, 0.5]]}"
badfile "negative bf16 reorder rate" device.bf16.reorder_bandwidth \
    "c['device']['bf16'] = {'peak_flops': 1e12, 'attn_efficiency': 0.3, 'gemm_efficiency': [[1, 0.5]], 'reorder_bandwidth': -1}"
badfile "bf16 curve above 1" device.bf16.gemm_efficiency \
    "c['device']['bf16'] = {'peak_flops': 1e12, 'attn_efficiency': 0.3, 'gemm_efficiency': [[1, 1.5]]}"

# --validate --cluster: a missing file, a calibration of neither 1 nor 2 threads: exit 2, one line
/usr/bin/python3 -c "
import json; c = json.load(open('fake.json')); c['threads'] = 4; open('t4.json', 'w').write(json.dumps(c))"
for args in "nope.json|nope.json" "t4.json|threads 4"; do
    P --validate --quick --cluster "$PWD/${args%|*}" >/dev/null 2>bad.err
    rc=$?
    [ $rc = 2 ] && [ "$(wc -l <bad.err)" = 1 ] && grep -q -- "${args#*|}" bad.err \
        && pass "validate --cluster ${args%|*}: exit 2, '$(cat bad.err)'" \
        || fail "validate --cluster ${args%|*}: exit $rc (want 2, one line), stderr '$(head -c 300 bad.err)'"
done

# the memory terms (docs/plan.md, Memory traffic): the update runs at its
# rate (10 GB/s) x the cache's gain (40 / 20) when the node's working sets fit the
# cache, else at the node's shared rate split over its streaming ranks
/usr/bin/python3 -c "
import json; c = json.load(open('fake.json')); d = c['device']
d['cache_bandwidth'], d['mem_bandwidth_shared'], d['cache_bytes'] = 40e9, 5e9, 64e6
d['update_bandwidth'], d['update_bandwidth_shared'] = 10e9, 2.5e9
c['devices_per_node'] = 2; open('mem.json', 'w').write(json.dumps(c))"
memcase() { # label rate zeroed flags... (zeroed: wpe's floats, seq-len x d-model, the
    # one gradient GPT's step clears; the rest are overwritten at their first write)
    local label=$1 rate=$2 zeroed=$3; shift 3
    P --cluster "$PWD/mem.json" --micro-batches 1 --json "$@" >mem.out 2>mem.err \
        || { fail "memory terms, $label: $(head -c 300 mem.err)"; return; }
    /usr/bin/python3 - "$label" "$rate" "$zeroed" <<'PY' || failed=$((failed + 1))
import json, sys
l = json.load(open("mem.out"))["layouts"][0]
p, dp = l["mem_params"] / 4, l["dp"]
shard = p / dp if l["zero"] else p
norm = 4 if dp * l["pp"] * l["tp"] > 1 else 0  # one process: the norm in backward
want = (4 * float(sys.argv[3]) + (norm + 28 + (8 if dp > 1 else 0)) * shard) / float(sys.argv[2])
ok = abs(l["opt_s"] - want) <= 1e-5 * want  # opt_s is printed with 6 digits
print("%s memory terms, %s: update %.6g s, want %.6g (working set %.3g MB)" % (
    "PASS" if ok else "FAIL", sys.argv[1], l["opt_s"], want, l["mem_total"] / 1e6))
raise SystemExit(0 if ok else 1)
PY
}
memcase "fits the cache: in-cache rate" 20e9 $((16 * 32)) --devices 1 "${tiny[@]}" --batch 2
memcase "one rank out of cache: its rate alone" 10e9 $((64 * 512)) --devices 1 --layers 2 \
    --d-model 512 --heads 8 --seq-len 64 --vocab 257 --batch 2
memcase "two ranks out of cache: the shared rate" 2.5e9 $((64 * 512)) --devices 2 --dp 2 --tp 1 \
    --pp 1 --layers 2 --d-model 512 --heads 8 --seq-len 64 --vocab 257 --batch 2

# the GEMMs' shared share (docs/plan.md, Compute shared): calibrated from the
# fake's streams at share 0.8 on a node of 2 devices, it slows the GEMMs and
# attention of a layout with 2 ranks on the node by 1/0.8 and leaves one
# process and the memory-bound kernels alone
CUBIST_PLAN_FAKE="gflops=100,gbs=20,attn=0.25,knee=256,alpha=2e-6,beta=3e9,share=0.8" \
    P --calibrate --out share.json >share.out 2>share.err || fail "fake calibration, share: $(head -c 300 share.err)"
/usr/bin/python3 -c "
import json; c = json.load(open('share.json')); d = c['device']
c['devices_per_node'] = 2; d['gemm_shared'] = d.get('gemm_shared', 0)
open('share2.json', 'w').write(json.dumps(c)); del d['gemm_shared']
open('share1.json', 'w').write(json.dumps(c))"
for dev in 1 2; do
    for f in share1 share2; do
        P --cluster "$PWD/$f.json" --devices $dev --micro-batches 1 --json "${tiny[@]}" --batch 4 \
            >"$f.d$dev" 2>share.err || fail "plan with $f.json, $dev devices: $(head -c 300 share.err)"
    done
done
/usr/bin/python3 - <<'PY' || failed=$((failed + 1))
import json
share = json.load(open("share2.json"))["device"]["gemm_shared"]
bad = [] if abs(share - 0.8) <= 1e-6 else ["calibrated share %g, fed 0.8" % share]
n = 0
for dev, f in ((1, 1.0), (2, 1 / 0.8)):
    a = json.load(open("share1.d%d" % dev))["layouts"]
    b = json.load(open("share2.d%d" % dev))["layouts"]
    key = lambda l: (l["dp"], l["pp"], l["tp"], l["mode"], l["schedule"], l["M"], l["recompute"], l["zero"])
    bb = {key(l): l for l in b}
    for l in a:
        m = bb[key(l)]
        n += 1
        for k, want in (("gemm_s", f * l["gemm_s"]), ("attn_s", f * l["attn_s"]), ("mem_s", l["mem_s"])):
            if abs(m[k] - want) > 1e-5 * want:
                bad.append("%s %s: %g, want %g" % (key(l), k, m[k], want))
print("%s GEMM shared share: calibrated %g; gemm and attention x1.25 with 2 ranks on the node, "
      "x1 with one, memory-bound kernels x1, over %d layouts%s" % (
      "FAIL" if bad else "PASS", share, n, (": " + "; ".join(bad[:4])) if bad else ""))
raise SystemExit(1 if bad else 0)
PY
printf '{"name": "x", "nodes": 1,' >bad.json
P --cluster "$PWD/bad.json" --devices 2 >/dev/null 2>bad.err
rc=$?
[ $rc = 2 ] && [ "$(wc -l <bad.err)" = 1 ] && pass "truncated cluster JSON: exit 2, '$(cat bad.err)'" \
    || fail "truncated cluster JSON: exit $rc, stderr '$(head -c 300 bad.err)'"
P --cluster "$PWD/none.json" --devices 2 >/dev/null 2>bad.err
rc=$?
[ $rc = 2 ] && [ "$(wc -l <bad.err)" = 1 ] && pass "missing cluster file: exit 2, '$(cat bad.err)'" \
    || fail "missing cluster file: exit $rc, stderr '$(head -c 300 bad.err)'"

# ---------------------------------------------------------------- presets
for f in "$ROOT"/clusters/*.json; do
    n=$(basename "$f" .json)
    P --cluster "$f" --devices 8 "${tiny[@]}" --batch 16 >preset.out 2>preset.err \
        || { fail "preset $n: plan failed: $(head -c 300 preset.err)"; continue; }
    /usr/bin/python3 - "$f" "$n" <<'PY' || failed=$((failed + 1))
import json, sys
c = json.load(open(sys.argv[1]))
fields = ["nodes", "devices_per_node", "threads"]
fields += ["device." + k for k in c["device"] if k != "bf16"] + ["links.%s.%s" % (t, k) for t in c["links"] for k in c["links"][t]]
fields += ["device.bf16." + k for k in c["device"].get("bf16", {})]
missing = [f for f in fields if not c["sources"].get(f)]
print("%s preset %s: %d fields, each with a source%s" % ("FAIL" if missing else "PASS", sys.argv[2],
      len(fields), (": none for " + ", ".join(missing)) if missing else ""))
sys.exit(1 if missing else 0)
PY
done

# ---------------------------------------------------------------- reproduce, plot
P --reproduce bian2021 >r1.out 2>&1 && grep -q "paper 2.32x" r1.out && grep -q "paper 1.57x" r1.out \
    && pass "reproduce bian2021: $(grep -m1 'predicted 3-D' r1.out)" || fail "reproduce bian2021: $(head -c 300 r1.out)"
P --reproduce horovod2019 >r2.out 2>&1 && grep -q "paper 91%" r2.out && grep -q "paper 65%" r2.out \
    && pass "reproduce horovod2019: $(grep -o 'predicted [0-9]*% at [0-9]* (paper [0-9]*%)' r2.out | tr '\n' ' ')" \
    || fail "reproduce horovod2019: $(head -c 300 r2.out)"
P --reproduce nope >/dev/null 2>bad.err; rc=$?
[ $rc = 2 ] && pass "reproduce unknown: exit 2, '$(cat bad.err)'" || fail "reproduce unknown: exit $rc"
if command -v gnuplot >/dev/null; then
    P --cluster "$ROOT/clusters/longhorn.json" --devices 64 --layers 4 --d-model 256 --heads 64 \
        --seq-len 128 --batch 64 --plot plot.png --top 1 >/dev/null 2>plot.err
    [ "$(head -c 4 plot.png 2>/dev/null | tail -c 3)" = PNG ] && [ ! -e plot.png.tmp ] \
        && pass "--plot writes a PNG" || fail "--plot: $(head -c 300 plot.err)"
else
    fail "--plot: gnuplot is not installed (scripts/deps.sh installs gnuplot-nox)"
fi
finish
