#!/usr/bin/python3
"""NeuMF (He et al. 2017) in PyTorch, op by op, against cubist's NCF.

  ncf_ref.py train --init INIT.st --batches B.bin --log LOG --grads G.st
                   --batch B --steps S --mlp 256,128,64 [optimizer flags]

Retrains from cubist's initial weights (`cubist train --model ncf --steps 0
--save`) on the rows cubist drew (--dump-batches: int32 user, item, label
per row, negatives included) with torch.optim.AdamW in float64, and checks
cubist's per-step loss (1e-5 relative: float32 against float64 over a few
hundred rows and ten Adam steps, measured ~1e-7) and its step-1 gradients
(every tensor, ||a - b|| / ||b|| <= 1e-4: float32 sums of at most a few
hundred terms). The model: GMF = gmf.user[u] * gmf.item[i]; MLP = ReLU
linears (weights [in, out]) on [mlp.user[u] | mlp.item[i]]; logit =
predict . [GMF | MLP]; loss = mean binary cross-entropy with logits.
"""
import argparse, json, math, sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from cbref import Checks, read_safetensors, lr_at  # noqa: E402


def forward(P, nl, rows):
    u, i, y = rows[:, 0], rows[:, 1], rows[:, 2]
    g = P['gmf.user.weight'][u] * P['gmf.item.weight'][i]
    h = torch.cat([P['mlp.user.weight'][u], P['mlp.item.weight'][i]], dim=1)
    for l in range(nl):
        h = torch.relu(h @ P[f'mlp.{l}.weight'] + P[f'mlp.{l}.bias'])
    z = torch.cat([g, h], dim=1) @ P['predict.weight']
    return F.binary_cross_entropy_with_logits(z, y.to(z.dtype))


def decays(name):
    return name.endswith('.weight')  # the tables, the linears' weights and predict; not biases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('mode', choices=['train'])
    ap.add_argument('--init', required=True)
    ap.add_argument('--batches', required=True)
    ap.add_argument('--log', required=True)
    ap.add_argument('--grads', required=True)
    ap.add_argument('--batch', type=int, required=True)
    ap.add_argument('--steps', type=int, required=True)
    ap.add_argument('--mlp', default='256,128,64')
    ap.add_argument('--lr', type=float, default=1e-3)
    ap.add_argument('--min-lr', type=float, default=1e-4)
    ap.add_argument('--warmup', type=int, default=0)
    ap.add_argument('--weight-decay', type=float, default=0.0)
    ap.add_argument('--beta1', type=float, default=0.9)
    ap.add_argument('--beta2', type=float, default=0.999)
    ap.add_argument('--eps', type=float, default=1e-8)
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    ck = Checks()
    init, _ = read_safetensors(a.init)
    P = {k: torch.tensor(np.asarray(v), dtype=torch.float64, requires_grad=True)
         for k, v in init.items()}
    nl = len(a.mlp.split(',')) - 1
    rows = np.fromfile(a.batches, dtype='<i4').reshape(-1, a.batch, 3)
    ck.check(rows.shape[0] == a.steps, 'ncf batches', f'{rows.shape[0]} steps dumped')
    log = [json.loads(l) for l in open(a.log) if l.strip()]
    names = sorted(P)
    opt = torch.optim.AdamW(
        [{'params': [P[n] for n in names if decays(n)], 'weight_decay': a.weight_decay},
         {'params': [P[n] for n in names if not decays(n)], 'weight_decay': 0.0}],
        lr=0.0, betas=(a.beta1, a.beta2), eps=a.eps)
    got_g, _ = read_safetensors(a.grads)
    negs = int((rows[:, :, 2] == 0).sum())
    print(f'# {a.steps} steps of {a.batch} rows, {negs} of them sampled negatives', flush=True)
    for s in range(a.steps):
        opt.zero_grad()
        loss = forward(P, nl, torch.tensor(rows[s].astype(np.int64)))
        loss.backward()
        ref, got = float(loss), float(log[s]['loss'])
        rel = abs(got - ref) / abs(ref)
        ck.check(rel <= 1e-5, f'ncf loss step {s + 1}', f'cubist {got:.9g} torch {ref:.9g} rel {rel:.2e} tol 1e-5')
        if s == 0:
            for n in names:
                g, r = np.asarray(got_g[n], np.float64), P[n].grad.numpy()
                err = float(np.linalg.norm(g - r)) / max(float(np.linalg.norm(r)), 1e-30)
                ck.check(err <= 1e-4, f'ncf grad {n:<18s}', f'||d||/||ref|| {err:.2e} tol 1e-4')
        lr = lr_at(s, a.lr, a.min_lr, a.warmup, a.steps)
        for grp in opt.param_groups:
            grp['lr'] = lr
        opt.step()
    return ck.summary('ncf against PyTorch')


if __name__ == '__main__':
    sys.exit(main())
