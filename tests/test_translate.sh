#!/usr/bin/env bash
# `cubist translate` and val_bleu (docs/nmt.md, "Decoding"). A tiny
# encoder-decoder (1 + 1 blocks, d 64, no dropout) learns a word-for-word "translation"
# (ten English words to Spanish ones, 4-5 words a pair, in bytes) for 1500
# steps, then:
# 1. Greedy decoding through the engine's KV cache equals the full
#    recompute (--no-cache) token for token, and beam search with 4 beams
#    (reordered caches) equals its --no-cache run: the same arithmetic of
#    the same weights, one row or all of them at a time.
# 2. --beam 1 (the beam search code with one beam) equals greedy. The
#    encoder runs once per source: the engine's count of the sequences its
#    nodes ran on (--stats) is the number of sources under --beam 4 as
#    under greedy (it was 4x under beam 4 when each beam had its own run).
# 3. cubist's greedy tokens equal tests/torch/nmt_greedy_ref.py's (the
#    checkpoint in PyTorch float64, recomputing every position): exact ids;
#    float32 against float64 moves logits by ~1e-5, and the reference
#    prints the smallest top-2 gap it met (checked > 1e-3, so no choice was
#    a near tie).
# 4. The model learned: BLEU of the held-out greedy translations >= 0.5
#    (measured 0.87; a source-blind model, the commonest words, scores 0).
# 5. cubist bleu on the translations equals NLTK's corpus_bleu (1e-12),
#    and val_bleu in the training log (the trainer's decoding of the same
#    20 pairs with the same final weights) equals it (1e-6, the log's digits).
# 6. Bad input: a missing checkpoint, a GPT checkpoint, an empty line, a
#    line longer than the model, --bleu-pairs with --tp: one line, exit 2.
set -u
. "$(dirname "$0")/launcher.sh"
C="$BUILD/cubist"
PY=/usr/bin/python3
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
cd "$d" || exit 1
"$PY" - <<'PYEOF'
import random
r = random.Random(1)
d = {"the": "el", "man": "hombre", "king": "rey", "house": "casa", "son": "hijo", "land": "tierra",
     "god": "dios", "is": "es", "good": "bueno", "big": "grande"}
w = list(d)
for name, n in (("train", 2000), ("val", 40)):
    with open(name + ".tsv", "w") as f:
        for i in range(n):
            s = [r.choice(w) for _ in range(r.randint(4, 5))]
            f.write(" ".join(s) + "\t" + " ".join(d[x] for x in s) + "\n")
PYEOF
cut -f1 val.tsv | head -n 20 > src.txt
cut -f2 val.tsv | head -n 20 > ref.txt
"$C" prepare --pairs train.tsv --output train.bin --val-pairs val.tsv --val-output val.bin \
    --context 40 > /dev/null || { fail "prepare --pairs"; exit 1; }
M=(--model nmt --data train.bin --val-data val.bin --layers 1 --d-model 64 --heads 4 --ffn 128
   --batch 16 --lr 3e-3 --min-lr 3e-4 --warmup 30 --smoothing 0 --dropout 0 --threads 1 --quiet)
"$C" train "${M[@]}" --steps 1500 --eval-every 1500 --bleu-pairs 20 \
    --log train.jsonl --save m.st > train.out 2>&1 || { fail "training: $(tail -n 2 train.out)"; exit 1; }

# ---------------------------------------------------------------- decoding paths
xl() { "$C" translate --model m.st --input src.txt "$@"; }
same() { # LABEL A B
    if [ -s "$2" ] && cmp -s "$2" "$3"; then pass "$1 ($(wc -l < "$2") sentences, $(wc -w < "$2") tokens)"
    else fail "$1: $(diff "$2" "$3" | head -n 4 | tr '\n' ' ')"; fi
}
xl --ids > greedy.ids && xl --ids --no-cache > full.ids && same "greedy: KV cache = full recompute" greedy.ids full.ids
xl --ids --beam 4 > beam4.ids && xl --ids --beam 4 --no-cache > beam4full.ids &&
    same "beam 4: KV cache (reordered) = full recompute" beam4.ids beam4full.ids
xl --ids --beam 1 > beam1.ids && same "beam 1 = greedy" beam1.ids greedy.ids
ns=$(wc -l < src.txt)
for f in "" "--beam 4"; do
    xl --ids --stats $f > stats.ids 2> stats.err
    enc=$(sed -n 's/.*encoder on \([0-9]*\) sequences.*/\1/p' stats.err)
    want=greedy.ids; [ -n "$f" ] && want=beam4.ids
    if [ "$enc" = "$ns" ] && cmp -s stats.ids "$want"; then
        pass "${f:-greedy}: the encoder ran once per source ($enc sequences for $ns sources)"
    else fail "${f:-greedy}: encoder on '$enc' sequences for $ns sources: $(head -c 300 stats.err)"; fi
