/* Process grid: coordinates, validation and the sub-communicators; see
 * grid.h for the layout and the rank order of every group. */
#include "comm/grid.h"

#include <stdlib.h>
#include <string.h>

int cb_grid_parse_mode(const char *s, cb_tp_mode *mode, cb_err *e) {
    if (s && strcmp(s, "1d") == 0) *mode = CB_TP_1D;
    else if (s && strcmp(s, "2d") == 0) *mode = CB_TP_2D;
    else if (s && strcmp(s, "3d") == 0) *mode = CB_TP_3D;
    else return cb_fail(e, CB_EINPUT, "--tp-mode '%s' is unknown; use 1d, 2d or 3d", s ? s : "");
    return CB_OK;
}

const char *cb_grid_mode_name(cb_tp_mode mode) {
    return mode == CB_TP_1D ? "1d" : mode == CB_TP_2D ? "2d" : mode == CB_TP_3D ? "3d" : "?";
}

int cb_grid_side(int tp, cb_tp_mode mode) {
    int dims = mode == CB_TP_2D ? 2 : mode == CB_TP_3D ? 3 : 1;
    for (int q = 1; q <= tp; q++) {
        long v = dims == 1 ? q : dims == 2 ? (long)q * q : (long)q * q * q;
        if (v == tp) return q;
        if (v > tp) break;
    }
    return 0;
}

static int check_mode(int tp, cb_tp_mode mode, cb_err *e) {
    if (mode != CB_TP_1D && mode != CB_TP_2D && mode != CB_TP_3D)
        return cb_fail(e, CB_EINPUT, "tensor-parallel mode %d is unknown; use --tp-mode 1d, 2d or 3d", (int)mode);
    if (cb_grid_side(tp, mode)) return CB_OK;
    if (mode == CB_TP_2D)
        return cb_fail(e, CB_EINPUT, "--tp-mode 2d needs --tp to be a square q*q (1, 4, 9, 16, ...), got %d; "
                       "change --tp or use --tp-mode 1d", tp);
    return cb_fail(e, CB_EINPUT, "--tp-mode 3d needs --tp to be a cube q*q*q (1, 8, 27, 64, ...), got %d; "
                   "change --tp or use --tp-mode 1d", tp);
}

int cb_grid_check(int dp, int pp, int tp, cb_tp_mode mode, int world_size, cb_err *e) {
    if (dp < 1 || pp < 1 || tp < 1)
        return cb_fail(e, CB_EINPUT, "--dp, --pp and --tp must be at least 1, got dp=%d pp=%d tp=%d", dp, pp, tp);
    int rc = check_mode(tp, mode, e);
    if (rc) return rc;
    long n = (long)dp * pp * tp;
    if (n != world_size)
        return cb_fail(e, CB_EINPUT, "grid dp=%d x pp=%d x tp=%d needs %ld processes but the job has %d; "
                       "launch with `mpirun -np %ld` or choose sizes whose product is %d",
                       dp, pp, tp, n, world_size, n, world_size);
    return CB_OK;
}

cb_grid_coord cb_grid_coords(int dp, int pp, int tp, cb_tp_mode mode, int world_rank) {
    (void)dp;
    cb_grid_coord a = {0};
    int q = cb_grid_side(tp, mode);
    a.t = world_rank % tp;
    a.p = world_rank / tp % pp;
    a.d = world_rank / tp / pp;
    if (mode == CB_TP_2D && q) {
        a.r = a.t / q;
        a.c = a.t % q;
    } else if (mode == CB_TP_3D && q) {
        a.i = a.t / (q * q);
        a.j = a.t / q % q;
        a.k = a.t % q;
    }
    return a;
}

static void add(cb_grid *g, cb_comm *c) { g->comms[g->ncomms++] = c; }

/* Splits of the tensor group; colors need only be unique inside it. */
static void split_tensor(cb_grid *g) {
    const cb_grid_coord *a = &g->at;
    int q = g->q;
    if (g->mode == CB_TP_2D) {
        cb_comm_split(&g->tpg, a->r, a->c, "tp2d.row", &g->row);
        cb_comm_split(&g->tpg, a->c, a->r, "tp2d.col", &g->col);
        add(g, &g->row);
        add(g, &g->col);
    } else if (g->mode == CB_TP_3D) {
        cb_comm_split(&g->tpg, a->j * q + a->k, a->i, "tp3d.weight", &g->weight);
        cb_comm_split(&g->tpg, a->i * q + a->k, a->j, "tp3d.input", &g->input);
        cb_comm_split(&g->tpg, a->i * q + a->j, a->k, "tp3d.output", &g->output);
        cb_comm_split(&g->tpg, a->k, a->i * q + a->j, "tp3d.input_weight", &g->in_w);
        cb_comm_split(&g->tpg, a->j, a->i * q + a->k, "tp3d.output_weight", &g->out_w);
        add(g, &g->weight);
        add(g, &g->input);
        add(g, &g->output);
        add(g, &g->in_w);
        add(g, &g->out_w);
    }
}

