#!/usr/bin/env bash
# The command line end to end on tiny models: prepare's split, train's JSONL
# fields and validation loss (against PyTorch on the saved weights), a crash
# resumed from a --save-every checkpoint, --decay-embed (against PyTorch),
# sample's determinism and flags, the MFU peak cache, bench --json, output
# paths refused under --pp, and --help texts against docs/cli.md.
set -u
. "$(dirname "$0")/dp_common.sh"
ROOT="$HERE/.."
PY=/usr/bin/python3
export XDG_CACHE_HOME="$d/xdg" HOME="$d/home" # this test's peak cache, and no ~/.cache
mkdir -p "$HOME"
M=(--layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 4 --quiet --peak-gflops 100)

# ---------------------------------------------------------------- prepare
n=$(stat -c %s text.txt)
"$C" prepare --input text.txt --output tr.bin --val-output va.bin --val-fraction 0.1 >/dev/null \
    || fail "prepare with --val-fraction 0.1"
nval=$((n / 10)) # floor(n * 0.1): n is not a multiple of 10 here, so a rounding slip shows
want="$((1024 + 2 * (n - nval))) $((1024 + 2 * nval))"
got="$(stat -c %s tr.bin) $(stat -c %s va.bin)"
[ "$got" = "$want" ] && pass "prepare: $n bytes -> $((n - nval)) training + $nval validation tokens (file sizes $got)" \
    || fail "prepare --val-fraction 0.1 of $n bytes: file sizes $got, want $want"
"$C" prepare --input text.txt --output tr5.bin --val-output va5.bin >/dev/null
nval=$((n * 5 / 100))
got="$(stat -c %s va5.bin)"
[ "$got" = "$((1024 + 2 * nval))" ] && pass "prepare: --val-output without --val-fraction holds 5% ($nval tokens)" \
    || fail "prepare default fraction: validation file $got bytes, want $((1024 + 2 * nval))"

# ---------------------------------------------------------------- train: log fields, val_loss
"$C" train --data tr.bin --val-data va.bin "${M[@]}" --steps 7 --eval-every 3 --eval-batches 3 \
    --shuffle 0 --seed 3 --lr 3e-3 --save m.st --log m.jsonl || fail "train with validation"
out=$("$PY" - m.jsonl <<'PY' 2>&1
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ints = ["step", "tokens", "peak_rss_bytes", "comm_bytes", "comm_calls"]
nums = ["loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "fwd_ms", "bwd_ms", "opt_ms", "mfu",
        "comm_ms", "comm_wait_ms", "cpu_ms"]
bad = []
for r in rows:
    for k in ints:
        if not isinstance(r.get(k), int) or r[k] < 0: bad.append(f"step {r.get('step')}: {k}={r.get(k)!r}")
    for k in nums:
        if not isinstance(r.get(k), (int, float)) or r[k] < 0: bad.append(f"step {r.get('step')}: {k}={r.get(k)!r}")
    if r["tokens"] != r["step"] * 4 * 16: bad.append(f"step {r['step']}: tokens {r['tokens']} != step*B*T")
    # the process's CPU time over the step: at most every core's worth of
    # the step's wall time (+1 ms: the batch's fetch is outside step_ms)
    if not 0 < r["cpu_ms"] <= (os.cpu_count() or 1) * r["step_ms"] * 1.05 + 1:
        bad.append(f"step {r['step']}: cpu_ms {r['cpu_ms']} outside (0, cores x step_ms {r['step_ms']}]")
    if not (r["loss"] > 0 and r["tokens_per_s"] > 0 and r["step_ms"] > 0 and r["peak_rss_bytes"] > 0):
        bad.append(f"step {r['step']}: a figure that must be positive is not")
evald = [r["step"] for r in rows if "val_loss" in r]
if [r["step"] for r in rows] != list(range(1, 8)): bad.append("steps are not 1..7")
if evald != [3, 6, 7]: bad.append(f"val_loss at steps {evald}, want [3, 6, 7]")
if any(not isinstance(r["val_loss"], float) or r["val_loss"] <= 0 for r in rows if "val_loss" in r):
    bad.append("val_loss not a positive number")
print("; ".join(bad) if bad else f"OK {len(rows)} rows, val_loss at steps {evald}")
PY
)
[[ $out == OK* ]] && pass "train log: every docs/cli.md field present with a sane type; $out" || fail "train log: $out"

