#!/usr/bin/env bash
# Users' own models and training loops on cubist's public layers, run
# unchanged under every layout and data parallelism:
# 1. examples/mlp_lm (a residual MLP language model) under dp 2, 1-D 2 and
#    4, 2-D 4, 3-D 8, dp 2 x 1-D 2, dp 2 x 2-D 4, dp 2 x 3-D 8: the loss
#    and gradient norm of 30 steps and the saved weights equal the
#    single-process run to 1e-5 relative (per tensor, ||a-b||/||b||; fp32
#    sums regrouped across ranks differ by a few ulp).
# 2. examples/tiny_gpt (a user-built pre-LN transformer with attention,
#    GPT-2's layer names) under dp 2 (with and without ZeRO-1), 1-D 2,
#    2-D 4, 3-D 8, dp 2 x 2-D 4, dp 2 x 3-D 8 with ZeRO-1, against its
#    serial run the same way; its serial run against `cubist train --init`
#    of the weights it starts from (cubist train's GPT is the same graph on
#    the same engine): the same losses, gradient norms and final weights bit
#    for bit; and ZeRO-1 keeps 1/dp of the AdamW moments per rank.
# 3. Both under the pipeline, the same binaries: pp 2 and 4 with each
#    schedule and M = 1, 4, 8 micro-batches (interleaved with v = 2), with
#    recompute block and selective, pp 2 x 2-D 4, pp 2 x 3-D 8 and pp 2 x
#    dp 2 x ZeRO-1, each against the serial run (whose one step is the M
#    micro-batches' sum in one: the sums regroup, so 1e-5 as above).
#    And tiny_gpt under dp 2 with the split and sparse embedding-gradient
#    paths (ZeRO-1 and 4 micro-batches with split), which the engine feeds
#    through its lookup query.
# 4. mlp_lm --shared-skip under pp 3 with a manual partition that puts a
#    weight's two uses on stages 0 and 2 and sends the embedding's output
#    from stage 0 straight to stage 2, and under auto partitions and other
#    schedules.
# Every comparison line comes from tests/compare.py, all of them run in one
# process after the runs (printed last); a comparison that crashes or exits
# non-zero without a FAIL line is a FAIL here too.
set -u
. "$(dirname "$0")/launcher.sh"
root=$ROOT
C="$BUILD/cubist"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
# deterministic text, so a failure reproduces
/usr/bin/python3 "$root/tests/gen_text.py" 160000 > "$d/text.txt"
"$C" prepare --input "$d/text.txt" --output "$d/train.bin" >/dev/null || { fail "example: prepare"; exit 1; }

# compare.py's comparisons, queued; cmp_flush runs them at the end
. "$root/tests/compare_queue.sh"

# run EXAMPLE LABEL NP flags...: 30 steps against the example's serial run
run() {
    local ex=$1 label=$2 np=$3; shift 3
    local g=(); [ "$ex" = tiny_gpt ] && g=(--grads "$d/gpt.grads.st")
    if timeout "$(tmo 240)" "${launch[@]}" -np "$np" "$BUILD/examples/$ex" --data "$d/train.bin" \
            --steps 30 --save "$d/$ex.$label.st" "$@" > "$d/$ex.$label.log" 2>&1; then
        cmp_q logs "$d/$ex.$label.log" "$d/$ex.serial.log" --label "$ex $label loss"
        cmp_q st "$d/$ex.$label.st" "$d/$ex.serial.st" --label "$ex $label weights" "${g[@]}"
    else
        fail "$ex $label: $(tail -n 2 "$d/$ex.$label.log" | tr '\n' ' ')"
    fi
}

serial() { # EXAMPLE: the reference run, no launcher
    "$BUILD/examples/$1" --data "$d/train.bin" --steps 30 --save "$d/$1.serial.st" \
        > "$d/$1.serial.log" 2>&1 || { fail "$1 serial run: $(tail -n 2 "$d/$1.serial.log")"; return 1; }
}

if serial mlp_lm; then
    run mlp_lm dp2 2 --dp 2
    run mlp_lm tp1d2 2 --tp 2 --tp-mode 1d
    run mlp_lm tp1d4 4 --tp 4 --tp-mode 1d
    run mlp_lm tp2d4 4 --tp 4 --tp-mode 2d
    run mlp_lm tp3d8 8 --tp 8 --tp-mode 3d
    run mlp_lm dp2_tp1d2 4 --dp 2 --tp 2 --tp-mode 1d
    run mlp_lm dp2_tp2d4 8 --dp 2 --tp 4 --tp-mode 2d
    run mlp_lm dp2_tp3d8 16 --dp 2 --tp 8 --tp-mode 3d
    run mlp_lm pp3_m1 3 --pp 3 --micro-batches 1
    run mlp_lm pp2_manual 2 --pp 2 --partition 0,2,13
    run mlp_lm pp2_tp1d2 4 --pp 2 --tp 2 --tp-mode 1d --micro-batches 4
    run mlp_lm pp2_dp2_tp1d2 8 --pp 2 --dp 2 --tp 2 --tp-mode 1d
