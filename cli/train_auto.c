/* `cubist train --layout auto`: the flags' model, batch and the launched
 * rank count go to the planner (src/plan/auto.c), which sets dp, pp, tp,
 * the tensor mode and the schedule; the micro-batches stay the flags'. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "plan_cli.h"
#include "data/ncf.h"
#include "train/train.h"

static int check_auto(const cb_train_opts *o, const char *layout, cb_err *e) {
    if (strcmp(layout, "auto"))
        return cb_fail(e, CB_EINPUT, "--layout %s: the only value is auto (else give --dp --pp --tp)", layout);
    if (o->dp || o->pp > 1 || o->tp > 1)
        return cb_fail(e, CB_EINPUT, "--layout auto chooses --dp, --pp and --tp; drop them or drop --layout");
    return CB_OK;
}

/* The layout for `world` ranks of model m (T tokens a row), set in o. */
static int plan_layout(cb_train_opts *o, const cb_plan_model *m, int T, const char *cluster,
                       int world, int rank, cb_err *e) {
    static char mode[4];
    cb_plan_cluster c;
    char path[4096], why[1024];
    int rc = CB_OK;
    if (cluster) rc = plan_find_cluster(cluster, path, sizeof path, e);
    if (!rc && !cluster && !plan_cache_path(o->threads ? o->threads : 1, path, sizeof path))
        rc = cb_fail(e, CB_EINPUT, "--layout auto: no --cluster and no cache directory (HOME)");
    if (!rc && (rc = cb_plan_cluster_read(path, &c, e)) && !cluster)
        rc = cb_fail(e, CB_EINPUT, "--layout auto: this machine is not calibrated (%s); run "
                     "`cubist plan --calibrate` once, or pass --cluster FILE", path);
    if (rc) return rc;
    int M = o->pipe.micro_batches != CB_PP_UNSET ? o->pipe.micro_batches : o->accum;
    if (M < 1) M = 1;
    cb_plan_job j = {m,
                     &c,
                     o->B * M,
                     T,
                     o->bucket_mb * 1e6,
                     .comm_bf16 = !strcmp(o->comm_dtype, "bf16"),
                     .bf16 = o->precision && !strcmp(o->precision, "bf16")};
    cb_plan_layout l;
    if (j.bf16 && (rc = cb_plan_cluster_bf16(&c, NULL, e))) return rc;
    if ((rc = cb_plan_auto(&j, world, M, &l, why, sizeof why, e))) return rc;
    snprintf(mode, sizeof mode, "%s", cb_grid_mode_name(l.mode));
    o->dp = l.dp, o->pp = l.pp, o->tp = l.tp, o->tp_mode = mode;
    if (l.pp > 1) o->pipe.schedule = cb_plan_schedule_name(l.schedule);
    if (l.pp > 1 && l.schedule == CB_PLAN_INTERLEAVED) o->pipe.virtual_stages = l.v;
    if (rank == 0) printf("layout auto on %d ranks, %s: %s\n", world, c.name, why);
    return CB_OK;
}

static const char *auto_layout, *auto_cluster; /* --layout and --cluster */

int cli_train_auto_flags(struct cli_flag *f) {
    f[0] = (cli_flag){"layout", ARG_STR, &auto_layout,
                      "auto: dp, pp, tp, tp-mode and schedule chosen by the planner for the "
                      "launched ranks"};
    f[1] = (cli_flag){"cluster", ARG_STR, &auto_cluster,
                      "--layout auto: cluster file or preset (default: this machine's `cubist "
                      "plan --calibrate`)"};
    return 2;
}

/* The family's model once its prepare resolved the sizes from the flags,
 * the checkpoint or the data: GPT's config and T, BERT's vocabulary is the text's and its 4 special ids (task_bert.c),
 * NCF's users and items are the pair file's. */
static int family_model(const cb_train_opts *o, cb_plan_model *m, cb_err *e) {
    if (!o->family || o->family == &cb_train_gpt) {
        cb_plan_model_gpt(&o->model, m);
        return CB_OK;
    }
    if (o->family == &cb_train_bert) {
        const cb_bert_task_opts *b = o->family_opts;
        cb_bert_config c = {b->layers, b->d_model, b->heads, b->seq_len, b->special_base + 4, 2,
                            b->roberta, b->dropout, b->attn_dropout,
                            cb_bert_task_predictions(b)};
        return cb_plan_model_bert(&c, m, e);
    }
    if (o->family == &cb_train_nmt)
        return cb_plan_model_nmt(&((const cb_nmt_task_opts *)o->family_opts)->c, o->T, m, e);
    const cb_ncf_task_opts *n = o->family_opts;
    cb_ncf_data d;
    cb_ncf_config c = n->c;
    int rc = cb_ncf_open(o->data, n->negatives, o->seed, &d, e);
    if (rc) return rc;
    c.users = d.users, c.items = d.items;
    cb_ncf_close(&d);
    return cb_plan_model_ncf(&c, m, e);
}

static int family_auto(cb_train_opts *o, cb_err *e) {
    cb_plan_model m;
    cb_comm *w = cb_comm_world();
    int rc = family_model(o, &m, e);
    return rc ? rc : plan_layout(o, &m, o->T, auto_cluster, w->size, w->rank, e);
}

int cli_train_family_auto(cb_train_opts *o, cb_err *e) {
    if (!auto_layout) return CB_OK;
    int rc = check_auto(o, auto_layout, e);
    if (!rc) o->layout_auto = family_auto;
    return rc;
}