# val_loss of step 7 is the mean loss of the final weights over 3 sequential
# validation batches: recomputed by PyTorch from m.st. Same float32 sums in a
# different order: measured ~1e-7 relative; 1e-5 fails any wrong batch or mean.
out=$("$PY" - m.st va.bin m.jsonl "$ROOT/tests/torch" <<'PY' 2>&1
import json, sys
sys.path.insert(0, sys.argv[4])
import cbref, torch
cfg, P = cbref.load_weights(sys.argv[1])
tok = cbref.read_tokens(sys.argv[2])
with torch.no_grad():
    ref = sum(cbref.gpt2_loss(P, cfg, *cbref.sequential_batch(tok, k, 4, 16)).item() for k in range(3)) / 3
got = [json.loads(l) for l in open(sys.argv[3])][-1]["val_loss"]
rel = abs(got - ref) / ref
print(f"{'OK' if rel <= 1e-5 else 'BAD'} cubist {got:.7f} PyTorch {ref:.7f} rel {rel:.1e}")
PY
)
[[ $out == OK* ]] && pass "val_loss equals PyTorch's mean loss over the 3 eval batches: ${out#OK }" \
    || fail "val_loss against PyTorch: $out"

# ---------------------------------------------------------------- --save-every + crash + resume
S=(--data tr.bin "${M[@]}" --steps 8 --save-every 2 --lr 3e-3 --warmup 2)
"$C" train "${S[@]}" --save u.st --log u.jsonl || fail "uninterrupted run"
CUBIST_TEST_EXIT_RANK=0 CUBIST_TEST_EXIT_STEP=5 "$C" train "${S[@]}" --save c.st --log c1.jsonl
rc=$?
"$C" train "${S[@]}" --save c.st --resume c.st --log c2.jsonl || fail "resume after the crash"
fields() { sed -E 's/.*"step":([0-9]+),"loss":([^,]*),"lr":([^,]*),"grad_norm":([^,]*),"tokens":([0-9]+),.*/\1 \2 \3 \4 \5/' "$@"; }
if [ $rc = 3 ] && [ "$(fields c2.jsonl)" = "$(fields u.jsonl | tail -n 4)" ] && [ "$(wc -l <c2.jsonl)" = 4 ]; then
    pass "--save-every 2: a run that dies in step 5 resumes from step 4's checkpoint; steps 5-8 equal the uninterrupted run"
else
    fail "--save-every resume: crash exit $rc (want 3); resumed steps: $(fields c2.jsonl | cut -c1-60 | tr '\n' '|') vs $(fields u.jsonl | tail -n 4 | cut -c1-60 | tr '\n' '|')"
fi

# ---------------------------------------------------------------- --decay-embed
# Strong decay (lr x wd = 0.03 a step) so the embeddings' shrinking is far
# above Adam's noise; PyTorch's reference (tests/torch/gpt2_ref.py) trains the
# same steps from the same initial weights and compares log and final weights.
D=(--data tr.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 4 --steps 5 --lr 3e-3
   --min-lr 3e-3 --weight-decay 10 --clip 0 --shuffle 0 --seed 4)
"$C" train "${D[@]}" --steps 0 --quiet --peak-gflops 100 --save e0.st || fail "decay-embed init"
for de in 0 1; do
    "$C" train "${D[@]}" --quiet --peak-gflops 100 --init e0.st --decay-embed $de --save e$de.final.st \
        --log e$de.jsonl || fail "train --decay-embed $de"
