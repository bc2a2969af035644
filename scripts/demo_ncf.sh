#!/usr/bin/env bash
# make demo MODEL=ncf: NeuMF on the Debian package dependency graph of this
# machine's apt lists (each package a user, each package it depends on an
# item), HR@10 / NDCG@10 of leave-last-out ranking against the most-popular
# baseline on the same candidates.
set -eu
BUILD=${BUILD:-build}
C=$BUILD/cubist
mkdir -p data out
if [ ! -s data/debian_deps.bin ]; then
    /usr/bin/python3 scripts/debian_deps.py > data/debian_deps.tsv
    $C prepare --interactions data/debian_deps.tsv --output data/debian_deps.bin
fi
echo "data: $(wc -l < data/debian_deps.tsv) (package, dependency) pairs, $(wc -l < data/debian_deps.bin.users) packages depending, $(wc -l < data/debian_deps.bin.items) depended on"
# docs/models.md: smaller factors, 16 negatives and weight decay did better
# on this graph than the paper's 64 / 256-128-64 / 4 (which overfit it)
$C train --model ncf --data data/debian_deps.bin --negatives 16 --factors 32 --mlp 64,32,16 \
    --batch 1024 --steps ${DEMO_STEPS:-15000} --lr 2e-3 --min-lr 1e-4 --weight-decay 0.2 \
    --eval-every ${DEMO_EVAL_EVERY:-2500} --eval-users 1000 \
    --save out/ncf.safetensors --log out/ncf.jsonl | grep '^eval'

/usr/bin/python3 - out/ncf.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"val_hr10"' in l]
r = rows[-1]
print(f"step {r['step']}: NCF HR@10 {r['val_hr10']:.3f} NDCG@10 {r['val_ndcg10']:.3f}; "
      f"most popular HR@10 {r['pop_hr10']:.3f} NDCG@10 {r['pop_ndcg10']:.3f} (1000 users, "
      f"the held-out item among 99 unobserved ones)")
PY
