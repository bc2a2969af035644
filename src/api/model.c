/* Users' own models from cubist's parallel-aware layers: a thin layer over
 * the layout operators (src/layout), the parameter table (src/model/ptable)
 * and AdamW. The built-in GPT uses the same operators.
 *
 * Pipeline parallelism (--pp P) runs the same user code unchanged. The
 * layers, in declaration order, are the model's modules (each embedding's
 * tied LM head is one more module after the last layer); they are split
 * into P contiguous stages (src/pipeline/partition, FLOP costs). Under
 * --pp the operator calls are recorded instead of run: cb_head_forward runs
 * the recorded forward, cb_model_step the recorded backward, each over
 * --micro-batches M row slices of the batch, GPipe order (every forward,
 * then every backward: the loss must be returned before the backward is
 * declared, so 1F1B cannot apply here; --schedule other than gpipe,
 * --virtual-stages and --recompute are refused, --no-profile accepted). An operator runs on the stage of
 * its layer; one without a layer (gelu, add, copy, zero) on the stage of
 * the operator before it. Each activation remembers which stages hold its
 * current value; an operator reading it elsewhere first receives it from
 * the stage that wrote it (non-blocking sends, blocking receives, every
 * rank walking (micro-batch, operator) in the same order: no cycle can
 * wait). The result is what the single process computes, whatever the
 * order of declarations; declaring in execution order limits the messages
 * to the activations live across a stage boundary (the example's cut
 * inside a block sends two per micro-batch each way: the residual stream
 * and the branch). Activations are allocated on the stages that
 * touch them, parameters only on their stage (the head's stage holds a
 * copy of the tied embedding, gradients summed every step). Every operator
 * is row-wise (tokens are independent; attention works on whole sequences,
 * and a micro-batch is whole sequences), so the tensor layout under --pp is
 * the serial one or 1d, whose activations keep whole rows.
 *
 * Data parallelism (and --zero 1) reuses the trainer's src/train/dp.c over
 * this rank's parameter block (cb_dp_init_block): fused buckets reduced in
 * cb_model_step, ZeRO-1 shards of the AdamW state. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "cubist.h"
#include "layout/layout.h"
#include "model/ptable.h"
#include "optim/adamw.h"
#include "pipeline/partition.h"
#include "pipeline/pp_train.h"
#include "train/dp.h"

struct cb_dist {
    cb_grid g;
    cb_layout *L;
    int M;                 /* micro-batches per step under --pp; 0: default */
    const char *partition; /* auto | equal | boundaries */
    double mem_weight;
    int print_partition;
    int zero; /* --zero 1: AdamW state sharded over the data-parallel ranks */
};

enum { L_EMBED, L_LINEAR, L_NORM, L_ATTN };

/* Gradient fusion bucket size under data parallelism, as cubist train's
 * --bucket-mb default. */
#define BUCKET_MB 25.0

struct cb_layer {
    cb_model *m;
    int kind, idx;
    char name[48], pos[48]; /* pos: an embedding's position tensor, "" for <name>.pos */
    int t0, tcopy;         /* this rank's tensors in the table, -1 none */
    int stage, head_stage; /* pipeline stage of the layer, of an embedding's head */
    int parity;
    cb_linear lin;
    cb_norm norm;
    cb_embed emb;
    float *mean, *rstd, *logits;
    int *ids, *targets;
    int C, heads; /* attention: width, heads; att the probabilities of each micro-batch */
    float *att;
};

struct cb_act {
    cb_model *m;
    float *data; /* NULL under --pp until this rank touches it */
    int H, parity;
    size_t n;    /* local floats */
    int writer;  /* stage that wrote the current value; -1: zeros everywhere */
    unsigned char *valid; /* [stages]: holds the current value */
};

/* A recorded operator (under --pp). */
enum { OP_EMB_F, OP_EMB_B, OP_LIN_F, OP_LIN_B, OP_NORM_F, OP_NORM_B, OP_GELU_F, OP_GELU_B,
       OP_ADD, OP_COPY, OP_ZERO, OP_HEAD_F, OP_HEAD_B, OP_ATT_F, OP_ATT_B };

typedef struct pp_op {
    int kind, stage;
    cb_layer *l;
    cb_act *a[3];
    float dloss;
    int x0, nx; /* its transfers */
} pp_op;

typedef struct pp_xfer {
    cb_act *a;
    int from, to;
} pp_xfer;

typedef struct pp_send {
    cb_act *a;
    int mb;
    cb_comm_req r;
} pp_send;

struct cb_model {
    cb_dist *d;
    int B, T, Bl; /* global and local sequences */
    cb_ptable pt;
    float *params, *grads;
    cb_adamw opt;
    cb_dp dp; /* dp > 1: fused gradient buckets, ZeRO-1 shards (src/train/dp) */
    int nlayers, nacts, oom, built;
    float *att_scratch; /* attention backward: one micro-batch's probabilities' size */
    cb_layer *layers[256];
    cb_act *acts[1024];
    /* pipeline */
    int P, me, M;  /* stages, this rank's stage, micro-batches */
    int cur;       /* stage of the last recorded operator */
    pp_op *tape;
    int ntape, cap;
    pp_xfer *xf;
    int nxf, xcap;
    pp_send *sends;
    int nsends, scap;
};

/* ---------------------------------------------------------------- dist */

/* Removes "--name value" from argv; returns the value, NULL when absent.
 * A bare "--name" as the last argument is reported through *missing. */
static const char *take_flag(int *argc, char **argv, const char *name, const char **missing) {
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], name)) continue;
        if (i + 1 == *argc) {
            *missing = name;
            *argc -= 1;
            return NULL;
        }
        const char *v = argv[i + 1];
        memmove(&argv[i], &argv[i + 2], sizeof(char *) * (*argc - i - 1));
        *argc -= 2;
        return v;
    }
    return NULL;
}

