#!/usr/bin/env bash
# Two length sets (cb_model_set_lengths_set, cb_layer_use_lengths) through
# the engine, with tests/test_lengths.c: a toy encoder-decoder whose encoder
# self-attention is padded by the source lengths (set 0), the decoder's
# causal self-attention by the target lengths (set 1), and whose
# cross-attention masks target queries and source keys. The step-1 loss
# against PyTorch in fp64 on the same initial weights and batch (and
# PyTorch with the two sets swapped must differ, so the check sees the
# sets); then dp 2 (and ZeRO-1), 1-D 2, 2-D 4, 3-D 8 and pp 2 (1F1B, 4
# micro-batches) against one process over 30 steps whose lengths change
# every step (0 and T included).
set -u
. "$(dirname "$0")/dp_common.sh"
P="$BUILD/tests/test_lengths"
PY=/usr/bin/python3
"$C" prepare --input text.txt --output train.bin >/dev/null || { fail "prepare"; finish; exit; }
"$P" --data train.bin --steps 0 --save init.st >/dev/null || { fail "test_lengths --steps 0"; finish; exit; }
"$P" --data train.bin --steps 30 --save serial.st > serial.log 2>&1 || { fail "serial run: $(tail -n 2 serial.log)"; finish; exit; }

# fp32 forward of a 2-block model against fp64: ~1e-7 relative (measured
# 1.4e-8 on a byte text); 1e-5 as the engine's other PyTorch checks
out=$("$PY" - init.st train.bin serial.log <<'PY' 2>&1
import json, struct, sys, math, torch
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: torch.frombuffer(bytearray(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
            dtype=torch.float32).reshape(v["shape"]).double() for k, v in h.items() if k != "__metadata__"}
def tokens(p):
    b = open(p, "rb").read(); h = struct.unpack("<3i", b[:12])
    return torch.tensor(struct.unpack(f"<{h[2]}H", b[1024:1024 + 2 * h[2]]), dtype=torch.long)
B, T, C, NH = 8, 16, 32, 4
W, tok = read(sys.argv[1]), tokens(sys.argv[2])
ids, tg = tok[:B * T].view(B, T), tok[1:B * T + 1].view(B, T)
src = torch.tensor([(5 * r) % (T + 1) for r in range(B)]); tgt = torch.tensor([(3 * r + 1) % (T + 1) for r in range(B)])
ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), W[p + ".weight"], W[p + ".bias"], 1e-5)
lin = lambda x, p: x @ W[p + ".weight"] + W[p + ".bias"]
def attend(q, k, v, qlen, klen, causal):
    hs = C // NH
    q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(hs)
    i = torch.arange(T)[:, None]; j = torch.arange(T)[None, :]
    mask = (j[None] < klen[:, None, None]) & ((j <= i)[None] if causal else True)
    s = s.masked_fill(~mask[:, None], float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, -1))  # a row with no key: zeros
    o = (p @ v).transpose(1, 2).reshape(B, T, C)
    return o * (torch.arange(T)[None, :] < qlen[:, None])[..., None]  # padded query rows: zero
def block(x, p, qlen, causal):
    qkv = lin(ln(x, p + ".ln"), p + ".qkv")
    return x + lin(attend(*qkv.split(C, -1), qlen, qlen, causal), p + ".proj")
def loss(swap):
    x = W["emb.weight"][ids] + W["emb.pos"][:T]
    s, t = (tgt, src) if swap else (src, tgt)
    enc = block(x, "enc", s, False)
    y = block(x, "dec", t, True)
    q = lin(ln(y, "x.ln"), "x.q"); k, v = lin(enc, "x.kv").split(C, -1)
    y = y + lin(attend(q, k, v, t, s, False), "x.proj")
    logits = ln(y, "ln_f") @ W["emb.weight"].T
    return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), tg.view(-1)).item()
got = float(open(sys.argv[3]).read().split("\n")[0].split()[3])
want, wrong = loss(False), loss(True)
rel = abs(got - want) / abs(want)
ok = rel <= 1e-5 and abs(wrong - want) / abs(want) > 1e-3
print(("OK" if ok else "BAD") + f" step-1 loss {got:.9g}, PyTorch fp64 {want:.9g}: rel {rel:.2g} (tol 1e-5); "
      f"with the two sets swapped PyTorch gives {wrong:.9g}")
PY
)
[[ $out == OK* ]] && pass "two length sets vs PyTorch: $out" || fail "two length sets vs PyTorch: $out"

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
        cmp_ logs "$label.log" serial.log --label "length sets $label loss"
        cmp_ st "$label.st" serial.st --label "length sets $label weights"
    else
        fail "$label: $(tail -n 2 "$label.log" | tr '\n' ' ')"
    fi
}
run dp2 2 --dp 2
run dp2_zero 2 --dp 2 --zero 1
run tp1d2 2 --tp 2 --tp-mode 1d
run tp2d4 4 --tp 4 --tp-mode 2d
run tp3d8 8 --tp 8 --tp-mode 3d
run pp2_1f1b 2 --pp 2 --schedule 1f1b --micro-batches 4
finish