fi

# every schedule, micro-batch count, recompute and tensor layout under --pp
pipeline_matrix() { # EXAMPLE
    local ex=$1 p s mb
    for p in 2 4; do
        for s in gpipe 1f1b interleaved; do
            for mb in 1 4 8; do
                run "$ex" "pp${p}_${s}_m$mb" "$p" --pp "$p" --schedule "$s" --micro-batches "$mb"
            done
        done
    done
    run "$ex" pp2_rc_block 2 --pp 2 --micro-batches 4 --recompute block
    run "$ex" pp2_rc_selective 2 --pp 2 --micro-batches 4 --recompute selective
    run "$ex" pp2_rc_layers1 2 --pp 2 --micro-batches 4 --recompute block --recompute-layers 1
    run "$ex" pp2_rc_uniform2 2 --pp 2 --micro-batches 4 --recompute block --recompute-method uniform \
        --recompute-layers 2
    run "$ex" pp2_tp2d4 8 --pp 2 --tp 4 --tp-mode 2d --micro-batches 4
    run "$ex" pp2_tp3d8 16 --pp 2 --tp 8 --tp-mode 3d --micro-batches 1
    run "$ex" pp2_dp2_zero 4 --pp 2 --dp 2 --zero 1 --micro-batches 4
}
[ -f "$d/mlp_lm.serial.st" ] && pipeline_matrix mlp_lm

# a residual that skips a stage and a weight shared by stages 0 and 2
if "$BUILD/examples/mlp_lm" --data "$d/train.bin" --steps 30 --shared-skip \
        --save "$d/skip.serial.st" > "$d/skip.serial.log" 2>&1; then
    skip() { # label np flags...
        local label=$1 np=$2; shift 2
        if timeout "$(tmo 240)" "${launch[@]}" -np "$np" "$BUILD/examples/mlp_lm" --data "$d/train.bin" \
                --steps 30 --shared-skip --save "$d/skip.$label.st" "$@" > "$d/skip.$label.log" 2>&1; then
            cmp_q logs "$d/skip.$label.log" "$d/skip.serial.log" --label "shared-skip $label loss"
            cmp_q st "$d/skip.$label.st" "$d/skip.serial.st" --label "shared-skip $label weights"
        else
            fail "shared-skip $label: $(tail -n 2 "$d/skip.$label.log" | tr '\n' ' ')"
        fi
    }
    skip pp3_manual 3 --pp 3 --partition 0,5,11,19 --micro-batches 4 --print-partition
    if grep -q "b0.fc1 (stage 0) and b0.fc1 (stage 2)" "$d/skip.pp3_manual.log"; then
        pass "shared-skip pp3: b0.fc1's two uses on stages 0 and 2 (not adjacent)"
    else fail "shared-skip pp3: the partition does not put b0.fc1 on stages 0 and 2"; fi
    skip pp3_auto 3 --pp 3
    skip pp3_gpipe_m8 3 --pp 3 --schedule gpipe --micro-batches 8
    skip pp2_interleaved 2 --pp 2 --schedule interleaved --micro-batches 4
else
    fail "mlp_lm --shared-skip serial run: $(tail -n 2 "$d/skip.serial.log")"
fi

# tiny_gpt: its initial weights, cubist train's GPT trained from them (the
# reference's step-1 gradients for the key-bias check), its serial run
gpt=(--data "$d/train.bin" --layers 2 --d-model 32 --heads 4 --seq-len 16 --vocab 256 --batch 8
     --steps 30 --shuffle 0 --lr 1e-3 --min-lr 1e-4 --warmup 3 --clip 1 --eps 1e-6
     --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --quiet --peak-gflops 100 --threads 1)