/* The collective entry points agree on e across ranks, so it must start clean. */
static void clear(cb_err *e) {
    e->code = CB_OK;
    e->msg[0] = '\0';
}

/* Removes a bare "--name"; returns whether it was there. */
static int take_bool(int *argc, char **argv, const char *name) {
    for (int i = 1; i < *argc; i++)
        if (!strcmp(argv[i], name)) {
            memmove(&argv[i], &argv[i + 1], sizeof(char *) * (*argc - i));
            *argc -= 1;
            return 1;
        }
    return 0;
}

/* *out = the integer s of flag, in [lo, hi]; unchanged when s is NULL. */
static int int_flag(const char *flag, const char *s, int lo, int hi, int *out, cb_err *e) {
    if (!s) return CB_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if ((end == s || *end || errno || v < lo || v > hi) && hi == INT_MAX)
        return cb_fail(e, CB_EINPUT, "%s takes an integer >= %d; got '%s'", flag, lo, s);
    if (end == s || *end || errno || v < lo || v > hi)
        return cb_fail(e, CB_EINPUT, "%s takes an integer from %d to %d; got '%s'", flag, lo, hi, s);
    *out = (int)v;
    return CB_OK;
}

/* The flags cb_dist_init takes out of argv. */
typedef struct dist_flags {
    const char *dp, *tp, *pp, *mb, *mode, *part, *mw, *zero, *missing;
    const char *sched, *vs, *rec, *recl, *recm; /* refused unless harmless */
    int print;
} dist_flags;

static dist_flags take_flags(int *argc, char **argv) {
    dist_flags f = {0};
    f.dp = take_flag(argc, argv, "--dp", &f.missing);
    f.tp = take_flag(argc, argv, "--tp", &f.missing);
    f.pp = take_flag(argc, argv, "--pp", &f.missing);
    f.mb = take_flag(argc, argv, "--micro-batches", &f.missing);
    f.mode = take_flag(argc, argv, "--tp-mode", &f.missing);
    f.part = take_flag(argc, argv, "--partition", &f.missing);
    f.mw = take_flag(argc, argv, "--partition-memory-weight", &f.missing);
    f.zero = take_flag(argc, argv, "--zero", &f.missing);
    f.sched = take_flag(argc, argv, "--schedule", &f.missing);
    f.vs = take_flag(argc, argv, "--virtual-stages", &f.missing);
    f.rec = take_flag(argc, argv, "--recompute", &f.missing);
    f.recl = take_flag(argc, argv, "--recompute-layers", &f.missing);
    f.recm = take_flag(argc, argv, "--recompute-method", &f.missing);
    f.print = take_bool(argc, argv, "--print-partition");
    take_bool(argc, argv, "--no-profile");
    return f;
}

/* `cubist train`'s pipeline flags that a user's program cannot honour: the
 * user's loop returns the loss before it declares the backward, so its
 * pipeline is GPipe (no 1F1B, no interleaving), and it keeps the activations
 * it declares (no recompute). --schedule gpipe and --no-profile (the
 * partition always comes from FLOP counts) are accepted. */
static int user_pipeline_flags(const dist_flags *f, cb_err *e) {
    if (f->sched && strcmp(f->sched, "gpipe"))
        return cb_fail(e, CB_EINPUT, "--schedule %s: a user model's pipeline runs GPipe (its loop "
                                     "returns the loss before declaring the backward); use gpipe",
                       f->sched);
    if (f->vs)
        return cb_fail(e, CB_EINPUT, "--virtual-stages needs the interleaved schedule, and a user "
                                     "model's pipeline runs GPipe; drop it (use gpipe)");
    const char *rf = NULL, *rv = NULL;
    if (f->rec && strcmp(f->rec, "none")) rf = "--recompute", rv = f->rec;
    else if (f->recl) rf = "--recompute-layers", rv = f->recl;
    else if (f->recm) rf = "--recompute-method", rv = f->recm;
    if (rf)
        return cb_fail(e, CB_EINPUT, "%s %s: a user model keeps the activations it declares, "
                                     "nothing is recomputed; drop %s",
                       rf, rv, rf);
    return CB_OK;
}

/* Parsed and checked flags: grid sizes, mode, pipeline options, ZeRO. */
static int parse_flags(const dist_flags *f, cb_dist *d, int *dp, int *pp, int *tp,
                       cb_tp_mode *mode, cb_err *e) {
    int world = cb_comm_world()->size, rc = CB_OK;
    if (f->missing) return cb_fail(e, CB_EINPUT, "%s needs a value, e.g. %s 2", f->missing, f->missing);
    *tp = *pp = 1;
    rc = user_pipeline_flags(f, e);
    if (!rc) rc = int_flag("--tp", f->tp, 1, INT_MAX, tp, e);
    if (!rc) rc = int_flag("--pp", f->pp, 1, INT_MAX, pp, e);
    *dp = world / (*tp * *pp) > 0 ? world / (*tp * *pp) : 1;
    if (!rc) rc = int_flag("--dp", f->dp, 1, INT_MAX, dp, e);
    if (!rc) rc = int_flag("--micro-batches", f->mb, 1, INT_MAX, &d->M, e);
    if (!rc) rc = int_flag("--zero", f->zero, 0, 1, &d->zero, e);
    if (!rc) rc = cb_grid_parse_mode(f->mode ? f->mode : "1d", mode, e);
    char *end = NULL;
    d->mem_weight = f->mw ? strtod(f->mw, &end) : 0.8;
    if (!rc && f->mw && (end == f->mw || *end || !(d->mem_weight >= 0 && d->mem_weight <= 1)))
        rc = cb_fail(e, CB_EINPUT, "--partition-memory-weight '%s' must be a number in [0, 1] "
                                   "(0.8 default)", f->mw);
    d->partition = f->part ? f->part : "auto";
    d->print_partition = f->print;
    if (!rc && *pp > 1 && *tp > 1 && *mode != CB_TP_1D)
        rc = cb_fail(e, CB_EINPUT,
                     "a user model under --pp takes --tp-mode 1d only (its operators need "
                     "whole token rows on a stage); use --tp-mode 1d or --pp 1");
    return rc;
}

