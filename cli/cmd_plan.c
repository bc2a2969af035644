/* `cubist plan`: predicted step time and memory of every layout of a model
 * on a cluster, sorted (docs/plan.md); --calibrate, --validate and
 * --reproduce are their own files. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "plan_cli.h"

const char *plan_exe(void) {
    static char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    return exe;
}

int plan_run(const char *cmd, const char *prefix, char *buf, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[4096];
    size_t len = 0, pl = strlen(prefix);
    buf[0] = 0;
    while (fgets(line, sizeof line, p))
        if (!strncmp(line, prefix, pl) && len + strlen(line) < cap) {
            memcpy(buf + len, line, strlen(line) + 1);
            len += strlen(line);
        }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int plan_find_cluster(const char *name, char *path, size_t cap, cb_err *e) {
    if (strchr(name, '/') || strstr(name, ".json")) {
        snprintf(path, cap, "%s", name);
        return CB_OK;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", plan_exe());
    char *s = strrchr(dir, '/');
    if (s) *s = 0; /* build/ : the tree is one level up */
    const char *roots[] = {".", dir, "..", NULL};
    for (int i = 0; roots[i]; i++) {
        snprintf(path, cap, "%s/%s/clusters/%s.json", roots[i], i == 1 ? ".." : ".", name);
        if (exists(path)) return CB_OK;
    }
    return cb_fail(e, CB_EINPUT, "cluster '%s' not found as clusters/%s.json; give a path or a "
                   "preset name (longhorn, stampede2, h100)", name, name);
}

/* ------------------------------------------------------------ the list */

void plan_print_header(void) {
    printf("  %3s %-40s %9s %9s %8s %8s %8s %8s %8s %7s %8s\n", "#", "layout", "step ms",
           "compute", "recomp", "tp", "pp", "bubble", "dp exp", "opt", "mem GB");
}

void plan_print_row(int rank, const cb_plan_choice *c) {
    char name[96];
    const cb_plan_pred *p = &c->p;
    cb_plan_layout_name(&c->l, name, sizeof name);
    printf("  %3d %-40s %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %7.2f %8.3f\n", rank, name,
           1e3 * p->step_s, 1e3 * p->compute_s, 1e3 * p->recompute_s, 1e3 * p->tp_s,
           1e3 * p->pp_s, 1e3 * p->bubble_s, 1e3 * p->dp_exposed_s, 1e3 * (p->opt_s + p->pack_s),
           p->mem_total / 1e9);
}