if "$BUILD/examples/tiny_gpt" --data "$d/train.bin" --steps 0 --save "$d/init.st" >/dev/null &&
   "$C" train "${gpt[@]}" --init "$d/init.st" --log "$d/gpt.jsonl" --save "$d/gpt.st" \
        --dump-grads "$d/gpt.grads.st" 2>"$d/gpt.err" && serial tiny_gpt; then
    # tiny_gpt's own declaration of GPT-2 from the weights cubist train
    # started from, and the library's (cb_model_declare_gpt, --builtin) from
    # cubist train's seed (one generator keyed by name): one graph on one
    # engine, the same operators in the same order, so every loss, norm and
    # weight is equal bit for bit. That needs the same OpenBLAS kernels in
    # both programs: the library sets OPENBLAS_CORETYPE from the CPU's
    # features for every program linking it (src/kernels/cpu.c), so this
    # runs with the environment as it is, whatever it pins (other kernels
    # would round differently and break the bit-for-bit match).
    "$C" train "${gpt[@]}" --log "$d/gpt_seed.jsonl" --save "$d/gpt_seed.st" 2>"$d/gpt_seed.err" ||
        fail "cubist train from its seed: $(head -c 300 "$d/gpt_seed.err")"
    bits() { # name reference-log reference-weights label tiny_gpt-flags...
        local name=$1 log=$2 st=$3 label=$4; shift 4
        if "$BUILD/examples/tiny_gpt" "$@" --data "$d/train.bin" --steps 30 \
                --save "$d/$name.st" > "$d/$name.log" 2>&1; then
            cmp_q logs "$d/$name.log" "$log" --keys loss,grad_norm --tol 0 --label "$label: loss and norm bit for bit"
            cmp_q st "$d/$name.st" "$st" --tol 0 --label "$label: final weights bit for bit"
        else fail "tiny_gpt $*: $(tail -n 2 "$d/$name.log")"; fi
    }
    bits tiny_bits "$d/gpt.jsonl" "$d/gpt.st" "tiny_gpt = cubist train's GPT from the same weights file"
    bits builtin "$d/gpt_seed.jsonl" "$d/gpt_seed.st" "GPT graph = cubist train's GPT, same seed" --builtin
    run tiny_gpt dp2 2 --dp 2
    run tiny_gpt dp2_zero 2 --dp 2 --zero 1
    run tiny_gpt tp1d2 2 --tp 2 --tp-mode 1d
    run tiny_gpt tp2d4 4 --tp 4 --tp-mode 2d
    run tiny_gpt tp3d8 8 --tp 8 --tp-mode 3d
    run tiny_gpt dp2_tp2d4 8 --dp 2 --tp 4 --tp-mode 2d
    run tiny_gpt dp2_zero_tp3d8 16 --dp 2 --zero 1 --tp 8 --tp-mode 3d
    pipeline_matrix tiny_gpt
    # the embedding gradient's paths through the model's lookup query
    run tiny_gpt dp2_embed_split 2 --dp 2 --embed-grad split
    run tiny_gpt dp2_embed_sparse 2 --dp 2 --embed-grad sparse
    run tiny_gpt dp2_zero_embed_split_m4 2 --dp 2 --zero 1 --embed-grad split --micro-batches 4
    # the step's times: compute and waiting fit inside the step
    times() { sed -nE 's/^# rank 0: last step ([0-9.]+) ms: forward ([0-9.]+), backward ([0-9.]+), waiting ([0-9.]+), update ([0-9.]+), bubble (-?[0-9.]+)/\1 \2 \3 \4 \5 \6/p' "$1"; }
    for lab in serial pp4_1f1b_m1; do
        read -r st fw bw wt up bb <<<"$(times "$d/tiny_gpt.$lab.log")"
        if [ -n "${bb:-}" ] && awk -v s="$st" -v f="$fw" -v b="$bw" -v w="$wt" -v u="$up" \
                'BEGIN { exit !(f > 0 && b > 0 && f + b + w + u <= s * 1.001 + 0.01) }'; then
            pass "tiny_gpt $lab: step $st ms = forward $fw + backward $bw + waiting $wt + update $up + rest; bubble $bb"
        else fail "tiny_gpt $lab: step times '$st $fw $bw $wt $up $bb' do not add up"; fi
    done
    # checkpoints: 13 steps, cb_model_save_checkpoint, a new process
    # resumes (cb_model_load_checkpoint) and runs to 30: the uninterrupted
    # run's losses, norms and weights bit for bit under each layout; and
    # saved under one layout, resumed under another (to 1e-5: the layouts'
    # sums regroup)
    resume() { # label np-save np-resume "save flags" "resume flags" tol
        local label=$1 n1=$2 n2=$3 f1=$4 f2=$5 tol=$6 full
        full="$d/tiny_gpt.resume_ref_$label"
        # shellcheck disable=SC2086
        if timeout "$(tmo 240)" "${launch[@]}" -np "$n2" "$BUILD/examples/tiny_gpt" --data "$d/train.bin" \
                --steps 30 --save "$full.st" $f2 > "$full.log" 2>&1 &&
           timeout "$(tmo 240)" "${launch[@]}" -np "$n1" "$BUILD/examples/tiny_gpt" --data "$d/train.bin" \
                --steps 30 --stop-after 13 --checkpoint "$d/ck_$label.st" $f1 > "$d/ck_$label.a" 2>&1 &&
           timeout "$(tmo 240)" "${launch[@]}" -np "$n2" "$BUILD/examples/tiny_gpt" --data "$d/train.bin" \
                --steps 30 --resume "$d/ck_$label.st" --save "$d/ck_$label.st2" $f2 > "$d/ck_$label.b" 2>&1; then
            cat "$d/ck_$label.a" "$d/ck_$label.b" > "$d/ck_$label.log"
            cmp_q logs "$d/ck_$label.log" "$full.log" --tol "$tol" --label "tiny_gpt resume $label: loss"
            local g=(); [ "$tol" != 0 ] && g=(--grads "$d/gpt.grads.st") # the key bias: see compare.py
            cmp_q st "$d/ck_$label.st2" "$full.st" --tol "$tol" --label "tiny_gpt resume $label: weights" "${g[@]}"
        else fail "tiny_gpt resume $label: $(tail -qn 1 "$full.log" "$d/ck_$label.a" "$d/ck_$label.b" | tr '\n' ' ')"; fi
    }
    resume serial 1 1 "" "" 0
    resume dp2_zero 2 2 "--dp 2 --zero 1" "--dp 2 --zero 1" 0
    resume pp2_interleaved 2 2 "--pp 2 --schedule interleaved --micro-batches 4" \
        "--pp 2 --schedule interleaved --micro-batches 4" 0
    resume tp3d8 8 8 "--tp 8 --tp-mode 3d" "--tp 8 --tp-mode 3d" 0
    resume pp2_dp2_zero_to_serial 4 1 "--pp 2 --dp 2 --zero 1" "" 1e-5
    # recompute in one process: the same numbers bit for bit (a rerun of a
    # forward repeats its arithmetic), fewer activation bytes
    actb() { sed -nE 's/^# rank 0: ([0-9]+) activation bytes/\1/p' "$1"; }
    for rc in block selective; do
        run tiny_gpt "rc_$rc" 1 --recompute "$rc"
        cmp_q logs "$d/tiny_gpt.rc_$rc.log" "$d/tiny_gpt.serial.log" --tol 0 \
            --label "tiny_gpt --recompute $rc: the serial losses bit for bit"
        a=$(actb "$d/tiny_gpt.rc_$rc.log") b=$(actb "$d/tiny_gpt.serial.log")
        if [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ]; then
            pass "tiny_gpt --recompute $rc: $a activation bytes < $b without"
        else fail "tiny_gpt --recompute $rc: activation bytes '$a', without '$b'"; fi
    done
    # ZeRO-1: each of the dp 2 ranks keeps half the AdamW moments
    moments() { sed -nE 's/^# rank 0: ([0-9]+) parameters, ([0-9]+) AdamW moments/\1 \2/p' "$1"; }
    read -r p1 m1 <<<"$(moments "$d/tiny_gpt.serial.log")"
    read -r p2 m2 <<<"$(moments "$d/tiny_gpt.dp2_zero.log")"
    if [ -n "${m2:-}" ] && [ "$p2" = "$p1" ] && [ $((2 * m2)) -ge $((m1 - 2)) ] && [ $((2 * m2)) -le $((m1 + 2)) ]; then
        pass "tiny_gpt --dp 2 --zero 1: rank 0 keeps $m2 AdamW moments of $m1 (1/2), all $p2 parameters"
    else
        fail "tiny_gpt --dp 2 --zero 1: AdamW moments '${m2:-?}' on rank 0, want half of '${m1:-?}'"
    fi
