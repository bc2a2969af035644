/* `cubist train --model ncf`: NeuMF on a pair file through the graph
 * engine (cb_model_declare_ncf), under any layout the engine runs: the
 * parallel flags go to cb_dist_init, the rest is parsed here. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "data/ncf.h"
#include "graph/graph.h"

typedef struct ncf_opts {
    const char *model, *data, *mlp, *log, *save, *init, *dump_grads, *dump_batches;
    int negatives, factors, batch, steps, warmup, eval_every, eval_users, eval_neg, quiet;
    int threads, grad_accum;
    uint64_t seed;
    cb_adamw_config opt;
} ncf_opts;

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
    "gradients (one process).\n";

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

static int check_opts(const ncf_opts *o, cb_err *e) {
    if (o->model && strcmp(o->model, "ncf"))
        return cb_fail(e, CB_EINPUT, "--model %s: this is the ncf trainer", o->model);
    if (!o->data)
        return cb_fail(e, CB_EINPUT, "--model ncf needs --data PAIRS (`cubist prepare "
                                     "--interactions FILE.tsv --output PAIRS`)");
    if (o->batch < 1 || o->steps < 0 || o->factors < 1 || o->negatives < 0 || o->eval_neg < 1 ||
        o->eval_users < 0 || o->eval_every < 0)
        return cb_fail(e, CB_EINPUT, "--batch, --factors, --eval-negatives >= 1 and --steps, "
                                     "--negatives, --eval-users, --eval-every >= 0; fix the flag");
    return CB_OK;
}

/* This rank's rows of step s: ids (user, item) and labels; the whole
 * batch to the dump file on rank 0. */
static void batch_rows(cb_ncf_data *d, int s, int B, int first, int count, int *ids, int *tg,
                       FILE *dump) {
    for (int k = 0; k < B; k++) {
        int u, it, y;
        cb_ncf_row(d, (uint64_t)s * B + k, &u, &it, &y);
        if (k >= first && k < first + count) {
            ids[2 * (k - first)] = u, ids[2 * (k - first) + 1] = it, tg[k - first] = y;
        }
        int32_t row[3] = {u, it, y};
        if (dump) fwrite(row, sizeof row, 1, dump);
    }
}

typedef struct evalset {
    int n, neg;   /* users, negatives per user */
    int *cand;    /* n x (1 + neg) items, the held-out one first */
    int *users;
    float *score; /* n x (1 + neg) */
    double pop_hr, pop_ndcg;
} evalset;

/* HR@10 and NDCG@10 of candidate 0 among a row's n scores, expected over
 * a uniform order of ties (the popularity baseline ties often: items of
 * equal counts): g candidates score higher, t tie, rank g + j for j
 * uniform in [0, t]. */
static void hit(const float *s, int n, double *hr, double *ndcg) {
    int g = 0, t = 0;
    for (int k = 1; k < n; k++) g += s[k] > s[0], t += s[k] == s[0];
    for (int j = 0; j <= t && g + j < 10; j++) {
        *hr += 1.0 / (t + 1);
        *ndcg += 1.0 / ((t + 1) * log2(2.0 + g + j));
    }
}

static void metrics(const evalset *v, const float *score, double *hr, double *ndcg) {
    int w = 1 + v->neg;
    *hr = *ndcg = 0;
    for (int u = 0; u < v->n; u++) hit(score + (size_t)u * w, w, hr, ndcg);
    *hr /= v->n > 0 ? v->n : 1;
    *ndcg /= v->n > 0 ? v->n : 1;
}

static int eval_init(const cb_ncf_data *d, const ncf_opts *o, evalset *v) {
    v->neg = o->eval_neg;
    int w = 1 + v->neg;
    v->users = malloc(sizeof(int) * (d->users + 1));
    if (!v->users) return -1;
    v->n = cb_ncf_eval_users(d, v->neg, o->eval_users, v->users);
    v->cand = malloc(sizeof(int) * ((size_t)v->n * w + 1));
    v->score = malloc(sizeof(float) * ((size_t)v->n * w + 1));
    if (!v->cand || !v->score) return -1;
    for (int u = 0; u < v->n; u++) cb_ncf_candidates(d, v->users[u], v->neg, v->cand + (size_t)u * w);
    for (size_t k = 0; k < (size_t)v->n * w; k++) v->score[k] = (float)d->pop[v->cand[k]];
    metrics(v, v->score, &v->pop_hr, &v->pop_ndcg);
    return 0;
}

/* The model's logit of every candidate, B rows at a time (the last batch
 * padded by repeating its first row). */
static int eval_scores(cb_model *m, const evalset *v, int B, int *ids, float *out, cb_err *e) {
    int first, count, w = 1 + v->neg;
    size_t total = (size_t)v->n * w;
    cb_model_rows(m, &first, &count);
    for (size_t b0 = 0; b0 < total; b0 += B) {
        for (int k = 0; k < count; k++) {
            size_t r = b0 + first + k < total ? b0 + first + k : b0;
            ids[2 * k] = v->users[r / w], ids[2 * k + 1] = v->cand[r];
        }
        int rc = cb_model_scores(m, ids, out, e);
        if (rc) return rc;
        memcpy(v->score + b0, out, sizeof(float) * (total - b0 < (size_t)B ? total - b0 : (size_t)B));
    }
    return CB_OK;
}

