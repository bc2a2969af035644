/* `cubist bleu`: corpus BLEU-4 of a hypothesis file against a reference
 * file, one sentence a line (src/eval/bleu.h). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "eval/bleu.h"
#include "formats/fileio.h"

/* The next line of [*s, end): its start and length; *s moves past it. */
static const char *next_line(const char **s, const char *end, size_t *len) {
    const char *l = *s, *nl = memchr(l, '\n', (size_t)(end - l));
    *len = nl ? (size_t)(nl - l) : (size_t)(end - l);
    *s = nl ? nl + 1 : end;
    return l;
}

static size_t count_lines(const char *s, size_t n) {
    size_t c = 0;
    for (const char *end = s + n; s < end; c++) next_line(&s, end, &(size_t){0});
    return c;
}

static int score_maps(const char *hp, const char *h, size_t hn, const char *rp, const char *r, size_t rn,
                      cb_bleu *b, cb_err *e) {
    size_t nh = count_lines(h, hn), nr = count_lines(r, rn);
    if (nh != nr)
        return cb_fail(e, CB_EINPUT, "%s has %zu lines but %s has %zu; give one hypothesis for each "
                       "reference, in order", hp, nh, rp, nr);
    for (const char *he = h + hn, *re = r + rn; h < he;) {
        size_t hl, rl;
        const char *hs = next_line(&h, he, &hl), *rs = next_line(&r, re, &rl);
        if (cb_bleu_add(b, hs, hl, rs, rl)) return cb_fail(e, CB_ENOMEM, "out of memory scoring %s", hp);
    }
    return CB_OK;
}

int cli_bleu_files(const char *hyp, const char *ref, cb_bleu *b, cb_err *e) {
    void *h = NULL, *r = NULL;
    size_t hn = 0, rn = 0;
    int rc = fio_map(hyp, "check the hypothesis file's path", &h, &hn, e);
    if (!rc) rc = fio_map(ref, "check the reference file's path", &r, &rn, e);
    if (!rc && rn == 0) rc = cb_fail(e, CB_EINPUT, "%s: file is empty; give one reference a line", ref);
    if (!rc) rc = score_maps(hyp, h ? h : "", hn, ref, r, rn, b, e);
    fio_unmap(h, hn);
    fio_unmap(r, rn);
    return rc;
}

int cmd_bleu(int argc, char **argv) {
    const char *hyp = NULL, *ref = NULL;
    const cli_flag flags[] = {
        {"hyp", ARG_STR, &hyp, "hypotheses (system output), one sentence a line"},
        {"ref", ARG_STR, &ref, "references, one a line, in the same order"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help;
    cb_err e = {0};
    if (cli_parse("bleu", argc, argv, flags, n, &help, &e)) return cli_fail(&e);
    if (help) {
        cli_usage(stdout, "bleu", "--hyp OUT.txt --ref REF.txt", flags, n,
                  "Corpus BLEU-4 as NLTK's corpus_bleu with its defaults (docs/nmt.md): clipped\n"
                  "n-gram counts summed over the corpus, weights 1/4, no smoothing, brevity penalty.\n"
                  "Tokens are runs of non-space bytes with each punctuation mark its own token.\n"
                  "Prints one JSON line: bleu, p (the four precisions), bp, hyp_len, ref_len.\n");
        return 0;
    }
    if (!hyp || !ref) return cb_fail(&e, CB_EINPUT, "bleu needs --hyp FILE and --ref FILE"), cli_fail(&e);
    cb_bleu b = {0};
    if (cli_bleu_files(hyp, ref, &b, &e)) return cli_fail(&e);
    double p[CB_BLEU_N], bp, s = cb_bleu_score(&b, p, &bp);
    printf("{\"bleu\": %.17g, \"p\": [%.17g, %.17g, %.17g, %.17g], \"bp\": %.17g, \"hyp_len\": %zu, "
           "\"ref_len\": %zu}\n", s, p[0], p[1], p[2], p[3], bp, b.hyp_len, b.ref_len);
    return 0;
}
