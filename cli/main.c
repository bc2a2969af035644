/* cubist command line: train, sample, prepare, bench, plan, plot, bleu. Errors are one line on
 * stderr and exit status 2 for bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} COMMANDS[] = {
    {"train", cmd_train, "train a GPT on a token file"},
    {"sample", cmd_sample, "generate text from a checkpoint"},
    {"prepare", cmd_prepare, "turn a text file into token files"},
    {"bench", cmd_bench, "benchmark a training step against PyTorch; --peak: sgemm GFLOP/s"},
    {"plot", cmd_plot, "draw training logs (loss, val loss, lr, MFU) to a PNG"},
    {"bleu", cmd_bleu, "corpus BLEU-4 of translations against references"},
    {"translate", cmd_translate, "translate text with a `train --model nmt` checkpoint"},
    {"plan", cmd_plan, "predict step time and memory of every layout; calibrate, validate"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: cubist COMMAND [flags]   (cubist COMMAND --help for its flags)\n\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", COMMANDS[i].name, COMMANDS[i].what);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 2, argv + 2);
    fprintf(stderr, "cubist: unknown command '%s'; run `cubist --help` for the list\n", argv[1]);
    return 2;
}

/* This process's rank as the launcher announced it (mpirun, hydra, srun),
 * for errors found before MPI starts: every rank finds the same one and
 * only rank 0 prints it. 0 when not launched. */
static int launched_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

int cli_fail(const cb_err *e) {
    if (launched_rank() == 0) fprintf(stderr, "cubist: error: %s\n", e->msg);
    return e->code == CB_EINPUT ? 2 : 1;
}