static void print_json(const cb_plan_choice *c, int n, int total) {
    printf("{\"fits\":%d,\"layouts\":[", total);
    for (int i = 0; i < n; i++) {
        const cb_plan_layout *l = &c[i].l;
        const cb_plan_pred *p = &c[i].p;
        printf("%s{\"dp\":%d,\"pp\":%d,\"tp\":%d,\"mode\":\"%s\",\"schedule\":\"%s\",\"M\":%d,"
               "\"v\":%d,\"recompute\":%d,\"zero\":%d,\"embed\":\"%s\",",
               i ? "," : "", l->dp, l->pp, l->tp, cb_grid_mode_name(l->mode),
               cb_plan_schedule_name(l->schedule), l->M, l->v, l->recompute, l->zero,
               cb_plan_embed_name(l->embed));
        printf("\"step_s\":%.6g,\"compute_s\":%.6g,\"recompute_s\":%.6g,\"tp_s\":%.6g,"
               "\"pp_s\":%.6g,\"bubble_s\":%.6g,\"dp_s\":%.6g,\"dp_exposed_s\":%.6g,\"opt_s\":%.6g,",
               p->step_s, p->compute_s, p->recompute_s, p->tp_s, p->pp_s, p->bubble_s, p->dp_s,
               p->dp_exposed_s, p->opt_s);
        printf("\"gemm_s\":%.6g,\"attn_s\":%.6g,\"mem_s\":%.6g,", p->kern.gemm_s, p->kern.attn_s,
               p->kern.mem_s);
        printf("\"mem_params\":%.17g,\"mem_grads\":%.17g,\"mem_opt\":%.17g,\"mem_act\":%.17g,"
               "\"mem_scratch\":%.17g,\"mem_comm\":%.17g,\"mem_total\":%.17g,",
               p->mem_params, p->mem_grads, p->mem_opt, p->mem_act, p->mem_scratch, p->mem_comm,
               p->mem_total);
        printf("\"mem_bf16\":%.17g,\"bf16_packed\":%.17g,\"pack_s\":%.6g,", p->mem_bf16,
               p->bf16_packed, p->pack_s);
        printf("\"tp_bytes\":%.17g,\"tp_calls\":%.17g,\"pp_bytes\":%.17g,\"pp_calls\":%.17g,"
               "\"dp_bytes\":%.17g,\"dp_calls\":%.17g,\"tp_act_model_bytes\":%.17g,"
               "\"tp_act_scratch_bytes\":%.17g,\"tp_param_bytes\":%.17g",
               p->tp_bytes, p->tp_calls, p->pp_bytes, p->pp_calls, p->dp_bytes, p->dp_calls,
               p->tp.act_model_bytes, p->tp.act_scratch_bytes, p->tp.param_bytes);
        printf(",\"stage_bound\":[");
        for (int s = 0; p->nstage && p->stage_bound[p->nstage] >= 0 && s <= p->nstage; s++)
            printf("%s%d", s ? "," : "", p->stage_bound[s]);
        printf("],\"stage_act_bytes\":[");
        for (int s = 0; s < p->nstage; s++) printf("%s%.17g", s ? "," : "", p->stage_act[s]);
        printf("],\"stage_tp_bytes\":[");
        for (int s = 0; s < p->nstage && p->stage_tp_calls[0] > 0; s++)
            printf("%s%.17g", s ? "," : "", p->stage_tp_bytes[s]);
        printf("],\"stage_tp_calls\":[");
        for (int s = 0; s < p->nstage && p->stage_tp_calls[0] > 0; s++)
            printf("%s%.17g", s ? "," : "", p->stage_tp_calls[s]);
        printf("]}");
    }
    printf("]}\n");
}

#define MAXCHOICE 8192

/* GPT from its sizes (or a checkpoint's); the graph models from the
 * same size flags and their own (docs/plan.md). */
int plan_model_of(const plan_opts *o, cb_plan_model *m, cb_err *e) {
    cb_gpt_config c = {o->layers, o->d_model, o->heads, o->seq_len, o->vocab};
    int bert = !strcmp(o->model, "bert") || !strcmp(o->model, "roberta");
    if (bert || !strcmp(o->model, "nmt")) {
        if (o->layers < 1 || o->d_model < 1 || o->heads < 1 || o->d_model % o->heads ||
            o->vocab < 2 || o->seq_len < 1 || o->dec_layers < 0 || o->ffn < 0 || o->types < 1 ||
            o->max_predictions < 0 || o->max_predictions > o->seq_len ||
            !(o->dropout >= 0 && o->dropout < 1) || !(o->attn_dropout >= 0 && o->attn_dropout < 1))
            return cb_fail(e, CB_EINPUT, "--model %s: --layers, --d-model, --heads (dividing "
                           "--d-model), --seq-len, --types >= 1, --vocab >= 2, --dec-layers, "
                           "--ffn >= 0, --max-predictions in [0, --seq-len], --dropout and "
                           "--attn-dropout in [0, 1); fix the flag",
                           o->model);
        if (bert) {
            cb_bert_config b = {o->layers, o->d_model, o->heads, o->seq_len, o->vocab, o->types,
                                !strcmp(o->model, "roberta"), (float)o->dropout,
                                (float)o->attn_dropout, o->max_predictions};
            return cb_plan_model_bert(&b, m, e);
        }
        cb_nmt_config n = {o->layers, o->dec_layers ? o->dec_layers : o->layers, o->d_model,
                           o->heads, o->ffn ? o->ffn : 4 * o->d_model, o->vocab, 0.1f, 0,
                           o->pre_ln, (float)o->dropout, !o->no_scale};
        return cb_plan_model_nmt(&n, o->seq_len, m, e);
    }
    if (!strcmp(o->model, "ncf")) {
        cb_ncf_config n = {o->users, o->items, o->factors, 0, {0}};
        int rc = cli_ncf_mlp(o->mlp, &n, e);
        if (!rc && (o->users < 1 || o->items < 1 || o->factors < 1))
            rc = cb_fail(e, CB_EINPUT, "--model ncf: --users, --items and --factors must be >= 1");
        return rc ? rc : cb_plan_model_ncf(&n, m, e);
    }
    if (strcmp(o->model, "gpt"))
        return cb_fail(e, CB_EINPUT, "--model %s: give gpt, bert, roberta, nmt or ncf", o->model);
    if (o->init && cb_gpt_config_from_file(o->init, &c, e)) return e->code;
    if (o->init && o->seq_len != 1024) c.seq_len = o->seq_len;
    int rc = cb_gpt_config_check(&c, e);
    if (!rc) cb_plan_model_gpt(&c, m);
    return rc;
}

