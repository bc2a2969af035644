/* The graph engine behind cb_model: a model is declared once as layers
 * (parameters) and operations on activations (cb_op_*), then built; the
 * engine owns forward, backward, recompute and the order of micro-batches.
 *
 * Declaration records nodes in order. Each node reads one or two values
 * (activations: N tokens x H features of one micro-batch, with the parity
 * of the tensor layouts, see layout.h) and writes one, except the loss,
 * which ends the graph. Backward is derived: nodes run in reverse, each
 * adding its share into the gradients of its inputs (the first share of a
 * gradient overwrites, later ones accumulate: decided at build time, so no
 * buffer is cleared during a step).
 *
 * Parameter gradients likewise: walking this rank's schedule at build,
 * the first backward (node and micro-batch) to write each tensor in a
 * step overwrites it when it writes it densely (a linear's weight and
 * bias, a LayerNorm's, the tied head's wte: beta 0 in the GEMM, a plain
 * store in the sums), and every later write accumulates. Only the tensors
 * whose first write adds rows or shares (embedding and lookup tables,
 * positions, the decoder bias, the logistic head), and those no node here
 * writes, are cleared at the step's start (their runs of the gradient
 * block, planned at build). GPT's tied wte is first written by the head
 * (backward starts at the loss), so its lookup's rows add to that.
 *
 * Stages. The nodes are cut into p x v contiguous virtual stages (the
 * pipeline partition; one stage without --pp); virtual stage vs runs on
 * pipeline rank vs % p as its chunk vs / p. A value produced on one chunk
 * and read on another travels as a message per micro-batch (forward), its
 * gradient back (backward), straight from the producer to each chunk that
 * reads it, so a residual that skips a stage skips it on the wire too.
 * Messages between chunks of the same rank go through MPI as well (to
 * itself), so there is one path. Every rank walks its own schedule
 * (schedule.h); receives block, sends do not, and their buffers are kept
 * until the slot is reused: the schedules are deadlock-free for a chain of
 * stages, and a skip edge adds no order that the chain does not imply.
 *
 * A layer used by nodes on several pipeline ranks (a tied embedding and LM
 * head, any shared weight) has a copy on each; the rank of the lowest
 * virtual stage owns it. After backward the others send their gradients to
 * the owner, which adds them; only the owner's copy is updated and counted
 * (norm, checkpoint), and after the optimizer step it sends the new values
 * back, so the copies are equal bit for bit.
 *
 * Memory is planned at build: per chunk, a slot block per micro-batch in
 * flight (the values it writes or receives, what each node keeps for
 * backward: LayerNorm statistics, attention probabilities, logits, and the
 * gradients of received values, which are sent from there), one gradient
 * block, and scratch. Nothing is allocated during a step. A value's
 * gradient lives from its first share (in backward order) to its
 * producer's backward; gradients whose lives do not overlap share a buffer
 * (the smallest free one that fits, else a new one), and an add passes its
 * output's gradient buffer on to one input instead of copying it.
 *
 * Data parallelism: after the backward of a chunk's last micro-batch,
 * each node reports the tensors whose gradient it finished (those it uses
 * that no node after it in backward order on this rank uses) to the
 * bucketed reduction (dp.h), which starts a bucket as soon as all of its
 * tensors are final; a tensor with copies on other pipeline ranks is
 * final after their shares are added. The sparse and split embedding
 * paths (--embed-grad) apply when the first layer is an embedding whose
 * lookup and tied head both run here, unsharded: one stage, --tp 1; the
 * engine answers their lookup query with the embedding node's ids and
 * output gradient.
 *
 * Recompute (--recompute): `block` keeps, per micro-batch, only the values
 * that cross the boundary of a declared block (cb_model_begin_block ..
 * end_block) and reruns the block's forward right before its backward into
 * buffers shared by every block and micro-batch (Megatron's methods:
 * --recompute-layers n reruns only the first n blocks of each chunk;
 * --recompute-method uniform reruns groups of n blocks, keeping only each
 * group's input); `selective` keeps all
 * but the attention probabilities and GELU outputs, which are recomputed
 * from their kept inputs before the backward that needs them. */
