#!/usr/bin/env bash
# The translation encoder-decoder (`cubist train --model nmt`) under every
# layout and data-parallel path, against one process, on the small
# synthetic pair file of tests/test_nmt.sh (2 + 2 blocks, d 32, 4 heads,
# 30 AdamW steps): loss, gradient norm and val_loss at every step and the
# final weights to 1e-5 relative (tests/compare.py). The sums regroup
# across ranks (float32 reductions in another order), nothing else differs;
# AdamW eps 1e-3 as in test_nmt.sh (the key biases' gradient is zero in
# exact arithmetic and a small eps turns its rounding noise into steps).
#   tensor:   2-D 4, 3-D 8 (the vocabulary padded to 260)           vs one process
#   pipeline: pp 2 interleaved (v 2), pp 4 1F1B and interleaved,
#             pp 2 x 2-D 4 (the encoder's output sent to every decoder
#             stage, its gradient back)                             vs --grad-accum M
#   data:     dp 2 x ZeRO-1; --embed-grad dense, sparse and split
#             (the one table read by the source's and the decoder's
#             lookups and by the tied output projection); split and
#             sparse with --grad-accum 2, and sparse with ZeRO-1    vs one process
# (test_nmt.sh covers dp 2, 1-D 2 and pp 2 1F1B.) --embed-grad sparse or
# split with --tp 2 or --pp 2: exit 2, one line on every rank.
# The pipeline partition of 6 + 6 blocks (--print-partition, FLOP costs:
# --no-profile --partition-memory-weight 0) on pp 2 and pp 4: the stages
# printed are the contiguous cut that minimises the largest stage's FLOPs
# (every cut tried, ties to the earliest), with a module's FLOPs per row
# from docs/nmt.md's formulas: an encoder block 6(4C^2 + 2CF) + 12TC, a
# decoder block 6(8C^2 + 2CF) + 24TC (cross-attention's q, kv and
# projection, and its attention), plus their norms (10C), sums (3C) and
# ReLU (3F); each printed share within 0.05% of the formula's.
# `cubist bench --embed-grad --model nmt` at 2 and 4 ranks: the table of
# 2..64 ranks, the crossover lines (the first p the formulas give equals
# floor(2VC/(S(C+1))) + 1), and one real step of a small translation model
# under each path whose bytes under the path's tags and whose buffers equal
# the formulas exactly: this is also what shows that sparse and split run
# their own exchange on this model, with both lookups' rows (2 x B x T).
set -u
. "$(dirname "$0")/nmt_common.sh"

S=(--model nmt --data train.bin --val-data val.bin --layers 2 --d-model 32 --heads 4 --ffn 64
   --batch 8 --seq-len 24 --steps 30 --lr 2e-3 --warmup 3 --eps 1e-3 --eval-every 10
   --eval-batches 2 --quiet)
run() { # NAME NP flags...
    local name=$1 np=$2; shift 2
    timeout "$(tmo 300)" "${launch[@]}" -np "$np" "$C" train "${S[@]}" "$@" --save "$name.st" \
        --log "$name.jsonl" > "$name.log" 2>&1 ||
        { fail "$name: $(tail -n 2 "$name.log" | tr '\n' ' ')"; return 1; }
}
cmp_() { # LABEL GOT REF: loss, grad_norm, val_loss and the weights
    local out
    grep val_loss "$2.jsonl" > "$2.val"; grep val_loss "$3.jsonl" > "$3.val"
    out=$("$PY" "$ROOT/tests/compare.py" logs "$2.jsonl" "$3.jsonl" --label "$1 loss" 2>&1
          "$PY" "$ROOT/tests/compare.py" logs "$2.val" "$3.val" --keys val_loss \
              --label "$1 val_loss" 2>&1
          "$PY" "$ROOT/tests/compare.py" st "$2.st" "$3.st" --label "$1 weights" 2>&1)
    grep '^PASS\|^FAIL' <<<"$out"
    failed=$((failed + $(grep -c '^FAIL' <<<"$out")))
    [ "$(grep -c '^PASS' <<<"$out")" = 3 ] || [ "$(grep -c '^FAIL' <<<"$out")" != 0 ] ||
        fail "$1: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
}
both() { # NAME NP REF flags...: run, then compare with REF
    local name=$1 np=$2 ref=$3; shift 3
    run "$name" "$np" "$@" && cmp_ "nmt $name (vs $ref)" "$name" "$ref"
}
run one 1 || exit 1
run ga2 1 --grad-accum 2 || exit 1
run ga4 1 --grad-accum 4 || exit 1

both tp2d4 4 one --tp 4 --tp-mode 2d
both tp3d8 8 one --tp 8 --tp-mode 3d
both pp2_interleaved 2 ga4 --pp 2 --schedule interleaved --micro-batches 4
both pp4_1f1b 4 ga4 --pp 4 --schedule 1f1b --micro-batches 4
# 8 virtual stages need 8 modules: 3 + 3 blocks (9 modules)
run ga4_l3 1 --grad-accum 4 --layers 3 &&
    both pp4_interleaved 4 ga4_l3 --pp 4 --schedule interleaved --micro-batches 4 --layers 3