int plan_load_job(const plan_opts *o, cb_plan_model *m, cb_plan_cluster *c, cb_plan_job *j,
                  cb_err *e) {
    char path[PATH_MAX];
    int rc = plan_model_of(o, m, e);
    if (!rc && o->cluster) rc = plan_find_cluster(o->cluster, path, sizeof path, e);
    if (!rc) rc = o->cluster ? cb_plan_cluster_read(path, c, e) : plan_local_cluster(o->threads, c, e);
    *j = (cb_plan_job){m, c, o->batch, m->T, 25e6, 0, 0};
    if (!rc && o->comm_dtype) rc = cb_dp_comm_dtype_parse(o->comm_dtype, &j->comm_bf16, e);
    cb_precision p = CB_PREC_FP32;
    if (!rc && o->precision) rc = cb_precision_parse(o->precision, &p, e);
    j->bf16 = p == CB_PREC_BF16;
    if (!rc && j->bf16) rc = cb_plan_cluster_bf16(c, NULL, e);
    return rc;
}

static int by_step(const void *a, const void *b) {
    double x = ((const cb_plan_choice *)a)->p.step_s, y = ((const cb_plan_choice *)b)->p.step_s;
    return (x > y) - (x < y);
}

/* Keeps the layouts that match --dp --pp --tp --tp-mode --schedule (3-D
 * re-predicted without kept gathers under --tp3d-save shard; data
 * parallelism alone with the --embed-grad path). */
static int only(const plan_opts *o, const cb_plan_job *j, cb_plan_choice *ch, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        cb_plan_layout *l = &ch[i].l;
        if ((o->dp && l->dp != o->dp) || (o->pp && l->pp != o->pp) || (o->tp && l->tp != o->tp) ||
            (o->tp_mode && strcmp(o->tp_mode, cb_grid_mode_name(l->mode))) ||
            (o->schedule && l->pp > 1 && strcmp(o->schedule, cb_plan_schedule_name(l->schedule))))
            continue;
        ch[k] = ch[i];
        if (l->mode == CB_TP_3D && !strcmp(o->save, "shard"))
            ch[k].l.gathered = 0, cb_plan_predict(j, &ch[k].l, &ch[k].p);
        if (o->embed != CB_DP_EMBED_DENSE && l->dp > 1 && l->tp == 1 && l->pp == 1)
            ch[k].l.embed = o->embed, cb_plan_predict(j, &ch[k].l, &ch[k].p);
        k++;
    }
    qsort(ch, k, sizeof *ch, by_step); /* re-predicted ones move */
    return k;
}