/* The grid over base (MPI_COMM_WORLD, or MPI_COMM_SELF: a rank alone). */
static int create_on(cb_grid *g, MPI_Comm base, int dp, int pp, int tp, cb_tp_mode mode,
                     cb_err *e) {
    memset(g, 0, sizeof *g);
    MPI_Comm_size(base, &g->world_size);
    MPI_Comm_rank(base, &g->world_rank);
    int rc = cb_grid_check(dp, pp, tp, mode, g->world_size, e);
    if (rc) return rc;
    g->dp = dp, g->pp = pp, g->tp = tp, g->mode = mode;
    g->q = cb_grid_side(tp, mode);
    g->at = cb_grid_coords(dp, pp, tp, mode, g->world_rank);
    const cb_grid_coord *a = &g->at;
    MPI_Comm w;
    MPI_Comm_dup(base, &w);
    cb_comm_wrap(&g->world, w, "world");
    cb_comm_split(&g->world, a->p * tp + a->t, a->d, "dp", &g->dpg);
    cb_comm_split(&g->world, a->d * tp + a->t, a->p, "pp", &g->ppg);
    cb_comm_split(&g->world, a->d * pp + a->p, a->t, "tp", &g->tpg);
    cb_comm_split(&g->world, a->d, a->p * tp + a->t, "model", &g->model);
    add(g, &g->world);
    add(g, &g->dpg);
    add(g, &g->ppg);
    add(g, &g->tpg);
    add(g, &g->model);
    split_tensor(g);
    return CB_OK;
}

int cb_grid_create(cb_grid *g, int dp, int pp, int tp, cb_tp_mode mode, cb_err *e) {
    return create_on(g, MPI_COMM_WORLD, dp, pp, tp, mode, e);
}

int cb_grid_create_self(cb_grid *g, cb_err *e) {
    return create_on(g, MPI_COMM_SELF, 1, 1, 1, CB_TP_1D, e);
}

void cb_grid_free(cb_grid *g) {
    for (int i = 0; i < g->ncomms; i++) cb_comm_free(g->comms[i]);
    g->ncomms = 0;
}

static void coord_text(const cb_grid *g, const cb_grid_coord *a, char *s, size_t n) {
    if (g->mode == CB_TP_2D) snprintf(s, n, "(r,c)=(%d,%d)", a->r, a->c);
    else if (g->mode == CB_TP_3D) snprintf(s, n, "(i,j,k)=(%d,%d,%d)", a->i, a->j, a->k);
    else snprintf(s, n, "-");
}

char *cb_grid_hosts(cb_grid *g) {
    char host[MPI_MAX_PROCESSOR_NAME > CB_GRID_HOST ? MPI_MAX_PROCESSOR_NAME : CB_GRID_HOST] = {0};
    int len = 0;
    MPI_Get_processor_name(host, &len);
    host[CB_GRID_HOST - 1] = '\0';
    char *all = NULL;
    if (g->world_rank == 0) all = calloc((size_t)g->world_size, CB_GRID_HOST);
    if (g->world_rank == 0 && !all) cb_comm_fatal_code(CB_ENOMEM, "out of memory for --print-grid");
    cb_comm_gather_bytes(&g->world, CB_COMM_CONTROL, host, all, CB_GRID_HOST, 0);
    return all;
}

void cb_grid_print(const cb_grid *g, const char *hosts, FILE *f) {
    fprintf(f, "grid: %d processes = dp %d x pp %d x tp %d (tp-mode %s, q=%d)\n", g->world_size,
            g->dp, g->pp, g->tp, cb_grid_mode_name(g->mode), g->q);
    for (int w = 0; w < g->world_size; w++) {
        cb_grid_coord a = cb_grid_coords(g->dp, g->pp, g->tp, g->mode, w);
        char ct[48];
        coord_text(g, &a, ct, sizeof ct);
        fprintf(f, "rank %4d  d=%d p=%d t=%d  %-18s host %s\n", w, a.d, a.p, a.t, ct,
                hosts + (size_t)w * CB_GRID_HOST);
    }
}