done
out=$("$PY" - e0.st e0.final.st e1.final.st "$ROOT/tests/torch" <<'PY' 2>&1
import sys
sys.path.insert(0, sys.argv[4])
import cbref
P = [cbref.read_safetensors(p)[0] for p in sys.argv[1:4]]
n = lambda a: float((a.astype("float64") ** 2).sum() ** 0.5)
w0, wa, wb = (n(p["wte.weight"]) for p in P)
q0, qa, qb = (n(p["wpe.weight"]) for p in P)
ok = wb < 0.95 * wa and qb < 0.95 * qa
print(f"{'OK' if ok else 'BAD'} |wte| init {w0:.4f}, decay-embed 0 {wa:.4f}, 1 {wb:.4f}; |wpe| {q0:.4f}, {qa:.4f}, {qb:.4f}")
PY
)
[[ $out == OK* ]] && pass "--decay-embed 1 shrinks wte and wpe against --decay-embed 0: ${out#OK }" || fail "--decay-embed: $out"
ref=$("$PY" "$ROOT/tests/torch/gpt2_ref.py" "${D[@]}" --init e0.st --decay-embed 1 --compare-log e1.jsonl \
      --compare-final e1.final.st 2>&1)
nf=$(grep -c '^FAIL' <<<"$ref"); np_=$(grep -c '^PASS' <<<"$ref")
[ "$nf" = 0 ] && [ "$np_" -gt 10 ] && pass "--decay-embed 1 matches PyTorch's AdamW with decay on wte/wpe ($np_ checks)" \
    || fail "--decay-embed 1 against PyTorch: $nf failed: $(grep '^FAIL' <<<"$ref" | head -3 | tr '\n' '|')"
ref=$("$PY" "$ROOT/tests/torch/gpt2_ref.py" "${D[@]}" --init e0.st --decay-embed 0 --compare-final e1.final.st 2>&1)
grep -q '^FAIL.*wte.weight' <<<"$ref" && pass "the PyTorch comparison tells the two apart (reference without decay-embed fails on wte)" \
    || fail "the reference without --decay-embed did not fail on wte: $(head -c 300 <<<"$ref")"

# ---------------------------------------------------------------- sample
smp() { "$C" sample --ckpt m.st --prompt "ab" --tokens 40 "$@"; }
smp --seed 1 >s1 && smp --seed 1 >s1b && smp --seed 2 >s2 && smp --seed 1 --temperature 0.5 --top-k 5 >s3 \
    && smp --seed 1 --temperature 0.5 --top-k 5 >s3b && smp --seed 1 --top-k 1 >g1 && smp --seed 2 --top-k 1 >g2 \
    || fail "sample exited non-zero"
sizes="$(stat -c %s s1 s2 s3 g1 | tr '\n' ' ')"
[ "$sizes" = "43 43 43 43 " ] && pass "sample --tokens 40 writes the prompt, 40 tokens and a newline (43 bytes)" \
    || fail "sample sizes $sizes, want 43 each"
cmp -s s1 s1b && cmp -s s3 s3b && pass "sample: the same seed and flags give the same text" \
    || fail "sample not deterministic for a seed"
! cmp -s s1 s2 && pass "sample: another seed gives another text" || fail "sample: seeds 1 and 2 gave the same text"
cmp -s g1 g2 && pass "sample --top-k 1 is greedy: the same text for seeds 1 and 2" \
    || fail "sample --top-k 1 depends on the seed: $(head -c 60 g1 | od -c | head -2)"
"$C" sample --ckpt m.st --prompt "ab" --tokens 5 --heads 4 >/dev/null 2>&1 \
    && pass "sample --heads that agrees with the file is accepted" || fail "sample --heads 4 (the file's) refused"

# ---------------------------------------------------------------- MFU peak cache
out=$("$C" bench --peak --json --threads 1) || fail "bench --peak"
out0=$out
cache=$(sed -E 's/.*"cache":"([^"]*)".*/\1/' <<<"$out")
peak=$(sed -E 's/.*"peak_gflops":([0-9.]+).*/\1/' <<<"$out")
case $cache in "$XDG_CACHE_HOME"/cubist/peak-*)
    [ "$(cat "$cache")" = "$peak" ] && pass "bench --peak writes its figure ($peak) to \$XDG_CACHE_HOME: $cache" \
        || fail "bench --peak: cache holds '$(cat "$cache")', printed $peak" ;;
*) fail "bench --peak cache path '$cache' is not under \$XDG_CACHE_HOME ($out)" ;;
esac
echo 0.5 >"$cache"
"$C" train --data tr.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 4 --steps 2 --quiet \
    --threads 1 --log p.jsonl || fail "train without --peak-gflops"