#ifndef CB_GRAPH_H
#define CB_GRAPH_H

#include "api/flags.h"
#include "comm/grid.h"
#include "cubist.h"
#include "layout/layout.h"
#include "model/ptable.h"
#include "optim/adamw.h"
#include "pipeline/partition.h"
#include "pipeline/schedule.h"
#include "dp/dp.h"

enum { G_EMBED, G_LINEAR, G_NORM, G_ATTN, G_LOOKUP, G_LOGIT, G_BIAS };      /* layer kinds */
enum { N_EMBED, N_LINEAR, N_NORM, N_ATTN, N_GELU, N_ADD, N_LOSS,     /* node kinds */
       N_LOOKUP, N_MUL, N_RELU, N_CONCAT, N_LOGIT, N_DROP, N_KINDS };
/* the nodes that end the graph: the LM head's cross-entropy, the logistic loss */
#define IS_LOSS(kind) ((kind) == N_LOSS || (kind) == N_LOGIT)
enum { RC_NONE, RC_BLOCK, RC_SELECTIVE };                            /* --recompute */

struct cb_dist {
    cb_grid g;
    cb_layout *L;
    int M;                 /* --micro-batches; 0: the default */
    int v;                 /* --virtual-stages; 0: the default */
    cb_pp_kind sched;
    int sched_given;
    const char *partition; /* auto | equal | boundaries */
    double mem_weight;
    int print_partition;
    int zero;              /* --zero 1 */
    int recompute;         /* RC_* */
    int embed_grad;        /* --embed-grad: a cb_dp_embed (dp.h) */
    int rc_layers;         /* --recompute-layers: block: the first n blocks of each chunk (0 all);
                              uniform: blocks per group (0: 1) */
    int rc_uniform;        /* --recompute-method uniform */
    double max_memory;     /* --max-memory in bytes; 0: no limit */
    double bucket_mb;      /* --bucket-mb of the gradient reduction; 0: the default */
    int comm_bf16;         /* --comm-dtype bf16: the gradient buckets travel in bf16 */
    int block_units;       /* partition whole blocks (a block, or a run of nodes between
                              blocks, is one module); 0: every node is one */
    int profile;           /* --partition auto: time each module before partitioning */
};

#define CB_LAYER_NAME_MAX 55 /* + ".weight" within cb_tensor_info's 64 */

struct cb_layer {
    cb_model *m;
    int kind, idx;
    char name[64], pos[64]; /* pos: an embedding's position tensor name, "" for <name>.pos */
    int parity;             /* of the input it is applied to; -1 until first used */
    int parts;              /* a linear's output sections (QKV: 3) */
    int t[2];               /* this rank's table index of each tensor, -1 not held */
    int owner_vs[2];        /* lowest virtual stage using each tensor, -1 unused */
    cb_linear lin;
    cb_norm norm;           /* also the logistic head's weight vector (no bias) */
    cb_embed emb;           /* also a lookup table (no positions) */
    int C, heads;           /* attention */
    unsigned attn_flags;    /* CB_ATTN_* */
    int len_set[2];         /* padded attention: length sets of queries, keys */
    float attn_drop;        /* attention: dropout of the probabilities (0: none) */
    float init_sd;          /* normal initial weights */
    int sinusoid;           /* embedding: fixed sinusoidal positions */
    float emb_scale;        /* embedding: s wte[id] + pos (0: unscaled); wpe_scaled: pos / s */
    float *wpe_scaled;
};

struct cb_act {
    cb_model *m;
    int id, H, parity, parts;
    int node; /* its producer */
};

