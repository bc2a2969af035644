/* Tensor-parallel layouts: serial, 1-D (Megatron), 2-D (SUMMA/Optimus),
 * 3-D (the cube of Bian et al.). Each layout is one file implementing
 * cb_layout_ops; the model calls only these operators and never branches on
 * the layout (docs/parallelism.md holds the algorithms).
 *
 * Activations. A logical activation is N tokens x H features (N = the
 * tokens of this data-parallel rank's micro-batch, whole sequences of T
 * tokens) with a parity: 0 on the residual stream (block boundaries), 1
 * between the two linears of a pair (after QKV, after fc). Each rank holds
 * its local piece, act_shape() rows x cols:
 *   serial  N x H
 *   1d      parity 0: N x H (replicated)     parity 1: N x H/P (columns)
 *   2d      N/q x H/q, token block r, feature block c (both parities)
 *   3d      parity 0: N/q^2 x H/q, token block i*q+j, feature block k
 *           parity 1: N/q^2 x H/q, token block i*q+k, feature block j
 * Token blocks are whole sequences (attention needs them), so the batch of
 * sequences must divide by the number of token blocks.
 *
 * Linears. Y = X W + b, W [in, out] (Hugging Face Conv1D layout). A linear
 * takes an activation of parity p and returns parity 1-p: in 1-D the first
 * of a pair is column-parallel, the second row-parallel; in 3-D the roles
 * of j and k swap. `parts` > 1 says the output is that many equal sections
 * (QKV: 3) that are split separately, so each rank's output columns hold
 * [q | k | v] of its own heads and attention needs no communication.
 *
 * Parameters. Each rank holds a shard of every tensor (cb_shard): a row
 * range times column segments of the full tensor. Rows at or past the
 * tensor's true row count are padding (the vocabulary padded to a multiple
 * of the shard count): zero on load, dropped on save, never updated. A
 * shard may be replicated on several ranks (LayerNorm and bias vectors);
 * exactly one of the copies has owner = 1, and only owners count in the
 * gradient norm and write checkpoints. Layouts keep replicated copies equal
 * by reducing their gradients inside backward. */
#ifndef CB_LAYOUT_H
#define CB_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "cubist.h"
#include "comm/comm.h"
#include "kernels/kernels.h"

struct cb_grid;

typedef enum cb_layout_mode {
    CB_LAYOUT_SERIAL = 0,
    CB_LAYOUT_1D = 1,
    CB_LAYOUT_2D = 2,
    CB_LAYOUT_3D = 3
} cb_layout_mode;

typedef enum cb_param_kind {
    CB_P_LINEAR_W, /* [in, out] of a linear whose input has parity p */
    CB_P_LINEAR_B, /* [out] */
    CB_P_NORM,     /* [C] LayerNorm weight or bias on an activation of parity p */
    CB_P_EMBED,    /* [V, C] token embedding, tied to the LM head */
    CB_P_POS,      /* [T, C] position embedding */
    CB_P_VOCAB,    /* [V] per vocabulary entry (the MLM decoder bias): the vocabulary block
                      of the rank's head logits, cut at V, replicated over the ranks holding
                      that block (cb_vocab_bias_backward's share group) */
} cb_param_kind;

#define CB_SHARD_MAXSEG 4

typedef struct cb_shard {
    int64_t R, C;        /* full shape; 1-D tensors have R = 1 */
    int64_t rows_pad;    /* R padded to the layout's multiple (>= R) */
    int64_t row0, nrows; /* local rows [row0, row0 + nrows) of the padded tensor */
    int nseg;
    int64_t col0[CB_SHARD_MAXSEG], ncol[CB_SHARD_MAXSEG];
    int owner;
} cb_shard;

