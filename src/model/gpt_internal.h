/* Private layout of cb_gpt, shared by the model's files.
 *
 * Modules, in order: 0 the embedding (wte, wpe), 1..L the blocks, L+1 the
 * head (ln_f, the LM head tied to wte, the loss). A cb_gpt holds modules
 * [mod0, mod1): the whole model in one process, one pipeline stage's range
 * otherwise (the head's stage then keeps its own copy of wte, whose gradient
 * the pipeline sums with the embedding stage's). Activations are kept for
 * nslots micro-batches at once (the pipeline's in-flight count). Recompute
 * (gpt_rc): block keeps only block inputs per slot (each block's, or every
 * k-th's under the uniform method) and runs the blocks again in backward;
 * selective keeps everything but the two
 * large, cheap activations, the attention probabilities and the GELU
 * output, which every block of every slot writes into one shared buffer
 * each and backward recomputes from the kept qkv and fch. */
#ifndef CB_GPT_INTERNAL_H
#define CB_GPT_INTERNAL_H

#include "cubist.h"
#include "kernels/kernels.h"
#include "layout/layout.h"
#include "model/ptable.h"

#define NLAYER_TENSORS 12

typedef struct gpt_block {
    cb_norm ln1, ln2;
    cb_linear qkv, proj, fc, fcproj;
} gpt_block;

/* Saved for backward, per block; local pieces of N = B*T tokens. */
typedef struct gpt_layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C) p0, rows */
    float *qkv;                       /* (N,3C) p1 */
    float *att;                       /* att_numel */
    float *atty;                      /* (N,C) p1 */
    float *res2;                      /* (N,C) p0 residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu;            /* (N,4C) p1 */
    float *res3;                      /* (N,C) p0 block output */
} gpt_layer_acts;

/* One micro-batch in flight. */
typedef struct gpt_slot {
    float *x_in;           /* (N,C) p0: embedding output, or the received activation */
    float **blk_in;        /* block recompute: kept inputs of local blocks (N,C) p0;
                              block 0's is x_in */
    gpt_layer_acts *acts;  /* local blocks (rerun blocks: sets the slots share, one
                              or, uniform, a group's; selective: att, fch_gelu
                              shared by every block and slot) */
    float *x_out;          /* (N,C) p0: output to send when the head is elsewhere */
    float *lnf_out, *lnf_mean, *lnf_rstd, *logits;
    int *inp, *targets;
    int B, T;
} gpt_slot;

struct cb_gpt {
    cb_gpt_config c;
    int B, T;       /* planned maximum micro-batch of this data-parallel rank */
    int curB, curT; /* last forward */
    cb_layout *L;
    int own_layout; /* created here: freed with the model */
    int oom;        /* building the tensor table ran out of memory */
    int mod0, mod1, has_embed, has_head, blk0, nblk;
    int nslots;
    int recompute;  /* gpt_recompute */
    int nrc;        /* block recompute: local blocks [0, nrc) are rerun, 0 none */
    int rc_group;   /* uniform method: blocks rerun in groups of rc_group (every
                       block is rerun; nrc = nblk); 0: block method */
    cb_ptable pt;   /* tensors, their shards, local parameter count */
    float *params, *grads;
    cb_embed embed;
    gpt_block *blocks; /* nblk, global block blk0 + i */
    cb_norm lnf;
    float *actblock;
    size_t act_floats;
    gpt_slot *slots;
    float *d_res, *d_small, *d_qkv, *d_big, *d_att, *proj; /* scratch */
    cb_grad_ready_fn hook;
    void *hook_ctx;
    int no_lookup_grad; /* backward leaves wte's lookup rows out (data
                           parallelism's split embedding path, serial layout) */
};

/* Activation recomputation (--recompute none | block | selective). */
typedef enum gpt_recompute {
    GPT_RECOMPUTE_NONE = 0,
    GPT_RECOMPUTE_BLOCK = 1,    /* keep block inputs only, rerun blocks */
    GPT_RECOMPUTE_SELECTIVE = 2 /* drop att and fch_gelu, recompute them */
} gpt_recompute;

/* What to recompute. Block recompute has Megatron's two methods:
 *   block    (--recompute-method block, the default) reruns the first
 *            `layers` blocks of each stage (0: all), one at a time; the
 *            other blocks keep their activations.
 *   uniform  keeps the input of every layers-th block only (groups of
 *            `layers` blocks, >= 1) and reruns a whole group before its
 *            backward: per micro-batch ~ nblk/layers block inputs, plus
 *            `layers` block activation sets shared by every micro-batch. */