typedef struct gnode {
    int kind;
    cb_layer *l;
    int in[2], nin; /* values read */
    int field;      /* a lookup's or an embedding's id field */
    cb_layer *l2;   /* the MLM loss's decoder bias (cb_op_mlm_loss), else NULL */
    int erf;        /* a GELU: the exact (erf) form */
    float p;        /* dropout: the probability of dropping */
    int drop_ix;    /* dropout: its index among the model's dropouts (its key) */
    int out;        /* value written; -1 for the loss */
    int vs, seg;    /* virtual stage; the block it was declared in, -1 none */
    int rseg;       /* block recompute: the unit rerun together (a block, or under
                       the uniform method a group of blocks), -1: kept */
    size_t keep;    /* floats kept from forward per micro-batch (statistics, probabilities, logits) */
    int acc[2];     /* backward into input i accumulates (1) or overwrites (0) */
    int ow_mb;      /* the micro-batch whose backward of this node is the step's first
                       write of its dense parameter gradients: they are overwritten
                       then (cb_linear.overwrite), accumulated otherwise; -1 never */
    int zero_dy;    /* no share of the output's gradient arrives: clear it first */
    int recompute;  /* forward reruns before backward (block: in a segment; selective) */
    int alias;      /* an add's input whose gradient takes over the output's buffer, -1 */
    int fin[2];     /* tensors (this rank's table) whose gradient is final after this
                       node's backward of the step's last micro-batch, -1 none */
    int dec;        /* incremental decoding: depends on the decoder's id field (decode.c) */
} gnode;

/* A value crossing from one chunk to another, one per (value, reader). */
typedef struct gedge {
    int v, from, to; /* virtual stages */
    int tag;
} gedge;

/* One of this rank's chunks. Offsets are in floats; SIZE_MAX: not here. */
typedef struct gchunk {
    int vs, n0, n1;       /* nodes [n0, n1) */
    int nslots;
    size_t slot_floats, grad_floats, shared_floats;
    float *slot, *grad, *shared; /* nslots x slot_floats; grad_floats; recomputed values */
    size_t *val_off;      /* [values]: in a slot, or in shared when recomputed */
    int *val_shared;      /* [values]: 1 when val_off is into shared */
    size_t *grad_off;     /* [values]: written here: in grad; received: in the slot */
    int *grad_in_slot;
    size_t *keep_off;     /* [nodes]: in the slot, or shared for a recomputed node */
    int *slot_of;         /* [M] */
    int *free_slot, nfree;
    float *sendbuf;       /* [M][nein + neout] messages out: a copy per micro-batch and
                             edge, so no send is waited on before the step ends */
    size_t send_floats;   /* one micro-batch's, all edges */
    size_t *send_off;     /* [edges]: offset of an edge's message */
    cb_comm_req *pend;    /* [M x (nein + neout)] */
    int npend;
    int *ein, nein, *eout, neout; /* edges into and out of this chunk */
    int nseg, *seg0;      /* block recompute: segment start nodes, seg0[nseg] = n1 */
} gchunk;