size_t cb_shard_numel(const cb_shard *s);
size_t cb_shard_cols(const cb_shard *s);
/* local (nrows x cols) <- full (R x C); padding rows become zero */
void cb_shard_extract(const cb_shard *s, const float *full, float *local);
/* full (R x C) <- local; padding rows dropped */
void cb_shard_place(const cb_shard *s, const float *local, float *full);
/* local <- this shard of a generated tensor: element (row, col) of the full
 * tensor is sd x cb_rng_normal_at(key, row * C + col), or `value` when sd is
 * 0, or with sinusoid the sinusoidal position table's (fill_sinusoid);
 * padding rows zero. Costs the shard, never the full tensor. */
void cb_shard_generate(const cb_shard *s, float value, uint64_t key, float sd, int sinusoid,
                       float *local);

/* Parameter state handed to the operators: local shards (the model owns the
 * memory) and their gradients. overwrite: the next backward overwrites the
 * gradients it writes densely (a linear's dw, db, a LayerNorm's, the
 * head's dwte) instead of accumulating into them, with the bits that
 * accumulating into zeros would give; the engine sets it for the step's
 * first write of each (graph.h). The embedding lookup's rows, the
 * decoder bias and the logistic head always accumulate. */
typedef struct cb_linear {
    int in, out, parts, parity;
    float *w, *b, *dw, *db; /* b, db NULL without bias */
    void *saved;            /* layout-private, e.g. 3-D gathered inputs */
    int overwrite;
} cb_linear;

typedef struct cb_norm {
    int C, parity;
    float *w, *b, *dw, *db;
    int overwrite;
} cb_norm;

typedef struct cb_embed {
    int V, C, T;         /* true vocabulary; wte rows may be padded */
    float *wte, *wpe, *dwte, *dwpe;
    /* the head's loss (cb_layer_set_loss): label smoothing, and targets
     * equal to `ignore` left out when has_ignore; loss_scale (set by the
     * engine each step) = rows / rows with a real target, over the step */
    float smooth, loss_scale;
    int ignore, has_ignore;
    /* the head's optional decoder bias [V] (BERT's MLM head), whole on
     * every tensor rank, and its gradient, which the head sums over the
     * tensor group; NULL: none */
    float *bias, *dbias;
    int overwrite; /* the head's dwte (cb_linear) */
} cb_embed;

typedef struct cb_layout cb_layout;

/* One use of an operator, declared when a model is built so the layout can
 * plan the workspace that operator needs (cb_layout_reserve). N = B * T
 * tokens of one micro-batch; inflight: how many forwards of this operator
 * can be awaiting their backward at once, each in its own input buffer
 * (the micro-batches a pipeline chunk keeps). */
typedef enum cb_layout_op { CB_OP_EMBED, CB_OP_NORM, CB_OP_LINEAR, CB_OP_ATTN, CB_OP_HEAD } cb_layout_op;
typedef struct cb_layout_use {
    cb_layout_op op;
    int B, T, inflight;
    cb_linear *lin;       /* CB_OP_LINEAR */
    const cb_norm *norm;  /* CB_OP_NORM */
    const cb_embed *emb;  /* CB_OP_EMBED, CB_OP_HEAD */
    int bias;             /* CB_OP_HEAD: with a decoder bias (cb_embed.bias) */
} cb_layout_use;

