#!/usr/bin/env bash
# The translation data and BLEU (docs/nmt.md): scripts/bible_pairs.py builds
# the WEB x Reina-Valera verse pairs (Debian diatheke, sword-text-web,
# sword-text-sparv) with whole books held out; `prepare --pairs` writes
# every pair token for token; `cubist bleu` equals NLTK's corpus_bleu on the
# same hypotheses.
set -u
. "$(dirname "$0")/dp_common.sh"
ROOT="$HERE/.."
PY=/usr/bin/python3

# ---------------------------------------------------------------- the corpus
if out=$("$PY" "$ROOT/scripts/bible_pairs.py" --out-dir bp 2>&1); then
    pass "bible_pairs.py: $out"
else
    fail "bible_pairs.py (needs \`make deps\`: diatheke sword-text-web sword-text-sparv): $out"
    finish; exit
fi
# whole books held out: no verse of Jonah (val) or Ruth (test) in training;
# their first verses are where they belong, with the words around a cut
# footnote apart ("Yahweh’s word", not "Yahweh’sword")
out=$("$PY" - bp <<'PY'
import sys
d = sys.argv[1]
rows = {p: [l.rstrip("\n").split("\t") for l in open(f"{d}/bible_{p}.tsv", encoding="utf-8")] for p in ("train", "val", "test")}
bad = [p for p, r in rows.items() for x in r if len(x) != 2 or not x[0] or not x[1]]
jonah = "Now Yahweh’s word came to Jonah the son of Amittai, saying,"
ruth = "In the days when the judges judged, there was a famine in the land."
train_src = {s for s, _ in rows["train"]}
errs = []
if bad: errs.append(f"{len(bad)} lines without exactly two non-empty fields")
if len(rows["train"]) < 29000: errs.append(f"only {len(rows['train'])} training pairs")
if rows["val"][0][0] != jonah or rows["val"][0][1] != "Y FUÉ palabra de Jehová á Jonás, hijo de Amittai, diciendo:":
    errs.append(f"val starts {rows['val'][0]}")
if not rows["test"][0][0].startswith(ruth): errs.append(f"test starts {rows['test'][0]}")
if set(s for s, _ in rows["val"] + rows["test"]) & train_src: errs.append("a held-out source is in training")
if any("<" in s + t or "[" in s + t for r in rows.values() for s, t in r):
    errs.append("markup or a footnote left in a verse")
# diatheke prints Psalm 145's title before each of its verses: none may stay
leak = sum("A praise psalm by David." in s for r in rows.values() for s, _ in r)
if leak: errs.append(f"a psalm title left in {leak} verses")
print("; ".join(errs) if errs else f"OK train {len(rows['train'])}, val {len(rows['val'])} (Jonah 1:1 first), "
      f"test {len(rows['test'])} (Ruth 1:1 first), none in training, no markup, footnote or psalm title")
PY
)
[[ $out == OK* ]] && pass "held-out books: $out" || fail "held-out books: $out"

# ---------------------------------------------------------------- prepare --pairs on it
if "$C" prepare --pairs bp/bible_train.tsv --output tr.bin --val-pairs bp/bible_val.tsv --val-output va.bin >/dev/null; then
    out=$("$PY" - bp/bible_train.tsv tr.bin bp/bible_val.tsv va.bin <<'PY'
import struct, sys
errs, counts = [], []
for tsv, binf in zip(sys.argv[1::2], sys.argv[2::2]):
    b = open(binf, "rb").read()
    h = struct.unpack("<6i", b[:24])
    want = []
    for line in open(tsv, "rb").read().split(b"\n")[:-1]:
        s, t = line.split(b"\t")
        want += list(s) + [258] + list(t) + [258]
    got = list(struct.unpack(f"<{h[2]}H", b[1024:1024 + 2 * h[2]]))
    if h[:2] != (20240520, 1) or h[3:] != (1, 1, 256): errs.append(f"{binf}: header {h}")
    if got != want: errs.append(f"{binf}: {len(got)} tokens differ from the TSV's bytes + EOS ({len(want)})")
    counts.append(len(want))
print("; ".join(errs) if errs else f"OK {counts[0]} + {counts[1]} tokens, each TSV byte then EOS 258 per side, header (magic, 1, n, byte, pairs, V=256)")
PY
)
    [[ $out == OK* ]] && pass "prepare --pairs on the Bible: $out" || fail "prepare --pairs on the Bible: $out"