else
    fail "tiny_gpt reference runs: $(head -c 300 "$d/gpt.err")"
fi

# refusals: one line, exit 2, every rank
refuse() { # label np pattern flags...
    local label=$1 np=$2 pat=$3; shift 3
    timeout "$(tmo 60)" "${launch[@]}" -np "$np" "$BUILD/examples/mlp_lm" --data "$d/train.bin" --steps 2 "$@" > "$d/$label.out" 2>&1
    local rc=$? n
    n=$(grep -c "$pat" "$d/$label.out")
    if [ "$rc" = 2 ] && [ "$n" -ge 1 ]; then pass "example refuses $label: $(grep -m1 "$pat" "$d/$label.out")"
    else fail "example refuses $label: exit $rc, $n lines matching '$pat': $(tail -n 2 "$d/$label.out" | tr '\n' ' ')"; fi
}
refuse pp2_m3 2 "does not divide" --pp 2 --micro-batches 3
refuse dp2_tp2_split 4 "split needs the whole embedding" --dp 2 --tp 2 --embed-grad split
refuse pp2_dp2_sparse 4 "sparse needs the model's embedding lookups" --dp 2 --pp 2 --embed-grad sparse
refuse pp2_badpart 2 "partition" --pp 2 --partition 0,9,2
cmp_flush
[ "$failed" = 0 ]
