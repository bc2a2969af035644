/* The pipeline engine; see pipeline.h. */
#include "pipeline/pipeline.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define TAG_TIE 32761
#define TAG_EVAL 32763

static double now_ms(void) { return omp_get_wtime() * 1e3; }

/* Message tag of micro-batch mb arriving at virtual stage vs; MPI keeps
 * order between equal tags, and far fewer than 16380 are ever in flight. */
static int tag_of(const cb_pipe *pp, int mb, int vs, int grad) {
    return (int)(((long)mb * pp->nvs + vs) % 16380) * 2 + grad;
}

static void req_null(cb_comm_req *r, int n) {
    for (int i = 0; i < n; i++) r[i] = (cb_comm_req){.req = MPI_REQUEST_NULL};
}

static int alloc_chunk(cb_pipe *pp, cb_pp_chunk *ch, cb_err *e) {
    int n = ch->nslots, M = pp->o.M;
    size_t a = pp->act ? pp->act : 1;
    ch->slot_of = malloc(sizeof(int) * (size_t)M);
    ch->free_slots = malloc(sizeof(int) * (size_t)n);
    ch->dy = malloc(sizeof(float) * a * n);
    ch->dx = malloc(sizeof(float) * a * n);
    ch->rx_act = malloc(sizeof(cb_comm_req) * 4 * (size_t)n);
    if (!ch->slot_of || !ch->free_slots || !ch->dy || !ch->dx || !ch->rx_act)
        return cb_fail(e, CB_ENOMEM, "out of memory for pipeline buffers; lower --batch");
    ch->rx_grad = ch->rx_act + n;
    ch->tx_act = ch->rx_grad + n;
    ch->tx_grad = ch->tx_act + n;
    req_null(ch->rx_act, 4 * n);
    return CB_OK;
}

static int init_chunk(cb_pipe *pp, int c, const cb_gpt_config *cfg, cb_layout *L, uint64_t seed,
                      cb_err *e) {
    cb_pp_chunk *ch = &pp->ch[c];
    ch->pp = pp;
    ch->vs = c * pp->o.p + pp->s;
    ch->nslots = cb_pp_max_inflight(pp->acts, pp->nacts, c);
    if (ch->nslots < 1) ch->nslots = 1;
    gpt_stage_opts st = {pp->o.bound[ch->vs], pp->o.bound[ch->vs + 1], ch->nslots, pp->o.rc};
    int rc = gpt_create(cfg, pp->B, pp->T, L, &st, &ch->m, e);
    if (rc) return rc;
    cb_gpt_init_random(ch->m, seed);
    double bufs = sizeof(float) * 2.0 * ch->nslots * (pp->act ? pp->act : 1); /* dy, dx */
    gpt_rc none = {0};
    pp->st.act_bytes += sizeof(float) * (double)ch->m->act_floats + bufs;
    pp->st.act_bytes_none += sizeof(float) * (double)gpt_act_floats_with(ch->m, &none) + bufs;
    pp->st.flops += gpt_stage_flops(ch->m);
    pp->st.recompute_flops += gpt_recompute_flops(ch->m);
    return alloc_chunk(pp, ch, e);
}

static int check_config(const cb_gpt_config *cfg, const cb_pp_config *o, cb_comm *c, cb_err *e) {
    int rc = cb_pp_schedule_check(o->kind, o->p, o->v, o->M, e), nvs = o->p * o->v;
    if (rc) return rc;
    if (o->bound[0] != 0 || o->bound[nvs] != cfg->n_layer + 2)
        return cb_fail(e, CB_EINTERNAL, "partition does not cover modules 0..%d",
                       cfg->n_layer + 2);
    for (int i = 0; i < nvs; i++)
        if (o->bound[i] >= o->bound[i + 1])
            return cb_fail(e, CB_EINPUT,
                           "virtual stage %d of %d would hold no module; use fewer stages than "
                           "the %d modules (layers + 2)",
                           i, nvs, cfg->n_layer + 2);
    if ((c ? c->size : 1) != o->p)
        return cb_fail(e, CB_EINTERNAL, "pipeline group of %d ranks for %d stages",
                       c ? c->size : 1, o->p);
    if (!c && nvs > 1) return cb_fail(e, CB_EINTERNAL, "virtual stages need a communicator");
    return CB_OK;
}

