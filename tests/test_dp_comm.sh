#!/usr/bin/env bash
# Communication accounting and the data-parallel benchmarks, on tiny models:
#  - dp 2 x 1-D tp 2: the log's tensor-parallel tags carry exactly the bytes
#    and calls of the 1-D formulas (cli/bench_tp.c, cost_1d), received =
#    sent, per-rank arrays consistent; --comm-report rows per group and tag
#  - 2-D tp 4: --comm-report's min and max over ranks differ where the ranks'
#    traffic does (the off-diagonal ranks' embedding swap); --print-grid and
#    the log's per-step gathers are counted as control traffic (world), and
#    no step's figures include them
#  - cubist bench --dp-step: buckets start inside backward, all but those
#    overlapping the embeddings (dense) or wpe (split: wte's start after
#    the head's backward); --allreduce and --embed-grad (GPT's tied wte,
#    and --model ncf's four untied tables) run and print their figures,
#    each path's measured bytes and buffers equal to its formulas
#  - a --bucket-mb giving more than 65536 buckets, and bench --dp-step's
#    --embed-mode bogus, --comm-dtype fp16, --no-comm with a batch the
#    ranks do not divide and a --model other than gpt:
#    exit 2, one line
#  - the launcher guard: this build under the other MPI's launcher, and a
#    singleton inside a fake 2-task srun step: exit 2 naming the variable
set -u
. "$(dirname "$0")/dp_common.sh"

"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL dp comm: prepare"; exit 1; }
L=2 CM=32 B=8 T=16 DP=2 TP=2
M=(--data train.bin --layers $L --d-model $CM --heads 4 --seq-len $T --batch $B --steps 3 --quiet --peak-gflops 100)