typedef struct cb_layout_ops {
    const char *name;
    /* Checked before anything is built: batch, heads, widths, vocab. */
    int (*check)(const cb_layout *L, int B, int T, int C, int NH, int V, cb_err *e);
    /* local rows x cols of an N x H activation of the given parity */
    void (*act_shape)(const cb_layout *L, int N, int H, int parity, int *rows, int *cols);
    /* which rows and columns of the full N x H activation tensor rank tp_rank
     * holds (parts as for the linear that produced it: the QKV output has
     * parts 3); for tests and for gathering activations */
    cb_shard (*act_shard)(const cb_layout *L, int tp_rank, int N, int H, int parity, int parts);
    /* floats of the saved attention probabilities of a micro-batch's call a
     * (this rank's part, as its kernel table keeps them) and of the local logits */
    size_t (*att_numel)(const cb_layout *L, const cb_attn *a);
    size_t (*logits_numel)(const cb_layout *L, int N, int V);
    /* the shard of tensor group rank tp_rank; parts as in the linear */
    cb_shard (*shard)(const cb_layout *L, int tp_rank, cb_param_kind kind, int64_t R, int64_t C,
                      int parts, int parity);
    /* x (parity 0) = wte[ids] + wpe[t]; ids (B,T) is the whole micro-batch of
     * this data-parallel rank on every tensor rank */
    void (*embed_forward)(cb_layout *L, const cb_embed *e, const int *ids, int B, int T,
                          float *x);
    void (*embed_backward)(cb_layout *L, cb_embed *e, const int *ids, int B, int T,
                           const float *dx);
    /* y, mean, rstd local; backward accumulates into dx (the residual),
     * dw, db as n->overwrite says */
    void (*norm_forward)(cb_layout *L, const cb_norm *n, const float *x, float *y, float *mean,
                         float *rstd, int N);
    void (*norm_backward)(cb_layout *L, cb_norm *n, const float *x, const float *dy, float *dx,
                          const float *mean, const float *rstd, int N);
    /* x parity p -> y parity 1-p; backward overwrites dx, accumulates dw, db
     * (or overwrites them: l->overwrite) */
    void (*linear_forward)(cb_layout *L, cb_linear *l, const float *x, float *y, int N);
    void (*linear_backward)(cb_layout *L, cb_linear *l, const float *x, const float *dy,
                            float *dx, int N);
    /* x, an input of earlier linear forwards, was rewritten outside the
     * operators (selective recompute: one buffer serves every micro-batch
     * in flight, refilled before each backward): nothing kept from those
     * forwards may serve a backward on x. 3-D drops its gathered X^ of x;
     * the others keep nothing (cb_layout_nothing_kept). */
    void (*input_rewritten)(cb_layout *L, const float *x);
    /* a: the attention of the micro-batch's B sequences (cb_attn; its
     * lengths index those B); q, kv the local parity-1 pieces of its
     * queries and keys/values (a QKV output: q = kv), y parity 1 of width
     * C; backward overwrites dq, dkv (cb_split_attention_*) */
    void (*attention_forward)(cb_layout *L, const cb_attn *a, const float *q, const float *kv,
                              float *y, float *att);
    void (*attention_backward)(cb_layout *L, const cb_attn *a, const float *q, const float *kv,
                               const float *att, const float *dy, float *dq, float *dkv,
                               float *scratch);
    /* tied LM head and vocabulary-parallel cross-entropy of x (parity 0):
     * returns the mean loss over the N tokens of this data-parallel rank;
     * logits (logits_numel floats) are kept for backward. targets NULL
     * (sampling, serial layout only) leaves the probabilities in logits. */
    float (*head_forward)(cb_layout *L, const cb_embed *e, const float *x, const int *targets,
                          float *logits, int N);
    /* dx overwritten; dwte accumulates (or is overwritten: e->overwrite);
     * dloss scales the mean loss */
    void (*head_backward)(cb_layout *L, cb_embed *e, const float *x, const int *targets,
                          float *logits, float dloss, float *dx, int N);
    void (*free)(cb_layout *L);
    /* Declares the workspace of one use (cb_layout_reserve); NULL: none. */
    void (*plan)(cb_layout *L, const cb_layout_use *u);
    /* Allocates what plan declared beyond the scratch slots (3-D: the kept
     * gathered inputs); NULL: nothing. CB_ENOMEM on failure. */
    int (*plan_alloc)(cb_layout *L, cb_err *e);
} cb_layout_ops;

/* Capabilities of a layout, read by the model and data parallelism instead
 * of its name. */