struct cb_model {
    cb_dist *d;
    cb_layout *L;
    int B, T, Bl;       /* global and local sequences of a step */
    int M, Bm;          /* micro-batches per step, sequences per micro-batch */
    int P, v, me;       /* pipeline ranks, chunks per rank, this rank */
    cb_err err;         /* first declaration error, reported by cb_model_build */
    int built;
    cb_layer **layers;
    int nlayers, clayers;
    cb_act **acts;
    int nacts, cacts;
    gnode *nodes;
    int nnodes, cnodes, seg;
    int loss_node;
    /* built */
    cb_ptable pt;
    float *params, *grads;
    size_t *zero_runs;   /* [2 nzero]: offset, floats of each run of the gradient block
                            cleared at the step's start (graph.h) */
    int nzero;
    cb_adamw opt;
    cb_dp dp;
    gedge *edges;
    int nedges;
    gchunk *ch;          /* v */
    cb_pp_action *acts_sched;
    int nsched;
    cb_pp_partition *part;  /* --print-partition: the partition kept for */
    cb_pp_module *part_mod; /* cb_model_print_partition; else NULL */
    float *tmp;          /* one value's floats: a share added into a gradient */
    float *att_scratch;  /* attention backward */
    float *tmp2;         /* a second share (product, concatenation, cross-attention) */
    float *rec_scratch;  /* lookup, concatenation, logistic loss (layout/rec.h) */
    int mlm_slots;       /* the MLM head's rows per sequence (max_predictions), 0: all */
    float *mlm_rows;     /* its masked input rows (Bm slots,C), then their gradient (Bm slots,C) */
    int *mlm_tg;         /* their targets (Bm slots), -1 on a slot no position filled */
    int *mlm_src;        /* their rows in the micro-batch (Bm slots) */
    int *fids;           /* one id field of a micro-batch's rows */
    int fields;          /* ids per row (cb_model_set_id_fields), 1 by default */
    const int *ids, *targets; /* the step's rows */
    const int *lens[CB_LENGTH_SETS]; /* cb_model_set_lengths (set 0) and _set: the rows' lengths, NULL: whole */
    double loss_sum;     /* this rank's micro-batch losses, when it holds the loss */
    double loss_scale;   /* the MLM loss: a micro-batch's loss sum to its share of the
                            step's mean over targets >= 0 (micro-batches x dp / count) */
    float grad_scale;    /* its gradient per row: dp / count */
    uint64_t seed;       /* of cb_model_build: initial weights, dropout masks */
    int step, training;  /* the step running (dropout's masks), 1 inside cb_model_train_step */
    int ndrop;           /* dropouts declared */
    int ntie, *tie_t, *tie_owner_rank, *tie_ranks; /* tensors held on several ranks */
    double *gss; /* one process: tensor t's gradient sum of squares, taken in backward
                    where it became final (still in cache), < 0 not yet; NULL otherwise */
    int no_lookup;       /* lookups' backward leave their rows out of the tables (split path) */
    int ntables;         /* the leading tensors the sparse and split paths handle (tables) */
    cb_model_step_info info; /* the last step's times */
    /* called in every step after the gradients are reduced and averaged,
     * before clipping (cubist train's --dump-grads); collective */
    void (*on_grads)(cb_model *m, int step, void *ctx);
    void *on_grads_ctx;
    size_t act_none_bytes;   /* the activation plan had it no recompute */
    int local;               /* built by one rank alone (partition profiling's copy) */
    double *node_ms;         /* when set, each node's forward + backward time adds here */
    int dec_beams;           /* decoding: row r reads source row r / dec_beams's encoder (decode.c) */
    cb_decode_info dec_info; /* decoding's work since build */
    double rc_flops, flops;  /* forward FLOPs the recompute reruns; a step's (fwd + bwd) */
};

/* A process grid for benchmarks (dist.c): data parallelism over the
 * world, or each rank alone (alone: groups of one, no reduction); serial
 * tensors, one stage, one micro-batch. */
int cb_dist_data_parallel(cb_dist **out, int alone, int zero, int embed_grad, double bucket_mb,
                          cb_err *e);
/* Tensor parallelism alone: tp ranks of mode (tp 0: this rank alone,
 * serial), one stage, one micro-batch; for tests and benchmarks that set
 * the layout's options or compare layouts in one process. */
int cb_dist_tensor(cb_dist **out, int tp, cb_tp_mode mode, cb_err *e);
void cb_dist_free(cb_dist *d); /* its grid and layout; MPI stays */
/* Module times of m's partition modules [u[k], u[k+1]) into mod[k].time_ms
 * (profile.c); collective. */
int cb_graph_profile(cb_model *m, const int *u, int n, cb_pp_module *mod, cb_err *e);
/* --heads against --d-model, for every family's flags: CB_EINPUT naming a
 * head count that does divide it (declare.c). */