# --- dp 2 x 1-D tp 2: tags against the formulas
if timeout "$TMO" "${launch[@]}" -np 4 "$C" train "${M[@]}" --dp $DP --tp $TP --log tp.jsonl --comm-report >tp.out 2>tp.err; then
    # 1-D, P = TP, N = B/dp * T rows: ring all-reduce sends 2(P-1)/P of the
    # message; per step 4L linear all-reduces of N C floats, 1 for the
    # embedding, the head's max (N), sums (2N) and dX (N C); the trainer's
    # norm (one double) on the tensor group
    want=$(/usr/bin/python3 -c "
N, C, L, P = $B // $DP * $T, $CM, $L, $TP
ar = lambda b: 2 * (P - 1) * b // P
print('linear=%d:%d embed=%d:1 head=%d:3 norm=%d:1' % (4 * L * ar(4 * N * C), 4 * L, ar(4 * N * C),
      ar(4 * N) + ar(8 * N) + ar(4 * N * C), ar(8)))")
    # shellcheck disable=SC2086
    logcheck tags "dp2 x 1d2: tensor-parallel tags = the 1-D formulas, every step" tp.jsonl $want
    logcheck fields "dp2 x 1d2: log fields" tp.jsonl 4 --symmetric
    if grep -q '^tp  *linear.fwd  *[0-9]* / ' tp.out && grep -q '^dp  *grad ' tp.out && grep -q '^all  *total ' tp.out; then
        pass "dp2 x 1d2 --comm-report: rows per group and tag (tp linear.fwd, dp grad, all total)"
    else
        fail "dp2 x 1d2 --comm-report: $(head -c 600 tp.out | tr '\n' '|')"
    fi
else
    fail "dp2 x 1d2 run: $(head -c 300 tp.err)"
fi

# --- 2-D tp 4: spread over ranks, control traffic
if timeout "$TMO" "${launch[@]}" -np 4 "$C" train "${M[@]}" --tp 4 --tp-mode 2d --steps 2 --print-grid --comm-report \
        --log 2d.jsonl >2d.out 2>2d.err; then
    # rank 0 is on the diagonal: no embedding swap; (0,1) and (1,0) swap
    if grep -qE '^tp +embed\.fwd +0 / [1-9]' 2d.out; then
        pass "2d4 --comm-report: min 0 / max > 0 calls for the off-diagonal embedding swap: $(grep -E '^tp +embed\.fwd' 2d.out | tr -s ' ')"
    else
        fail "2d4 --comm-report: no 'tp embed.fwd 0 / N' row: $(grep '^tp ' 2d.out | tr '\n' '|')"
    fi
    # --print-grid's gather + per step one log gather and one all-reduce (stop
    # signal and log errors agreed, src/train/stop.h), all under world/control
    if grep -qE '^world +control +5 / 5 ' 2d.out && ! grep -q '"control"' 2d.jsonl; then
        pass "control traffic: --print-grid, 2 per-step log gathers and 2 stop agreements counted (world control 5 calls), in no step's fields"
    else
        fail "control traffic: $(grep '^world' 2d.out | tr '\n' '|'); log has control: $(grep -c '"control"' 2d.jsonl)"
    fi
    logcheck fields "2d4: log fields" 2d.jsonl 4 --symmetric
else
    fail "2d4 run: $(head -c 300 2d.err)"
fi

# --- benchmarks on tiny sizes
TINY=(--layers 2 --d-model 32 --heads 4 --vocab 256 --seq-len 16)
for mode in dense split; do
    if timeout "$TMO" "${launch[@]}" -np 2 "$C" bench --dp-step "${TINY[@]}" --batch 4 --bucket-mb 0.01 --steps 2 \
            --reps 2 --embed-mode $mode >step-$mode.json 2>step-$mode.err; then :; else
        fail "bench --dp-step --embed-mode $mode: $(head -c 300 step-$mode.err)"
    fi
done
# late_buckets: the plan's buckets overlapping wte or wpe (dense), wpe only
# (split: wte's own buckets start after the head's backward); the started
# count is the trainer's own
out=$(/usr/bin/python3 - step-dense.json step-split.json 2>&1 <<'EOF'
import json, sys
d, s = (json.load(open(f)) for f in sys.argv[1:3])
for r in (d, s):
    ok = r["buckets"] > r["late_buckets"] > 0 and r["started_in_backward"] == r["buckets"] - r["late_buckets"] \
        and 0 <= r["hidden"] <= 1 and r["reduce_alone_ms"] > 0 and r["ranks"] == 2
    print("%s bench --dp-step (%s): %d of %d buckets started inside backward (all but the %d overlapping the "
          "embeddings%s), hidden %.3f, lone reduction %.2f ms" % ("PASS" if ok else "FAIL", r["embed"],
          r["started_in_backward"], r["buckets"], r["late_buckets"], ", wte's excepted" if r["embed"] == "split" else "",
          r["hidden"], r["reduce_alone_ms"]))
ok = d["embed"] == "dense" and s["embed"] == "split" and s["late_buckets"] < d["late_buckets"]
print("%s bench --dp-step: the split path starts wte's buckets inside backward: %d late buckets, dense %d"
      % ("PASS" if ok else "FAIL", s["late_buckets"], d["late_buckets"]))
EOF
)
echo "$out"
grep -q '^FAIL\|Traceback' <<<"$out" && failed=$((failed + 1))
if timeout "$TMO" "${launch[@]}" -np 2 "$C" bench --allreduce "${TINY[@]}" --bucket-mb 0.01 --reps 2 >ar.out 2>ar.err &&
        grep -qE '^  fused buckets \(15 x 0.01 MB, non-blocking\) +[0-9.]+ ms +bus +[0-9.]+ GB/s' ar.out &&
        grep -qE '^  fused buckets, --comm-dtype bf16 +[0-9.]+ ms +bus +[0-9.]+ GB/s \(half the bytes\)' ar.out &&
        grep -qE '^  time bf16 / fp32 \(fused\) +[0-9.]+$' ar.out &&
        grep -qE '^  raw MPI_Allreduce +[0-9.]+ ms' ar.out && grep -qE '^  ratio fused / raw +[0-9.]+$' ar.out; then
    pass "bench --allreduce: fused fp32, fused bf16 and raw times, ratio $(grep ratio ar.out | tr -s ' ')"
else
    fail "bench --allreduce: $(head -c 400 ar.out | tr '\n' '|') $(head -c 200 ar.err)"
fi
if timeout "$TMO" "${launch[@]}" -np 2 "$C" bench --embed-grad "${TINY[@]}" --batch 2 >eg.out 2>eg.err &&
        [ "$(grep -cE '^ +(2|4|8|16|32|64)( +[0-9.]+){6}$' eg.out)" = 6 ] &&
        grep -q 'measured at 2 ranks.*formulas match' eg.out; then
    pass "bench --embed-grad: 6 rows (2..64 ranks), measured dense, sparse and split exchanges at 2 ranks match"
else
    fail "bench --embed-grad: $(head -c 600 eg.out | tr '\n' '|') $(head -c 200 eg.err)"
fi

# NCF's four untied tables: the same table (the issue's 10^6 x 10^5 shape, formulas only) and
# the measured exchange of a small NeuMF under each path
if timeout "$TMO" "${launch[@]}" -np 2 "$C" bench --embed-grad --model ncf >egn.out 2>egn.err &&
        [ "$(grep -cE '^ +(2|4|8|16|32|64)( +[0-9.]+){6}$' egn.out)" = 6 ] &&
        grep -q "^NCF's 4 embedding tables" egn.out &&
        grep -q 'measured at 2 ranks (ncf.*formulas match' egn.out; then
    pass "bench --embed-grad --model ncf: 6 rows, measured dense, sparse and split exchanges at 2 ranks match"
else
    fail "bench --embed-grad --model ncf: $(head -c 600 egn.out | tr '\n' '|') $(head -c 200 egn.err)"
fi

# --- too many buckets: 1e-9 MB is one float per bucket, d 64 has 117k floats
timeout "$TMO" "${launch[@]}" -np 2 "$C" train "${M[@]}" --d-model 64 --bucket-mb 1e-9 >bk.out 2>bk.err
rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <bk.err)" = 1 ] && grep -q 'buckets, more than 65536; use --bucket-mb' bk.err; then
    pass "--bucket-mb 1e-9 refused: $(cat bk.err)"