int cb_dist_init(int *argc, char ***argv, cb_dist **out, cb_err *e) {
    clear(e);
    int rc = cb_comm_init(argc, argv, e);
    if (rc) return rc;
    dist_flags f = take_flags(argc, *argv);
    cb_dist *d = calloc(1, sizeof *d);
    if (!d) return cb_fail(e, CB_ENOMEM, "out of memory");
    int dp = 1, pp = 1, tp = 1;
    cb_tp_mode mode = CB_TP_1D;
    rc = parse_flags(&f, d, &dp, &pp, &tp, &mode, e);
    int have_grid = !rc && !cb_grid_create(&d->g, dp, pp, tp, mode, e);
    if (have_grid) cb_layout_create(&d->g, &d->L, e);
    rc = cb_comm_agree_err(cb_comm_world(), e);
    if (rc) {
        if (d->L) cb_layout_free(d->L);
        if (have_grid) cb_grid_free(&d->g);
        free(d);
        return rc;
    }
    *out = d;
    return CB_OK;
}

int cb_dist_rank(const cb_dist *d) { return d->g.world_rank; }

void cb_dist_exit(cb_dist *d, const cb_err *e) {
    (void)d;
    cb_comm_exit(e->code == CB_EINPUT ? 2 : 1, e->msg);
}

void cb_dist_finalize(cb_dist *d) {
    cb_layout_free(d->L);
    cb_grid_free(&d->g);
    free(d);
    cb_comm_finalize();
}

/* ---------------------------------------------------------------- declaring */

cb_model *cb_model_new(cb_dist *d, int batch, int seq_len) {
    cb_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->d = d;
    m->B = batch;
    m->T = seq_len;
    m->Bl = d->g.dp > 0 ? batch / d->g.dp : batch;
    m->pt.L = d->L;
    m->P = d->g.pp;
    m->me = d->g.at.p;
    return m;
}

/* Tensors are added to the table at build, once the stages are known. */
static cb_layer *new_layer(cb_model *m, int kind, const char *name, int parity) {
    cb_layer *l = calloc(1, sizeof *l);
    if (!l || m->nlayers == 256) {
        free(l);
        m->oom = 1;
        return NULL;
    }
    l->m = m;
    l->kind = kind;
    l->idx = m->nlayers;
    l->parity = parity;
    l->t0 = l->tcopy = -1;
    snprintf(l->name, sizeof l->name, "%s", name);
    m->layers[m->nlayers++] = l;
    return l;
}

cb_layer *cb_model_embedding(cb_model *m, const char *name, int vocab, int C) {
    cb_layer *l = new_layer(m, L_EMBED, name, 0);
    if (l) l->emb = (cb_embed){.V = vocab, .C = C, .T = m->T};
    return l;
}

cb_layer *cb_model_embedding_named(cb_model *m, const char *tok, const char *pos, int vocab,
                                   int C) {
    cb_layer *l = cb_model_embedding(m, tok, vocab, C);
    if (l) snprintf(l->pos, sizeof l->pos, "%s", pos);
    return l;
}

static cb_layer *linear(cb_model *m, const char *name, int in, int out, int parts, int parity) {
    cb_layer *l = new_layer(m, L_LINEAR, name, parity);
    if (l) l->lin = (cb_linear){.in = in, .out = out, .parts = parts, .parity = parity};
    return l;
}

cb_layer *cb_model_linear(cb_model *m, const char *name, int in, int out, int parity) {
    return linear(m, name, in, out, 1, parity);
}

cb_layer *cb_model_linear_qkv(cb_model *m, const char *name, int C) {
    return linear(m, name, C, 3 * C, 3, 0);
}

cb_layer *cb_model_attention(cb_model *m, const char *name, int C, int heads) {
    cb_layer *l = new_layer(m, L_ATTN, name, 1);
    if (l) l->C = C, l->heads = heads;
    return l;
}

cb_layer *cb_model_layernorm(cb_model *m, const char *name, int C, int parity) {
    cb_layer *l = new_layer(m, L_NORM, name, parity);
    if (l) l->norm = (cb_norm){.C = C, .parity = parity};
    return l;
}

static size_t act_floats(const cb_model *m, int H, int parity) {
    int rows, cols;
    m->d->L->ops->act_shape(m->d->L, m->Bl * m->T, H, parity, &rows, &cols);
    return (size_t)rows * cols;
}

cb_act *cb_model_act(cb_model *m, int H, int parity) {
    cb_act *a = calloc(1, sizeof *a);
    if (a) *a = (cb_act){m, NULL, H, parity, act_floats(m, H, parity), -1, NULL};
    if (a && m->P == 1) a->data = calloc(a->n + 1, sizeof(float));
    if (a && m->P > 1) a->valid = malloc((size_t)m->P);
    if (!a || (m->P == 1 && !a->data) || (m->P > 1 && !a->valid) || m->nacts == 1024) {
        if (a) free(a->data), free(a->valid);
        free(a);
        m->oom = 1;
        return NULL;
    }
    if (a->valid) memset(a->valid, 1, (size_t)m->P); /* zeros, the same everywhere */
    m->acts[m->nacts++] = a;
    return a;
}

/* ---------------------------------------------------------------- building */

/* The initial values: normal(0, 0.02) matrices and embeddings, unit
 * LayerNorm weights, zero vectors. */