typedef struct run {
    cb_dist *d;
    cb_model *m;
    cb_ncf_data data;
    evalset ev;
    FILE *log, *dump;
    int *ids, *tg, *eids;
    float *escore;
    const char *dump_grads;
    cb_err dump_err;
} run;

/* --dump-grads: step 1's gradients, reduced and averaged, before clipping,
 * from the engine's hook as cubist train's GPT writes them (collective). */
static void on_grads(cb_model *m, int step, void *ctx) {
    run *r = ctx;
    if (step == 0 && r->dump_grads) cb_graph_save_grads(m, r->dump_grads, &r->dump_err);
}

static void run_free(run *r) {
    if (r->log) fclose(r->log);
    if (r->dump) fclose(r->dump);
    free(r->ids), free(r->tg), free(r->eids), free(r->escore);
    free(r->ev.users), free(r->ev.cand), free(r->ev.score);
    cb_model_free(r->m);
    cb_ncf_close(&r->data);
}

static int evaluate(run *r, const ncf_opts *o, int step, double *hr, double *ndcg, cb_err *e) {
    int rc = eval_scores(r->m, &r->ev, o->batch, r->eids, r->escore, e);
    if (rc) return rc;
    metrics(&r->ev, r->ev.score, hr, ndcg);
    if (cb_dist_rank(r->d) == 0 && !o->quiet)
        printf("eval step %d val_hr10 %.6f val_ndcg10 %.6f pop_hr10 %.6f pop_ndcg10 %.6f users "
               "%d\n", step, *hr, *ndcg, r->ev.pop_hr, r->ev.pop_ndcg, r->ev.n);
    return CB_OK;
}

static int setup(run *r, const ncf_opts *o, cb_ncf_config *c, cb_err *e) {
    int rc = cb_ncf_open(o->data, o->negatives, o->seed, &r->data, e);
    if (rc) return rc;
    c->users = r->data.users, c->items = r->data.items, c->factors = o->factors;
    r->m = cb_model_new(r->d, o->batch, 1);
    cb_model_declare_ncf(r->m, c);
    cb_adamw_config opt = o->opt;
    opt.steps = o->steps;
    rc = cb_model_build(r->m, o->seed, &opt, e);
    if (!rc && o->init) rc = cb_model_load(r->m, o->init, e);
    if (rc) return rc;
    r->dump_grads = o->dump_grads;
    r->m->on_grads = on_grads;
    r->m->on_grads_ctx = r;
    int first, count, root = cb_dist_rank(r->d) == 0;
    cb_model_rows(r->m, &first, &count);
    if (root && !o->quiet)
        printf("ncf: %d users, %d items, %zu training pairs, data parallelism %d, embedding gradient %s\n",
               c->users, c->items, r->data.ntrain, r->m->d->g.dp,
               r->m->d->g.dp > 1 ? cb_dp_embed_name(&r->m->dp) : "local");
    r->ids = malloc(sizeof(int) * 2 * count);
    r->tg = malloc(sizeof(int) * count);
    r->eids = malloc(sizeof(int) * 2 * count);
    r->escore = malloc(sizeof(float) * o->batch);
    if (!r->ids || !r->tg || !r->eids || !r->escore || eval_init(&r->data, o, &r->ev))
        return cb_fail(e, CB_ENOMEM, "out of memory for batches");
    if (root && o->log && !(r->log = fopen(o->log, "w")))
        rc = cb_fail(e, CB_EINPUT, "--log %s cannot be written; check the path", o->log);
    if (root && !rc && o->dump_batches && !(r->dump = fopen(o->dump_batches, "wb")))
        rc = cb_fail(e, CB_EINPUT, "--dump-batches %s cannot be written; check the path",
                     o->dump_batches);
    return rc;
}

static int train(run *r, const ncf_opts *o, cb_err *e) {
    int first, count, root = cb_dist_rank(r->d) == 0, rc = CB_OK;
    cb_model_rows(r->m, &first, &count);
    double hr = 0, ndcg = 0;
    for (int s = 0; s < o->steps && !rc; s++) {
        batch_rows(&r->data, s, o->batch, first, count, r->ids, r->tg, r->dump);
        double t0 = omp_get_wtime();
        float norm, loss = cb_model_train_step(r->m, r->ids, r->tg, s, &norm);
        double ms = (omp_get_wtime() - t0) * 1e3;
        if (s == 0 && r->dump_err.code) *e = r->dump_err, rc = e->code;
        int ev = (o->eval_every > 0 && (s + 1) % o->eval_every == 0) || s + 1 == o->steps;
        if (!rc && ev) rc = evaluate(r, o, s + 1, &hr, &ndcg, e);
        if (root && !o->quiet) printf("step %d loss %.9g grad_norm %.9g\n", s + 1, loss, norm);
        if (root && r->log) {
            fprintf(r->log, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,"
                            "\"step_ms\":%.3f,\"samples_per_s\":%.1f", s + 1, loss,
                    cb_lr_at(&r->m->opt.c, s), norm, ms, o->batch / (ms / 1e3));
            if (ev) fprintf(r->log, ",\"val_hr10\":%.6f,\"val_ndcg10\":%.6f,\"pop_hr10\":%.6f,"
                                    "\"pop_ndcg10\":%.6f", hr, ndcg, r->ev.pop_hr, r->ev.pop_ndcg);
            fprintf(r->log, "}\n");
        }
    }
    if (!rc && !o->steps) rc = evaluate(r, o, 0, &hr, &ndcg, e);
    if (!rc && o->save) rc = cb_model_save(r->m, o->save, e);
    return rc;
}

