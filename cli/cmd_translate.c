/* `cubist translate`: greedy or beam-search translation of text lines with
 * a checkpoint of `cubist train --model nmt`, through the engine's
 * incremental decoding (src/eval/search.c). docs/nmt.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "cli.h"
#include "comm/comm.h"
#include "data/bitext.h"
#include "data/tokenizer.h"
#include "eval/search.h"
#include "train/train.h"
#include "util/clock.h"

typedef struct tr_opts {
    const char *model, *input, *tokenizer, *bpe_dir;
    int beam, max_len, no_cache, ids, stats;
    double alpha;
} tr_opts;

typedef struct sources {
    uint16_t **tok;
    int *len, n;
} sources;

static void sources_free(sources *s) {
    for (int i = 0; i < s->n; i++) free(s->tok[i]);
    free(s->tok), free(s->len);
}

/* A compact vocabulary's ids (metadata vocab_map, space-separated, of a
 * model trained on `prepare --compact-vocab` pairs) around tk. */
static int map_vocab(const char *path, const char *m, cb_tokenizer *tk, cb_err *e) {
    int32_t *ids;
    int n, rc = cb_tokenizer_parse_map(m, strlen(m), path, &ids, &n, e);
    if (!rc) rc = cb_tokenizer_compact(tk, ids, n, e);
    free(ids); /* NULL on a parse error */
    return rc;
}

/* The checkpoint's tokenizer (and vocabulary map), or --tokenizer where it
 * records none. */
static int open_tokenizer(const tr_opts *o, const cb_nmt_config *c, cb_tokenizer *tk, cb_err *e) {
    cb_st_file f;
    int rc = cb_st_open(o->model, &f, e);
    if (rc) return rc;
    const char *name = cb_st_meta(&f, "tokenizer");
    if (name && !strcmp(name, "unknown")) name = NULL;
    if (name && o->tokenizer && strcmp(name, o->tokenizer))
        rc = cb_fail(e, CB_EINPUT, "--tokenizer %s: %s was trained on %s tokens; drop the flag",
                     o->tokenizer, o->model, name);
    else if (!name && !o->tokenizer)
        rc = cb_fail(e, CB_EINPUT, "%s does not record its tokenizer; pass --tokenizer byte|gpt2 "
                                   "(the one `cubist prepare --pairs` used)", o->model);
    if (!rc) rc = cb_tokenizer_open(name ? name : o->tokenizer, o->bpe_dir, tk, e);
    const char *map = cb_st_meta(&f, "vocab_map");
    if (!rc && map) rc = map_vocab(o->model, map, tk, e);
    if (!rc && tk->vocab != c->pad)
        rc = cb_fail(e, CB_EINPUT, "%s: vocabulary %d is tokenizer %s's %d + 3; pass the tokenizer "
                                   "it was trained with", o->model, c->vocab, tk->name, tk->vocab);
    cb_st_close(&f);
    return rc;
}

/* One source line (newline cut): tokens, or a bad-input error naming it. */
static int add_line(sources *s, const cb_tokenizer *tk, const char *path, char *line, size_t n,
                    int T, cb_err *e) {
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    int no = s->n + 1;
    if (!n) return cb_fail(e, CB_EINPUT, "%s line %d is empty; give one source sentence a line",
                           path, no);
    uint16_t *t = malloc(sizeof(uint16_t) * n);
    size_t k = t ? tk->encode(tk, (const uint8_t *)line, n, t) : SIZE_MAX;
    if (k == SIZE_MAX) return free(t), cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
    if (k + 1 > (size_t)T)
        return free(t), cb_fail(e, CB_EINPUT, "%s line %d is %zu tokens; the model takes at most "
                                              "%d a source (then its EOS): split the line", path, no,
                                k, T - 1);
    s->tok[s->n] = t, s->len[s->n++] = (int)k;
    return CB_OK;
}