int cb_pipe_init(cb_pipe *pp, cb_comm *c, const cb_gpt_config *cfg, int B, int T, cb_layout *L,
                 const cb_pp_config *o, uint64_t seed, cb_err *e) {
    memset(pp, 0, sizeof *pp);
    int rc = check_config(cfg, o, c, e);
    if (rc) return rc;
    pp->c = c;
    pp->o = *o;
    pp->s = c ? c->rank : 0;
    pp->nvs = o->p * o->v;
    pp->B = B;
    pp->T = T;
    int rows, cols;
    L->ops->act_shape(L, B * T, cfg->d_model, 0, &rows, &cols);
    pp->act = (size_t)rows * cols;
    pp->acts = malloc(sizeof(cb_pp_action) * 2 * (size_t)o->M * o->v);
    pp->ch = calloc((size_t)o->v, sizeof *pp->ch);
    if (!pp->acts || !pp->ch) return cb_fail(e, CB_ENOMEM, "out of memory for the pipeline");
    pp->nacts = cb_pp_schedule(o->kind, o->p, o->v, o->M, pp->s, pp->acts);
    pp->st.max_inflight = cb_pp_max_inflight(pp->acts, pp->nacts, -1);
    for (int i = 0; !rc && i < o->v; i++) rc = init_chunk(pp, i, cfg, L, seed, e);
    if (rc) return rc;
    pp->tie_first = pp->nvs > 1 && pp->s == 0 ? 0 : -1;
    pp->tie_last = pp->nvs > 1 && pp->s == o->p - 1 ? o->v - 1 : -1;
    int tied = pp->tie_first >= 0 ? pp->tie_first : pp->tie_last;
    req_null(pp->tie_req, 2);
    if (tied >= 0 && o->p > 1) {
        double n = pp->ch[tied].m->pt.t[0].numel + 1;
        pp->tie_buf = malloc(sizeof(float) * n);
        if (!pp->tie_buf) return cb_fail(e, CB_ENOMEM, "out of memory for the tied embedding");
        pp->st.act_bytes += sizeof(float) * n;
        pp->st.act_bytes_none += sizeof(float) * n;
    }
    return CB_OK;
}

void cb_pipe_free(cb_pipe *pp) {
    for (int i = 0; pp->ch && i < pp->o.v; i++) {
        cb_pp_chunk *ch = &pp->ch[i];
        cb_gpt_free(ch->m);
        free(ch->slot_of);
        free(ch->free_slots);
        free(ch->dy);
        free(ch->dx);
        free(ch->rx_act);
    }
    free(pp->ch);
    free(pp->acts);
    free(pp->tie_buf);
    memset(pp, 0, sizeof *pp);
}

void cb_pipe_zero_grad(cb_pipe *pp) {
    for (int i = 0; i < pp->o.v; i++) cb_gpt_zero_grad(pp->ch[i].m);
}

/* Reserves slots and posts the receives of actions in order, as far as
 * free slots allow. */
static void post(cb_pipe *pp) {
    while (pp->posted < pp->nacts) {
        cb_pp_action a = pp->acts[pp->posted];
        cb_pp_chunk *ch = &pp->ch[a.chunk];
        int vs = ch->vs, slot;
        if (!a.bwd) {
            if (!ch->nfree) return;
            slot = ch->slot_of[a.mb] = ch->free_slots[--ch->nfree];
            if (vs > 0)
                cb_comm_irecv(pp->c, "pp.act", gpt_stage_input(ch->m, slot), pp->act,
                              (vs - 1) % pp->o.p, tag_of(pp, a.mb, vs, 0), &ch->rx_act[slot]);
        } else if (vs < pp->nvs - 1) {
            slot = ch->slot_of[a.mb];
            cb_comm_irecv(pp->c, "pp.grad", ch->dy + (size_t)slot * pp->act, pp->act,
                          (vs + 1) % pp->o.p, tag_of(pp, a.mb, vs, 1), &ch->rx_grad[slot]);
        }
        pp->posted++;
    }
}

/* Lets MPI move the messages in flight while this rank computes. */
static void progress(cb_pipe *pp) {
    for (int c = 0; c < pp->o.v; c++) {
        cb_pp_chunk *ch = &pp->ch[c];
        for (int i = 0; i < 4 * ch->nslots; i++)
            if (ch->rx_act[i].req != MPI_REQUEST_NULL) cb_comm_test(&ch->rx_act[i]);
    }
}

static void wait_timed(cb_pipe *pp, cb_comm_req *r) {
    if (r->req == MPI_REQUEST_NULL) return;
    double t0 = now_ms();
    cb_comm_wait(r);
    pp->st.wait_ms += now_ms() - t0;
}

static float *wte_grad(cb_pp_chunk *ch) { return ch->m->grads + ch->m->pt.t[0].offset; }

/* The tied chunk whose wte gradient goes to the other end of the pipeline,
 * NULL when both ends are here (or nowhere). */
static cb_pp_chunk *tie_remote(cb_pipe *pp) {
    if ((pp->tie_first >= 0) == (pp->tie_last >= 0)) return NULL;
    return &pp->ch[pp->tie_first >= 0 ? pp->tie_first : pp->tie_last];
}

