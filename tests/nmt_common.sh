# Sourced by the translation model's scripts (test_nmt.sh,
# test_nmt_layouts.sh): tests/dp_common.sh (the launcher, the binary, the
# PASS/FAIL helpers, a scratch directory), and in that directory a small
# synthetic pair file (train.bin, 200 pairs, and val.bin, 20; each target
# is its source's characters reversed, 1..5 words, so batches by token
# count hold 2 to 8 pairs and the longest side takes 23 bytes + EOS).
. "$(dirname "${BASH_SOURCE[0]}")/dp_common.sh"
PY=/usr/bin/python3
"$PY" - <<'PYEOF'
import random
r = random.Random(1)
w = "the a of and to in he she it is was god lord king man land house son".split()
for name, n in (("train", 200), ("val", 20)):
    with open(name + ".tsv", "w") as f:
        for i in range(n):
            s = " ".join(r.choice(w) for _ in range(r.randint(1, 5)))
            f.write(s + "\t" + s[::-1] + "\n")
PYEOF
"$C" prepare --pairs train.tsv --output train.bin --val-pairs val.tsv --val-output val.bin \
    --context 40 >/dev/null || { fail "prepare --pairs"; exit 1; }