out=$("$PY" - p.jsonl <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
N = 256 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32  # cubist's GPT, L2 C32 T16 V256
fpt = 6 * N + 12 * 2 * 32 * 16
want = r["tokens_per_s"] * fpt / 0.5e9
print(("OK" if abs(r["mfu"] - want) <= 1e-3 * want else "BAD") + f" mfu {r['mfu']} = tokens/s x {fpt} FLOPs / 0.5 GFLOP/s = {want:.5f}")
PY
)
[[ $out == OK* ]] && pass "train reads the cached peak: ${out#OK }" || fail "train against the cached peak: $out"
# bf16's MFU is against the bf16 GEMM's peak, cached beside sgemm's in its own file
cache16=$(sed -E 's/.*"bf16_cache":"([^"]*)".*/\1/' <<<"$out0")
peak16=$(sed -E 's/.*"bf16_gemm_gflops":([0-9.]+).*/\1/' <<<"$out0")
case $cache16 in "$XDG_CACHE_HOME"/cubist/peak-bf16-*)
    [ "$(cat "$cache16")" = "$peak16" ] && [ "$cache16" != "$cache" ] \
        && pass "bench --peak writes the bf16 peak ($peak16) to its own file: $cache16" \
        || fail "bench --peak: bf16 cache $cache16 holds '$(cat "$cache16")', printed $peak16" ;;
*) fail "bench --peak bf16 cache path '$cache16' is not under \$XDG_CACHE_HOME ($out0)" ;;
esac
echo 0.25 >"$cache16"
"$C" train --data tr.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 4 --steps 2 \
    --threads 1 --precision bf16 --log p16.jsonl 2>p16.err || fail "train --precision bf16: $(tail -1 p16.err)"
out=$("$PY" - p16.jsonl <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
N = 256 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32
want = r["tokens_per_s"] * (6 * N + 12 * 2 * 32 * 16) / 0.25e9
print(("OK" if abs(r["mfu"] - want) <= 1e-3 * want else "BAD") + f" mfu {r['mfu']} = tokens/s x FLOPs / 0.25 GFLOP/s = {want:.5f}")
PY
)
[[ $out == OK* ]] && grep -q "bf16 peak 0 GFLOP/s" p16.err \
    && pass "train --precision bf16 reads the cached bf16 peak and says so: ${out#OK }" \
    || fail "train --precision bf16 against the cached bf16 peak: $out; $(head -1 p16.err)"
[ "$(cat "$cache")" = "0.5" ] && pass "the bf16 run left sgemm's cached peak alone" \
    || fail "the bf16 run changed sgemm's cache to $(cat "$cache")"
"$C" bench --peak --threads 1 >/dev/null && [ "$(cat "$cache")" != "0.5" ] \
    && pass "bench --peak re-measures and rewrites the cache ($(cat "$cache"))" || fail "bench --peak left the cache at $(cat "$cache")"
# the other models' benchmarks take their MFU against a peak of the same
# run (and cache it), not a cached one: a planted 0.5 is not used
echo 0.5 >"$cache"
out=$("$C" bench --model ncf --users 50 --items 40 --factors 8 --mlp 32,16,8 --batch 64 --steps 2 \
      --no-torch --threads 1 2>&1)
np=$(sed -n 's/.*MFU .* of \([0-9.]*\) GFLOP\/s.*/\1/p' <<<"$out")
[ -n "$np" ] && [ "$np" != "0.5" ] && [ "$(cat "$cache")" != "0.5" ] \
    && pass "bench --model ncf: MFU against a peak measured in the run ($np GFLOP/s), cached ($(cat "$cache"))" \
    || fail "bench --model ncf: peak '$np', cache $(cat "$cache"): $out"
# a cache that cannot be written (a file where its directory would be):
# a warning each, and the lines name no file ("(nowhere)"), --json's caches ""
: >not-a-dir
XDG_CACHE_HOME=$PWD/not-a-dir "$C" bench --peak --threads 1 >np.out 2>np.err
np_st=$?
[ $np_st = 0 ] && [ "$(grep -c "warning: the .*peak is not cached" np.err)" = 2 ] \
    && [ "$(grep -c "cached in (nowhere)" np.out)" = 2 ] && ! grep -q not-a-dir np.out \
    && pass "bench --peak with an unwritable cache: two warnings, both peaks cached in (nowhere)" \
    || fail "bench --peak with an unwritable cache: status $np_st, $(head -c 300 np.err) / $(grep -i cached np.out)"
