/* Private layout of cb_gpt, shared by the model's files. */
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

struct cb_gpt {
    cb_gpt_config c;
    int B, T;       /* planned maximum micro-batch of this data-parallel rank */
    int curB, curT; /* last forward */
    cb_layout *L;
    int own_layout; /* created here: freed with the model */
    int oom;        /* building the tensor table ran out of memory */
    cb_ptable pt; /* tensors, their shards, local parameter count */
    float *params, *grads;
    cb_embed embed;
    gpt_block *blocks;
    cb_norm lnf;
    float *actblock;
    gpt_layer_acts *acts;
    float *encoded, *lnf_out, *lnf_mean, *lnf_rstd, *logits;
    float *d_res, *d_small, *d_qkv, *d_big, *d_att, *proj; /* backward scratch */
    int *inp, *targets, has_targets;
    cb_grad_ready_fn hook;
    void *hook_ctx;
};

/* Builds the model on a layout (B = this data-parallel rank's sequences). */
int gpt_create(const cb_gpt_config *c, int B, int T, cb_layout *L, cb_gpt **out, cb_err *e);
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
