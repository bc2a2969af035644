#!/usr/bin/python3
"""PyTorch baseline for `cubist bench --model ncf`: NeuMF's training step
(forward, backward, AdamW on every parameter, as cubist's dense update) in
float32 on N CPU threads, on uniform random (user, item, label) rows; prints
ONE JSON line {"samples_per_s": ..., "step_ms": ..., "params": ...}. The model
is tests/torch/ncf_ref.py's (GMF and ReLU MLP tower on their own tables,
concatenated into one logit without bias). Run it as cubist does:
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_ncf.py
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
import cbref  # noqa: E402

cbref.warn_env_for_bench()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=100000)
    ap.add_argument("--items", type=int, default=10000)
    ap.add_argument("--factors", type=int, default=64)
    ap.add_argument("--mlp", default="256,128,64")
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    mlp = [int(x) for x in a.mlp.split(",")]
    E = mlp[0] // 2
    P = {"gu": torch.randn(a.users, a.factors) * 0.1, "gi": torch.randn(a.items, a.factors) * 0.1,
         "mu": torch.randn(a.users, E) * 0.1, "mi": torch.randn(a.items, E) * 0.1,
         "h": torch.randn(a.factors + mlp[-1]) * 0.1}
    for l in range(1, len(mlp)):
        P[f"w{l}"] = torch.randn(mlp[l - 1], mlp[l]) * (2.0 / mlp[l - 1]) ** 0.5
        P[f"b{l}"] = torch.zeros(mlp[l])
    for t in P.values():
        t.requires_grad_(True)
    opt = torch.optim.AdamW(list(P.values()), lr=1e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)

    def step():
        u = torch.randint(a.users, (a.batch,), generator=g)
        i = torch.randint(a.items, (a.batch,), generator=g)
        y = torch.randint(2, (a.batch,), generator=g).float()
        opt.zero_grad()
        x = P["gu"][u] * P["gi"][i]
        h = torch.cat([P["mu"][u], P["mi"][i]], dim=1)
        for l in range(1, len(mlp)):
            h = torch.relu(h @ P[f"w{l}"] + P[f"b{l}"])
        z = torch.cat([x, h], dim=1) @ P["h"]
        F.binary_cross_entropy_with_logits(z, y).backward()
        opt.step()

    step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = (time.perf_counter() - t0) / a.steps
    print(json.dumps({"samples_per_s": a.batch / dt, "step_ms": dt * 1e3,
                      "params": sum(t.numel() for t in P.values()), "threads": a.threads,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
