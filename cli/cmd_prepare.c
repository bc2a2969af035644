#include <stdio.h>

#include "args.h"
#include "cli.h"

int cmd_prepare(int argc, char **argv) {
    const char *input = NULL, *output = NULL, *val_output = NULL;
    double frac = 0.05;
    const cli_flag flags[] = {
        {"input", ARG_STR, &input, "text file to tokenise"},
        {"output", ARG_STR, &output, "training token file to write (llm.c format)"},
        {"val-output", ARG_STR, &val_output, "validation token file (the text's tail)"},
        {"val-fraction", ARG_DOUBLE, &frac, "fraction of the text for validation (0.05)"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help;
    cb_err e = {0};
    if (cli_parse("prepare", argc, argv, flags, n, &help, &e)) return cli_fail(&e);
    if (help) {
        cli_usage(stdout, "prepare", "--input TEXT --output TRAIN.bin [--val-output VAL.bin]",
                  flags, n,
                  "Byte-level tokenizer: token = byte (vocab 256). Files are llm.c token files\n"
                  "(256 x int32 header, magic 20240520, version 1, then uint16 tokens).\n");
        return 0;
    }
    if (!input || !output) {
        cb_fail(&e, CB_EINPUT, "prepare needs --input TEXT and --output FILE");
        return cli_fail(&e);
    }
    if (frac < 0 || frac >= 1) {
        cb_fail(&e, CB_EINPUT, "--val-fraction %g must be in [0, 1)", frac);
        return cli_fail(&e);
    }
    if (cb_prepare_text(input, output, val_output, val_output ? frac : 0, &e)) return cli_fail(&e);
    return 0;
}
