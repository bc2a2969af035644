#!/usr/bin/env bash
# Issue 13's layers through the engine, with tests/test_nmt_layers.c:
#
# --model sinusoid: fixed sinusoidal positions (cb_layer_set_sinusoidal) in
# an MLP language model, weight decay on embeddings on: the table in the
# saved file equals PyTorch's sinusoids of Vaswani et al.; 30 AdamW steps
# leave it exactly as drawn while the token embedding trains.
#
# --model smooth: the same with label smoothing 0.1 and padding targets
# left out (cb_layer_set_loss): the step-1 loss against PyTorch's
# cross_entropy(label_smoothing, ignore_index) in fp64; under dp 2 each rank
# holds a different number of real targets, so the mean over the step's
# real targets is checked too.
#
# --model lengths: two length sets (cb_model_set_lengths_set,
# cb_layer_use_lengths) in a toy encoder-decoder whose encoder
# self-attention is padded by the source lengths (set 0), the decoder's
# causal self-attention by the target lengths (set 1), and whose
# cross-attention masks target queries and source keys: the step-1 loss
# against PyTorch in fp64 on the same initial weights and batch (PyTorch
# with the two sets swapped must differ, so the check sees the sets).
#
# Both under dp 2 (and ZeRO-1), 1-D 2, 2-D 4, 3-D 8 and pp 2 (1F1B, 4
# micro-batches) against one process over 30 steps (loss, gradient norm
# and final weights to 1e-5 relative: sums regroup across ranks); the
# sinusoid table unchanged under each, 1-D 4 (padded vocabulary) too.
set -u
. "$(dirname "$0")/dp_common.sh"
P="$BUILD/tests/test_nmt_layers"
PY=/usr/bin/python3
"$C" prepare --input text.txt --output train.bin >/dev/null || { fail "prepare"; finish; exit; }
for model in sinusoid smooth lengths; do
    "$P" --model $model --data train.bin --steps 0 --save $model.init.st >/dev/null &&
        "$P" --model $model --data train.bin --steps 30 --save $model.serial.st > $model.serial.log 2>&1 ||
        { fail "$model serial runs: $(tail -n 2 $model.serial.log)"; finish; exit; }
done

# ---------------------------------------------------------------- sinusoid against PyTorch
# fixed: PyTorch's table in float64, rounded to float32; glibc's and
# PyTorch's sin/cos are both within an ulp of the double result, so the
# floats agree to one float ulp (2^-24 relative; |values| <= 1: 6e-8 absolute)
table() { # LABEL FILE: the table equals PyTorch's, and the initial one bit for bit
    local out
    out=$("$PY" - "$2" sinusoid.init.st <<'PY' 2>&1
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
table "sinusoid initial" sinusoid.init.st
table "sinusoid after 30 steps, decay on embeddings" sinusoid.serial.st

# ---------------------------------------------------------------- length sets against PyTorch
out=$("$PY" - lengths.init.st train.bin lengths.serial.log <<'PY' 2>&1
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


# ---------------------------------------------------------------- label smoothing against PyTorch
# the step-1 loss of --model smooth (smoothing 0.1, row r ending in r % 8
# padding targets 0) against PyTorch's cross_entropy(label_smoothing=0.1,
# ignore_index=0) in fp64 on the same weights and batch; the plain mean
# must differ from it
out=$("$PY" - smooth.init.st train.bin smooth.serial.log <<'PY' 2>&1
import json, struct, sys, torch
F = torch.nn.functional
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: torch.frombuffer(bytearray(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
            dtype=torch.float32).reshape(v["shape"]).double() for k, v in h.items() if k != "__metadata__"}
b = open(sys.argv[2], "rb").read(); cnt = struct.unpack("<3i", b[:12])[2]
tok = torch.tensor(struct.unpack(f"<{cnt}H", b[1024:1024 + 2 * cnt]), dtype=torch.long)
W, B, T, C = read(sys.argv[1]), 8, 16, 32
ids, tg = tok[:B * T].view(B, T), tok[1:B * T + 1].view(B, T).clone()
for r in range(B):
    tg[r, T - r % 8:] = 0
ln = lambda x, p: F.layer_norm(x, (C,), W[p + ".weight"], W[p + ".bias"], 1e-5)
lin = lambda x, p: x @ W[p + ".weight"] + W[p + ".bias"]
x = W["emb.weight"][ids] + W["emb.pos"][:T]
for l in range(2):
    x = x + lin(F.gelu(lin(ln(x, f"b.{l}.ln"), f"b.{l}.fc"), approximate="tanh"), f"b.{l}.proj")
logits = (ln(x, "ln_f") @ W["emb.weight"].T).view(-1, 256)
want = F.cross_entropy(logits, tg.view(-1), label_smoothing=0.1, ignore_index=0).item()
plain = F.cross_entropy(logits, tg.view(-1)).item()
got = float(open(sys.argv[3]).read().split("\n")[0].split()[3])
rel = abs(got - want) / want
ok = rel <= 1e-5 and abs(plain - want) / want > 1e-3 and (tg == 0).any()
print(("OK" if ok else "BAD") + f" step-1 loss {got:.9g}, PyTorch fp64 {want:.9g}: rel {rel:.2g} (tol 1e-5); "
      f"{int((tg == 0).sum())} of {B * T} targets left out; the plain mean would be {plain:.9g}")
PY
)
[[ $out == OK* ]] && pass "label smoothing and ignored targets vs PyTorch: $out" || fail "label smoothing vs PyTorch: $out"

# ---------------------------------------------------------------- layouts against one process
cmp_() { # compare.py's lines
    local out; out=$("$PY" "$HERE/compare.py" "$@" 2>&1)
    echo "$out" | grep '^PASS\|^FAIL'
    grep -q '^FAIL\|Traceback' <<<"$out" && failed=$((failed + 1))
    grep -q '^PASS\|^FAIL' <<<"$out" || fail "compare.py $*: $(tail -n 2 <<<"$out")"
}
run() { # MODEL LABEL NP flags...
    local model=$1 label=$2 np=$3; shift 3
    if timeout "$TMO" "${launch[@]}" -np "$np" "$P" --model $model --data train.bin --steps 30 \
            --save "$model.$label.st" "$@" > "$model.$label.log" 2>&1; then
        cmp_ logs "$model.$label.log" $model.serial.log --label "$model $label loss"
        cmp_ st "$model.$label.st" $model.serial.st --label "$model $label weights"
        [ $model = lengths ] || table "$model $label table" "$model.$label.st"
    else
        fail "$model $label: $(tail -n 2 "$model.$label.log" | tr '\n' ' ')"
    fi
}
for model in sinusoid smooth lengths; do
    run $model dp2 2 --dp 2
    run $model dp2_zero 2 --dp 2 --zero 1
    run $model tp1d2 2 --tp 2 --tp-mode 1d
    run $model tp2d4 4 --tp 4 --tp-mode 2d
    run $model tp3d8 8 --tp 8 --tp-mode 3d
    run $model pp2_1f1b 2 --pp 2 --schedule 1f1b --micro-batches 4
done
run sinusoid tp1d4 4 --tp 4 --tp-mode 1d
finish