/* Every line of the input, checked before anything is translated. */
static int read_sources(const tr_opts *o, const cb_tokenizer *tk, int T, sources *s, cb_err *e) {
    const char *path = o->input ? o->input : "stdin";
    FILE *f = o->input ? fopen(o->input, "r") : stdin;
    if (!f) return cb_fail(e, CB_EINPUT, "--input %s cannot be read; check the path", o->input);
    char *line = NULL;
    size_t cap = 0, slots = 0;
    ssize_t n;
    int rc = CB_OK;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        if ((size_t)s->n == slots) {
            slots = slots ? 2 * slots : 64;
            uint16_t **a = realloc(s->tok, sizeof *a * slots);
            if (a) s->tok = a;
            int *l = a ? realloc(s->len, sizeof *l * slots) : NULL;
            if (l) s->len = l;
            if (!a || !l) rc = cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
        }
        if (!rc) rc = add_line(s, tk, path, line, (size_t)n, T, e);
    }
    free(line);
    if (o->input) fclose(f);
    return rc;
}

static void emit(const tr_opts *o, const cb_tokenizer *tk, const int *out, int n) {
    uint8_t buf[256];
    for (int i = 0; i < n; i++) {
        if (o->ids) printf(i ? " %d" : "%d", out[i]);
        else fwrite(buf, 1, tk->decode(tk, out[i], buf, sizeof buf), stdout);
    }
    printf("\n");
}

/* The model of c for rows rows of T positions, weights from the checkpoint. */
static int load(const tr_opts *o, const cb_nmt_config *c, int rows, int T, int *slen, int *tlen,
                cb_dist **d, cb_model **m, cb_err *e) {
    char arg0[] = "cubist", *argv0[] = {arg0, NULL}, **argv = argv0;
    int argc = 1;
    cb_adamw_config none = {0};
    int rc = cb_dist_init(&argc, &argv, d, e);
    if (!rc && cb_comm_world()->size > 1)
        rc = cb_fail(e, CB_EINPUT, "translate runs on one process; start it without mpirun");
    if (rc) return rc;
    *m = cb_model_new(*d, rows, T);
    if (!*m) return cb_fail(e, CB_ENOMEM, "out of memory for the model");
    cb_model_declare_nmt(*m, c);
    cb_model_set_lengths_set(*m, 0, slen);
    cb_model_set_lengths_set(*m, 1, tlen);
    rc = cb_model_build(*m, 0, &none, e);
    return rc ? rc : cb_model_load(*m, o->model, e);
}

/* --stats: the decoding's time (the model loaded) and the engine's count
 * of its work, on stderr. */
static void print_stats(const tr_opts *o, const cb_model *m, int n, double wall, double cpu) {
    cb_decode_info in;
    cb_model_decode_info(m, &in);
    fprintf(stderr, "translate: %d sources, %s %d: %.3f s wall, %.3f s CPU; encoder on %lld "
                    "sequences (%.3f s wall, %.3f s CPU), decoder on %lld positions (%.3f s, "
                    "%.3f s)%s\n", n, o->beam > 0 ? "beam" : "greedy", o->beam > 0 ? o->beam : 1,
            wall, cpu, in.encoder_rows, in.encoder_s, in.encoder_cpu_s, in.decoder_positions,
            in.decoder_s, in.decoder_cpu_s,
            o->no_cache ? " (--no-cache: the whole model each position, not counted)" : "");
}

static int translate(const tr_opts *o, const cb_nmt_config *c, int T, const cb_tokenizer *tk,
                     const sources *s, cb_err *e) {
    int rows = o->beam > 0 ? o->beam : 1, max_len = o->max_len ? o->max_len : T - 1;
    int *slen = calloc((size_t)rows, sizeof(int)), *tlen = calloc((size_t)rows, sizeof(int));
    int *out = malloc(sizeof(int) * (size_t)max_len), n = 0;
    cb_dist *d = NULL;
    cb_model *m = NULL;
    cb_search sr = {0};
    int rc = slen && tlen && out ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory for decoding");
    if (!rc) rc = load(o, c, rows, T, slen, tlen, &d, &m, e);
    if (!rc) rc = cb_search_init(&sr, m, rows, T, c->vocab, slen, tlen, !o->no_cache, e);
    double w0 = cb_clock_s(CLOCK_MONOTONIC), c0 = cb_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int i = 0; !rc && i < s->n; i++) {
        const uint16_t *src = s->tok[i];
        rc = o->beam > 0 ? cb_search_beam(&sr, src, s->len[i], o->beam, o->alpha, max_len, out, &n, e)
                         : cb_search_greedy(&sr, &src, &s->len[i], 1, max_len, out, &n, e);
        if (!rc) emit(o, tk, out, n);
    }
    fflush(stdout);
    if (!rc && o->stats)
        print_stats(o, m, s->n, cb_clock_s(CLOCK_MONOTONIC) - w0,
                    cb_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0);
    cb_search_free(&sr);
    cb_model_free(m);
    if (d) cb_dist_finalize(d);
    free(slen), free(tlen), free(out);
    return rc;
}

