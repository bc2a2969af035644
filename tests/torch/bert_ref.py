#!/usr/bin/python3
"""BERT / RoBERTa masked-language models in PyTorch, op by op, against cubist's.
  bert_ref.py --init INIT.st --batches B.bin --log LOG --grads G.st --model bert
              --batch B --seq-len T --layers L --heads H --steps S [optimizer flags]
  bert_ref.py --runs FILE       one such run per line of FILE, arguments
                                tab-separated, each after a line '@@ K'
Retrains from cubist's initial weights (`cubist train --model bert --steps 0
--save`) on the rows cubist built (--dump-batches: per row int32 T token ids,
T token types, T targets (-1: not masked), the length) with torch.optim.AdamW
in float64, and checks cubist's loss at every step (1e-5 relative: float32
against float64 over a few thousand terms and ten Adam steps) and its step-1
gradients (every tensor, ||a - b|| / ||b|| <= 1e-4: float32 sums of at most
a few thousand terms).

The model is Hugging Face's BertForMaskedLM written out: x = word[ids] +
pos[t] + type[types], LayerNorm; per block x = LN(x + O(attn(x))), x =
LN(x + W2 gelu_erf(W1 x)), attention bidirectional with keys at or past a
sequence's length masked and padded query rows zero (cubist's padded
attention; Hugging Face leaves padded rows' outputs unmasked, which only
changes values at padding, where no target is); the head LN(gelu_erf(W x))
@ word^T + bias; cross-entropy over targets >= 0, mean over the step's.
cubist's layout: one QKV linear [C, 3C], weights [in, out], LayerNorm eps
1e-5.
"""
import argparse, json, math, sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from cbref import Checks, read_safetensors, lr_at, clip_grads, run_lines  # noqa: E402