done
if "$PY" "$ROOT/tests/torch/nmt_greedy_ref.py" --model m.st --input src.txt > torch.ids 2> torch.err; then
    gap=$(sed -n 's/.*ids: //p' torch.err)
    same "greedy tokens = PyTorch float64 reference (smallest top-2 logit gap $gap)" greedy.ids torch.ids
    "$PY" -c "import sys; sys.exit(not float(sys.argv[1]) > 1e-3)" "$gap" ||
        fail "a choice of the reference was within 1e-3 of a tie ($gap): the check is not reliable"
else fail "PyTorch reference: $(tail -n 2 torch.err)"; fi

# ---------------------------------------------------------------- BLEU
xl > hyp.txt
out=$("$PY" - "$C" <<'PY'
import json, re, subprocess, sys
from nltk.translate.bleu_score import corpus_bleu
C = sys.argv[1]
P = "!-/:-@\\[-`{-~¡¿«»\u2010-\u205e"
tok = lambda s: re.findall(f"[{P}]|[^ \\t\\n\\v\\f\\r{P}]+", s)
hyps = open("hyp.txt", encoding="utf-8").read().split("\n")[:-1]
refs = open("ref.txt", encoding="utf-8").read().split("\n")[:-1]
got = json.loads(subprocess.run([C, "bleu", "--hyp", "hyp.txt", "--ref", "ref.txt"], check=True,
                                capture_output=True, text=True).stdout)["bleu"]
want = corpus_bleu([[tok(r)] for r in refs], [tok(h) for h in hyps])
log = [json.loads(l) for l in open("train.jsonl") if "val_bleu" in l]
vb = log[-1]["val_bleu"] if log else float("nan")
errs = []
if not abs(got - want) <= 1e-12: errs.append(f"cubist bleu {got!r} NLTK {want!r}")
if not abs(vb - got) <= 1e-6: errs.append(f"val_bleu {vb!r} in the log, translate's {got!r}")
if not got >= 0.5: errs.append(f"BLEU {got:.4f} < 0.5: the model did not learn")
print("; ".join(errs) if errs else f"OK BLEU {got:.6f} = NLTK {want:.6f} = val_bleu {vb:.6f} (>= 0.5)")
PY
)
[[ $out == OK* ]] && pass "translations: $out" || fail "BLEU: $out"

# ---------------------------------------------------------------- bad input
bad() { # LABEL WANT command...: exit 2, one line naming WANT
    local label=$1 want=$2; shift 2
    "$@" > bad.out 2> bad.err < "${STDIN:-/dev/null}"
    local rc=$?
    if [ "$rc" = 2 ] && [ "$(grep -c . bad.err)" = 1 ] && grep -q -- "$want" bad.err && [ ! -s bad.out ]; then
        pass "bad input $label: exit 2, \"$(head -n 1 bad.err)\""
    else fail "bad input $label: exit $rc, stderr: $(head -c 300 bad.err) stdout: $(head -c 100 bad.out)"; fi
}
bad "missing checkpoint" "nope.st" "$C" translate --model nope.st --input src.txt
"$C" prepare --input train.tsv --output plain.bin > /dev/null
"$C" train --data plain.bin --layers 1 --d-model 32 --heads 4 --seq-len 16 --batch 2 --steps 0 \
    --save gpt.st > /dev/null 2>&1
bad "a GPT checkpoint" "not a translation model" "$C" translate --model gpt.st --input src.txt
printf 'the man\n\nthe king\n' > empty.txt
bad "an empty line" "empty.txt line 2 is empty" "$C" translate --model m.st --input empty.txt
head -c 60 /dev/zero | tr '\0' 'a' > long.txt; echo >> long.txt
bad "a line longer than the model" "long.txt line 1 is 60 tokens" "$C" translate --model m.st --input long.txt
STDIN=empty.txt bad "an empty line on stdin" "stdin line 2 is empty" "$C" translate --model m.st
bad "--bleu-pairs with --tp" "takes --dp, not --tp" "$C" train "${M[@]}" --steps 1 --eval-every 1 \
    --bleu-pairs 5 --tp 2
[ "$failed" = 0 ]