static void layer_tensor(const cb_layer *l, int k, char *name, size_t cap, int64_t *d0,
                         int64_t *d1, int *decay, cb_param_kind *kind, int *init) {
    const char *suffix = k == 0 ? "weight" : l->kind == L_EMBED ? "pos" : "bias";
    if (k == 1 && l->pos[0]) snprintf(name, cap, "%s.weight", l->pos);
    else snprintf(name, cap, "%s.%s", l->name, suffix);
    *d1 = 0;
    *decay = 0;
    if (l->kind == L_EMBED) {
        *d0 = k == 0 ? l->emb.V : l->m->T;
        *d1 = l->emb.C;
        *kind = k == 0 ? CB_P_EMBED : CB_P_POS;
        *init = CB_INIT_NORMAL;
    } else if (l->kind == L_LINEAR) {
        *d0 = k == 0 ? l->lin.in : l->lin.out;
        if (k == 0) *d1 = l->lin.out;
        *decay = k == 0;
        *kind = k == 0 ? CB_P_LINEAR_W : CB_P_LINEAR_B;
        *init = k == 0 ? CB_INIT_NORMAL : CB_INIT_ZERO;
    } else {
        *d0 = l->norm.C;
        *kind = CB_P_NORM;
        *init = k == 0 ? CB_INIT_ONE : CB_INIT_ZERO;
    }
}

/* The modules of the partition: the layers, then each embedding's head. */
static int modules(cb_model *m, cb_pp_module *mod, int *head_of) {
    double N = (double)m->Bl * m->T / m->M, f = sizeof(float);
    int n = 0;
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        cb_pp_module *x = &mod[n++];
        if (l->kind == L_EMBED) {
            *x = (cb_pp_module){.flops = 3 * N * l->emb.C,
                                .param_bytes = f * ((double)l->emb.V + m->T) * l->emb.C,
                                .act_bytes = f * N * l->emb.C, .tie = i};
        } else if (l->kind == L_LINEAR) {
            double io = (double)l->lin.in * l->lin.out;
            *x = (cb_pp_module){.flops = 6 * N * io, .param_bytes = f * (io + l->lin.out),
                                .act_bytes = f * N * l->lin.out, .tie = -1};
        } else if (l->kind == L_ATTN) { /* scores and context, forward + backward */
            *x = (cb_pp_module){.flops = 12 * N * m->T * l->C,
                                .act_bytes = f * N * (l->C + (double)l->heads * m->T), .tie = -1};
        } else {
            *x = (cb_pp_module){.flops = 10 * N * l->norm.C, .param_bytes = f * 2 * l->norm.C,
                                .act_bytes = f * N * (l->norm.C + 2), .tie = -1};
        }
        snprintf(x->name, sizeof x->name, "%.23s", l->name);
    }
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        if (l->kind != L_EMBED) continue;
        head_of[i] = n;
        mod[n] = (cb_pp_module){.flops = 6 * N * l->emb.C * l->emb.V,
                                .param_bytes = f * (double)l->emb.V * l->emb.C,
                                .act_bytes = f * N * (l->emb.V + 1), .tie = i};
        snprintf(mod[n].name, sizeof mod[n].name, "%.18s.head", l->name);
        n++;
    }
    return n;
}

/* Stages of the layers and heads (everything on stage 0 without --pp). */
static int place(cb_model *m, cb_err *e) {
    cb_dist *d = m->d;
    int n = m->nlayers, *head_of = calloc((size_t)n + 1, sizeof(int));
    cb_pp_module *mod = calloc(2 * (size_t)n + 1, sizeof *mod);
    double *cost = calloc(2 * (size_t)n + 1, sizeof *cost);
    int rc = head_of && mod && cost ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory partitioning");
    cb_pp_partition pt;
    int nmod = rc ? 0 : modules(m, mod, head_of);
    if (!rc) cb_pp_module_costs(mod, nmod, d->mem_weight, cost);
    if (!rc && m->P > 1) {
        if (!strcmp(d->partition, "auto")) rc = cb_pp_partition_auto(cost, nmod, m->P, &pt, e);
        else if (!strcmp(d->partition, "equal")) rc = cb_pp_partition_equal(cost, nmod, m->P, &pt, e);
        else rc = cb_pp_partition_parse(d->partition, cost, nmod, m->P, &pt, e);
    }
    for (int i = 0; !rc && i < n; i++) {
        cb_layer *l = m->layers[i];
        l->stage = l->head_stage = 0;
        for (int s = 0; m->P > 1 && s < m->P; s++) {
            if (pt.bound[s] <= i && i < pt.bound[s + 1]) l->stage = s;
            if (l->kind == L_EMBED && pt.bound[s] <= head_of[i] && head_of[i] < pt.bound[s + 1])
                l->head_stage = s;
        }
    }
    if (!rc && m->P > 1 && d->print_partition && d->g.world_rank == 0) {
        printf("partition of %d modules (layers, then tied heads) into %d stages, memory weight "
               "%g, FLOP costs:\n", nmod, m->P, d->mem_weight);
        cb_pp_partition_print(stdout, &pt, mod, d->mem_weight, m->P);
        fflush(stdout);
    }
    free(head_of), free(mod), free(cost);
    return rc;
}

static int holds(const cb_model *m, const cb_layer *l) { return l->stage == m->me; }

/* This rank's tensors, in declaration order: its stage's layers, and the
 * tied copy of an embedding whose head is here. */
static int make_table(cb_model *m, cb_err *e) {
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        int copy = l->kind == L_EMBED && !holds(m, l) && l->head_stage == m->me;
        for (int k = 0; k < 2 && l->kind != L_ATTN && (holds(m, l) || (copy && k == 0)); k++) {
            char name[64];
            int64_t d0, d1;
            int decay, init;
            cb_param_kind kind;
            layer_tensor(l, k, name, sizeof name, &d0, &d1, &decay, &kind, &init);
            int parts = l->kind == L_LINEAR ? l->lin.parts : 1;
            int t = cb_ptable_add(&m->pt, name, d0, d1, decay, i, kind, parts, l->parity);
            if (t < 0) return cb_fail(e, CB_ENOMEM, "out of memory declaring the model");
            if (copy) l->tcopy = t;
            else if (k == 0) l->t0 = t;
        }
    }
    return CB_OK;
}