static int plan_list(const plan_opts *o, cb_err *e) {
    cb_plan_model m;
    cb_plan_cluster c;
    cb_plan_job j;
    int rc = plan_load_job(o, &m, &c, &j, e);
    if (rc) return rc;
    if (o->devices < 1 || o->devices > 65536)
        return cb_fail(e, CB_EINPUT, "--devices %d: give 1 to 65536 devices", o->devices);
    cb_plan_choice *ch = malloc(sizeof *ch * MAXCHOICE);
    if (!ch) return cb_fail(e, CB_ENOMEM, "out of memory for the layout list");
    int n = cb_plan_enumerate(&j, o->devices, o->max_memory_gb * 1e9, o->micro_batches, ch, MAXCHOICE);
    n = only(o, &j, ch, n < MAXCHOICE ? n : MAXCHOICE);
    int shown = n < MAXCHOICE ? n : MAXCHOICE;
    if (o->top > 0 && shown > o->top) shown = o->top;
    if (o->json) print_json(ch, shown, n);
    else {
        char what[128];
        if (m.family == CB_PLAN_FAM_NCF)
            snprintf(what, sizeof what, "ncf %d users %d items F%d MLP %s", o->users, o->items,
                     o->factors, o->mlp);
        else
            snprintf(what, sizeof what, "%s %dL d%d %dH V%d", m.name, m.gpt.n_layer,
                     m.gpt.d_model, m.gpt.n_head, m.gpt.vocab);
        printf("%s, batch %d x T %d, %.3g parameters%s, on %s: %d devices; %d layouts fit %.2f GB "
               "per device (times per optimizer step)\n",
               what, o->batch, m.T, m.family ? m.params : cb_plan_model_params(&m),
               j.bf16 ? ", bf16 products" : "", c.name, o->devices, n,
               (o->max_memory_gb > 0 ? o->max_memory_gb * 1e9 : c.memory_bytes) / 1e9);
        plan_print_header();
        for (int i = 0; i < shown; i++) plan_print_row(i + 1, &ch[i]);
        if (!n) printf("  none: raise --max-memory or --devices, or lower --batch\n");
    }
    free(ch);
    if (o->plot) rc = plan_plot(o, &j, e);
    return rc;
}

static const char EPILOG[] =
    "  cubist plan --cluster longhorn --devices 64 --layers 24 --d-model 2048 --heads 64\n"
    "        every layout of 64 devices that fits memory, fastest first (--json, --plot F.png)\n"
    "  cubist plan --calibrate [--out F] [--repeat R]   measure this machine: GEMM efficiency\n"
    "        by shape, memory-bound bandwidth (alone, every device at once, in cache), MPI\n"
    "        alpha/beta per collective (an mpirun child of 2 ranks); R runs: the best\n"
    "  cubist plan --validate [--cluster F1[,F2]] [--repeat R] [--quick]\n"
    "        predicted vs measured on this machine, from the calibrations of 1 and 2 threads\n"
    "        given (others measured now, the best of R >= 3 runs)\n"
    "  cubist plan --reproduce bian2021|horovod2019\n"
    "  cubist plan --scaling --model nmt --batch B [--strong-batch G] [--cluster F --devices N]\n"
    "        weak (B sequences a rank) and strong (G in all) data-parallel efficiency at 1..N\n"
    "        ranks under --embed-grad dense, sparse and split; without --cluster this machine\n"
    "        (1..64) and the stampede2 preset (1..1200)\n"
    "--cluster: a file or a preset under clusters/ (longhorn, stampede2, h100); without it,\n"
    "this machine: the calibrated cache file ($XDG_CACHE_HOME/cubist/cluster-T<threads>.json,\n"
    "written by --calibrate), else a quick calibration now. --batch is the global batch of\n"
    "one optimizer step in sequences; --micro-batches fixes M (0: searched). Test only:\n"
    "CUBIST_PLAN_FAKE=\"gflops=G,gbs=B,attn=A,knee=K,alpha=S,beta=B[,share=F]\" feeds calibration these\n"
    "rates instead of timing. Formulas and the cluster file format: docs/plan.md.\n";

