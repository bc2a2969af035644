#!/usr/bin/env bash
# Fixed sinusoidal positions (cb_layer_set_sinusoidal) through the engine,
# with tests/test_positions.c (an MLP language model, weight decay on
# embeddings on): the table in the saved file equals PyTorch's sinusoids of
# Vaswani et al.; 30 AdamW steps leave it exactly as drawn while the token
# embedding trains; under 1-D 2 and 4, 2-D 4, 3-D 8, dp 2 x ZeRO-1 and pp 2
# (1F1B, 4 micro-batches) the trajectory and final weights equal one
# process's, and the table is still the drawn one.
set -u
. "$(dirname "$0")/dp_common.sh"
P="$BUILD/tests/test_positions"
PY=/usr/bin/python3
"$C" prepare --input text.txt --output train.bin >/dev/null || { fail "prepare"; finish; exit; }
"$P" --data train.bin --steps 0 --save init.st >/dev/null || { fail "test_positions --steps 0"; finish; exit; }
"$P" --data train.bin --steps 30 --save serial.st > serial.log 2>&1 || { fail "serial run: $(tail -n 2 serial.log)"; finish; exit; }

# fixed: PyTorch's table in float64, rounded to float32; glibc's and
# PyTorch's sin/cos are both within an ulp of the double result, so the
# floats agree to one float ulp (2^-24 relative; |values| <= 1: 6e-8 absolute)
table() { # LABEL FILE: the table equals PyTorch's and init.st's, bit for bit with init.st
    local out
    out=$("$PY" - "$2" init.st <<'PY' 2>&1
import json, struct, sys, math, torch
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]), dtype=torch.float32).reshape(v["shape"])
    return out
got, init = read(sys.argv[1]), read(sys.argv[2])
T, C = got["emb.pos"].shape
t = torch.arange(T, dtype=torch.float64)[:, None]
j = torch.arange(C, dtype=torch.float64)[None, :]
a = t / torch.pow(10000.0, (j - j % 2) / C)
ref = torch.where(j % 2 == 0, torch.sin(a), torch.cos(a)).float()
d = (got["emb.pos"] - ref).abs().max().item()
same = torch.equal(got["emb.pos"], init["emb.pos"])
moved = (got["emb.weight"] - init["emb.weight"]).abs().max().item()
ok = d <= 6e-8 and same and (moved > 0 or sys.argv[1] == sys.argv[2])
print(("OK" if ok else "BAD") + f" table [{T}, {C}] vs PyTorch max |diff| {d:.2g} (tol 6e-8), "
      f"unchanged since the start {same}, token embedding moved by up to {moved:.3g}")
PY
)
    [[ $out == OK* ]] && pass "$1: $out" || fail "$1: $out"
}
table "sinusoid initial" init.st
table "sinusoid after 30 steps, decay on embeddings" serial.st

cmp_() { # compare.py's lines
    local out; out=$("$PY" "$HERE/compare.py" "$@" 2>&1)
    echo "$out" | grep '^PASS\|^FAIL'
    grep -q '^FAIL\|Traceback' <<<"$out" && failed=$((failed + 1))
    grep -q '^PASS\|^FAIL' <<<"$out" || fail "compare.py $*: $(tail -n 2 <<<"$out")"
}
run() { # LABEL NP flags...
    local label=$1 np=$2; shift 2
    if timeout "$TMO" "${launch[@]}" -np "$np" "$P" --data train.bin --steps 30 --save "$label.st" "$@" \
            > "$label.log" 2>&1; then
        cmp_ logs "$label.log" serial.log --label "sinusoid $label loss"
        cmp_ st "$label.st" serial.st --label "sinusoid $label weights"
        table "sinusoid $label table" "$label.st"
    else
        fail "$label: $(tail -n 2 "$label.log" | tr '\n' ' ')"
    fi
}
run tp1d2 2 --tp 2 --tp-mode 1d
run tp1d4 4 --tp 4 --tp-mode 1d
run tp2d4 4 --tp 4 --tp-mode 2d
run tp3d8 8 --tp 8 --tp-mode 3d
run dp2_zero 2 --dp 2 --zero 1
run pp2_1f1b 2 --pp 2 --schedule 1f1b --micro-batches 4
finish