/* Each of this rank's tensors from the counter-based generator (the
 * same values under every layout and stage, see cb_ptable_init). */
static void fill(cb_model *m, uint64_t seed) {
    for (int t = 0; t < m->pt.n; t++) {
        const cb_layer *l = m->layers[m->pt.t[t].layer];
        for (int k = 0; k < 2; k++) {
            char name[64];
            int64_t d0, d1;
            int decay, init;
            cb_param_kind kind;
            layer_tensor(l, k, name, sizeof name, &d0, &d1, &decay, &kind, &init);
            if (!strcmp(name, m->pt.t[t].name)) cb_ptable_init(&m->pt, m->params, t, init, 0.02f, seed);
        }
    }
}

/* The probabilities of each micro-batch, and the model's backward scratch
 * (one micro-batch's worth, shared by every attention layer). */
static int bind_attention(cb_model *m, cb_layer *l) {
    cb_layout *L = m->d->L;
    size_t n = L->ops->att_numel(L, m->Bl / m->M, m->T, l->heads);
    l->att = calloc((size_t)m->M * n + 1, sizeof(float));
    if (!m->att_scratch) m->att_scratch = calloc(n + 1, sizeof(float));
    return l->att && m->att_scratch ? CB_OK : CB_ENOMEM;
}

/* Points each layer this rank runs at its shards and state buffers. */
static int bind(cb_model *m, cb_layer *l) {
    cb_layout *L = m->d->L;
    int N = m->Bl * m->T, Nm = N / m->M, rows, cols;
    if (l->kind == L_EMBED) { /* ids and targets are copied on every rank */
        l->ids = malloc(sizeof(int) * 2 * N);
        l->targets = l->ids ? l->ids + N : NULL;
        if (!l->ids) return CB_ENOMEM;
    }
    if (l->kind == L_ATTN) return holds(m, l) ? bind_attention(m, l) : CB_OK;
    int t0 = l->t0 >= 0 ? l->t0 : l->tcopy;
    if (t0 < 0) return CB_OK;
    const cb_tensor_info *t = &m->pt.t[t0];
    float *p0 = m->params + t[0].offset, *g0 = m->grads + t[0].offset;
    float *p1 = l->t0 >= 0 ? m->params + t[1].offset : NULL;
    float *g1 = l->t0 >= 0 ? m->grads + t[1].offset : NULL;
    if (l->kind == L_LINEAR) {
        l->lin.w = p0, l->lin.b = p1, l->lin.dw = g0, l->lin.db = g1;
        return CB_OK;
    }
    if (l->kind == L_NORM) {
        l->norm.w = p0, l->norm.b = p1, l->norm.dw = g0, l->norm.db = g1;
        L->ops->act_shape(L, N, l->norm.C, l->norm.parity, &rows, &cols);
        l->mean = calloc(2 * (size_t)rows + 1, sizeof(float));
        l->rstd = l->mean ? l->mean + rows : NULL;
        return l->mean ? CB_OK : CB_ENOMEM;
    }
    l->emb.wte = p0, l->emb.wpe = p1, l->emb.dwte = g0, l->emb.dwpe = g1;
    if (l->head_stage == m->me) {
        l->logits = calloc((size_t)m->M * L->ops->logits_numel(L, Nm, l->emb.V) + 1, sizeof(float));
        if (!l->logits) return CB_ENOMEM;
    }
    return CB_OK;
}

/* The layout's constraints on one layer's widths (a linear's output per
 * part), its heads (attention) and vocabulary (embedding). */
static int check_layer(cb_model *m, const cb_layer *l, cb_err *e) {
    cb_layout *L = m->d->L;
    int V = l->kind == L_EMBED ? l->emb.V : 0, NH = l->kind == L_ATTN ? l->heads : 0;
    int C = l->kind == L_EMBED  ? l->emb.C
            : l->kind == L_NORM ? l->norm.C
            : l->kind == L_ATTN ? l->C
                                : l->lin.in;
    if (l->kind == L_ATTN && (l->heads < 1 || C % l->heads))
        return cb_fail(e, CB_EINPUT, "attention %s: %d heads do not divide its width %d; choose "
                                     "heads that divide the width", l->name, l->heads, C);
    int rc = L->ops->check(L, m->Bl, m->T, C, NH, V, e);
    if (!rc && l->kind == L_LINEAR)
        rc = L->ops->check(L, m->Bl, m->T, l->lin.out / l->lin.parts, NH, V, e);
    return rc;
}

static int check_layers(cb_model *m, cb_err *e) {
    if (m->oom) return cb_fail(e, CB_ENOMEM, "out of memory declaring the model");
    if (m->B % m->d->g.dp)
        return cb_fail(e, CB_EINPUT, "batch %d does not divide over --dp %d; use a multiple of %d",
                       m->B, m->d->g.dp, m->d->g.dp);
    if (m->Bl % m->M)
        return cb_fail(e, CB_EINPUT,
                       "--micro-batches %d does not divide the %d sequences of a data-parallel "
                       "rank; use a divisor of %d", m->M, m->Bl, m->Bl);
    for (int i = 0; i < m->nlayers; i++) {
        int rc = check_layer(m, m->layers[i], e);
        if (rc) return rc;
    }
    return CB_OK;
}