static const char EPILOG[] =
    "Translates each line of --input (stdin by default) with a checkpoint of\n"
    "`cubist train --model nmt`, one output line per source line. The source is\n"
    "tokenized with the tokenizer the checkpoint records (the pair files'), or\n"
    "--tokenizer where it records none. Without --beam: greedy decoding; --beam K:\n"
    "beam search of K beams ranked by log P / ((5 + |Y|) / 6)^alpha (GNMT's length\n"
    "penalty, |Y| counting the end token); --beam 1 gives greedy's output. The\n"
    "encoder runs once per source; each new position runs the decoder on that\n"
    "position alone, its self-attention reading the keys and values kept from\n"
    "earlier positions (the KV cache) and cross-attention the encoder's, computed\n"
    "once. --no-cache recomputes the whole model for every position instead (the\n"
    "reference the cache is tested against). --stats prints one line on stderr:\n"
    "the decoding's wall and CPU time, the sequences the encoder ran on (one a\n"
    "source, whatever the beam) and the positions the decoder ran on (a row each),\n"
    "with the time of each.\n"
    "One process: under mpirun it exits 2.\n"
    "Bad input (exit 2, one line, nothing translated): a missing file, a\n"
    "checkpoint that is not a translation model, an empty line, a line longer\n"
    "than the model's positions.\n";

int cmd_translate(int argc, char **argv) {
    tr_opts o = {.alpha = 0.6};
    const cli_flag flags[] = {
        {"model", ARG_STR, &o.model, "checkpoint of `cubist train --model nmt --save`"},
        {"input", ARG_STR, &o.input, "source sentences, one a line (default: stdin)"},
        {"beam", ARG_INT, &o.beam, "beam search of K beams (default: greedy)"},
        {"alpha", ARG_DOUBLE, &o.alpha, "length penalty exponent of beam search (0.6)"},
        {"max-len", ARG_INT, &o.max_len, "most tokens a translation (default: the positions - 1)"},
        {"tokenizer", ARG_STR, &o.tokenizer, "byte|gpt2, for a checkpoint that records none"},
        {"bpe-dir", ARG_STR, &o.bpe_dir, "gpt2: directory of encoder.json and vocab.bpe (" CB_BPE_DIR ")"},
        {"no-cache", ARG_BOOL, &o.no_cache, "recompute every position (no KV cache): slower, the same"},
        {"ids", ARG_BOOL, &o.ids, "print token ids instead of text"},
        {"stats", ARG_BOOL, &o.stats, "on stderr: the decoding's time and the engine's work "
                                      "(sequences encoded, positions decoded)"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0, T = 0;
    cb_err e = {0};
    if (cli_parse("translate", argc, argv, flags, n, &help, &e)) return cli_fail(&e);
    if (help) {
        cli_usage(stdout, "translate", "--model CKPT [--input FILE] [--beam K] [flags]", flags, n,
                  EPILOG);
        return 0;
    }
    if (!o.model) return cb_fail(&e, CB_EINPUT, "translate needs --model CKPT (`cubist train --model "
                                                "nmt --save`)"), cli_fail(&e);
    if (o.beam < 0 || o.max_len < 0 || !(o.alpha >= 0))
        return cb_fail(&e, CB_EINPUT, "--beam, --max-len and --alpha must be >= 0"), cli_fail(&e);
    cb_nmt_config c;
    cb_tokenizer tk = {0};
    sources s = {0};
    int rc = cb_nmt_config_from_file(o.model, &c, &T, &e) || open_tokenizer(&o, &c, &tk, &e);
    if (!rc && o.max_len > T)
        rc = cb_fail(&e, CB_EINPUT, "--max-len %d: the model has %d positions; pass at most %d",
                     o.max_len, T, T);
    if (!rc) rc = read_sources(&o, &tk, T, &s, &e) || translate(&o, &c, T, &tk, &s, &e);
    sources_free(&s);
    cb_tokenizer_free(&tk);
    return rc ? cli_fail(&e) : 0;
}