int cmd_plan(int argc, char **argv) {
    plan_opts o = {.model = "gpt",
                   .layers = 12,
                   .d_model = 768,
                   .heads = 12,
                   .vocab = 50257,
                   .batch = 8,
                   .seq_len = 1024,
                   .top = 20,
                   .threads = 1,
                   .save = "gathered",
                   .embed_grad = "dense",
                   .repeat = 1,
                   /* the graph models' own sizes: train's defaults */
                   .types = 2, .dropout = 0.1, .attn_dropout = 0.1, .users = 1000, .items = 1000, .factors = 64,
                   .mlp = "256,128,64"};
    const cli_flag flags[] = {
        {"model", ARG_STR, &o.model, "gpt (default), bert, roberta, nmt or ncf"},
        {"n-layer", ARG_INT, &o.layers, "transformer blocks L (12; nmt: encoder blocks)"},
        {"layers", ARG_INT, &o.layers, "the same as --n-layer"},
        {"d-model", ARG_INT, &o.d_model, "channels C (768)"},
        {"heads", ARG_INT, &o.heads, "attention heads (12)"},
        {"vocab", ARG_INT, &o.vocab, "vocabulary V (50257)"},
        {"seq-len", ARG_INT, &o.seq_len, "sequence length T (1024)"},
        {"init", ARG_STR, &o.init, "take the model sizes from this checkpoint"},
        {"dec-layers", ARG_INT, &o.dec_layers, "nmt: decoder blocks (default: --layers)"},
        {"ffn", ARG_INT, &o.ffn, "nmt: feed-forward width (default: 4 x --d-model)"},
        {"pre-ln", ARG_BOOL, &o.pre_ln, "nmt: pre-LayerNorm blocks (default post-LN)"},
        {"no-scale", ARG_BOOL, &o.no_scale, "nmt: no sqrt(d_model) scale of the embeddings"},
        {"types", ARG_INT, &o.types, "bert: token types (2)"},
        {"max-predictions", ARG_INT, &o.max_predictions,
         "bert: masked rows per sequence the decoder runs on, as train's (round(0.15 x "
         "--seq-len))"},
        {"dropout", ARG_DOUBLE, &o.dropout, "bert, nmt: hidden dropout (0.1, as train's)"},
        {"attn-dropout", ARG_DOUBLE, &o.attn_dropout,
         "bert: dropout of the attention probabilities (0.1, as train's)"},
        {"users", ARG_INT, &o.users, "ncf: users (1000)"},
        {"items", ARG_INT, &o.items, "ncf: items (1000)"},
        {"factors", ARG_INT, &o.factors, "ncf: GMF factor width (64)"},
        {"mlp", ARG_STR, &o.mlp, "ncf: MLP widths (256,128,64)"},
        {"batch", ARG_INT, &o.batch, "global batch of one step, sequences (8)"},
        {"micro-batches", ARG_INT, &o.micro_batches, "fix M micro-batches per step (0: search)"},
        {"devices", ARG_INT, &o.devices, "devices (ranks) to plan for"},
        {"dp", ARG_INT, &o.dp, "only layouts of this many data-parallel ranks"},
        {"pp", ARG_INT, &o.pp, "only layouts of this many pipeline stages"},
        {"tp", ARG_INT, &o.tp, "only layouts of this many tensor-parallel ranks"},
        {"tp-mode", ARG_STR, &o.tp_mode, "only this tensor mode (1d, 2d, 3d)"},
        {"schedule", ARG_STR, &o.schedule,
         "only this pipeline schedule (gpipe, 1f1b, interleaved)"},
        {"tp3d-save", ARG_STR, &o.save, "3-D: gathered (keep X^, W^; default) or shard"},
        {"embed-grad", ARG_STR, &o.embed_grad,
         "data parallelism alone: dense (default), sparse or split"},
        {"precision", ARG_STR, &o.precision,
         "fp32 (default) or bf16: products at the cluster's bf16 rates (device.bf16), the "
         "bf16 table's memory; --calibrate: measure the bf16 rates too"},
        {"comm-dtype", ARG_STR, &o.comm_dtype,
         "fp32 (default) or bf16: the wire type of the data-parallel gradient and the "
         "tensor-parallel activations"},
        {"cluster", ARG_STR, &o.cluster,
         "cluster file or preset (default: this machine); --validate: F1[,F2], this machine's "
         "calibrations of 1 and 2 threads (`--calibrate --threads T`), the missing one measured"},
        {"max-memory", ARG_DOUBLE, &o.max_memory_gb, "GB per device (default: the cluster's)"},
        {"top", ARG_INT, &o.top, "rows listed (20; 0: all)"},
        {"json", ARG_BOOL, &o.json, "one JSON object"},
        {"plot", ARG_STR, &o.plot, "PNG of step time and memory against devices per mode"},
        {"threads", ARG_INT, &o.threads, "this machine: OpenMP threads per rank (1)"},
        {"calibrate", ARG_BOOL, &o.calibrate, "measure this machine and write a cluster file"},
        {"calibrate-comm", ARG_BOOL, &o.calibrate_comm, "child of --calibrate under mpirun"},
        {"out", ARG_STR, &o.out, "--calibrate: cluster file to write (default: the cache)"},
        {"quick", ARG_BOOL, &o.quick, "--calibrate, --validate: a small, fast set"},
        {"validate", ARG_BOOL, &o.validate, "predicted vs measured steps on this machine"},
        {"repeat", ARG_INT, &o.repeat,
         "--validate: runs of every case (round-robin over the cases), the fastest kept, and "
         "of its calibration (the best, 3 at least without --quick); --calibrate: runs, the "
         "best of each figure kept (1)"},
        {"profile", ARG_BOOL, &o.profile,
         "--validate: one process's kernel classes, predicted and profiled"},
        {"reproduce", ARG_STR, &o.reproduce, "bian2021 or horovod2019: the seeds' results"},
        {"scaling", ARG_BOOL, &o.scaling,
         "predicted weak and strong data-parallel scaling, each --embed-grad path"},
        {"strong-batch", ARG_INT, &o.strong_batch,
         "--scaling: sequences in all of the strong scaling (default: --batch)"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    cb_err e = {0};
    int rc = cli_parse("plan", argc, argv, flags, n, &help, &e);
    if (help && !rc) {
        cli_usage(stdout, "plan", "[--cluster F --devices N model flags] | --calibrate | "
                  "--validate | --reproduce NAME | --scaling", flags, n, EPILOG);
        return 0;
    }
    if (!rc && (o.threads < 1 || o.batch < 1 || o.repeat < 1 || o.micro_batches < 0 || o.top < 0 ||
                o.dp < 0 || o.pp < 0 || o.tp < 0))
        rc = cb_fail(&e, CB_EINPUT,
                     "--threads, --batch and --repeat must be >= 1, --micro-batches, --top, "
                     "--dp, --pp, --tp >= 0");
    if (!rc && strcmp(o.save, "gathered") && strcmp(o.save, "shard"))
        rc = cb_fail(&e, CB_EINPUT, "--tp3d-save must be gathered or shard; got '%s'", o.save);
    cb_err ignore;
    if (!rc && (cb_dp_embed_parse(o.embed_grad, &o.embed, &ignore) || o.embed == CB_DP_EMBED_AUTO))
        rc = cb_fail(&e, CB_EINPUT,
                     "plan: --embed-grad '%s': give dense, sparse or split (auto is "
                     "train's choice between them)",
                     o.embed_grad);
    if (rc) return cli_fail(&e);
    if (o.calibrate_comm) rc = plan_calibrate_comm(o.quick, &e);
    else if (o.calibrate) rc = plan_calibrate(&o, &e);
    else if (o.validate) rc = plan_validate(&o, &e);
    else if (o.reproduce) rc = plan_reproduce(&o, &e);
    else if (o.scaling) rc = plan_scaling(&o, &e);
    else if (!o.devices) rc = cb_fail(&e, CB_EINPUT, "plan: give --devices N (or --calibrate, "
                                      "--validate, --reproduce); see cubist plan --help");
    else rc = plan_list(&o, &e);
    return rc ? cli_fail(&e) : 0;
}
