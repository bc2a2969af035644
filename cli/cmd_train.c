#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "comm/comm.h"
#include "train/check.h"
#include "train/train.h"

static const char EPILOG[] =
    "Model flags default to the checkpoint's sizes with --init/--resume, else to\n"
    "4 layers, d-model 128, 4 heads, seq-len 64, vocab 256.\n"
    "Sequential data (--shuffle 0): micro-batch k is the k-th run of B*T+1 tokens\n"
    "from the start of the stream (wrapping); row b is tokens [b*T, b*T+T] of it.\n"
    "Shards (--data 'dir/*.bin' or a,b,c) are their concatenation in both modes;\n"
    "a window may span two shards. They must share one format and tokenizer.\n"
    "--save F writes F (weights, Hugging Face GPT-2 names) and F.state (AdamW\n"
    "moments, step, RNG, data position); --resume F continues bit for bit.\n"
    "--save-dtype bf16|f16 writes F's tensors in that dtype (export, rounded to\n"
    "nearest even; F.state stays fp32, and a resume starts from the rounded weights).\n"
    "--init reads published GPT-2 files too: Hugging Face safetensors with or\n"
    "without the \"transformer.\" prefix, F32/F16/BF16 (converted to fp32), the\n"
    "attn.bias/attn.masked_bias buffers and lm_head.weight ignored (the head is\n"
    "tied to wte); vocab 50257 (a layout pads it internally, saves drop the pad).\n"
    "Files without cubist metadata need --heads (GPT-2 124M: 12).\n"
    "--save DIR/ keeps one pair per save, DIR/step-00000010.safetensors(.state);\n"
    "--resume DIR takes the newest complete one. A checkpoint commits as one unit\n"
    "(a kill at any instant leaves the previous one or the new one).\n"
    "SIGTERM, SIGINT or --exit-signal: every rank finishes its step, saves and\n"
    "exits 75; a second SIGINT exits 130 at once. A wait in communication longer\n"
    "than --stall-timeout ends the job with status 6 (docs/operations.md).\n"
    "--log F: one JSON object per step: step loss lr grad_norm tokens tokens_per_s\n"
    "step_ms fwd_ms bwd_ms opt_ms mfu peak_rss_bytes comm_* cpu_ms [val_loss].\n"
    "MFU = tokens/s * FLOPs per token / peak, FLOPs per token = 6*N + 12*L*C*T\n"
    "(N parameters, L layers, C d-model, T seq-len; attention without the causal\n"
    "discount). The peak is --peak-gflops, else the sgemm rate `cubist bench --peak`\n"
    "measures (2048^3, this thread count, the BLAS core in use; with --precision\n"
    "bf16 the bf16 GEMM's), cached in $XDG_CACHE_HOME/cubist (default\n"
    "~/.cache/cubist); measured on first use if absent; `cubist bench --peak`\n"
    "re-measures and rewrites both.\n"
    "Processes: `mpirun -np N cubist train ...` (or `srun --mpi=pmix -n N` for an\n"
    "OpenMPI build, --mpi=pmi2 for MPICH) splits the world into dp x pp x tp\n"
    "(tensor ranks adjacent); --batch stays the GLOBAL micro-batch, each data-\n"
    "parallel rank computes B/dp of its rows, so any layout follows the same\n"
    "trajectory. Only world rank 0 prints, logs and saves; checkpoints hold full\n"
    "tensors (ZeRO shards gathered) and resume under any layout. The log adds\n"
    "opt_state_bytes (AdamW m and v on world rank 0), and for this step:\n"
    "comm_bytes, comm_bytes_recv (world rank 0's bytes sent and received, ring\n"
    "volume), comm_calls, comm_ms (time inside MPI), comm_wait_ms (waiting for\n"
    "gradient buckets after backward), comm_ranks {sent,recv,calls,ms: one entry\n"
    "per world rank} and comm_by_tag {tag: {bytes,bytes_recv,calls,ms}} (rank 0's,\n"
    "summed over its groups). --comm-report: per group and tag, min/max over ranks.\n"
    "A launch of N tasks that MPI sees as 1 process (a launcher of the other MPI)\n"
    "is refused (CUBIST_SINGLETON_OK=1 allows it).\n"
    "Test only: CUBIST_TEST_EXIT_RANK=R [CUBIST_TEST_EXIT_STEP=S] makes world rank R\n"
    "exit with status 3 in the middle of step S (default 1), for failure tests.\n";

/* Model sizes not given stay 0 ("from the checkpoint or default"); a given
 * size must be positive, which the 0 sentinel alone could not tell. */