XDG_CACHE_HOME=$PWD/not-a-dir "$C" bench --peak --json --threads 1 2>/dev/null | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
sys.exit(0 if j["cache"] == "" and j["bf16_cache"] == "" else 1)' \
    && pass "bench --peak --json with an unwritable cache: cache and bf16_cache empty" \
    || fail "bench --peak --json with an unwritable cache names a file"
[ ! -e "$HOME/.cache" ] && pass "nothing written under \$HOME/.cache" || fail "\$HOME/.cache was written: $(ls -R "$HOME/.cache")"

# ---------------------------------------------------------------- bench --peak-again
# every length's rows measure the peaks again (0 s: always); each row's MFU
# is against the highest peak printed so far, and the cache holds it
"$C" bench --layers 1 --d-model 32 --heads 2 --vocab 256 --ctx 64 --seq-lens 16,32 --batch 2 \
    --steps 1 --threads 1 --no-torch --precision bf16 --peak-again 0 >pa.txt 2>pa.err \
    || fail "bench --peak-again 0: $(tail -1 pa.err)"
out=$("$PY" - pa.txt "$XDG_CACHE_HOME/cubist" <<'PY'
import glob, re, sys
best = {"fp32": 0.0, "bf16": 0.0}
bad, rows, again = [], 0, 0
for l in open(sys.argv[1]):
    m = re.match(r"sgemm peak ([0-9.]+)", l) or re.search(r"again .*: sgemm ([0-9.]+)", l)
    if m: best["fp32"] = max(best["fp32"], float(m.group(1)))
    m = re.match(r"bf16 GEMM peak ([0-9.]+)", l) or re.search(r"again .*, bf16 ([0-9.]+)", l)
    if m: best["bf16"] = max(best["bf16"], float(m.group(1)))
    again += "measured again" in l
    for kind, pat in (("fp32", r"^  cubist .*MFU +([0-9.]+)% of ([0-9]+)"),
                      ("bf16", r"^  bf16 .*MFU +([0-9.]+)% of the bf16 GEMM's ([0-9]+)")):
        m = re.search(pat, l)
        if m:
            rows += 1
            # the row prints the peak to the unit, the peak lines to 0.1:
            # within 0.5 + 0.05 of each other (Python's round(522.5) is 522
            # where printf's %.0f of 522.53 is 523)
            if abs(int(m.group(2)) - best[kind]) > 0.551:
                bad.append(f"{kind} row against {m.group(2)}, highest so far {best[kind]}")
files = glob.glob(sys.argv[2] + "/peak-*-1")
c16 = [f for f in files if "/peak-bf16-" in f]
c32 = [f for f in files if f not in c16]
for kind, files in (("fp32", c32), ("bf16", c16)):
    v = [float(open(f).read()) for f in files]
    if not v or abs(max(v) - best[kind]) > 0.051:
        bad.append(f"{kind} cache {v}, highest printed {best[kind]}")
ok = not bad and rows == 4 and again == 2
print(("OK" if ok else "BAD") + f" {rows} rows, {again} re-measurements, highest {best}; {bad}")
PY
)
[[ $out == OK* ]] && pass "bench --peak-again 0: ${out#OK }" || fail "bench --peak-again: $out"
"$C" bench --peak-again -1 >/dev/null 2>pa.err; st=$?
[ $st = 2 ] && grep -q -- "--peak-again" pa.err && [ "$(wc -l <pa.err)" = 1 ] \
    && pass "bench --peak-again -1: status 2, one line" || fail "bench --peak-again -1: status $st, $(cat pa.err)"

