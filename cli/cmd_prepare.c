#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "cli.h"
#include "data/tokenizer.h"
#include "formats/fileio.h"

/* The same file under two names (a hard link, "./x" and "x"). */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!strcmp(a, b)) return 1;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* frac < 0: --val-fraction not given. Everything a run could trip over
 * after reading the text is refused here, so nothing is half written. */
static int check_prepare(const char *input, const char *output, const char *val_output,
                         double *frac, cb_err *e) {
    if (!input || !output)
        return cb_fail(e, CB_EINPUT, "prepare needs --input TEXT and --output FILE");
    if (*frac >= 0 && !val_output)
        return cb_fail(e, CB_EINPUT, "--val-fraction %g needs --val-output FILE (where the "
                                     "validation tokens go)", *frac);
    if (*frac < 0) *frac = 0.05;
    if (val_output && !(*frac > 0 && *frac < 1))
        return cb_fail(e, CB_EINPUT, "--val-fraction %g must be in (0, 1) with --val-output; pass "
                                     "e.g. 0.05, or drop --val-output", *frac);
    if (same_file(input, output) || (val_output && (same_file(input, val_output) ||
                                                    same_file(output, val_output))))
        return cb_fail(e, CB_EINPUT, "--input, --output and --val-output must be three different "
                                     "files; name the outputs differently");
    int rc = fio_check_writable("--output", output, e);
    if (!rc && val_output) rc = fio_check_writable("--val-output", val_output, e);
    return rc;
}

/* --interactions: pairs for recommendation, alone with --output. */
static int prepare_interactions(const char *tsv, const char *input, const char *output,
                         const char *val_output, double frac, cb_err *e) {
    if (input || val_output || frac >= 0 || !output)
        return cb_fail(e, CB_EINPUT, "--interactions FILE.tsv takes --output FILE only (not "
                                     "--input, --val-output, --val-fraction)");
    if (same_file(tsv, output))
        return cb_fail(e, CB_EINPUT, "--interactions and --output name the same file; name the "
                                     "output differently");
    int rc = fio_check_writable("--output", output, e);
    return rc ? rc : cb_prepare_interactions(tsv, output, e);
}

/* --pairs: the TSVs in, pair files out; everything refused before reading. */
static int check_pairs(const char *pairs, const char *val_pairs, const char *input, const char *output,
                       const char *val_output, double frac, int context, cb_err *e) {
    if (!pairs) return cb_fail(e, CB_EINPUT, "--val-pairs needs --pairs FILE.tsv (the training pairs)");
    if (input || frac >= 0)
        return cb_fail(e, CB_EINPUT, "--pairs takes no --input or --val-fraction; the held-out pairs "
                                     "come from --val-pairs FILE.tsv");
    if (!output) return cb_fail(e, CB_EINPUT, "prepare --pairs needs --output FILE");
    if (!val_pairs != !val_output)
        return cb_fail(e, CB_EINPUT, "--val-pairs and --val-output go together: pass both (held-out "
                                     "pairs and where their tokens go) or neither");
    if (context < 2 || context > 65535)
        return cb_fail(e, CB_EINPUT, "--context %d is outside [2, 65535]; pass e.g. 512", context);
    const char *f[4] = {pairs, output, val_pairs, val_output};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (f[i] && f[j] && same_file(f[i], f[j]))
                return cb_fail(e, CB_EINPUT, "--pairs, --output, --val-pairs and --val-output must be "
                                             "different files; name them differently");
    int rc = fio_check_writable("--output", output, e);
    if (!rc && val_output) rc = fio_check_writable("--val-output", val_output, e);
    return rc;
}

static int run_pairs(const char *pairs, const char *val_pairs, const char *output, const char *val_output,
                     int context, const char *tokenizer, const char *bpe_dir, int compact, cb_err *e) {
    size_t n[2];
    int rc = cb_prepare_pairs(pairs, output, val_pairs, val_output, context, tokenizer, bpe_dir,
                              compact, n, e);
    if (!rc && val_pairs) printf("prepare: %zu pairs -> %s, %zu -> %s\n", n[0], output, n[1], val_output);
    else if (!rc) printf("prepare: %zu pairs -> %s\n", n[0], output);
    return rc;
}