enum {
    CB_LAYOUT_WHOLE = 1 << 0, /* every tensor and activation whole on every rank (no sharding):
                                 the embedding lookup and the head see all rows and vocabulary */
    CB_LAYOUT_SAMPLES = 1 << 1, /* head_forward with targets NULL leaves the probabilities */
    CB_LAYOUT_ROWS = 1 << 2,    /* the head's input (parity 0) on each rank is a block of whole
                                   sequences (act_shard): the MLM head may run on the same
                                   number of rows of each sequence, gathered locally */
};

/* Scratch of a layout: numbered slots (each layout names its own, at most
 * CB_WS_SLOTS), sized by the plan at build, so no step allocates. */
#define CB_WS_SLOTS 10
typedef struct cb_workspace {
    void *buf[CB_WS_SLOTS];
    size_t cap[CB_WS_SLOTS];  /* bytes allocated */
    size_t need[CB_WS_SLOTS]; /* bytes declared by the plan */
    size_t kept_need;         /* bytes plan_alloc will allocate */
    int planned;              /* allocated from a plan */
    int grew;                 /* slots grown after planning: a plan that missed a use */
    int unkept;               /* 3-D: forwards whose X^ found no planned entry (gathered again) */
} cb_workspace;

struct cb_layout {
    const cb_layout_ops *ops;
    cb_layout_mode mode;
    int tp, q, tp_rank;
    struct cb_grid *grid; /* NULL for the serial layout */
    const cb_kernels *k;
    int save_gathered;    /* 3-D: keep gathered inputs for backward (1) or re-gather (0) */
    size_t scratch_bytes; /* the layout's own buffers (scratch, kept gathers): grown, never
                             shrunk, so this is their peak; for memory reports */
    int noted_pad;        /* the vocabulary padding was reported */
    unsigned caps;        /* CB_LAYOUT_WHOLE, ... */
    cb_workspace ws;
    /* A GEMM that runs while a non-blocking collective is in flight is cut
     * into this many row blocks with an MPI test between them: MPI (OpenMPI
     * at least) advances a non-blocking collective only inside MPI calls,
     * so without them the overlap is nominal. 1: one GEMM. Every block
     * computes the same sums, but OpenBLAS may round a row differently in a
     * product of fewer rows: results agree to ~1e-7, not bit for bit. */
    int overlap_chunks;
    int wire_bf16;        /* --comm-dtype bf16: activation collectives travel in bf16 (cb_layout_sum...) */
    void *priv;
};

/* The serial layout (no MPI); NULL when out of memory. */
cb_layout *cb_layout_serial(void);
/* The layout of a grid's tensor group; mode from the grid. */
int cb_layout_create(struct cb_grid *g, cb_layout **out, cb_err *e);
/* One per file: tp1d.c, tp2d.c, tp3d.c (grid->tp > 1). */
int cb_layout_1d(struct cb_grid *g, cb_layout **out, cb_err *e);
int cb_layout_2d(struct cb_grid *g, cb_layout **out, cb_err *e);
int cb_layout_3d(struct cb_grid *g, cb_layout **out, cb_err *e);
void cb_layout_free(cb_layout *L);
/* Fixes the checks suggest, each satisfying every constraint at once:
 * the smallest width >= C that m divides and, with NH > 0, NH divides; the
 * heads count nearest NH that m divides and that divides C (0: none). */
int cb_layout_fix_width(int C, int m, int NH);
int cb_layout_fix_heads(int C, int m, int NH);
/* The width and heads constraints of a layout: C % mw == 0 and, with
 * NH > 0 (0: a layer without heads), NH % mh == 0; one message naming what
 * fails, with a fix that satisfies both and NH | C. who names the layout
 * ("--tp-mode 3d with tp 8 (q=2)"), why the reason for mw; alt, when not
 * NULL, is another fix to offer ("--tp 2"). Quantities, not flags: the
 * message must be right for cubist train and for a user's program. */
int cb_layout_check_widths(int C, int NH, int mw, int mh, const char *who, const char *why,
                           const char *alt, cb_err *e);
/* Rank 0 of the world prints, once per layout, that the vocabulary V is
 * padded to Vp (a multiple of `what`); nothing when Vp == V. */