both pp2_tp2d4 8 ga2 --pp 2 --tp 4 --tp-mode 2d --schedule 1f1b --micro-batches 2
both dp2_zero1 2 one --dp 2 --zero 1
for eg in dense sparse split; do both "dp2_$eg" 2 one --dp 2 --embed-grad "$eg"; done
both dp2_split_ga2 2 ga2 --dp 2 --embed-grad split --grad-accum 2
both dp2_sparse_ga2 2 ga2 --dp 2 --embed-grad sparse --grad-accum 2
both dp2_sparse_zero1 2 one --dp 2 --embed-grad sparse --zero 1
# the startup line names the path taken (auto: dense here, V 259 is too
# small for split to pay)
loud=(); for a in "${S[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
for eg in auto dense sparse split; do
    want=$eg; [ $eg = auto ] && want=dense
    if timeout "$(tmo 60)" "${launch[@]}" -np 2 "$C" train "${loud[@]}" --steps 1 --dp 2 \
            --embed-grad $eg > note.out 2>&1 &&
        [ "$(grep -c "data parallelism 2, embedding gradient $want\$" note.out)" = 1 ]; then
        pass "--embed-grad $eg: $(grep '^nmt:' note.out)"
    else fail "--embed-grad $eg: the startup line: $(head -c 300 note.out)"; fi
done
# sparse and split need the whole table and both ends on every rank
for bad in "--tp 2 --tp-mode 1d" "--pp 2"; do
    for eg in sparse split; do
        timeout "$(tmo 60)" "${launch[@]}" -np 2 "$C" train "${S[@]}" --steps 2 $bad \
            --embed-grad $eg > bad.out 2> bad.err
        rc=$?
        if [ "$rc" = 2 ] && [ "$(sort -u bad.err | grep -c .)" = 1 ] &&
            grep -q "embed-grad $eg needs the whole embedding" bad.err; then
            pass "$bad --embed-grad $eg refused: exit 2, \"$(head -n 1 bad.err)\""
        else fail "$bad --embed-grad $eg: exit $rc, $(head -c 300 bad.err)"; fi
    done
done

cat > part.py <<'PYEOF'
import itertools, re, sys
C, F, T, V, L = 64, 256, 24, 259, 6
enc = 6 * (4 * C * C + 2 * C * F) + 12 * T * C + 2 * 3 * C + 2 * 10 * C + 3 * F
dec = 6 * (8 * C * C + 2 * C * F) + 24 * T * C + 3 * 3 * C + 3 * 10 * C + 3 * F
mods = [3 * C] + [enc] * L + [3 * C] + [dec] * L + [6 * C * V]  # lookups, blocks, head
n, p, tot = len(mods), int(sys.argv[2]), sum(mods)
def stages(b): return [sum(mods[b[i]:b[i + 1]]) for i in range(p)]
best = min((max(stages((0,) + c + (n,))), (0,) + c + (n,))
           for c in itertools.combinations(range(1, n), p - 1))[1]
rows = re.findall(r'^\s+\d+\s+\d+\s+\[(\d+),(\d+)\)\s+\S+\s+[0-9.]+\s+([0-9.]+)%', open(sys.argv[1]).read(), re.M)
got = tuple(int(r[0]) for r in rows) + (n,)
share = [100 * x / tot for x in stages(best)]
ok = got == best and all(abs(float(r[2]) - s) <= 0.05 for r, s in zip(rows, share))
print(('PASS' if ok else 'FAIL') + f' nmt 6+6 partition on pp {p}: stages at {list(got)} '
      f'(best by FLOPs {list(best)}), shares {[r[2] for r in rows]}% '
      f'(formula {[round(s, 1) for s in share]}), decoder/encoder block {dec / enc:.2f}')
PYEOF
for pp in 2 4; do
    if timeout "$(tmo 120)" "${launch[@]}" -np $pp "$C" train "${S[@]}" --layers 6 --d-model 64 \
            --ffn 256 --steps 0 --pp $pp --micro-batches $pp --no-profile \
            --partition-memory-weight 0 --print-partition > part$pp.out 2> part$pp.err; then
        out=$("$PY" part.py part$pp.out $pp 2>&1); echo "$out"
        grep -q ^PASS <<<"$out" || failed=$((failed + 1))
    else fail "nmt 6+6 partition on pp $pp: $(head -c 300 part$pp.err)"; fi
done

for np in 2 4; do
    if timeout "$(tmo 120)" "${launch[@]}" -np $np "$C" bench --embed-grad --model nmt >eg$np.out \
            2>eg$np.err && [ "$(grep -cE '^ +(2|4|8|16|32|64)( +[0-9.]+){6}$' eg$np.out)" = 6 ] &&
            grep -q "^the translation model's table" eg$np.out &&
            grep -q "measured at $np ranks (nmt, 128 lookup rows per rank).*formulas match" eg$np.out; then
        pass "bench --embed-grad --model nmt at $np ranks: 6 rows; $(grep -o 'measured.*' eg$np.out)"
    else fail "bench --embed-grad --model nmt at $np ranks: $(head -c 600 eg$np.out | tr '\n' '|') $(head -c 300 eg$np.err)"; fi
done
if "$PY" - eg2.out <<'PYEOF'; then
import math, re, sys
t = open(sys.argv[1]).read()
m = re.findall(r'from p = (\d+) \((?:2VC/\(S\(C\+1\)\) = )?([0-9.]+)\)', t)
ok = len(m) == 2 and all(int(p) == max(2, math.floor(float(x)) + 1) for p, x in m)
print(('PASS' if ok else 'FAIL') + ' bench --embed-grad --model nmt: gathering overtakes reducing at p = '
      + ', '.join(f'{p} ({x})' for p, x in m) + ' (tied, lookups alone), floor(x) + 1')
sys.exit(not ok)
PYEOF
:; else failed=$((failed + 1)); fi
[ "$failed" = 0 ]
