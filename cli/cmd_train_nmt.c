/* `cubist train --model nmt`: the translation encoder-decoder
 * (cb_model_declare_nmt) on pair files of `cubist prepare --pairs`, by the
 * one training loop (cb_train_run with the task of src/train/task_nmt.c):
 * this file parses the flags. docs/nmt.md. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "train/check.h"
#include "train/train.h"

static const char EPILOG[] =
    "The Transformer encoder-decoder of Vaswani et al. (Transformer-base by default:\n"
    "6 + 6 blocks, d 512, 8 heads, FFN 2048 with ReLU, label smoothing 0.1, post-LN;\n"
    "--pre-ln for pre-LN with a final LayerNorm on each stack), fixed sinusoidal\n"
    "positions, one embedding shared by the source, the decoder's input and the\n"
    "output projection. Dropout --dropout (0.1) on each sublayer's output before\n"
    "its residual add and on the embeddings + positions of both stacks, in training\n"
    "steps only, the same mask under every layout; the looked-up rows are scaled by\n"
    "sqrt(d) in front of the positions (--no-emb-scale: not), the output\n"
    "projection is not.\n"
    "Data: pair files of `cubist prepare --pairs` (vocabulary: the tokenizer's V +\n"
    "3, padding V, BOS V+1, EOS V+2). A step is one batch of pairs bucketed by\n"
    "length (at most --batch pairs and --max-tokens padded tokens, rows x T), the\n"
    "batches of an epoch shuffled by --seed and the epoch; rows the batch leaves\n"
    "are padding and count nothing. The loss is the smoothed cross-entropy mean\n"
    "over the step's real target tokens. val_loss: --val-data's pairs in file\n"
    "order, --eval-batches batches (the step's rows each) every --eval-every steps.\n"
    "val_bleu (--bleu-pairs N): corpus BLEU-4 of the greedy translations of the\n"
    "first N held-out pairs (`cubist translate`'s decoding) against their targets,\n"
    "at each evaluation; one stage, no --tp or --recompute (each --dp rank decodes).\n"
    "Parallel flags: --dp --zero --tp (1-D) --pp --schedule --micro-batches ...;\n"
    "--embed-grad dense|sparse|split (sparse, split: --tp 1 --pp 1). --dump-batches F\n"
    "writes each step's rows (int32: T source, T decoder input, T targets, source\n"
    "and target lengths) for the PyTorch test; --dump-grads F step 1's gradients.\n"
    "Checkpoints and stops as for the GPT (the one training loop): --save F or\n"
    "DIR/, --resume continues bit for bit, SIGTERM/SIGINT/--exit-signal save and\n"
    "exit 75.\n";

int cmd_train_nmt(int argc, char **argv) {
    cb_train_opts o;
    cb_train_defaults(&o);
    o.steps = 100, o.seed = 1337;
    o.opt = (cb_adamw_config){.lr = 7e-4f, .min_lr = 7e-5f, .beta1 = 0.9f, .beta2 = 0.98f,
                              .eps = 1e-9f, .weight_decay = 0.0f, .clip = 1.0f,
                              .decay_embeddings = 1};
    cb_nmt_task_opts nt = {.c = {.enc_layers = 6, .dec_layers = -1, .d_model = 512, .n_head = 8,
                                 .d_ff = 2048, .smoothing = 0.1f, .dropout = 0.1f}};
    o.family = &cb_train_nmt, o.family_opts = &nt;
    const char *model = NULL;
    int batch = 8, no_scale = 0;
    cli_flag flags[80] = {
        {"model", ARG_STR, &model, "nmt here (gpt: the default trainer)"},
        {"data", ARG_STR, &o.data, "training pairs (`cubist prepare --pairs`)"},
        {"val-data", ARG_STR, &o.val_data, "held-out pairs for val_loss"},
        {"layers", ARG_INT, &nt.c.enc_layers, "encoder blocks (6)"},
        {"dec-layers", ARG_INT, &nt.c.dec_layers, "decoder blocks (default: --layers)"},
        {"d-model", ARG_INT, &nt.c.d_model, "hidden width (512)"},
        {"heads", ARG_INT, &nt.c.n_head, "attention heads (8)"},
        {"ffn", ARG_INT, &nt.c.d_ff, "feed-forward width (2048)"},
        {"smoothing", ARG_FLOAT, &nt.c.smoothing, "label smoothing (0.1)"},
        {"pre-ln", ARG_BOOL, &nt.c.pre_ln, "pre-LayerNorm blocks (default post-LN, the paper's)"},
        {"dropout", ARG_FLOAT, &nt.c.dropout, "dropout of sublayer outputs and embeddings (0.1)"},
        {"no-emb-scale", ARG_BOOL, &no_scale, "no sqrt(d-model) scale of the embedding's rows"},
        {"seq-len", ARG_INT, &nt.seq_len, "positions a side (default: the files' longest side + 1)"},
        {"max-tokens", ARG_INT, &nt.max_tokens, "padded tokens a step (default: --batch x T)"},
        {"eval-every", ARG_INT, &o.eval_every, "val_loss every N steps (needs --val-data; 0 off)"},
        {"eval-batches", ARG_INT, &o.eval_batches, "held-out batches per validation (10)"},
        {"bleu-pairs", ARG_INT, &nt.bleu_pairs, "val_bleu at each evaluation: greedy BLEU of the "
                                                "first N held-out pairs (0 off)"},
        {"batch", ARG_INT, &batch, "pairs per step at most, over every data-parallel rank (8)"},
        {"seed", ARG_U64, &o.seed, "seed of initialisation and batch order (1337)"},
        {"dump-batches", ARG_STR, &nt.dump_batches, "write every step's rows (int32, see below)"},
    };
    int n = 0, help = 0;
    while (flags[n].name) n++;
    n += cli_train_opt_flags(&o, flags + n);
    n += cli_train_run_flags(&o, flags + n);
    cli_grad_accum_alias(argc, argv);
    cb_err e = {0};
    int rc = cli_train_parse(argc, argv, flags, n, "--model nmt --data PAIRS [--val-data PAIRS] [flags]",
                             EPILOG, &o, &help, &e);
    if (help && !rc) return 0;
    if (nt.c.dec_layers < 0) nt.c.dec_layers = nt.c.enc_layers;
    nt.c.emb_scale = !no_scale;
    if (!rc && !o.data)
        rc = cb_fail(&e, CB_EINPUT, "--model nmt needs --data PAIRS (`cubist prepare --pairs`)");
    return cli_train_family_run(argc, argv, &o, batch, "tokens_per_s", rc, &e);
}