def attention(qkv, NH, lens, drop=lambda p: p):
    B, T, C3 = qkv.shape
    C, hs = C3 // 3, C3 // 3 // NH
    heads = lambda x: x.reshape(B, T, NH, hs).transpose(1, 2)  # noqa: E731
    q, k, v = (heads(t) for t in qkv.split(C, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(hs)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    mask = ((j < lens[:, None, None]) & (i < lens[:, None, None]))[:, None]
    p = drop(torch.where(mask, s.masked_fill(~mask, -1e30).softmax(-1), torch.zeros_like(s)))
    return (p @ v).transpose(1, 2).reshape(B, T, C)


# ------------------------------------------------------------------ dropout
# cubist's counter-based masks (src/util/rng.c, cb_op_dropout): element i of
# a value (global row x features + feature) of dropout number ix is kept in
# step s when U(at(key(seed, "dropout.<ix>"), s), i) >= p, U = the top 24
# bits of splitmix64's finaliser of key + (i + 1) x golden, as a float.
M64, GOLD = (1 << 64) - 1, 0x9E3779B97F4A7C15


def mix(z):  # Python int or numpy uint64 array
    if isinstance(z, int):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def rng_key(seed, name):
    h = 0xCBF29CE484222325
    for ch in name.encode():
        h = ((h ^ ch) * 0x100000001B3) & M64
    return mix(seed ^ mix(h))


def keep(seed, name, step, shape, p):
    """The mask of the value (shape) of the dropout whose key is cb_rng_key(seed, name) in
    step `step`: hidden dropouts are named "dropout.<declaration index>", the attention
    probabilities' dropout (cb_layer_attention_dropout) by the attention layer's name, the
    index of (b, h, i, j) of the step's (B, NH, T, T) probabilities ((b NH + h) T + i) T + j."""
    key = mix((rng_key(seed, name) + (step + 1) * GOLD) & M64)
    i = np.arange(int(np.prod(shape)), dtype=np.uint64)
    u = (mix(np.uint64(key) + (i + np.uint64(1)) * np.uint64(GOLD)) >> np.uint64(40)).astype(np.float32)
    return torch.from_numpy(u / np.float32(16777216.0) >= np.float32(p)).reshape(shape)


def dropper(a, step):
    """cubist's dropout as a function applied in cubist's declaration order
    (a.dropout, a.seed; a.native_dropout: PyTorch's own generator, for the
    benchmarks); the scale 1/(1-p) rounded to float32 as cubist's"""
    ix = [0]

    def drop(x):
        if a.dropout == 0:
            return x
        if getattr(a, 'native_dropout', False):
            return F.dropout(x, a.dropout)
        k = keep(a.seed, f'dropout.{ix[0]}', step, tuple(x.shape), a.dropout)
        ix[0] += 1
        return torch.where(k, x * float(np.float32(1) / (np.float32(1) - np.float32(a.dropout))), 0)
    return drop


def names(model):
    if model == 'bert':
        return 'bert', 'cls.predictions.transform.dense', 'cls.predictions.transform.LayerNorm', 'cls.predictions.bias'
    return 'roberta', 'lm_head.dense', 'lm_head.layer_norm', 'lm_head.bias'


def forward(P, a, ids, types, tg, lens, step=0):
    enc, head, head_ln, bias = names(a.model)
    ln = lambda x, n: F.layer_norm(x, x.shape[-1:], P[n + '.weight'], P[n + '.bias'], 1e-5)  # noqa: E731
    lin = lambda x, n: x @ P[n + '.weight'] + P[n + '.bias']  # noqa: E731
    gelu = lambda x: F.gelu(x)  # noqa: E731  (the erf form)
    T = ids.shape[1]
    drop = dropper(a, step)

    def attn_drop(name):  # the probabilities' dropout of attention layer `name`
        pa = getattr(a, 'attn_dropout', 0.0)
        if pa == 0:
            return lambda p: p
        if getattr(a, 'native_dropout', False):
            return lambda p: F.dropout(p, pa)
        s = float(np.float32(1) / (np.float32(1) - np.float32(pa)))
        return lambda p: torch.where(keep(a.seed, name, step, tuple(p.shape), pa), p * s, 0)
    e = f'{enc}.embeddings.'
    x = P[e + 'word_embeddings.weight'][ids] + P[e + 'position_embeddings.weight'][:T] + \
        P[e + 'token_type_embeddings.weight'][types]
    x = drop(ln(x, e + 'LayerNorm'))
    for l in range(a.layers):
        p = f'{enc}.encoder.layer.{l}.'
        h = attention(lin(x, p + 'attention.self.qkv'), a.heads, lens, attn_drop(p + 'attention.self'))
        h = drop(lin(h, p + 'attention.output.dense'))
        x = ln(x + h, p + 'attention.output.LayerNorm')
        h = drop(lin(gelu(lin(x, p + 'intermediate.dense')), p + 'output.dense'))
        x = ln(x + h, p + 'output.LayerNorm')
    h = ln(gelu(lin(x, head)), head_ln)
    if getattr(a, 'masked_rows', False):  # the benchmark's variant: the decoder on the masked rows only
        h, tg = h[tg >= 0], tg[tg >= 0]
    logits = h @ P[e + 'word_embeddings.weight'].t() + P[bias]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1), ignore_index=-1)


def check_masking(a, ck, rows, T, base):
    """BERT's create_pretraining_data rule (src/train/task_bert.c): a row of length n has
    exactly min(P, max(1, round(n x mask_prob))) targets (n rounded half up in float32, as
    cubist; P = --max-predictions, default round(T x mask_prob)), each the original text
    token (below the special ids) at a text position of the row."""
    f32 = np.float32
    P = a.max_predictions or max(1, int(f32(T) * f32(a.mask_prob) + f32(0.5)))
    bad = 0
    for row in rows.reshape(-1, 3 * T + 1):
        n, tg = int(row[3 * T]), row[2 * T:3 * T]
        want = min(P, max(1, int(f32(n) * f32(a.mask_prob) + f32(0.5))))
        at = np.nonzero(tg >= 0)[0]
        bad += len(at) != want or (tg[at] >= base).any() or (at >= n).any() or (at == 0).any()
    ck.check(bad == 0, f'{a.model} masking', f'{rows.size // (3 * T + 1)} rows, {bad} off the rule, P {P}')