/* After the tied chunk's last backward: its wte gradient is final, so the
 * exchange with the other end starts while the other chunks' backwards run. */
static void tie_start(cb_pipe *pp) {
    cb_pp_chunk *ch = tie_remote(pp);
    float *g = wte_grad(ch);
    size_t n = ch->m->pt.t[0].numel;
    int partner = pp->tie_first >= 0 ? pp->o.p - 1 : 0;
    cb_comm_irecv(pp->c, "pp.tie", pp->tie_buf, n, partner, TAG_TIE, &pp->tie_req[0]);
    cb_comm_isend(pp->c, "pp.tie", g, n, partner, TAG_TIE, &pp->tie_req[1]);
}

static double forward(cb_pipe *pp, cb_pp_action a, const int *ids, const int *targets) {
    cb_pp_chunk *ch = &pp->ch[a.chunk];
    cb_gpt *m = ch->m;
    int slot = ch->slot_of[a.mb], vs = ch->vs;
    size_t off = (size_t)a.mb * pp->B * pp->T;
    wait_timed(pp, &ch->rx_act[slot]);
    wait_timed(pp, &ch->tx_act[slot]); /* the slot's previous output */
    double t0 = now_ms();
    float loss = gpt_stage_forward(m, slot, m->has_embed ? ids + off : NULL,
                                   m->has_head ? targets + off : NULL, pp->B, pp->T);
    pp->st.fwd_ms += now_ms() - t0;
    if (vs < pp->nvs - 1)
        cb_comm_isend(pp->c, "pp.act", gpt_stage_output(m, slot), pp->act, (vs + 1) % pp->o.p,
                      tag_of(pp, a.mb, vs + 1, 0), &ch->tx_act[slot]);
    return m->has_head ? loss : 0.0;
}

static void backward(cb_pipe *pp, cb_pp_action a, float scale, cb_pp_bwd_fn fn, void *ctx) {
    cb_pp_chunk *ch = &pp->ch[a.chunk];
    int slot = ch->slot_of[a.mb], vs = ch->vs;
    float *dy = vs < pp->nvs - 1 ? ch->dy + (size_t)slot * pp->act : NULL;
    wait_timed(pp, &ch->rx_grad[slot]);
    if (fn) fn(ctx, a.chunk, a.mb == pp->o.M - 1);
    double t0 = now_ms();
    gpt_stage_backward(ch->m, slot, scale, dy);
    pp->st.bwd_ms += now_ms() - t0;
    if (vs > 0) {
        float *dx = ch->dx + (size_t)slot * pp->act;
        wait_timed(pp, &ch->tx_grad[slot]);
        memcpy(dx, gpt_stage_dinput(ch->m), sizeof(float) * pp->act);
        cb_comm_isend(pp->c, "pp.grad", dx, pp->act, (vs - 1) % pp->o.p,
                      tag_of(pp, a.mb, vs - 1, 1), &ch->tx_grad[slot]);
    }
    ch->slot_of[a.mb] = -1;
    ch->free_slots[ch->nfree++] = slot;
    if (a.mb == pp->o.M - 1 && &pp->ch[a.chunk] == tie_remote(pp)) tie_start(pp);
}

/* wte's two gradients summed on both stages, then released to the hooks. */
static void tie_sum(cb_pipe *pp) {
    double t0 = now_ms();
    cb_pp_chunk *ch = tie_remote(pp);
    if (pp->tie_first >= 0 && pp->tie_last >= 0) { /* one rank holds both */
        float *a = wte_grad(&pp->ch[pp->tie_first]), *b = wte_grad(&pp->ch[pp->tie_last]);
        size_t n = pp->ch[pp->tie_first].m->pt.t[0].numel;
        for (size_t i = 0; i < n; i++) b[i] = a[i] = a[i] + b[i];
    } else if (ch) {
        float *g = wte_grad(ch);
        size_t n = ch->m->pt.t[0].numel;
        wait_timed(pp, &pp->tie_req[0]);
        wait_timed(pp, &pp->tie_req[1]);
        for (size_t i = 0; i < n; i++) g[i] = g[i] + pp->tie_buf[i];
    }
    pp->tie_hold = 0;
    for (int c = 0; c < pp->o.v; c++) {
        cb_pp_chunk *x = &pp->ch[c];
        if ((c == pp->tie_first || c == pp->tie_last) && x->hook) x->hook(x->hook_ctx, 0, 0);
    }
    pp->st.tie_ms = now_ms() - t0;
}

static void reset_slots(cb_pipe *pp) {
    for (int c = 0; c < pp->o.v; c++) {
        cb_pp_chunk *ch = &pp->ch[c];
        for (int i = 0; i < pp->o.M; i++) ch->slot_of[i] = -1;
        ch->nfree = ch->nslots;
        for (int i = 0; i < ch->nslots; i++) ch->free_slots[i] = ch->nslots - 1 - i;
    }
    pp->posted = 0;
}