static const int UNSET = INT_MIN;

static int model_flags(cb_gpt_config *c, cb_err *e) {
    int *f[5] = {&c->n_layer, &c->d_model, &c->n_head, &c->seq_len, &c->vocab};
    const char *names[5] = {"--layers", "--d-model", "--heads", "--seq-len", "--vocab"};
    for (int i = 0; i < 5; i++) {
        if (*f[i] == UNSET) *f[i] = 0;
        else if (*f[i] < 1)
            return cb_fail(e, CB_EINPUT, "%s %d must be >= 1; pass a positive size or drop the "
                                         "flag (default: the checkpoint's, else the built-in)",
                           names[i], *f[i]);
    }
    return CB_OK;
}

/* The value of --model (NULL: not given). */
static const char *model_arg(int argc, char **argv) {
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--model")) return argv[i + 1];
    return NULL;
}

int cmd_train(int argc, char **argv) {
    const char *model = model_arg(argc, argv);
    if (model && !strcmp(model, "ncf")) return cmd_train_ncf(argc, argv);
    if (model && (!strcmp(model, "bert") || !strcmp(model, "roberta")))
        return cmd_train_bert(argc, argv);
    if (model && !strcmp(model, "nmt")) return cmd_train_nmt(argc, argv);
    cb_train_opts o;
    cb_train_defaults(&o);
    o.model = (cb_gpt_config){UNSET, UNSET, UNSET, UNSET, UNSET};
    cli_flag flags[80] = {
        {"model", ARG_STR, &model, "gpt (default), ncf, bert, roberta or nmt (see --model M --help)"},
        {"data", ARG_STR, &o.data, "training tokens (llm.c or nanoGPT format): a file, a glob "
         "('dir/train_*.bin', sorted) or a comma list; shards read as one stream"},
        {"val-data", ARG_STR, &o.val_data, "validation tokens (file, glob or comma list)"},
        {"layers", ARG_INT, &o.model.n_layer, "transformer blocks L"},
        {"d-model", ARG_INT, &o.model.d_model, "channels C"},
        {"heads", ARG_INT, &o.model.n_head, "attention heads (must divide d-model)"},
        {"seq-len", ARG_INT, &o.model.seq_len, "sequence length T (and context of a new model)"},
        {"vocab", ARG_INT, &o.model.vocab, "vocabulary size V (256: bytes)"},
        {"batch", ARG_INT, &o.B, "sequences per micro-batch B (default 4)"},
        {"grad-accum", ARG_INT, &o.accum, "micro-batches per step (default 1)"},
        {"decay-embed", ARG_BOOL, &o.opt.decay_embeddings, "also decay wte and wpe (0)"},
        {"seed", ARG_U64, &o.seed, "seed of initialisation and data order (1337)"},
        {"shuffle", ARG_BOOL, &o.shuffle, "1: random windows, 0: sequential batches (1)"},
        {"eval-every", ARG_INT, &o.eval_every, "validation loss every N steps (needs --val-data)"},
        {"eval-batches", ARG_INT, &o.eval_batches, "batches per validation (10)"},
    };
    int n = 0, help = 0;
    while (flags[n].name) n++;
    n += cli_train_opt_flags(&o, flags + n);
    n += cli_train_run_flags(&o, flags + n);
    cb_err e = {0};
    int rc = cli_train_parse(argc, argv, flags, n, "--data FILE [flags]", EPILOG, &o, &help, &e);
    if (help && !rc) return 0;
    /* What the flags alone decide fails before MPI starts: at once, on every
     * rank alike (each parses the same argv), printed by rank 0 only. */
    if (!rc && model && strcmp(model, "gpt"))
        rc = cb_fail(&e, CB_EINPUT, "--model %s is not a model; use gpt, ncf, bert, roberta or nmt", model);
    if (!rc) rc = model_flags(&o.model, &e);
    if (!rc) rc = cb_train_check_flags(&o, &e);
    if (!rc) rc = cli_train_family_auto(&o, &e);
    cb_precision prec;
    if (!rc) rc = cb_precision_parse(o.precision, &prec, &e);
    if (!rc) rc = cb_kernels_select(prec, &e);
    if (rc) return cli_fail(&e);
    /* From here errors are agreed across ranks and printed once (cb_comm_exit). */
    if (cb_comm_init(&argc, &argv, &e)) return cli_fail(&e);
    cli_train_log log;
    cb_train_sink sink = cli_train_sink(&log, &o);
    if (cb_train_run(&o, &sink, &e))
        cli_train_exit(&e);
    cb_comm_finalize();
    return 0;
}