def hf_forward(H, a, ids, types, tg, lens):
    """The same network read from Hugging Face's layout (scripts/bert_to_hf.py's output):
    separate query, key, value, nn.Linear weights [out, in], the decoder's own tensors,
    RoBERTa's positions from row 2. No dropout (an evaluation)."""
    enc, head, head_ln, _ = names(a.model)
    dec = 'lm_head.decoder' if a.model == 'roberta' else 'cls.predictions.decoder'
    ln = lambda x, n: F.layer_norm(x, x.shape[-1:], H[n + '.weight'], H[n + '.bias'], 1e-5)  # noqa: E731
    lin = lambda x, n: x @ H[n + '.weight'].t() + H[n + '.bias']  # noqa: E731
    B, T = ids.shape
    e, off = f'{enc}.embeddings.', 2 if a.model == 'roberta' else 0
    x = H[e + 'word_embeddings.weight'][ids] + H[e + 'position_embeddings.weight'][off:off + T] + \
        H[e + 'token_type_embeddings.weight'][types]
    x = ln(x, e + 'LayerNorm')
    for l in range(a.layers):
        p = f'{enc}.encoder.layer.{l}.'
        q, k, v = (lin(x, p + 'attention.self.' + n) for n in ('query', 'key', 'value'))
        C = q.shape[-1]
        hs = C // a.heads
        sp = lambda t: t.reshape(B, T, a.heads, hs).permute(0, 2, 1, 3)  # noqa: E731
        s = sp(q) @ sp(k).transpose(-1, -2) / math.sqrt(hs)
        keymask = (torch.arange(T)[None, :] < lens[:, None])[:, None, None, :]
        att = torch.softmax(s.masked_fill(~keymask, float('-inf')), -1)
        o = (att @ sp(v)).permute(0, 2, 1, 3).reshape(B, T, C)
        o = o * (torch.arange(T)[None, :] < lens[:, None])[..., None]  # padded queries: zero
        x = ln(x + lin(o, p + 'attention.output.dense'), p + 'attention.output.LayerNorm')
        x = ln(x + lin(F.gelu(lin(x, p + 'intermediate.dense')), p + 'output.dense'), p + 'output.LayerNorm')
    h = ln(F.gelu(lin(x, head)), head_ln)
    logits = h @ H[dec + '.weight'].t() + H[dec + '.bias']
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1), ignore_index=-1)


def check_hf(a, ck, P, r, T):
    """--hf FILE: the converted weights give the loss of cubist's layout on the first batch."""
    H = {k: torch.tensor(np.asarray(v), dtype=torch.float64) for k, v in read_safetensors(a.hf)[0].items()}
    ids, types, tg, lens = r[0, :, :T], r[0, :, T:2 * T], r[0, :, 2 * T:3 * T], r[0, :, 3 * T]
    drop, adrop, a.dropout, a.attn_dropout = a.dropout, a.attn_dropout, 0.0, 0.0
    with torch.no_grad():
        want, got = float(forward(P, a, ids, types, tg, lens)), float(hf_forward(H, a, ids, types, tg, lens))
    a.dropout, a.attn_dropout = drop, adrop
    rel = abs(got - want) / abs(want)
    ck.check(rel <= 1e-12, f'{a.model} Hugging Face layout (scripts/bert_to_hf.py)',
             f'loss {got:.15g} vs cubist layout {want:.15g}, rel {rel:.1e} tol 1e-12; {len(H)} tensors')


def decays(name):  # cubist's: weights and embeddings, not biases or LayerNorm
    return name.endswith('.weight') and 'LayerNorm' not in name and 'layer_norm' not in name