# ---------------------------------------------------------------- bench --json
B=(bench --json --layers 1 --d-model 32 --heads 2 --vocab 256 --ctx 64 --seq-lens 16 --batch 2 --steps 1 --threads 1)
for torch in no-torch torch; do
    flag=(); [ $torch = no-torch ] && flag=(--no-torch)
    "$C" "${B[@]}" "${flag[@]}" >b.json 2>b.err || fail "bench --json ${flag[*]}: $(tail -1 b.err)"
    out=$("$PY" - b.json $torch <<'PY' 2>&1
import json, sys
j = json.load(open(sys.argv[1]))
need = ["tokens_per_s", "model_gflops", "mfu", "pytorch_tokens_per_s", "ratio_vs_pytorch", "params", "runs"]
miss = [k for k in need if k not in j]
N = 256 * 32 + 64 * 32 + 12 * 32 * 32 + 13 * 32 + 2 * 32  # L1 C32 context 64 V256
bad = miss + ([] if j.get("params") == N else [f"params {j.get('params')} != {N}"])
bad += [] if j["tokens_per_s"] > 0 and j["model_gflops"] > 0 and j["mfu"] > 0 else ["non-positive figures"]
w = j["runs"][0].get("windows")
# one thread: no cores' round trip to report
rts = [j["runs"][0].get(k, 0) for k in ("round_trip_ns", "window_round_trip_ns")]
bad += [] if rts == [None, None] else [f"round trips {rts} with one thread"]
if sys.argv[2] == "no-torch":
    bad += [] if j["pytorch_tokens_per_s"] is None and j["ratio_vs_pytorch"] is None else ["PyTorch figures not null"]
    bad += [] if w == 1 else [f"{w} windows without PyTorch (1: nothing to match)"]
else:
    # cubist's step is timed in as many windows as PyTorch's figure is the best of (its programs)
    bad += [] if isinstance(w, int) and w > 1 else [f"{w} windows: PyTorch's figure is the best of its programs"]
    r = j["tokens_per_s"] / j["pytorch_tokens_per_s"]
    bad += [] if abs(j["ratio_vs_pytorch"] - r) <= 2e-3 * r else [f"ratio {j['ratio_vs_pytorch']} != {r:.3f}"]
print("; ".join(bad) if bad else f"OK params {N}, ratio {j['ratio_vs_pytorch']}")
PY
)
    [[ $out == OK* ]] && pass "bench --json ($torch): valid JSON with the required keys; ${out#OK }" || fail "bench --json ($torch): $out"