int cb_model_build(cb_model *m, uint64_t seed, const cb_adamw_config *opt, cb_err *e) {
    clear(e);
    m->M = m->P == 1 ? 1 : m->d->M ? m->d->M : (m->Bl % m->P ? 1 : m->P);
    int rc = check_layers(m, e);
    if (!rc) rc = place(m, e);
    if (!rc) rc = make_table(m, e);
    if (!rc) {
        m->params = calloc(m->pt.nparams + 1, sizeof(float));
        m->grads = calloc(m->pt.nparams + 1, sizeof(float));
        if (!m->params || !m->grads) rc = cb_fail(e, CB_ENOMEM, "out of memory for parameters");
    }
    for (int i = 0; !rc && i < m->nlayers; i++)
        if (bind(m, m->layers[i])) rc = cb_fail(e, CB_ENOMEM, "out of memory for layer state");
    for (int i = 0; !rc && i < m->nlayers; i++) /* the tied copy counts once, on its layer's stage */
        if (m->layers[i]->tcopy >= 0) m->pt.t[m->layers[i]->tcopy].owner = 0;
    if (!rc) fill(m, seed);
    int dp = m->d->g.dp > 1;
    if (!rc && dp)
        rc = cb_dp_init_block(&m->dp, &m->d->g.dpg, m->params, m->grads, m->pt.t, m->pt.n,
                              m->pt.nparams, m->d->zero, BUCKET_MB, e);
    if (!rc) rc = cb_adamw_init(&m->opt, opt, dp ? m->dp.lo : 0, dp ? m->dp.hi : m->pt.nparams, e);
    m->built = !rc;
    return cb_comm_agree_err(cb_comm_world(), e);
}

void cb_model_sizes(const cb_model *m, size_t *params, size_t *adam) {
    *params = m->pt.nparams;
    *adam = 2 * (m->opt.hi - m->opt.lo);
}

void cb_model_rows(const cb_model *m, int *first, int *count) {
    *first = m->d->g.at.d * m->Bl;
    *count = m->Bl;
}

/* ---------------------------------------------------------------- operators */

/* Runs one operator on rows [mb * N/M, (mb + 1) * N/M) of this rank's
 * N = Bl * T tokens. Returns the loss of a head forward, else 0. */
static float exec(cb_model *m, const pp_op *o, int mb) {
    cb_layout *L = m->d->L;
    const cb_kernels *k = cb_kernels_cpu();
    cb_layer *l = o->l;
    int Nm = m->Bl * m->T / m->M, Bm = m->Bl / m->M;
    size_t r0 = (size_t)mb * Nm;
    float *p[3];
    size_t n[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        cb_act *a = o->a[i];
        if (a) n[i] = a->n / m->M;
        p[i] = a ? a->data + mb * n[i] : NULL;
    }
    switch (o->kind) {
    case OP_EMB_F: L->ops->embed_forward(L, &l->emb, l->ids + r0, Bm, m->T, p[0]); break;
    case OP_EMB_B: L->ops->embed_backward(L, &l->emb, l->ids + r0, Bm, m->T, p[0]); break;
    case OP_LIN_F: L->ops->linear_forward(L, &l->lin, p[0], p[1], Nm); break;
    case OP_LIN_B: L->ops->linear_backward(L, &l->lin, p[0], p[1], p[2], Nm); break;
    case OP_NORM_F:
        L->ops->norm_forward(L, &l->norm, p[0], p[1], l->mean + r0, l->rstd + r0, Nm);
        break;
    case OP_NORM_B:
        L->ops->norm_backward(L, &l->norm, p[0], p[1], p[2], l->mean + r0, l->rstd + r0, Nm);
        break;
    case OP_GELU_F: k->gelu_forward(k, p[1], p[0], n[0]); break;
    case OP_GELU_B: k->gelu_backward(k, p[2], p[0], p[1], n[0]); break;
    case OP_ADD: k->residual_forward(k, p[0], p[1], p[2], n[1]); break;
    case OP_COPY: memcpy(p[0], p[1], sizeof(float) * n[1]); break;
    case OP_ZERO: memset(p[0], 0, sizeof(float) * n[0]); break;
    case OP_HEAD_F:
        return L->ops->head_forward(L, &l->emb, p[0], l->targets + r0,
                                    l->logits + mb * L->ops->logits_numel(L, Nm, l->emb.V), Nm);
    case OP_HEAD_B:
        L->ops->head_backward(L, &l->emb, p[0], l->targets + r0,
                              l->logits + mb * L->ops->logits_numel(L, Nm, l->emb.V),
                              o->dloss / m->M, p[1], Nm);
        break;
    case OP_ATT_F:
        L->ops->attention_forward(L, p[0], p[1], l->att + mb * L->ops->att_numel(L, Bm, m->T, l->heads),
                                  Bm, m->T, l->C, l->heads);
        break;
    case OP_ATT_B:
        L->ops->attention_backward(L, p[0], l->att + mb * L->ops->att_numel(L, Bm, m->T, l->heads),
                                   p[1], p[2], m->att_scratch, Bm, m->T, l->C, l->heads);
        break;
    }
    return 0.0f;
}

/* Which of an operator's activations it reads (bit i: a[i]) and writes. */
static void access(int kind, int *rd, int *wr) {
    static const int R[] = {0, 1, 1, 3, 1, 7, 1, 3, 6, 2, 0, 1, 1, 1, 3};
    static const int W[] = {1, 0, 2, 4, 2, 4, 2, 4, 1, 1, 1, 0, 2, 2, 4};
    *rd = R[kind];
    *wr = W[kind];
}

static void grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return;
    int c = *cap ? 2 * *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) cb_comm_fatal("out of memory recording the pipeline's operators");
    *p = q;
    *cap = c;
}

/* Without --pp an operator runs now; under --pp it is recorded. */
static float op(cb_model *m, int kind, cb_layer *l, cb_act *a0, cb_act *a1, cb_act *a2,
                float dloss) {
    pp_op o = {.kind = kind, .l = l, .a = {a0, a1, a2}, .dloss = dloss};
    if (m->P == 1) return exec(m, &o, 0);
    o.stage = !l ? m->cur : (kind == OP_HEAD_F || kind == OP_HEAD_B) ? l->head_stage : l->stage;
    m->cur = o.stage;
    grow((void **)&m->tape, &m->cap, m->ntape + 1, sizeof *m->tape);
    m->tape[m->ntape++] = o;
    return 0.0f;
}

