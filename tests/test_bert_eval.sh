#!/usr/bin/env bash
# BERT's held-out evaluation (`cubist train --model bert --val-data F`, the
# `eval` line and log fields; docs/bert.md, "Held-out accuracy") and --fill:
# 1. A byte corpus whose every sequence is one letter repeated (letters
#    drawn with Zipf weights): a masked letter is the letter of its
#    neighbours, so a model that reads context reaches about 100% while
#    guessing the most frequent letter stays near its frequency. A short
#    training run (400 steps: measured 0.9 or more) must get val_acc >= 0.8 and val_loss below the unigram
#    loss by 1 nat; a misplaced position (probabilities of one row scored
#    against another's answer) or a scoring that ignored context fails it.
# 2. The baselines and the masked count recomputed here in double from the
#    token files (positions: every 7th of a row, shifted by the sequence
#    index; [CLS] A [SEP] B [SEP] for bert, [CLS] text [SEP] for roberta):
#    freq_acc, freq_top5, unigram_acc, unigram_loss within 1e-5 relative
#    (cubist keeps the frequencies in float: ~1e-7), val_masked exact.
# 3. --fill 8 prints 8 verses, each with the answer and five guesses, and
#    the first guess is the answer in at least 6.
# 4. Bad input: --val-data on 2 processes, --eval-every without --val-data,
#    a held-out file shorter than a sequence: exit 2, one line
#    (the same on every rank that prints).
set -u
. "$(dirname "$0")/launcher.sh"
C="$BUILD/cubist"
PY=/usr/bin/python3
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
cd "$d" || exit 1
T=16
letters() { # N_SEQUENCES LENGTH SEED: one Zipf-drawn letter per sequence
    "$PY" -c "import random, sys
n, L, seed = map(int, sys.argv[1:])
r = random.Random(seed)
w = [1 / (j + 1) for j in range(20)]
sys.stdout.write(''.join(chr(97 + r.choices(range(20), w)[0]) * L for _ in range(n)))" "$@"
}
for model in bert roberta; do
    text=$([ $model = bert ] && echo $((T - 3)) || echo $((T - 2)))
    letters 3000 "$text" 1 > train.txt
    letters 150 "$text" 2 > val.txt
    "$C" prepare --input train.txt --output train.bin >/dev/null &&
        "$C" prepare --input val.txt --output val.bin >/dev/null || { fail "prepare"; continue; }
    "$C" train --model $model --data train.bin --val-data val.bin --seq-len $T --batch 16 \
        --layers 1 --d-model 32 --heads 2 --steps 400 --lr 1e-2 --warmup 10 --dropout 0 \
        --attn-dropout 0 --eval-every 200 --log $model.jsonl --fill 8 > $model.out 2> $model.err ||
        { fail "$model train: $(head -c 300 $model.err)"; continue; }
    "$PY" - "$model" "$T" train.bin val.bin $model.jsonl $model.out <<'PY' && pass "$model: $(tail -n 1 $model.py.out)" || { fail "$model: $(cat $model.py.out)"; }
import json, math, sys
from collections import Counter
model, T, train, val, log, out = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
sys.stdout = open(model + ".py.out", "w")
def tokens(path):  # llm.c: 256 int32 header, then uint16
    b = open(path, "rb").read()[1024:]
    return [int.from_bytes(b[i:i + 2], "little") for i in range(0, len(b), 2)]
tr, va = tokens(train), tokens(val)
V = 256
cnt = Counter(tr)
uni = [(cnt[v] + 1) / (len(tr) + V) for v in range(V)]
freq = sorted(range(V), key=lambda v: (-cnt[v], v))[:5]
text = T - 3 if model == "bert" else T - 2
ans = []  # the scored answers
for k in range(len(va) // text):
    t = va[k * text:(k + 1) * text]
    if model == "bert":
        na = text // 2
        pos = [1 + i if i < na else 2 + i for i in range(text)]
    else:
        pos = [1 + i for i in range(text)]
    ans += [x for x, p in zip(t, pos) if (p + k) % 7 == 0]
n = len(ans)
want = {"freq_acc": sum(a == freq[0] for a in ans) / n,
        "freq_top5": sum(a in freq for a in ans) / n,
        "unigram_acc": sum(uni[a] for a in ans) / n,
        "unigram_loss": -sum(math.log(uni[a]) for a in ans) / n}
ev = [json.loads(l) for l in open(log) if '"val_acc"' in l]
steps = [e["step"] for e in ev]
last = ev[-1]
bad = [f"{k} {last[k]:.6f} != {v:.6f}" for k, v in want.items()
       if abs(last[k] - v) > 1e-5 * abs(v) + 1e-6]  # the log prints 6 decimals
lines = open(out).read().splitlines()
evline = [l for l in lines if l.startswith("eval step 400 ")]
if not evline or f"val_masked {n}" not in evline[0]:
    bad.append(f"val_masked: want {n}, eval line {evline}")
if steps != [200, 400]: bad.append(f"eval steps {steps}, want [200, 400]")
if not (last["val_acc"] >= 0.8 and last["val_loss"] < last["unigram_loss"] - 1
        and last["val_top5"] >= last["val_acc"]):
    bad.append(f"model: val_acc {last['val_acc']:.3f}, top5 {last['val_top5']:.3f}, loss "
               f"{last['val_loss']:.3f}, unigram loss {last['unigram_loss']:.3f}")
guess = [l for l in lines if "answer: " in l and "   guesses: " in l]
five = [l.split("   guesses: ")[1].split(" | ") for l in guess]
right = sum(l.split("answer: ")[1].split()[0] == g[0].rsplit(" ", 1)[0] for l, g in zip(guess, five))
if len(guess) != 8 or right < 6 or any(len(g) != 5 for g in five):
    bad.append(f"--fill: {len(guess)} answers, {right} first guesses right: {guess}")
print("\n".join(bad) if bad else
      f"val_acc {last['val_acc']:.3f} (most frequent {want['freq_acc']:.3f}), val_loss "
      f"{last['val_loss']:.3f} (unigram {want['unigram_loss']:.3f}); baselines and {n} "
      f"masked recomputed; --fill {right}/8 right")
sys.exit(1 if bad else 0)
PY
done

bad() { # LABEL NP WANT flags...: exit 2, one line naming WANT on every rank's stderr
    local label=$1 np=$2 want=$3; shift 3
    local run=("$C") # one process: no launcher (its start is most of such a run)
    [ "$np" = 1 ] || run=("${launch[@]}" -np "$np" "$C")
    timeout "$(tmo 60)" "${run[@]}" train --model bert --data train.bin --steps 2 "$@" \
        > bad.out 2> bad.err
    local rc=$?
    if [ "$rc" = 2 ] && grep -q -- "$want" bad.err && [ "$(sort -u bad.err | grep -c .)" = 1 ]; then
        pass "bad input $label: exit 2, \"$(head -n 1 bad.err)\""
    else fail "bad input $label: exit $rc, stderr: $(head -c 300 bad.err)"; fi
}
bad "--val-data on 2 processes" 2 "needs one process" --val-data val.bin --dp 2
bad "--eval-every without --val-data" 1 "needs --val-data" --eval-every 5
head -c 10 val.txt > short.txt
"$C" prepare --input short.txt --output short.bin >/dev/null
bad "a held-out file shorter than a sequence" 1 "fewer than one sequence" --val-data short.bin

echo "test_bert_eval: $failed failed"
[ "$failed" = 0 ]