else
    fail "--bucket-mb 1e-9: want exit 2 and one line; got $rc: $(head -c 300 bk.err)"
fi
for bad in "--embed-mode bogus|--embed-mode 'bogus' is unknown; use auto" \
           "--no-comm --batch 3|--batch 3 does not split over 2 ranks; use a multiple of 2" \
           "--model ncf|--model ncf: the data-parallel benchmarks run gpt, and --embed-grad alone also ncf" \
           "--model bert|--model bert: the data-parallel benchmarks run gpt" \
           "--comm-dtype fp16|--comm-dtype 'fp16' is unknown; use fp32 (default) or bf16"; do
    args=${bad%%|*} want=${bad#*|}
    timeout "$TMO" "${launch[@]}" -np 2 "$C" bench --dp-step "${TINY[@]}" $args >bb.out 2>bb.err
    rc=$?
    if [ "$rc" = 2 ] && [ "$(wc -l <bb.err)" = 1 ] && grep -qF "cubist: error: $want" bb.err; then
        pass "bench --dp-step $args refused: $(cat bb.err)"
    else
        fail "bench --dp-step $args: want exit 2 and one line '$want'; got $rc: $(head -c 300 bb.err)"
    fi
done

# --- the launcher guard: every task a singleton of the wrong MPI
if [ "$flavour" = openmpi ]; then other=mpirun.mpich var=PMI_SIZE; else other=mpirun.openmpi var=OMPI_COMM_WORLD_SIZE; fi
other_launch=("$other"); [ "$other" = mpirun.openmpi ] && other_launch+=(--oversubscribe -q)
if command -v "$other" >/dev/null; then
    timeout "$TMO" "${other_launch[@]}" -np 2 "$C" train "${M[@]}" --log wrong.jsonl >wl.out 2>wl.err
    rc=$?
    n=$(grep -c "launched as 2 tasks .*($var=2) but MPI sees 1 process" wl.err)
    # every task refuses; like any refusal before MPI starts, only the
    # launcher's rank 0 prints it, so the line appears once
    if [ "$rc" = 2 ] && [ "$n" = 1 ] && [ "$(wc -l <wl.err)" = 1 ] && [ ! -e wrong.jsonl ]; then
        pass "$flavour build under $other -np 2: exit 2, one line (launcher rank 0), no log written: $(head -1 wl.err)"
    else
        fail "$flavour build under $other -np 2: exit $rc, $n matching lines: $(head -c 400 wl.err | tr '\n' '|')"
    fi
else
    fail "launcher guard: $other is not installed (make deps)"
fi
SLURM_STEP_NUM_TASKS=2 SLURM_STEP_ID=0 SLURM_NTASKS=2 timeout "$TMO" "$C" train "${M[@]}" >sl.out 2>sl.err
rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <sl.err)" = 1 ] && grep -q 'launched as 2 tasks by srun (SLURM_STEP_NUM_TASKS=2)' sl.err; then
    pass "singleton in a 2-task srun step refused: $(cat sl.err)"
else
    fail "singleton in a 2-task srun step: exit $rc: $(head -c 300 sl.err)"
fi
SLURM_NTASKS=2 timeout "$TMO" "$C" train "${M[@]}" --steps 1 >sb.out 2>sb.err
rc=$?
if [ "$rc" = 0 ]; then
    pass "singleton in a batch script of 2 tasks (SLURM_NTASKS=2, no step) runs"
else
    fail "singleton in a batch script (SLURM_NTASKS=2, no step): exit $rc: $(head -c 300 sb.err)"
fi

finish