static void need(cb_act *a) {
    if (!a->data && !(a->data = calloc(a->n + 1, sizeof(float))))
        cb_comm_fatal("out of memory for an activation");
}

/* The transfers before each recorded operator, from the activations'
 * holders; updates the holders as the operators write. The same on every
 * rank. */
static void plan(cb_model *m) {
    m->nxf = 0;
    for (int i = 0; i < m->ntape; i++) {
        pp_op *o = &m->tape[i];
        int rd, wr;
        access(o->kind, &rd, &wr);
        o->x0 = m->nxf;
        for (int j = 0; j < 3; j++) {
            cb_act *a = o->a[j];
            if (!(rd >> j & 1) || a->valid[o->stage]) continue;
            grow((void **)&m->xf, &m->xcap, m->nxf + 1, sizeof *m->xf);
            m->xf[m->nxf++] = (pp_xfer){a, a->writer, o->stage};
            a->valid[o->stage] = 1;
        }
        o->nx = m->nxf - o->x0;
        for (int j = 0; j < 3; j++)
            if (wr >> j & 1) {
                memset(o->a[j]->valid, 0, (size_t)m->P);
                o->a[j]->valid[o->stage] = 1;
                o->a[j]->writer = o->stage;
            }
    }
}

/* Waits for this rank's sends of micro-batch mb of a (all, a NULL) before
 * its rows are written again. */
static void settle(cb_model *m, const cb_act *a, int mb) {
    int k = 0;
    for (int i = 0; i < m->nsends; i++) {
        pp_send *s = &m->sends[i];
        if (!a || (s->a == a && s->mb == mb)) cb_comm_wait(&s->r);
        else m->sends[k++] = *s;
    }
    m->nsends = k;
}

/* Runs the recorded operators over the M micro-batches; returns the mean
 * loss of a recorded head forward on every rank of the pipeline. */
static float run_tape(cb_model *m) {
    cb_comm *c = &m->d->g.ppg;
    plan(m);
    double loss = 0.0;
    int head = -1;
    for (int mb = 0; mb < m->M; mb++)
        for (int i = 0; i < m->ntape; i++) {
            pp_op *o = &m->tape[i];
            for (int pass = 0; pass < 2; pass++) /* sends first: nobody waits on a later one */
                for (int x = o->x0; x < o->x0 + o->nx; x++) {
                    pp_xfer *t = &m->xf[x];
                    size_t n = t->a->n / m->M;
                    int tag = x * m->M + mb;
                    if (pass == 0 && t->from == m->me) {
                        need(t->a);
                        grow((void **)&m->sends, &m->scap, m->nsends + 1, sizeof *m->sends);
                        pp_send *s = &m->sends[m->nsends++];
                        s->a = t->a;
                        s->mb = mb;
                        cb_comm_isend(c, "pp.act", t->a->data + mb * n, n, t->to, tag, &s->r);
                    } else if (pass == 1 && t->to == m->me) {
                        need(t->a);
                        settle(m, t->a, mb);
                        cb_comm_recv(c, "pp.act", t->a->data + mb * n, n, t->from, tag);
                    }
                }
            if (o->kind == OP_HEAD_F) head = o->stage;
            if (o->stage != m->me) continue;
            int rd, wr;
            access(o->kind, &rd, &wr);
            for (int j = 0; j < 3; j++)
                if (o->a[j]) {
                    need(o->a[j]);
                    if (wr >> j & 1) settle(m, o->a[j], mb);
                }
            loss += exec(m, o, mb);
        }
    settle(m, NULL, 0);
    m->ntape = 0;
    float v = (float)(loss / m->M);
    if (head >= 0) cb_comm_bcast(c, "loss", &v, 1, head);
    return v;
}

void cb_embedding_forward(cb_layer *l, const int *ids, cb_act *x) {
    memcpy(l->ids, ids, sizeof(int) * l->m->Bl * l->m->T);
    op(l->m, OP_EMB_F, l, x, NULL, NULL, 0);
}

void cb_embedding_backward(cb_layer *l, const cb_act *dx) {
    op(l->m, OP_EMB_B, l, (cb_act *)dx, NULL, NULL, 0);
}

void cb_linear_forward(cb_layer *l, const cb_act *x, cb_act *y) {
    op(l->m, OP_LIN_F, l, (cb_act *)x, y, NULL, 0);
}

void cb_linear_backward(cb_layer *l, const cb_act *x, const cb_act *dy, cb_act *dx) {
    op(l->m, OP_LIN_B, l, (cb_act *)x, (cb_act *)dy, dx, 0);
}

void cb_layernorm_forward(cb_layer *l, const cb_act *x, cb_act *y) {
    op(l->m, OP_NORM_F, l, (cb_act *)x, y, NULL, 0);
}

void cb_layernorm_backward(cb_layer *l, const cb_act *x, const cb_act *dy, cb_act *dx) {
    op(l->m, OP_NORM_B, l, (cb_act *)x, (cb_act *)dy, dx, 0);
}

void cb_attention_forward(cb_layer *l, const cb_act *qkv, cb_act *y) {
    op(l->m, OP_ATT_F, l, (cb_act *)qkv, y, NULL, 0);
}

void cb_attention_backward(cb_layer *l, const cb_act *qkv, const cb_act *dy, cb_act *dqkv) {
    op(l->m, OP_ATT_B, l, (cb_act *)qkv, (cb_act *)dy, dqkv, 0);
}

void cb_gelu_forward(const cb_act *x, cb_act *y) {
    op(x->m, OP_GELU_F, NULL, (cb_act *)x, y, NULL, 0);
}

void cb_gelu_backward(const cb_act *x, const cb_act *dy, cb_act *dx) {
    op(x->m, OP_GELU_B, NULL, (cb_act *)x, (cb_act *)dy, dx, 0);
}

void cb_act_add(cb_act *y, const cb_act *a, const cb_act *b) {
    op(y->m, OP_ADD, NULL, y, (cb_act *)a, (cb_act *)b, 0);
}

