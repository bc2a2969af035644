/* `cubist train --model ncf`: NeuMF on a pair file, trained by the one
 * training loop (cb_train_run with the NCF task, src/train/task_ncf.c):
 * this file parses the flags and prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "train/check.h"
#include "train/train.h"

static const char EPILOG[] =
    "NeuMF (He et al. 2017): GMF factors and an MLP tower (its own embeddings of\n"
    "width mlp[0]/2, ReLU layers) concatenated into one logit; logistic loss on\n"
    "each observed (user, item) pair of --data (`cubist prepare --interactions`)\n"
    "and --negatives items per pair drawn uniformly from the user's unobserved\n"
    "ones (fixed by --seed, epoch and position). Rows of a step: the next --batch\n"
    "of a stream of epochs, each the observed pairs and their negatives shuffled.\n"
    "Evaluation (leave-last-out): each user's last pair is held out of training\n"
    "and ranked among --eval-negatives unobserved items; val_hr10 (held-out item\n"
    "in the top 10) and val_ndcg10 (1/log2(2 + rank)) averaged over --eval-users\n"
    "users, beside pop_hr10, pop_ndcg10 of ranking by training popularity (both\n"
    "expected over a uniform order of tied scores). Lines: `step N loss L grad_norm G`\n"
    "and `eval step N val_hr10 .. val_ndcg10 .. pop_hr10 .. pop_ndcg10 ..`; --log:\n"
    "JSONL, step loss lr grad_norm step_ms samples_per_s [val_hr10 val_ndcg10].\n"
    "Parallel flags as for any graph model: --dp --zero --tp --tp-mode --pp\n"
    "--schedule --micro-batches --virtual-stages --partition --recompute; with one\n"
    "stage --grad-accum M is --micro-batches M. --dump-batches F writes each step's\n"
    "rows (int32 user, item, label) for the PyTorch test; --dump-grads F step 1's\n"
    "gradients (one process).\n"
    "Checkpoints and stops as for the GPT (the one training loop, src/train/run.c):\n"
    "--save F writes F and F.state (AdamW moments, step); --save DIR/ one pair per\n"
    "save (--save-every, --keep-last); --resume continues bit for bit (the rows\n"
    "follow from --seed and the step); SIGTERM, SIGINT or --exit-signal save and\n"
    "exit 75.\n";

int cli_ncf_mlp(const char *s, cb_ncf_config *c, cb_err *e) {
    c->n_mlp = 0;
    for (const char *p = s; *p && c->n_mlp < 8;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 2 || v > 1 << 20 || (*end && *end != ',')) break;
        c->mlp[c->n_mlp++] = (int)v;
        p = *end ? end + 1 : end;
        if (!*end && c->n_mlp >= 2 && c->mlp[0] % 2 == 0) return CB_OK;
        if (!*end) break;
    }
    return cb_fail(e, CB_EINPUT, "--mlp %s: give 2 to 8 widths >= 2 separated by commas, the "
                                 "first even (user and item halves), e.g. 256,128,64", s);
}

static int check_opts(const char *model, const cb_train_opts *o, int batch,
                      const cb_ncf_task_opts *n, cb_err *e) {
    if (model && strcmp(model, "ncf"))
        return cb_fail(e, CB_EINPUT, "--model %s: this is the ncf trainer", model);
    if (!o->data)
        return cb_fail(e, CB_EINPUT, "--model ncf needs --data PAIRS (`cubist prepare "
                                     "--interactions FILE.tsv --output PAIRS`)");
    if (batch < 1 || o->steps < 0 || n->c.factors < 1 || n->negatives < 0 || n->eval_neg < 1 ||
        n->eval_users < 0 || o->eval_every < 0)
        return cb_fail(e, CB_EINPUT, "--batch, --factors, --eval-negatives >= 1 and --steps, "
                                     "--negatives, --eval-users, --eval-every >= 0; fix the flag");
    int M = o->pipe.micro_batches != CB_PP_UNSET ? o->pipe.micro_batches : 1;
    if (M >= 1 && batch % M)
        return cb_fail(e, CB_EINPUT, "--batch %d does not split into %d micro-batches; use a "
                                     "multiple of %d", batch, M, M);
    return cb_train_check_flags(o, e);
}

int cmd_train_ncf(int argc, char **argv) {
    cb_train_opts o;
    cb_train_defaults(&o);
    o.steps = 1000, o.seed = 1337, o.eval_every = 0;
    o.opt = (cb_adamw_config){.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .eps = 1e-8f, .weight_decay = 0.0f, .clip = 0.0f};
    cb_ncf_task_opts nt = {.c = {.factors = 64}, .negatives = 4, .eval_users = 1000, .eval_neg = 99};
    o.family = &cb_train_ncf, o.family_opts = &nt;
    const char *model = NULL, *mlp = "256,128,64";
    int batch = 256;
    cli_flag flags[80] = {
        {"model", ARG_STR, &model, "ncf here (gpt: the default trainer)"},
        {"data", ARG_STR, &o.data, "pair file (cubist prepare --interactions)"},
        {"negatives", ARG_INT, &nt.negatives, "sampled unobserved items per observed pair (4)"},
        {"factors", ARG_INT, &nt.c.factors, "GMF factor width (64)"},
        {"mlp", ARG_STR, &mlp, "MLP widths, the first = 2 x its embedding width (256,128,64)"},
        {"batch", ARG_INT, &batch, "rows (pairs) per step, over every data-parallel rank (256)"},
        {"seed", ARG_U64, &o.seed, "seed of initialisation, negatives and order (1337)"},
        {"eval-every", ARG_INT, &o.eval_every, "HR@10 / NDCG@10 every N steps (0: at the end)"},
        {"eval-users", ARG_INT, &nt.eval_users, "users evaluated, 0 = all (1000)"},
        {"eval-negatives", ARG_INT, &nt.eval_neg, "unobserved items ranked with the held-out (99)"},
        {"dump-batches", ARG_STR, &nt.dump_batches, "write every step's rows (int32 user item label)"},
    };
    int n = 0, help = 0;
    while (flags[n].name) n++;
    n += cli_train_opt_flags(&o, flags + n);
    n += cli_train_run_flags(&o, flags + n);
    cli_grad_accum_alias(argc, argv);
    cb_err e = {0};
    int rc = cli_train_parse(argc, argv, flags, n, "--model ncf --data PAIRS [flags]", EPILOG, &o, &help, &e);
    if (help && !rc) return 0;
    if (!rc) rc = check_opts(model, &o, batch, &nt, &e);
    if (!rc) rc = cli_ncf_mlp(mlp, &nt.c, &e);
    cb_precision prec;
    if (!rc) rc = cb_precision_parse(o.precision, &prec, &e);
    if (!rc) rc = cb_kernels_select(prec, &e);
    if (rc) return cli_fail(&e);
    o.B = batch / (o.pipe.micro_batches != CB_PP_UNSET ? o.pipe.micro_batches : 1);
    if (cb_comm_init(&argc, &argv, &e)) return cli_fail(&e);
    cli_train_lines lines;
    cb_train_sink sink = cli_train_lines_sink(&lines, &o, "samples_per_s");
    if (cb_train_run(&o, &sink, &e)) cli_train_exit(&e);
    cb_comm_finalize();
    return 0;
}