typedef struct gpt_rc {
    int mode;    /* gpt_recompute */
    int layers;  /* --recompute-layers; see above */
    int uniform; /* 1: the uniform method */
} gpt_rc;

/* --recompute (NULL: none), --recompute-method (NULL: block) and
 * --recompute-layers (block: >= 0, 0 all; uniform: >= 1, 0 means 1) into
 * rc; CB_EINPUT with one line for an unknown value or a method or layer
 * count given without --recompute block. */
/* The config's metadata keys in checkpoints: n_layer d_model n_head seq_len vocab. */
extern const char *const cb_gpt_config_keys[5];
int gpt_recompute_parse(const char *mode, const char *method, int layers, gpt_rc *rc, cb_err *e);

/* Planned activation floats of m's slots had it been built with rc
 * instead: what `none` would plan, for the startup report. 0 when out of
 * memory. */
size_t gpt_act_floats_with(const cb_gpt *m, const gpt_rc *rc);
/* Forward + backward matmul FLOPs of one module for N tokens in sequences
 * of T: GPT_MOD_EMBED, _BLOCK (attention scores and context without the
 * causal discount) or _HEAD (the tied LM head). A forward is a third. */
enum { GPT_MOD_EMBED, GPT_MOD_BLOCK, GPT_MOD_HEAD };
double gpt_module_flops(const cb_gpt_config *c, double N, int T, int kind);
/* Of m's planned micro-batch: the step's FLOPs of its modules, and the
 * extra forward FLOPs its recompute adds (block: the rerun blocks'
 * forwards; selective: each block's attention core, QK^T and x V; GELU
 * and softmax are not matmuls and not counted). */
double gpt_stage_flops(const cb_gpt *m);
double gpt_recompute_flops(const cb_gpt *m);

typedef struct gpt_stage_opts {
    int mod0, mod1; /* modules held; 0, L+2 for the whole model */
    int nslots;     /* >= 1 */
    gpt_rc rc;
} gpt_stage_opts;

/* Builds the model (or a stage of it) on a layout; B = this data-parallel
 * rank's sequences. stage NULL: the whole model, one slot. */
int gpt_create(const cb_gpt_config *c, int B, int T, cb_layout *L, const gpt_stage_opts *stage,
               cb_gpt **out, cb_err *e);
/* The same on a serial layout that the model owns (cb_gpt_create with stage
 * options). */
int gpt_create_serial(const cb_gpt_config *c, int B, int T, const gpt_stage_opts *stage,
                      cb_gpt **out, cb_err *e);
/* Forward of this stage's modules for micro-batch slot. The first stage
 * reads ids (B,T); the others read gpt_stage_input(m, slot), which the
 * caller filled. Returns the mean loss on the head's stage, else 0, and
 * leaves the output in gpt_stage_output(m, slot). */
float gpt_stage_forward(cb_gpt *m, int slot, const int *ids, const int *targets, int B, int T);
float *gpt_stage_input(cb_gpt *m, int slot);
const float *gpt_stage_output(const cb_gpt *m, int slot);
/* Backward of slot: on the head's stage from the loss scaled by dloss_scale,
 * elsewhere from dy, the gradient of this stage's output. Leaves the
 * gradient of the stage input in gpt_stage_dinput(m) (not on the first
 * stage). Parameter gradients accumulate. */
void gpt_stage_backward(cb_gpt *m, int slot, float dloss_scale, const float *dy);
const float *gpt_stage_dinput(const cb_gpt *m);
/* Local floats of one (N,C) parity-0 activation of the last forward or
 * backward: what stages exchange. */
size_t gpt_act_floats(const cb_gpt *m);

/* Sum of squares of the gradients this rank owns (replicated copies once);
 * the caller adds it up over the tensor and pipeline ranks. */
double gpt_grad_sumsq(const cb_gpt *m);
/* The tensor table entries, for the optimizer. */
#define gpt_tensors(m) ((m)->pt.t)
#define gpt_ntensors(m) ((m)->pt.n)
/* Collective over the tensor group: writes nb parameter-shaped blocks
 * (parameters, gradients, AdamW moments) gathered to full tensors into one
 * file on tensor rank 0, block i under the tensor names with prefixes[i];
 * extra is nextra metadata pairs added to the config. */
int gpt_save_blocks(const cb_gpt *m, int nb, const float *const *blocks,
                    const char *const *prefixes, const char *path, const char *const *extra,
                    int nextra, cb_err *e);
/* Reads such a block back from an open file into this rank's shards,
 * checking every shape. */
int gpt_load_block(const cb_gpt *m, float *block, const char *prefix, const cb_st_file *f,
                   const char *path, cb_err *e);

#endif