done
# two threads: a cache line's round trip between their cores before and
# after the rows and before the fastest window, each a real time (under
# the probe's 50 ms budget)
out=$("$C" bench --json --layers 1 --d-model 32 --heads 2 --vocab 256 --ctx 64 --seq-lens 16 --batch 2 \
    --steps 1 --threads 2 --no-torch 2>b.err | "$PY" -c '
import json, sys
r = json.load(sys.stdin)["runs"][0]
rt = r.get("round_trip_ns", []) + [r.get("window_round_trip_ns")]
ok = len(rt) == 3 and all(isinstance(x, float) and 1 < x < 5e7 for x in rt)
print(("OK " if ok else "BAD ") + str(rt))')
[[ $out == OK* ]] && pass "bench --json --threads 2: the cores' round trip before, after and before the fastest window, ${out#OK } ns" \
    || fail "bench --json --threads 2: round_trip_ns $out $(tail -1 b.err)"
"$C" "${B[@]}" --torch-script "$d/nothere.py" >/dev/null 2>b.err
rc=$?
[ $rc = 1 ] && grep -q "PyTorch benchmark failed.*nothere.py" b.err && pass "bench: a failing PyTorch run fails the benchmark: $(cat b.err)" \
    || fail "bench with a broken PyTorch script: exit $rc: $(cat b.err)"
# --grad-accum M: a step of M micro-batches of B sequences on both sides.
# PyTorch's accumulated step is the full batch's: the same losses over three
# steps for M=2 of B=1 as for M=1 of B=2, every variant (fp32: the sums of
# the two orders agree to about 1e-7 relative; Adam's first steps move the
# weights by the same lr-sized amounts, so 1e-4 is wide and a step that
# updated after each micro-batch, or summed instead of averaging, misses it
# by far more)
out=$("$PY" - "$ROOT/bench" 2>tb.err <<'PY'

import sys
sys.path.insert(0, sys.argv[1])
sys.argv = sys.argv[:1]
import torch
import torch_bench as tb
cfg = tb.cbref.Config(1, 32, 2, 16, 64)
tok = torch.randint(0, 64, (1, 2, 17), generator=torch.Generator().manual_seed(5))
xa, ya = tok[:, :, :16].contiguous(), tok[:, :, 1:].contiguous()
xb, yb = xa.reshape(2, 1, 16), ya.reshape(2, 1, 16)
bad = []
for name, make in tb.VARIANTS.items():
    sa, _ = make(cfg, xa, ya, False)
    sb, _ = make(cfg, xb, yb, False)
    la, lb = [sa() for _ in range(3)], [sb() for _ in range(3)]
    bad += [f"{name}: {la} vs {lb}" for a, b in zip(la, lb) if abs(a - b) > 1e-4 * abs(a)]
    s16, _ = make(cfg, xb, yb, True)
    bad += [] if abs(s16() - la[0]) < 0.05 * la[0] else [f"{name} bf16 autocast: loss far from fp32's"]
print("; ".join(bad) if bad else f"OK {len(tb.VARIANTS)} variants")
PY
)
[[ $out == OK* ]] && pass "torch_bench.py --grad-accum: 2 micro-batches of 1 give the losses of one of 2 (${out#OK })" \
    || fail "torch_bench.py accumulation: $(tail -c 600 <<<"$out") $(tail -c 300 tb.err)"
out=$("$C" bench --json --layers 1 --d-model 32 --heads 2 --vocab 256 --ctx 64 --seq-lens 16 --batch 1 \
    --grad-accum 3 --steps 1 --threads 1 2>b.err | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
ok = j.get("grad_accum") == 3 and j.get("batch") == 1 and j["pytorch_tokens_per_s"] > 0 and j["tokens_per_s"] > 0
print(("OK " if ok else "BAD ") + str({k: j.get(k) for k in ("batch", "grad_accum", "tokens_per_s", "pytorch_tokens_per_s")}))')
[[ $out == OK* ]] && pass "bench --grad-accum 3: both sides run 3 micro-batches a step, ${out#OK }" \
    || fail "bench --grad-accum 3: $out $(tail -1 b.err)"
"$C" bench --grad-accum 0 >/dev/null 2>b.err
rc=$?
[ $rc = 2 ] && [ "$(wc -l <b.err)" = 1 ] && grep -q -- "--grad-accum" b.err \
    && pass "bench --grad-accum 0 refused: $(cat b.err)" || fail "bench --grad-accum 0: exit $rc: $(cat b.err)"
# the model benches' --rounds: the rows R times, each side's best kept
out=$("$C" bench --model bert --layers 1 --d-model 32 --heads 2 --seq-len 16 --batch 2 --vocab 64 \
    --steps 1 --threads 1 --no-torch --rounds 2 2>&1)
grep -q "the best of 2 rounds" <<<"$out" && grep -Eq "^cubist: +[1-9][0-9]* tokens/s" <<<"$out" \
    && pass "bench --model bert --rounds 2: runs both rounds and keeps the best" \
    || fail "bench --model bert --rounds 2: $out"
# --vs-gpt: the GPT benchmark's rows (a GPT of the same depth and width) in
# the same rounds, and BERT's ratio over GPT's, which the printed figures give
out=$("$C" bench --model bert --layers 1 --d-model 32 --heads 2 --seq-len 16 --batch 2 --vocab 64 \
    --steps 1 --rounds 2 --vs-gpt 2>&1)
chk=$(awk '/^cubist: / {c = $2} /^PyTorch: / {t = $2}
           /^GPT \(1 layers, d 32, 2 heads/ {for (i = 2; i < NF; i++) {if ($i == "tokens/s," && $(i - 2) == "cubist") g = $(i - 1); if ($(i - 1) == "PyTorch" && $i ~ /;$/) gt = $i + 0}}
           /ratio over the GPT benchmark.s:/ {r = $NF}
           END {w = (c / t) / (g / gt); print (c > 0 && t > 0 && g > 0 && gt > 0 && r > 0 && (r - w) ^ 2 <= (0.01 * w + 0.006) ^ 2) ? "OK " r : "bad c " c " t " t " g " g " gt " gt " r " r}' <<<"$out")
[[ $chk == OK* ]] && pass "bench --model bert --vs-gpt: both ratios from the same rounds, their ratio ${chk#OK }" \
    || fail "bench --model bert --vs-gpt: $chk: $(tail -c 600 <<<"$out")"
"$C" bench --model bert --vs-gpt --no-torch >/dev/null 2>b.err
rc=$?
[ $rc = 2 ] && [ "$(wc -l <b.err)" = 1 ] && grep -q -- "drop --no-torch" b.err \
    && pass "bench --model bert --vs-gpt --no-torch refused: $(cat b.err)" \
    || fail "bench --model bert --vs-gpt --no-torch: exit $rc: $(cat b.err)"
"$C" bench --model bert --rounds 0 >/dev/null 2>b.err
rc=$?
[ $rc = 2 ] && [ "$(wc -l <b.err)" = 1 ] && grep -q -- "--rounds >= 1" b.err \
    && pass "bench --model bert --rounds 0 refused before measuring: $(cat b.err)" \
    || fail "bench --model bert --rounds 0: exit $rc: $(cat b.err)"
"$C" bench --seq-lens abc >/dev/null 2>b.err
rc=$?
[ $rc = 2 ] && grep -q -- "--seq-lens 'abc'" b.err && pass "bench --seq-lens abc refused before measuring: $(cat b.err)" \
    || fail "bench --seq-lens abc: exit $rc: $(cat b.err)"

# ---------------------------------------------------------------- output paths under --pp
for flag in --save --log; do
    timeout "$TMO" "${launch[@]}" -np 2 "$C" train --data tr.bin "${M[@]}" --steps 2 --pp 2 $flag /nonexistent/dir/x \
        >out 2>err
    rc=$?
    [ $rc = 2 ] && [ "$(wc -l <err)" = 1 ] && grep -q -- "$flag /nonexistent/dir/x: cannot write there" err \
        && pass "--pp 2 $flag /nonexistent/dir/x: exit 2 before training: $(cat err)" \
        || fail "--pp 2 $flag unwritable: exit $rc, $(wc -l <err) lines: $(head -c 300 err)"
done

# ---------------------------------------------------------------- --help against the docs/cli.md
# a flag is documented in the command's docs/cli.md section or in another
# reference page of docs/ (docs/data.md: tokenizers, shards, weights, plots)
docflags=$(cat "$ROOT"/docs/*.md | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u)
for cmd in train sample prepare bench plot bleu; do
    sec=$(awk -v h="### cubist $cmd" '$0 == h {on = 1; next} /^##/ {on = 0} on' "$ROOT/docs/cli.md")
    helpflags=$("$C" $cmd --help | sed -nE 's/^  (--[a-z0-9-]+).*/\1/p' | sort -u)
    readme=$(grep -oE -- '--[a-z0-9][a-z0-9-]*' <<<"$sec" | sort -u)
    undoc=$(comm -23 <(echo "$helpflags") <(sort -u <(echo "$readme") <(echo "$docflags")) | tr '\n' ' ')
    unknown=$(comm -13 <(echo "$helpflags") <(echo "$readme") | tr '\n' ' ')
    stale=$("$C" $cmd --help | grep -i "not implemented")
    [ -z "$undoc" ] && [ -z "$stale" ] && pass "cubist $cmd --help: all $(wc -w <<<"$helpflags") flags in the docs/cli.md section or docs/" \
        || fail "cubist $cmd --help: flags missing from docs/cli.md '### cubist $cmd' and docs/: '$undoc' ${stale:+stale: $stale}"
    # docs/cli.md flags of the section that no --help lists (bench modes live in their own --help)
    others=$("$C" $cmd --help; [ $cmd = bench ] && for m in --allreduce --tp-compare --pipeline; do "$C" bench $m --help; done)
    missing=""
    for f in $unknown; do grep -qF -- "$f" <<<"$others" || missing+="$f "; done
    [ -z "$missing" ] && pass "docs/cli.md '### cubist $cmd': every flag it names is in --help" \
        || fail "docs/cli.md '### cubist $cmd' names flags no --help lists: $missing"
done
finish