int cb_heads_check(int heads, int d_model, cb_err *e);
/* the MLM head's rows per sequence of a BERT config (max_predictions resolved) */
int cb_bert_predictions(const cb_bert_config *c);
/* The GPT config's metadata keys in weights files (gpt.c): n_layer
 * d_model n_head seq_len vocab. */
extern const char *const cb_gpt_config_keys[5];
/* The pipeline partition's modules of a declared model, before
 * cb_model_build (FLOPs and bytes per micro-batch, the bytes under d's
 * recompute): their count (at most cap), -1 on failure. */
int cb_graph_modules(cb_model *m, cb_pp_module *mod, int cap);
/* The planner's read-only view of a declared model (src/plan/graph.c):
 * this rank's plan as cb_model_build would make it, nothing allocated for
 * the model and no communication; the model is only freed after. params:
 * this rank's parameters (floats); act: cb_model_activation_bytes; ws:
 * the workspace (the layout's and the engine's scratch); send_floats and
 * msgs: what one micro-batch sends over the pipeline edges (forward
 * values and backward gradients). */
typedef struct cb_graph_planned {
    double params, act, ws, send_floats, msgs;
    double zeroed; /* gradient floats cleared when a step starts (the rest are overwritten first) */
} cb_graph_planned;
int cb_graph_plan_only(cb_model *m, cb_graph_planned *p, cb_err *e);
/* Declaration and build (graph.c). */
int cb_graph_plan(cb_model *m, cb_err *e);
/* Execution (exec.c). */
void cb_graph_forward(cb_model *m, int c, int mb, int train);
void cb_graph_backward(cb_model *m, int c, int mb);
void cb_graph_wait_all(cb_model *m);
/* Forward and backward of every micro-batch of ids in the schedule's
 * order, the copies of shared tensors added on their owners: the step's
 * gradients (summed over this rank's micro-batches, not reduced over the
 * data-parallel ranks) and its mean loss, the same on every rank; no
 * update. Collective. */
float cb_graph_grad_step(cb_model *m, const int *ids, const int *targets);
/* Forward only of the first nmb (<= M) micro-batches of ids: their mean
 * loss, the same on every rank (cb_model_eval: all M). Collective. */
float cb_graph_eval(cb_model *m, const int *ids, const int *targets, int nmb);
size_t cb_graph_value_floats(const cb_model *m, int v);
/* For incremental decoding (decode.c): value v, and node i's kept floats,
 * of micro-batch 0 in the slot an evaluation takes (between steps none is
 * held); node i's forward on the first B (<= Bm) rows of micro-batch 0
 * there (a layout that samples). */
float *cb_graph_eval_val(cb_model *m, int v);
/* the scaled embedding lookup of B rows of T positions from t0 (exec.c) */
void cb_graph_embed(cb_model *m, cb_layer *l, const int *ids, int t0, int B, int T, float *y,
                    size_t ny);
float *cb_graph_eval_kept(cb_model *m, int i);
void cb_graph_eval_node(cb_model *m, int i, int B);
/* Checkpoint pieces (exec.c) for trainers with their own file layout:
 * nb parameter-shaped blocks under prefixes into one safetensors file (the
 * one-process file whatever the layout; collective); the AdamW moments as
 * whole blocks m | v on data-parallel rank 0 (NULL elsewhere, *oom on
 * failure); this rank's range of the moments prefix "m." / "v." of f. */
int cb_graph_save_blocks(cb_model *m, int nb, const float *const *blocks,
                         const char *const *prefix, const char *path, const char *const *meta,
                         int nmeta, cb_err *e);
float *cb_graph_full_moments(cb_model *m, int *oom);
int cb_graph_load_moments(cb_model *m, const cb_st_file *f, const char *path, cb_err *e);

#endif
