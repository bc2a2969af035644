#!/usr/bin/env bash
# Published GPT-2 weights: files shaped as Hugging Face publishes them
# ("transformer." prefix, attn.bias/attn.masked_bias buffers, lm_head.weight,
# vocab 50257; F32, F16 and BF16), written by PyTorch, load into the
# built-in model and the graph engine with logits equal to PyTorch's
# (tests/torch/hf_gpt2.py states the tolerances); `cubist train --init`
# reads them (one process and 1-D tensor parallelism over 2, which pads the
# vocabulary to 50258 inside), saves them unpadded, and --save-dtype bf16|f16
# writes the bits PyTorch's rounding gives; bad --save-dtype: exit 2.
set -u
. "$(dirname "$0")/launcher.sh"
C=$BUILD/cubist
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
/usr/bin/python3 tests/torch/hf_gpt2.py "$BUILD" "$d"
cd "$d" || exit 1
[ -s gpt2_hf_fp32.safetensors ] || { echo "FAIL hf: no file written by PyTorch"; exit 1; }
/usr/bin/python3 - <<'PY' > tokens.ok || { echo "FAIL hf: token fixture"; exit 1; }
import struct, random
r = random.Random(3)
t = [r.randrange(50257) for _ in range(4000)]
open('tok.bin', 'wb').write(struct.pack('<256i', *([20240520, 1, len(t), 2] + [0] * 252)) + struct.pack(f'<{len(t)}H', *t))
PY
T=(--data tok.bin --heads 4 --batch 2 --seq-len 32 --steps 0 --quiet --peak-gflops 100)
compare() { # name, file A, file B, what: the listed tensors of A and B, B's dtype
    /usr/bin/python3 - "$@" <<'PY'
import sys, json, struct, numpy as np
name, a, b, want = sys.argv[1:5]
def raw(p):
    d = open(p, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8 + n])
    h.pop('__metadata__', None)
    return {k.removeprefix('transformer.'): (v['dtype'], v['shape'], d[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
            for k, v in h.items() if not k.endswith(('attn.bias', 'attn.masked_bias')) and k != 'lm_head.weight'}
A, B = raw(a), raw(b)
bad = [k for k in A if k not in B or A[k] != B[k]] + [k for k in B if k not in A]
dt = {v[0] for v in B.values()}
ok = not bad and dt == {want}
print(("PASS" if ok else "FAIL") + f" hf: {name}: {len(B)} tensors, dtype {sorted(dt)}, shapes and bits "
      + ("equal" if ok else f"differ: {bad[:3]}"))
PY
}
"$C" train "${T[@]}" --init gpt2_hf_bf16.safetensors --save out_bf16.st --save-dtype bf16 2>err.txt \
    && compare "--init BF16 file, --save-dtype bf16" gpt2_hf_bf16.safetensors out_bf16.st BF16 \
    || echo "FAIL hf: --init BF16: $(head -c 300 err.txt)"
"$C" train "${T[@]}" --init gpt2_hf_fp32.safetensors --save out_f16.st --save-dtype f16 2>err.txt \
    && compare "--init F32 file, --save-dtype f16 (PyTorch's rounding)" gpt2_hf_f16.safetensors out_f16.st F16 \
    || echo "FAIL hf: --save-dtype f16: $(head -c 300 err.txt)"
"$C" train "${T[@]}" --init gpt2_hf_f16.safetensors --save out_f32.st 2>err.txt \
    && /usr/bin/python3 -c "
import sys; sys.path.insert(0, '$ROOT/tests/torch'); import cbref, numpy as np
a, _ = cbref.read_safetensors('gpt2_hf_f16.safetensors'); b, m = cbref.read_safetensors('out_f32.st')
ok = all(np.array_equal(a['transformer.' + k].astype(np.float32), v) for k, v in b.items()) and len(b) == 4 + 12 * 2
print(('PASS' if ok else 'FAIL') + ' hf: --init F16 file, fp32 save: every tensor widened exactly, wte', b['wte.weight'].shape)" \
    || echo "FAIL hf: --init F16: $(head -c 300 err.txt)"
timeout "$(tmo 300)" "${launch[@]}" -np 2 "$C" train "${T[@]}" --tp 2 --init gpt2_hf_fp32.safetensors --save out_tp.st 2>err.txt \
    && compare "--tp 2 (vocab padded to 50258 inside), saved unpadded" gpt2_hf_fp32.safetensors out_tp.st F32 \
    || echo "FAIL hf: --tp 2 --init: $(head -c 300 err.txt)"
"$C" train "${T[@]}" --init gpt2_hf_fp32.safetensors --save x.st --save-dtype fp16 >/dev/null 2>err.txt
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < err.txt)" -eq 1 ] && grep -q "save-dtype 'fp16' is unknown; use fp32, bf16 or f16" err.txt && [ ! -e x.st ] \
    && echo "PASS hf: --save-dtype fp16: exit 2, one line, nothing written" || echo "FAIL hf: --save-dtype fp16: exit $rc: $(cat err.txt)"
