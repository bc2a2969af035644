#!/usr/bin/env bash
# Divisibility of the tensor-parallel layouts, checked up front: each
# constraint of the issue, broken on its own, ends every rank of the job
# with exit status 2 and one line naming the constraint and a fix, within a
# timeout (no hang). A suggested fix must satisfy every constraint at once:
# it is parsed out of the message and checked (d_model 33 with 3 heads at
# q=2 needs both changed: heads 4, d_model 36). The vocabulary padding of
# each layout is reported once, as a note, and the run goes on. A user's
# program gets the same messages, naming quantities (batch, heads, d_model),
# not flags it does not have; bad grid flags name the flag.
set -u
. "$(dirname "$0")/dp_common.sh"
"$C" prepare --input text.txt --output train.bin >/dev/null || { fail "tp errors: prepare"; finish; exit; }
EX="$(dirname "$C")/examples"
base=(--data train.bin --layers 1 --seq-len 8 --steps 1 --quiet --peak-gflops 100 --vocab 256)

# drill NAME NP PATTERN command...: exit 2, exactly one line, matching PATTERN
drill() {
    local name=$1 np=$2 pat=$3; shift 3
    timeout 60 "${launch[@]}" -np "$np" "$@" >out.txt 2>&1
    local rc=$? lines
    lines=$(grep -c . out.txt)
    if [ $rc = 2 ] && [ "$lines" = 1 ] && grep -q -- "$pat" out.txt; then
        pass "$name: exit 2, \"$(cat out.txt)\""
    else
        fail "$name: exit $rc (want 2), $lines lines (want 1) matching '$pat': $(head -c 400 out.txt)"
    fi
}

# fix NAME Q_W Q_H HEADS D_MODEL: the last drill's "use heads H and d_model
# D" (either may be left as given) satisfies D % Q_W, H % Q_H and D % H
fix() {
    /usr/bin/python3 - "$@" <<'EOF' || failed=$((failed + 1))
import re, sys
name, mw, mh, h0, d0 = sys.argv[1], *map(int, sys.argv[2:6])
msg = open("out.txt").read()
use = dict((k, int(v)) for k, v in re.findall(r"(heads|d_model) (\d+)", msg.split("use ", 1)[-1]))
h, d = use.get("heads", h0), use.get("d_model", d0)
ok = bool(use) and h > 0 and d > 0 and d % mw == 0 and h % mh == 0 and d % h == 0
print("%s %s: suggested heads %d, d_model %d satisfy d_model %% %d, heads %% %d, d_model %% heads"
      % ("PASS" if ok else "FAIL", name, h, d, mw, mh))
sys.exit(0 if ok else 1)
EOF
}

drill_t() { # NAME NP PATTERN train flags...
    local name=$1 np=$2 pat=$3; shift 3
    drill "$name" "$np" "$pat" "$C" train "${base[@]}" "$@"
}
# 3-D, q = 2: tp a cube, batch % q^2, d_model % q^2, heads % q, the vocabulary padded
drill_t "3d: tp 4 is not a cube" 4 "needs --tp to be a cube" --tp 4 --tp-mode 3d --batch 4 --d-model 16 --heads 2
drill_t "3d: batch 6 % q^2=4" 8 "got batch 6: use batch 8" --tp 8 --tp-mode 3d --batch 6 --d-model 16 --heads 2
drill_t "3d: d_model 6 % q^2=4" 8 "d_model (the width) divisible by 4" --tp 8 --tp-mode 3d --batch 4 --d-model 6 --heads 2
fix "3d d_model 6" 4 2 2 6
drill_t "3d: heads 3 % q=2" 8 "heads divisible by 2" --tp 8 --tp-mode 3d --batch 4 --d-model 24 --heads 3
fix "3d heads 3" 4 2 3 24
drill_t "3d: heads 3 and d_model 30" 8 "heads divisible by 2 and d_model" --tp 8 --tp-mode 3d --batch 4 --d-model 30 --heads 3
fix "3d heads 3, d_model 30" 4 2 3 30
# 2-D, q = 2: tp a square, batch % q, d_model % q, heads % q
drill_t "2d: tp 2 is not a square" 2 "needs --tp to be a square" --tp 2 --tp-mode 2d --batch 4 --d-model 16 --heads 2
drill_t "2d: batch 3 % q=2" 4 "got batch 3: use batch 4" --tp 4 --tp-mode 2d --batch 3 --d-model 16 --heads 2
drill_t "2d: d_model 33, heads 3" 4 "heads divisible by 2 and d_model" --tp 4 --tp-mode 2d --batch 4 --d-model 33 --heads 3
fix "2d d_model 33 heads 3" 2 2 3 33
drill_t "2d: heads 3 % q=2" 4 "heads divisible by 2" --tp 4 --tp-mode 2d --batch 4 --d-model 24 --heads 3
fix "2d heads 3" 2 2 3 24
# 1-D: heads % tp (the fix may also be another tp)
drill_t "1d: heads 4 % tp 3" 3 "heads divisible by 3" --tp 3 --tp-mode 1d --batch 4 --d-model 24 --heads 4
fix "1d heads 4" 3 3 4 24
# the vocabulary padding is reported once and the run goes on
note() { # name np pattern flags...
    local name=$1 np=$2 pat=$3; shift 3
    timeout 120 "${launch[@]}" -np "$np" "$C" train "${base[@]}" "$@" >out.txt 2>&1
    local rc=$? n
    n=$(grep -c "note: .*pads the vocabulary" out.txt)
    if [ $rc = 0 ] && [ "$n" = 1 ] && grep -q -- "$pat" out.txt; then
        pass "$name: runs, one note: \"$(grep note: out.txt)\""
    else
        fail "$name: exit $rc, $n notes (want 1) matching '$pat': $(head -c 400 out.txt)"
    fi
}
note "3d: vocab 257 padded to 260" 8 "pads the vocabulary 257 to 260 (a multiple of q^2=4)" \
    --tp 8 --tp-mode 3d --batch 4 --d-model 16 --heads 2 --vocab 257
note "2d: vocab 257 padded to 258" 4 "pads the vocabulary 257 to 258 (a multiple of q=2)" \
    --tp 4 --tp-mode 2d --batch 4 --d-model 16 --heads 2 --vocab 257
note "1d: vocab 257 padded to 260" 4 "pads the vocabulary 257 to 260 (a multiple of tp=4)" \
    --tp 4 --tp-mode 1d --batch 4 --d-model 16 --heads 4 --vocab 257

# a user's program: the same constraints, named as quantities; its grid flags strictly parsed
drill "user model, 2d q=3: batch 8 % 3" 9 "got batch 8: use batch 9" "$EX/mlp_lm" --data train.bin --tp 9 --tp-mode 2d
drill "user model, 1d tp 8: heads 4 % 8" 8 "got heads 4: use heads 8, or --tp 4" "$EX/tiny_gpt" --data train.bin --tp 8 --tp-mode 1d
drill "user model: --tp abc" 2 "--tp takes an integer; got 'abc'" "$EX/mlp_lm" --data train.bin --tp abc
drill "user model: --dp 2x" 2 "--dp takes an integer; got '2x'" "$EX/mlp_lm" --data train.bin --dp 2x
drill "user model: --zero 2" 2 "--zero 2 is unknown; use 0 (off) or 1 (shard AdamW state)" "$EX/mlp_lm" --data train.bin --zero 2
drill "user model: --tp without a value" 1 "--tp needs a value" "$EX/mlp_lm" --data train.bin --tp
finish