else
    fail "prepare --pairs on the Bible"
fi

# ---------------------------------------------------------------- BLEU against NLTK
# Hypotheses made from the held-out references (Spanish: ¿ ¡ and curly
# quotes, accents): identical, words dropped and swapped, another verse,
# halves (the brevity penalty), empty and 1-3 token lines, and a corpus with
# no 4-gram match. NLTK's tokens come from a regular expression written here,
# independently of cubist's C tokenizer. Both sum integer counts and take
# logs of the same ratios in double: 1e-12 absolute covers their different
# orders of summation; NLTK gives ~1e-77 where no 4-gram matches (it smooths
# a zero to the smallest float), cubist 0, also within 1e-12.
cut -f2 bp/bible_test.tsv > ref.txt
out=$("$PY" - "$C" ref.txt <<'PY'
import json, random, re, subprocess, sys
from nltk.translate.bleu_score import corpus_bleu
C, reffile = sys.argv[1], sys.argv[2]
refs = open(reffile, encoding="utf-8").read().split("\n")[:-1]
P = "!-/:-@\\[-`{-~¡¿«»\u2010-\u205e"
tok = lambda s: re.findall(f"[{P}]|[^ \\t\\n\\v\\f\\r{P}]+", s)
rng = random.Random(5)
def noisy(s):
    w = [x for x in s.split(" ") if rng.random() > 0.2]
    for _ in range(2):
        if len(w) > 1:
            i = rng.randrange(len(w) - 1); w[i], w[i + 1] = w[i + 1], w[i]
    return " ".join(w)
sets = {
    "identical": refs,
    "noisy": [noisy(r) for r in refs],
    "other verse": refs[1:] + refs[:1],
    "halves": [r[: len(r) // 2] for r in refs],
    "empty and short": ["" if i % 7 == 0 else " ".join(r.split(" ")[: 1 + i % 3]) if i % 3 == 0 else noisy(r) for i, r in enumerate(refs)],
    "no 4-gram": [" ".join(r.split(" ")[::2]) for r in refs],
}
worst, errs = 0.0, []
for name, hyps in sets.items():
    open("hyp.txt", "w", encoding="utf-8").write("".join(h + "\n" for h in hyps))
    got = json.loads(subprocess.run([C, "bleu", "--hyp", "hyp.txt", "--ref", reffile], check=True, capture_output=True, text=True).stdout)
    want = corpus_bleu([[tok(r)] for r in refs], [tok(h) for h in hyps])
    hl, rl = sum(len(tok(h)) for h in hyps), sum(len(tok(r)) for r in refs)
    diff = abs(got["bleu"] - want)
    worst = max(worst, diff)
    if diff > 1e-12 or got["hyp_len"] != hl or got["ref_len"] != rl:
        errs.append(f"{name}: cubist {got['bleu']!r} ({got['hyp_len']}/{got['ref_len']} tokens), NLTK {want!r} ({hl}/{rl})")
    print(f"# {name}: cubist {got['bleu']:.6f} NLTK {want:.6f} bp {got['bp']:.4f}", file=sys.stderr)
print("; ".join(errs) if errs else f"OK {len(sets)} corpora of {len(refs)} verses, worst difference {worst:.2g}")
PY
)
[[ $out == OK* ]] && pass "cubist bleu = NLTK corpus_bleu: $out" || fail "cubist bleu vs NLTK: $out"
finish
