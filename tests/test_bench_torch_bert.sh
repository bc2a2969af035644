#!/bin/bash
# The PyTorch programs that `cubist bench --model bert` times
# (bench/torch_bert.py --program functional|addmm|addmm-foreach) are the
# same network: the addmm program's loss and every gradient against
# tests/torch/bert_ref.py's on the same weights (random biases and
# LayerNorms) and rows, dropout off, the decoder on every row and on the
# masked rows, full-length and padded sequences (loss 1e-5 relative,
# gradients ||d|| / ||ref|| <= 1e-5 per tensor: float32 sums in another
# order). Needs /usr/bin/python3 with torch.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-/usr/bin/python3}
if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "FAIL bench_torch_bert: $PY cannot import torch; apt-get install python3-torch"
    exit 1
fi
out=$(OMP_WAIT_POLICY=PASSIVE "$PY" \
    "$ROOT/bench/torch_bert.py" --check --layers 2 --d-model 64 --heads 4 --vocab 300 \
    --seq-len 16 --batch 3 --max-predictions 3 --threads 1 2>&1)
rc=$?
n=$(grep -c '^# check' <<<"$out")
if [ "$rc" -eq 0 ] && [ "$n" -eq 4 ]; then
    echo "PASS bench_torch_bert: the addmm program's loss and gradients equal the reference's in 4 cases"
else
    echo "FAIL bench_torch_bert: status $rc, $n of 4 cases"
fi
grep '^# check' <<<"$out"