int cmd_train_ncf(int argc, char **argv) {
    ncf_opts o = {.negatives = 4, .factors = 64, .batch = 256, .steps = 1000, .eval_users = 1000,
                  .eval_neg = 99, .seed = 1337, .mlp = "256,128,64",
                  .opt = {.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f,
                          .eps = 1e-8f, .weight_decay = 0.0f, .clip = 0.0f}};
    const cli_flag flags[] = {
        {"model", ARG_STR, &o.model, "ncf here (gpt: the default trainer)"},
        {"data", ARG_STR, &o.data, "pair file (cubist prepare --interactions)"},
        {"negatives", ARG_INT, &o.negatives, "sampled unobserved items per observed pair (4)"},
        {"factors", ARG_INT, &o.factors, "GMF factor width (64)"},
        {"mlp", ARG_STR, &o.mlp, "MLP widths, the first = 2 x its embedding width (256,128,64)"},
        {"batch", ARG_INT, &o.batch, "rows (pairs) per step, over every data-parallel rank (256)"},
        {"steps", ARG_INT, &o.steps, "optimizer steps (1000)"},
        {"lr", ARG_FLOAT, &o.opt.lr, "peak learning rate (1e-3)"},
        {"min-lr", ARG_FLOAT, &o.opt.min_lr, "final learning rate of the cosine (1e-4)"},
        {"warmup", ARG_INT, &o.opt.warmup, "linear warm-up steps (0)"},
        {"weight-decay", ARG_FLOAT, &o.opt.weight_decay, "AdamW decay of the tables and weights, not biases (0)"},
        {"beta1", ARG_FLOAT, &o.opt.beta1, "AdamW beta1 (0.9)"},
        {"beta2", ARG_FLOAT, &o.opt.beta2, "AdamW beta2 (0.999)"},
        {"eps", ARG_FLOAT, &o.opt.eps, "AdamW epsilon (1e-8)"},
        {"clip", ARG_FLOAT, &o.opt.clip, "global gradient-norm clip, 0 = off (0)"},
        {"seed", ARG_U64, &o.seed, "seed of initialisation, negatives and order (1337)"},
        {"eval-every", ARG_INT, &o.eval_every, "HR@10 / NDCG@10 every N steps (0: at the end)"},
        {"eval-users", ARG_INT, &o.eval_users, "users evaluated, 0 = all (1000)"},
        {"eval-negatives", ARG_INT, &o.eval_neg, "unobserved items ranked with the held-out (99)"},
        {"init", ARG_STR, &o.init, "start from this weights file (safetensors)"},
        {"save", ARG_STR, &o.save, "write the final weights (safetensors)"},
        {"log", ARG_STR, &o.log, "JSONL log, one object per step"},
        {"dump-grads", ARG_STR, &o.dump_grads, "write step 1's gradients (one process)"},
        {"dump-batches", ARG_STR, &o.dump_batches, "write every step's rows (int32 user item label)"},
        {"threads", ARG_INT, &o.threads, "threads (default: OMP_NUM_THREADS or all cores)"},
        {"quiet", ARG_BOOL, &o.quiet, "no progress output"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    for (int i = 0; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (help) {
        cli_usage(stdout, "train", "--model ncf --data PAIRS [flags]", flags, n, EPILOG);
        return 0;
    }
    cli_grad_accum_alias(argc, argv);
    run r = {0};
    cb_err e = {0};
    int ac = argc + 1; /* argv[-1] is the command's name, where cb_dist_init expects a program */
    char **av = argv - 1;
    if (cb_dist_init(&ac, &av, &r.d, &e)) cb_dist_exit(NULL, &e);
    cb_ncf_config c = {0};
    int rc = cli_parse("train", ac - 1, av + 1, flags, n, &help, &e);
    if (!rc) rc = check_opts(&o, &e);
    if (!rc) rc = cli_ncf_mlp(o.mlp, &c, &e);
    if (!rc && o.threads > 0) omp_set_num_threads(o.threads);
    if (!rc) rc = setup(&r, &o, &c, &e);
    if (!rc) rc = train(&r, &o, &e);
    run_free(&r);
    if (rc) cb_dist_exit(r.d, &e);
    cb_dist_finalize(r.d);
    return 0;
}