void cb_layout_note_pad(cb_layout *L, int64_t V, int64_t Vp, const char *what);

#define CB_OVERLAP_CHUNKS 4 /* default overlap_chunks of the 2-D and 3-D layouts */
/* MPI progress on the requests in flight: cb_comm_test on each non-NULL one. */
void cb_layout_progress(cb_comm_req *const *pending, int n);
/* dw (IC,OC) += (acc) or = inp (N,IC)^T dout (N,OC) in L->overlap_chunks
 * row blocks of dw, with progress on pending between them. */
void cb_layout_dw_overlapped(cb_layout *L, float *dw, const float *dout, const float *inp, int N,
                             int IC, int OC, cb_comm_req *const *pending, int npending, int acc);
/* A parameter gradient's share computed elsewhere (a reduction's result):
 * g (n) = x when overwrite, else g += x */
void cb_layout_grad_put(cb_layout *L, float *g, const float *x, size_t n, int overwrite);

/* The collectives of activations and their gradients, in bf16 on the wire
 * when L->wire_bf16 (cb_comm_*_bf16f: fp32 sums, half the bytes), else the
 * fp32 forms. sum: x (n) summed in place; reduce: recv (n) on root, send
 * NULL meaning recv; reduce_scatter: send (p*n) -> recv (n); allgather:
 * send (n) -> recv (p*n). Parameters, their gradients and statistics
 * (LayerNorm's, the loss's) keep the fp32 forms. */
void cb_layout_sum(cb_layout *L, cb_comm *c, const char *tag, float *x, size_t n);
void cb_layout_reduce(cb_layout *L, cb_comm *c, const char *tag, const float *send, float *recv,
                      size_t n, int root);
void cb_layout_reduce_scatter(cb_layout *L, cb_comm *c, const char *tag, const float *send,
                              float *recv, size_t n);
void cb_layout_allgather(cb_layout *L, cb_comm *c, const char *tag, const float *send,
                         float *recv, size_t n);

/* Workspace (cb_workspace). reserve: slot must hold `bytes` (the maximum
 * over every call is kept). scratch: slot's buffer of at least `bytes`;
 * beyond the plan (or without one: the layouts built outside a graph) it
 * grows, and ends the job with status 4 (CB_ENOMEM) if it cannot. */
void cb_layout_reserve(cb_layout *L, int slot, size_t bytes);
void *cb_layout_scratch(cb_layout *L, int slot, size_t bytes);
/* scratch, zero-filled */
void *cb_layout_zeroed(cb_layout *L, int slot, size_t bytes);
/* Declares every use (ops->plan); then bytes the workspace will take. */
void cb_layout_plan(cb_layout *L, const cb_layout_use *u);
size_t cb_layout_workspace_bytes(const cb_layout *L);
/* Allocates the planned workspace; CB_ENOMEM naming the bytes. */
int cb_layout_workspace_alloc(cb_layout *L, cb_err *e);
void cb_layout_workspace_free(cb_layout *L);
/* Ends the job (every rank that reaches it) with CB_ENOMEM: an allocation
 * during a step that no plan covered failed. */
_Noreturn void cb_layout_oom(const char *what);

/* Operators written once (ops.c), parameterised by the communicators a
 * layout hands them; slot, slot2 are workspace slots of the caller's that
 * the operator may use (the *_reserve functions declare them).
 *
 * LayerNorm of rows whose C features are split over the ranks of `feat`:
 * x, y, dy, dx (N, Cl) local columns, mean, rstd (N). `rep` (NULL: none)
 * holds the other copies of the weight and bias, whose gradients it sums. */
void cb_split_norm_forward(cb_layout *L, cb_comm *feat, int slot, const cb_norm *n,
                           const float *x, float *y, float *mean, float *rstd, int N, int Cl);