double cb_pipe_step(cb_pipe *pp, const int *ids, const int *targets, float dloss_scale,
                    cb_pp_bwd_fn before_bwd, void *ctx) {
    double t0 = now_ms(), loss = 0;
    pp->st.fwd_ms = pp->st.bwd_ms = pp->st.wait_ms = 0;
    reset_slots(pp);
    pp->tie_hold = 1;
    for (int i = 0; i < pp->nacts; i++) {
        post(pp);
        if (pp->posted <= i) cb_comm_fatal("pipeline: no free slot for a scheduled action (internal error)");
        cb_pp_action a = pp->acts[i];
        if (a.bwd) backward(pp, a, dloss_scale, before_bwd, ctx);
        else loss += forward(pp, a, ids, targets);
        progress(pp);
    }
    for (int c = 0; c < pp->o.v; c++)
        for (int i = 0; i < 4 * pp->ch[c].nslots; i++) wait_timed(pp, &pp->ch[c].rx_act[i]);
    tie_sum(pp);
    if (pp->c && pp->o.p > 1) cb_comm_bcast_bytes(pp->c, "pp.loss", &loss, sizeof loss, pp->o.p - 1);
    pp->st.step_ms = now_ms() - t0;
    pp->st.busy_ms = pp->st.fwd_ms + pp->st.bwd_ms;
    pp->st.bubble = pp->st.step_ms > 0 ? 1 - pp->st.busy_ms / pp->st.step_ms : 0;
    return loss;
}

/* Each chunk in order, slot 0 (no step is in flight): receive, forward,
 * send. Sends are non-blocking (a rank may send to itself) and waited at
 * the end; the messages between two ranks come in chunk order, so one tag
 * serves. Data moves in virtual stage order only, so nothing waits in a
 * cycle. */
double cb_pipe_eval(cb_pipe *pp, const int *ids, const int *targets) {
    double loss = 0;
    int p = pp->o.p;
    cb_comm_req *reqs = malloc(sizeof *reqs * (size_t)pp->o.v);
    if (!reqs) cb_comm_fatal("out of memory for the validation pass");
    for (int c = 0; c < pp->o.v; c++) {
        cb_gpt *m = pp->ch[c].m;
        int vs = pp->ch[c].vs;
        reqs[c] = (cb_comm_req){.req = MPI_REQUEST_NULL};
        if (vs > 0)
            cb_comm_recv(pp->c, "pp.eval", gpt_stage_input(m, 0), pp->act, (vs - 1) % p, TAG_EVAL);
        float l = gpt_stage_forward(m, 0, m->has_embed ? ids : NULL, m->has_head ? targets : NULL,
                                    pp->B, pp->T);
        if (m->has_head) loss = l;
        if (vs < pp->nvs - 1)
            cb_comm_isend(pp->c, "pp.eval", gpt_stage_output(m, 0), pp->act, (vs + 1) % p,
                          TAG_EVAL, &reqs[c]);
    }
    cb_comm_waitall(reqs, pp->o.v);
    free(reqs);
    if (pp->c && p > 1) cb_comm_bcast_bytes(pp->c, "pp.loss", &loss, sizeof loss, p - 1);
    return loss;
}

double cb_pipe_grad_sumsq(const cb_pipe *pp) {
    double s = 0;
    for (int c = 0; c < pp->o.v; c++) {
        const cb_gpt *m = pp->ch[c].m;
        int skip_wte = pp->nvs > 1 && c == pp->tie_last; /* counted on the embedding's stage */
        for (int i = skip_wte; i < m->pt.n; i++)
            if (m->pt.t[i].owner)
                s += m->L->k->sumsq(m->L->k, m->grads + m->pt.t[i].offset, m->pt.t[i].numel);
    }
    return s;
}

/* Hook of a tied chunk: wte (tensor 0) is final only after the tied sum. */
static void tied_ready(void *ctx, int first, int last) {
    cb_pp_chunk *ch = ctx;
    if (ch->pp->tie_hold && first == 0) first = 1;
    if (ch->hook) ch->hook(ch->hook_ctx, first, last); /* first > last: progress only */
}

void cb_pipe_chain_hooks(cb_pipe *pp) {
    for (int c = 0; c < pp->o.v; c++) {
        cb_pp_chunk *ch = &pp->ch[c];
        if (c != pp->tie_first && c != pp->tie_last) continue;
        if (ch->m->hook == tied_ready) continue;
        ch->hook = ch->m->hook;
        ch->hook_ctx = ch->m->hook_ctx;
        cb_gpt_set_grad_hook(ch->m, tied_ready, ch);
    }
}
