/* `cubist train --layout auto`: the flags' model, batch and the launched
 * rank count go to the planner (src/plan/auto.c), which sets dp, pp, tp,
 * the tensor mode and the schedule; the micro-batches stay the flags'. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "plan_cli.h"
#include "train/train.h"

/* Sizes not given: the checkpoint's, else the trainer's built-in defaults
 * (src/train/run.c, resolve_config). */
static int model_config(const cb_train_opts *o, cb_gpt_config *c, cb_err *e) {
    static const cb_gpt_config DEF = {4, 128, 4, 64, 256};
    const char *ck = o->resume ? o->resume : o->init;
    cb_gpt_config f = DEF;
    *c = o->model;
    if (ck && cb_gpt_config_from_file(ck, &f, e)) return e->code;
    int *have[5] = {&c->n_layer, &c->d_model, &c->n_head, &c->seq_len, &c->vocab};
    const int *dflt[5] = {&f.n_layer, &f.d_model, &f.n_head, &f.seq_len, &f.vocab};
    for (int i = 0; i < 5; i++)
        if (!*have[i]) *have[i] = *dflt[i];
    return cb_gpt_config_check(c, e);
}

int cli_train_check_auto(const cb_train_opts *o, const char *layout, cb_err *e) {
    if (strcmp(layout, "auto"))
        return cb_fail(e, CB_EINPUT, "--layout %s: the only value is auto (else give --dp --pp --tp)", layout);
    if (o->dp || o->pp > 1 || o->tp > 1)
        return cb_fail(e, CB_EINPUT, "--layout auto chooses --dp, --pp and --tp; drop them or drop --layout");
    return CB_OK;
}

int cli_train_auto(cb_train_opts *o, const char *cluster, int world, int rank, cb_err *e) {
    static char mode[4];
    cb_gpt_config g;
    cb_plan_model m;
    cb_plan_cluster c;
    char path[4096], why[1024];
    int rc = model_config(o, &g, e);
    if (!rc && cluster) rc = plan_find_cluster(cluster, path, sizeof path, e);
    if (!rc && !cluster && !plan_cache_path(o->threads ? o->threads : 1, path, sizeof path))
        rc = cb_fail(e, CB_EINPUT, "--layout auto: no --cluster and no cache directory (HOME)");
    if (!rc && (rc = cb_plan_cluster_read(path, &c, e)) && !cluster)
        rc = cb_fail(e, CB_EINPUT, "--layout auto: this machine is not calibrated (%s); run "
                     "`cubist plan --calibrate` once, or pass --cluster FILE", path);
    if (rc) return rc;
    int M = o->pipe.micro_batches != CB_PP_UNSET ? o->pipe.micro_batches : o->accum;
    cb_plan_model_gpt(&g, &m);
    cb_plan_job j = {&m, &c, o->B * M, g.seq_len, o->bucket_mb * 1e6,
                     .comm_bf16 = !strcmp(o->comm_dtype, "bf16")};
    cb_plan_layout l;
    if ((rc = cb_plan_auto(&j, world, M, &l, why, sizeof why, e))) return rc;
    snprintf(mode, sizeof mode, "%s", cb_grid_mode_name(l.mode));
    o->dp = l.dp, o->pp = l.pp, o->tp = l.tp, o->tp_mode = mode;
    if (l.pp > 1) o->pipe.schedule = cb_plan_schedule_name(l.schedule);
    if (l.pp > 1 && l.schedule == CB_PLAN_INTERLEAVED) o->pipe.virtual_stages = l.v;
    if (rank == 0) printf("layout auto on %d ranks, %s: %s\n", world, c.name, why);
    return CB_OK;
}