void cb_split_norm_backward(cb_layout *L, cb_comm *feat, cb_comm *rep, int slot, int slot2,
                            cb_norm *n, const float *x, const float *dy, float *dx,
                            const float *mean, const float *rstd, int N, int Cl);
void cb_split_norm_reserve(cb_layout *L, int slot, int slot2, int N, int Cl);
/* Vocabulary-parallel cross-entropy over the ranks of `vocab`: logits
 * (N, Vl) hold columns v0.. of the padded vocabulary (true size V) and are
 * replaced by the probabilities; losses (N); targets (N) NULL for none.
 * Returns the sum of the N losses in row order. vocab NULL: no reduction
 * (one rank holds every column). */
double cb_vocab_ce_forward(cb_layout *L, cb_comm *vocab, int slot, float *logits, float *losses,
                           const int *targets, int N, int Vl, int v0, int V);
void cb_vocab_ce_reserve(cb_layout *L, int slot, int N);
/* The head's loss on those logits: the cross-entropy above, or with e's
 * label smoothing or ignored targets the smoothed, weighted losses (their
 * row sums and target logits reduced over `vocab` first: one all-reduce of
 * 2N floats more); returns the losses' sum. vocab NULL: one rank holds the
 * whole vocabulary (Vl columns from v0 = 0). The backward leaves dlogits
 * in place (dloss scales each row). cb_vocab_loss_reserve plans slot. */
int cb_loss_plain(const cb_embed *e);
double cb_vocab_loss_forward(cb_layout *L, cb_comm *vocab, int slot, const cb_embed *e,
                             float *logits, float *losses, const int *targets, int N, int Vl,
                             int v0);
void cb_vocab_loss_backward(cb_layout *L, const cb_embed *e, float *logits, const int *targets,
                            int v0, float dloss, int N, int Vl);
void cb_vocab_loss_reserve(cb_layout *L, int slot, int N, const cb_embed *e);
/* The head's decoder bias (e->bias, NULL: none; CB_P_VOCAB: this rank's
 * block v0.. of it): add its entries (below the true vocabulary) to the
 * local logits (N, Vl) */
void cb_vocab_bias_add(cb_layout *L, const cb_embed *e, float *logits, int N, int Vl, int v0);
/* e->dbias (NULL: nothing; the block v0..) += the column sums of dlogits
 * (N, Vl), summed over share (the ranks of other tokens holding the same
 * vocabulary block; NULL: none) in slot (Vl floats, free at this point;
 * cb_vocab_bias_reserve) */
void cb_vocab_bias_backward(cb_layout *L, int slot, cb_comm *share, const cb_embed *e,
                            const float *dlogits, int v0, int N, int Vl);
void cb_vocab_bias_reserve(cb_layout *L, int slot, int Vl);
cb_shard cb_vocab_bias_shard(int64_t V, int64_t v0, int64_t Vl, int owner);

/* Attention in every layout: the kernel on this rank's sequences and
 * heads (no communication), and the floats of its probabilities. */
void cb_split_attention_forward(cb_layout *L, const cb_attn *a, const float *q, const float *kv,
                                float *y, float *att);
void cb_split_attention_backward(cb_layout *L, const cb_attn *a, const float *q, const float *kv,
                                 const float *att, const float *dy, float *dq, float *dkv,
                                 float *scratch);
size_t cb_split_att_numel(const cb_layout *L, const cb_attn *a);

/* input_rewritten of a layout that keeps nothing from forward. */
void cb_layout_nothing_kept(cb_layout *L, const float *x);

/* The shard of a parameter on tensor rank tp_rank: ops->shard */
cb_shard cb_layout_shard(const cb_layout *L, int tp_rank, cb_param_kind kind, int64_t R,
                         int64_t C, int parts, int parity);

/* Collective over the tensor group: full (R x C, on tp rank 0) from every
 * rank's local shard. full may be NULL on other ranks. */
void cb_layout_gather(cb_layout *L, cb_param_kind kind, int64_t R, int64_t C, int parts,
                      int parity, const float *local, float *full);

#endif