void cb_act_copy(cb_act *dst, const cb_act *src) {
    op(dst->m, OP_COPY, NULL, dst, (cb_act *)src, NULL, 0);
}

void cb_act_zero(cb_act *x) { op(x->m, OP_ZERO, NULL, x, NULL, NULL, 0); }

float cb_head_forward(cb_layer *l, const cb_act *x, const int *targets) {
    cb_model *m = l->m;
    memcpy(l->targets, targets, sizeof(int) * m->Bl * m->T);
    float loss = op(m, OP_HEAD_F, l, (cb_act *)x, NULL, NULL, 0);
    return m->P == 1 ? loss : run_tape(m);
}

void cb_head_backward(cb_layer *l, const cb_act *x, float dloss, cb_act *dx) {
    op(l->m, OP_HEAD_B, l, (cb_act *)x, dx, NULL, dloss);
}

/* ---------------------------------------------------------------- training */

void cb_model_zero_grad(cb_model *m) { memset(m->grads, 0, sizeof(float) * m->pt.nparams); }

float cb_model_mean(cb_model *m, float v) {
    cb_comm_allreduce(&m->d->g.dpg, "loss", &v, &v, 1, CB_COMM_SUM);
    return v / m->d->g.dp;
}

/* The tied embedding's gradient: the embedding's stage and the head's
 * stage swap theirs and both add (a + b = b + a exactly, so the two copies
 * stay equal). */
static void tie_grads(cb_model *m) {
    cb_comm *c = &m->d->g.ppg;
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        if (l->kind != L_EMBED || l->stage == l->head_stage) continue;
        int t = l->t0 >= 0 ? l->t0 : l->tcopy;
        if (t < 0) continue;
        int peer = l->t0 >= 0 ? l->head_stage : l->stage;
        size_t n = m->pt.t[t].numel;
        float *g = m->grads + m->pt.t[t].offset, *in = malloc(sizeof(float) * n + 1);
        if (!in) cb_comm_fatal("out of memory summing the tied embedding's gradient");
        cb_comm_req r[2];
        cb_comm_irecv(c, "pp.tie", in, n, peer, 1, &r[0]);
        cb_comm_isend(c, "pp.tie", g, n, peer, 1, &r[1]);
        cb_comm_waitall(r, 2);
        cb_kernels_cpu()->residual_forward(cb_kernels_cpu(), g, g, in, n);
        free(in);
    }
}

/* Gradients summed over the data-parallel ranks (ZeRO-1: this rank's
 * shard [lo, hi) of them) and averaged; clipped to the global norm; one
 * AdamW update of [lo, hi); ZeRO-1 then all-gathers the parameters. */
float cb_model_step(cb_model *m, int step) {
    const cb_kernels *k = cb_kernels_cpu();
    cb_grid *g = &m->d->g;
    size_t lo = m->opt.lo, hi = m->opt.hi;
    if (m->P > 1) {
        if (m->ntape) run_tape(m);
        tie_grads(m);
    }
    double ss;
    if (g->dp > 1) {
        cb_dp_begin_backward(&m->dp, 1);
        cb_dp_reduce(&m->dp);
        k->scale(k, m->grads + lo, 1.0f / g->dp, hi - lo);
        ss = cb_dp_grad_sumsq(&m->dp);
    } else {
        ss = cb_ptable_sumsq(&m->pt, m->grads);
    }
    cb_comm_allreduce_f64(&g->model, "norm", &ss, &ss, 1, CB_COMM_SUM);
    double norm = sqrt(ss);
    float s = cb_clip_scale(m->opt.c.clip, norm);
    if (s < 1.0f) k->scale(k, m->grads + lo, s, hi - lo);
    cb_adamw_step(&m->opt, k, m->params, m->grads, m->pt.t, m->pt.n, cb_lr_at(&m->opt.c, step));
    if (g->dp > 1) cb_dp_sync_params(&m->dp);
    return (float)norm;
}

/* Without --pp: one file from tensor rank 0 of data-parallel rank 0. Under
 * --pp each stage writes a part and world rank 0 merges them (the tied
 * embedding once): the file is the single process's. */
int cb_model_save(cb_model *m, const char *path, cb_err *e) {
    clear(e);
    const float *blocks[1] = {m->params};
    const char *prefix[1] = {""}, *meta[2] = {"format", "pt"};
    char part[4200];
    if (m->P > 1) cb_pp_part_path(part, sizeof part, path, m->me);
    if (m->d->g.at.d == 0)
        cb_ptable_save(&m->pt, 1, blocks, prefix, m->P > 1 ? part : path, meta, 1, e);
    int rc = cb_comm_agree_err(cb_comm_world(), e);
    if (!rc && m->P > 1) {
        if (m->d->g.world_rank == 0) cb_pp_merge_parts(path, m->P, e);
        rc = cb_comm_agree_err(cb_comm_world(), e);
    }
    return rc;
}

int cb_model_load(cb_model *m, const char *path, cb_err *e) {
    clear(e);
    cb_st_file f;
    if (!cb_st_open(path, &f, e)) {
        cb_ptable_load(&m->pt, m->params, "", &f, path, e);
        cb_st_close(&f);
    }
    return cb_comm_agree_err(cb_comm_world(), e);
}

void cb_model_free(cb_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        free(l->mean);
        free(l->logits);
        free(l->att);
        free(l->ids);
        free(l);
    }
    for (int i = 0; i < m->nacts; i++) {
        free(m->acts[i]->data);
        free(m->acts[i]->valid);
        free(m->acts[i]);
    }
    if (m->d->g.dp > 1) cb_dp_free(&m->dp);
    cb_ptable_free(&m->pt);
    cb_adamw_free(&m->opt);
    free(m->params);
    free(m->grads);
    free(m->att_scratch);
    free(m->tape);
    free(m->xf);
    free(m->sends);
    free(m);
}