int cmd_prepare(int argc, char **argv) {
    const char *input = NULL, *output = NULL, *val_output = NULL, *tokenizer = "byte", *bpe_dir = NULL;
    const char *interactions = NULL, *pairs = NULL, *val_pairs = NULL;
    double frac = -1;
    int context = 512, compact = 0;
    const cli_flag flags[] = {
        {"input", ARG_STR, &input, "text file to tokenise"},
        {"output", ARG_STR, &output, "training token file to write (llm.c format)"},
        {"val-output", ARG_STR, &val_output, "validation token file (the text's tail)"},
        {"val-fraction", ARG_DOUBLE, &frac,
         "fraction of the text for validation, needs --val-output (0.05)"},
        {"tokenizer", ARG_STR, &tokenizer, "byte (vocab 256) or gpt2 (GPT-2's BPE, vocab 50257) (byte)"},
        {"bpe-dir", ARG_STR, &bpe_dir, "gpt2: directory of encoder.json and vocab.bpe (" CB_BPE_DIR ")"},
        {"interactions", ARG_STR, &interactions,
         "user<TAB>item pairs (recommendation, --model ncf) instead of --input"},
        {"pairs", ARG_STR, &pairs, "translation pairs, `source<TAB>target` a line, instead of --input"},
        {"val-pairs", ARG_STR, &val_pairs, "held-out pairs for validation, with --pairs and --val-output"},
        {"context", ARG_INT, &context, "--pairs: most tokens of a side with its end token (512)"},
        {"compact-vocab", ARG_BOOL, &compact,
         "--pairs: only the ids the training pairs use (+ single bytes); map in OUT.vocab"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help;
    cb_err e = {0};
    if (cli_parse("prepare", argc, argv, flags, n, &help, &e)) return cli_fail(&e);
    if (help) {
        cli_usage(stdout, "prepare",
                  "--input TEXT --output TRAIN.bin [--val-output VAL.bin]\n"
                  "       cubist prepare --interactions PAIRS.tsv --output PAIRS.bin\n"
                  "       cubist prepare --pairs TRAIN.tsv --output TRAIN.bin [--val-pairs VAL.tsv "
                  "--val-output VAL.bin]",
                  flags, n,
                  "--tokenizer byte: token = byte (vocab 256). --tokenizer gpt2: GPT-2's byte-level\n"
                  "BPE (vocab 50257; <|endoftext|> in the text is token 50256), as OpenAI's encoder;\n"
                  "`make deps` installs its files into " CB_BPE_DIR ".\n"
                  "Files are llm.c token files (256 x int32 header, magic 20240520, version 1,\n"
                  "count, tokenizer: 1 byte, 2 gpt2; then uint16 tokens).\n"
                  "With --val-output the last floor(n * fraction) tokens go to the validation\n"
                  "file and the rest to --output; both are written or neither.\n"
                  "--interactions: one user<TAB>item per line, ids any strings, mapped to dense\n"
                  "indices in first-seen order; writes OUT (pairs) and OUT.users, OUT.items\n"
                  "(line k: the original id of index k), all three or none; a bad line is\n"
                  "named by file and line number. Input of `cubist train --model ncf`.\n"
                  "--pairs: translation pair files (docs/nmt.md): each side then its end token,\n"
                  "header word 4 = 1 and word 5 = the tokenizer's vocab V; ids V, V+1, V+2 are\n"
                  "padding, start and end. A line without one tab, an empty side or a side longer\n"
                  "than --context is refused, naming the file and line, and nothing is written.\n"
                  "--compact-vocab: the vocabulary is the tokenizer's ids the training pairs use\n"
                  "and every single byte (a held-out word outside it is spelled in bytes), V its\n"
                  "size, header word 6 = 1; OUT.vocab and VAL.vocab list, line k, the tokenizer's\n"
                  "id of id k. Training and `translate` read it (a GPT-2 model's output layer\n"
                  "shrinks from 50,260 rows to the ids the corpus uses).\n");
        return 0;
    }
    if (compact && !pairs) {
        cb_fail(&e, CB_EINPUT, "--compact-vocab is for translation pairs; pass --pairs FILE.tsv or drop it");
        return cli_fail(&e);
    }
    if (interactions)
        return prepare_interactions(interactions, input, output, val_output, frac, &e) ? cli_fail(&e) : 0;
    if (pairs || val_pairs) {
        if (check_pairs(pairs, val_pairs, input, output, val_output, frac, context, &e) ||
            run_pairs(pairs, val_pairs, output, val_output, context, tokenizer, bpe_dir, compact, &e))
            return cli_fail(&e);
        return 0;
    }
    if (check_prepare(input, output, val_output, &frac, &e) ||
        cb_prepare_text(input, output, val_output, frac, tokenizer, bpe_dir, &e))
        return cli_fail(&e);
    return 0;
}