def main(argv=None):
    ap = argparse.ArgumentParser()
    for f in ('--init', '--batches', '--log', '--grads'):
        ap.add_argument(f, required=True)
    ap.add_argument('--model', choices=['bert', 'roberta'], default='bert')
    for f in ('--batch', '--seq-len', '--layers', '--heads', '--steps'):
        ap.add_argument(f, type=int, required=True)
    ap.add_argument('--lr', type=float, default=1e-3)
    ap.add_argument('--min-lr', type=float, default=1e-4)
    ap.add_argument('--warmup', type=int, default=0)
    ap.add_argument('--weight-decay', type=float, default=0.01)
    ap.add_argument('--beta1', type=float, default=0.9)
    ap.add_argument('--beta2', type=float, default=0.999)
    ap.add_argument('--eps', type=float, default=1e-6)
    ap.add_argument('--clip', type=float, default=1.0)
    ap.add_argument('--dropout', type=float, default=0.1)
    ap.add_argument('--attn-dropout', type=float, default=0.1)
    ap.add_argument('--seed', type=int, default=1337)
    ap.add_argument('--mask-prob', type=float, default=0.15)
    ap.add_argument('--max-predictions', type=int, default=0)
    ap.add_argument('--hf', help='also check this scripts/bert_to_hf.py conversion of --init')
    a = ap.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    ck = Checks()
    init, _ = read_safetensors(a.init)
    P = {k: torch.tensor(np.asarray(v), dtype=torch.float64, requires_grad=True) for k, v in init.items()}
    T = a.seq_len
    rows = np.fromfile(a.batches, dtype='<i4').reshape(-1, a.batch, 3 * T + 1)
    ck.check(rows.shape[0] == a.steps, f'{a.model} batches', f'{rows.shape[0]} steps dumped')
    log = [json.loads(l) for l in open(a.log) if l.strip()]
    names_ = sorted(P)
    opt = torch.optim.AdamW(
        [{'params': [P[n] for n in names_ if decays(n)], 'weight_decay': a.weight_decay},
         {'params': [P[n] for n in names_ if not decays(n)], 'weight_decay': 0.0}],
        lr=0.0, betas=(a.beta1, a.beta2), eps=a.eps)
    got_g, _ = read_safetensors(a.grads)
    r = torch.tensor(rows.astype(np.int64))
    print(f'# {a.model}: {a.steps} steps of {a.batch} rows, {int((r[:, :, 2 * T:3 * T] >= 0).sum())} '
          f'masked positions, lengths {int(r[:, :, 3 * T].min())}..{int(r[:, :, 3 * T].max())}', flush=True)
    check_masking(a, ck, rows, T, P[f'{names(a.model)[0]}.embeddings.word_embeddings.weight'].shape[0] - 4)
    if a.hf:
        check_hf(a, ck, P, r, T)
    for s in range(a.steps):
        opt.zero_grad()
        ids, types, tg, lens = r[s, :, :T], r[s, :, T:2 * T], r[s, :, 2 * T:3 * T], r[s, :, 3 * T]
        loss = forward(P, a, ids, types, tg, lens, s)
        loss.backward()
        ref, got = float(loss), float(log[s]['loss'])
        rel = abs(got - ref) / abs(ref)
        ck.check(rel <= 1e-5, f'{a.model} loss step {s + 1}', f'cubist {got:.9g} torch {ref:.9g} rel {rel:.2e} tol 1e-5')
        if s == 0:
            ck.check(sorted(got_g) == names_, f'{a.model} gradient names', f'{len(got_g)} tensors')
            for n in names_:
                if n not in got_g:
                    continue
                g, rf = np.asarray(got_g[n], np.float64), P[n].grad.numpy()
                err = float(np.linalg.norm(g - rf)) / max(float(np.linalg.norm(rf)), 1e-30)
                ck.check(err <= 1e-4, f'{a.model} grad {n:<58s}', f'||d||/||ref|| {err:.2e} tol 1e-4')
        clip_grads([P[n].grad for n in names_], a.clip)
        lr = lr_at(s, a.lr, a.min_lr, a.warmup, a.steps)
        for grp in opt.param_groups:
            grp['lr'] = lr
        opt.step()
    return ck.summary(f'{a.model} against PyTorch')


if __name__ == '__main__':
    sys.exit(run_lines(sys.argv[2], main) if sys.argv[1:2] == ['--runs'] else main())
