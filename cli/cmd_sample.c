/* Generation from a checkpoint: the whole window is recomputed for each new
 * token (no KV cache), which is what the training forward offers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "data/tokenizer.h"
#include "util/rng.h"

/* Draws from probs (V) at a temperature, among the top_k most likely (0: all). */
static int draw(const float *probs, int V, float temp, int top_k, cb_rng *r, float *w) {
    float cut = 0.0f;
    if (top_k > 0 && top_k < V) {
        memcpy(w, probs, sizeof(float) * V);
        for (int i = 0; i < top_k; i++) { /* partial selection of the k-th largest */
            int best = i;
            for (int j = i + 1; j < V; j++)
                if (w[j] > w[best]) best = j;
            float t = w[i];
            w[i] = w[best];
            w[best] = t;
        }
        cut = w[top_k - 1];
    }
    double sum = 0;
    for (int i = 0; i < V; i++) {
        w[i] = probs[i] >= cut && probs[i] > 0 ? powf(probs[i], 1.0f / temp) : 0.0f;
        sum += w[i];
    }
    double u = cb_rng_uniform(r) * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        acc += w[i];
        if (u < acc) return i;
    }
    return V - 1;
}

/* tk NULL: the checkpoint's tokenizer is unknown, so ids are printed. */
static void emit(const cb_tokenizer *tk, int id) {
    uint8_t buf[256];
    if (tk) fwrite(buf, 1, tk->decode(tk, id, buf, sizeof buf), stdout); /* padding ids: nothing */
    else printf("%d ", id);
    fflush(stdout);
}

/* The tokenizer the checkpoint records (`cubist train` writes it from the
 * token file); a file without one (Hugging Face's) by its vocabulary: 256
 * bytes, 50257 (or llm.c's padded 50304) GPT-2. *tk NULL: none applies. */
static int checkpoint_tokenizer(const char *ckpt, int vocab, const char *bpe_dir, cb_tokenizer *tk,
                                cb_err *e) {
    cb_st_file f;
    int rc = cb_st_open(ckpt, &f, e);
    if (rc) return rc;
    const char *name = cb_st_meta(&f, "tokenizer");
    if (!name || !strcmp(name, "unknown"))
        name = vocab == 256 ? "byte" : vocab == 50257 || vocab == 50304 ? "gpt2" : NULL;
    rc = name ? cb_tokenizer_open(name, bpe_dir, tk, e) : CB_OK;
    if (!rc && name && tk->vocab > vocab)
        rc = cb_fail(e, CB_EINPUT, "%s: its vocabulary of %d is smaller than tokenizer %s's %d; the "
                     "metadata is wrong", ckpt, vocab, name, tk->vocab);
    if (!name) tk->vocab = 0;
    cb_st_close(&f);
    return rc;
}

/* The GPT of c as a graph of one sequence of T tokens (cb_model_probs: one
 * process, serial), weights from ckpt. */
static int load_model(const cb_gpt_config *c, const char *ckpt, int T, cb_dist **d, cb_model **m,
                      cb_err *e) {
    char arg0[] = "cubist", *argv0[] = {arg0, NULL}, **argv = argv0;
    int argc = 1;
    cb_adamw_config none = {0};
    int rc = cb_dist_init(&argc, &argv, d, e);
    if (rc) return rc;
    *m = cb_model_new(*d, 1, T);
    if (*m) cb_model_declare_gpt(*m, c);
    rc = cb_model_build(*m, 0, &none, e);
    return rc ? rc : cb_model_load(*m, ckpt, e);
}

/* Each new token from the window of the last tokens (up to the context) at
 * positions 0..: the model takes T tokens, the window is padded after its
 * end, which causal attention never lets the window's positions see. */
static int generate(const cb_gpt_config *c, const char *ckpt, const cb_tokenizer *tk,
                    const char *prompt, int ntok, float temp, int top_k, uint64_t seed, cb_err *e) {
    size_t plen = strlen(prompt), cap = plen + (size_t)ntok + 2;
    int *ids = malloc(sizeof(int) * cap), *win = malloc(sizeof(int) * (c->seq_len + 1));
    uint16_t *enc = malloc(sizeof(uint16_t) * (plen + 1));
    float *w = malloc(sizeof(float) * c->vocab);
    int rc = ids && win && enc && w ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory for sampling");
    /* no tokenizer: the prompt's bytes; an empty prompt starts from a newline
     * (bytes) or <|endoftext|> (GPT-2's document separator) */
    size_t n = rc ? 0 : tk ? tk->encode(tk, (const uint8_t *)prompt, plen, enc) : plen;
    for (size_t i = 0; i < n && n != SIZE_MAX; i++) ids[i] = tk ? enc[i] : (uint8_t)prompt[i] % c->vocab;
    if (n == SIZE_MAX) n = 0;
    if (!rc && n == 0) ids[n++] = tk && tk->vocab > 256 ? tk->vocab - 1 : '\n' % c->vocab;
    size_t longest = n + (ntok > 0 ? ntok - 1 : 0);
    int T = longest < (size_t)c->seq_len ? (int)longest : c->seq_len;
    cb_dist *d = NULL;
    cb_model *m = NULL;
    if (!rc) rc = load_model(c, ckpt, T, &d, &m, e);
    cb_rng r;
    cb_rng_seed(&r, seed);
    if (!rc) fwrite(prompt, 1, plen, stdout);
    for (int s = 0; !rc && s < ntok; s++) {
        int len = n < (size_t)T ? (int)n : T;
        memset(win, 0, sizeof(int) * T);
        memcpy(win, ids + n - len, sizeof(int) * len);
        const float *probs = cb_model_probs(m, win);
        int next = draw(probs + (size_t)(len - 1) * c->vocab, c->vocab, temp, top_k, &r, w);
        ids[n++] = next;
        emit(tk, next);
    }
    if (!rc) printf("\n");
    cb_model_free(m);
    if (d) cb_dist_finalize(d);
    free(ids), free(win), free(enc), free(w);
    return rc;
}

static int check_sample_flags(int ntok, float temp, int top_k, int heads, cb_err *e) {
    if (ntok < 0) return cb_fail(e, CB_EINPUT, "--tokens %d is negative; pass how many tokens to generate", ntok);
    if (!(temp > 0))
        return cb_fail(e, CB_EINPUT, "--temperature %g must be > 0; 1 samples the model as it is, "
                                     "lower is greedier", temp);
    if (top_k < 0)
        return cb_fail(e, CB_EINPUT, "--top-k %d is negative; pass 0 (all tokens) or k >= 1", top_k);
    if (heads < 0)
        return cb_fail(e, CB_EINPUT, "--heads %d is negative; pass the model's head count", heads);
    return CB_OK;
}

/* --heads only fills in what a file without metadata lacks; the file's own
 * n_head wins, so a different --heads is a mistake to report, as in train. */
static int check_heads(const char *ckpt, int heads, int file_heads, cb_err *e) {
    if (heads && heads != file_heads)
        return cb_fail(e, CB_EINPUT, "--heads %d differs from %s, which has %d; drop the flag",
                       heads, ckpt, file_heads);
    return CB_OK;
}

int cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "", *bpe_dir = NULL;
    int ntok = 256, top_k = 0, heads = 0;
    float temp = 1.0f;
    uint64_t seed = 1337;
    const cli_flag flags[] = {
        {"ckpt", ARG_STR, &ckpt, "weights file (safetensors)"},
        {"prompt", ARG_STR, &prompt, "text to continue (default: empty)"},
        {"tokens", ARG_INT, &ntok, "tokens to generate (256)"},
        {"temperature", ARG_FLOAT, &temp, "softmax temperature (1.0)"},
        {"top-k", ARG_INT, &top_k, "sample among the k most likely tokens, 0 = all (0)"},
        {"seed", ARG_U64, &seed, "sampling seed (1337)"},
        {"heads", ARG_INT, &heads, "attention heads, for files without cubist metadata"},
        {"bpe-dir", ARG_STR, &bpe_dir, "GPT-2 tokenizer files (" CB_BPE_DIR ")"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help;
    cb_err e = {0};
    if (cli_parse("sample", argc, argv, flags, n, &help, &e)) return cli_fail(&e);
    if (help) {
        cli_usage(stdout, "sample", "--ckpt FILE [--prompt TEXT] [flags]", flags, n,
                  "Each token is drawn from the model's next-token distribution at the\n"
                  "temperature, among the top-k; the same --seed gives the same text. The whole\n"
                  "window (up to the model's context) is recomputed per token (no KV cache).\n"
                  "Text is decoded (and the prompt encoded) with the tokenizer the checkpoint\n"
                  "records (`cubist prepare --tokenizer` -> token file -> `cubist train --save`);\n"
                  "a file without one: vocabulary 256 bytes, 50257 or 50304 GPT-2's BPE, other\n"
                  "vocabularies print token ids.\n");
        return 0;
    }
    if (!ckpt) cb_fail(&e, CB_EINPUT, "sample needs --ckpt FILE (written by `cubist train --save`)");
    else check_sample_flags(ntok, temp, top_k, heads, &e);
    if (e.code) return cli_fail(&e);
    cb_gpt_config c = {.n_head = heads};
    cb_tokenizer tk = {0};
    int rc = cb_gpt_config_from_file(ckpt, &c, &e) || check_heads(ckpt, heads, c.n_head, &e) ||
             checkpoint_tokenizer(ckpt, c.vocab, bpe_dir, &tk, &e) ||
             generate(&c, ckpt, tk.vocab ? &tk : NULL, prompt, ntok, temp, top_k, seed, &e);
    cb_tokenizer_free(&tk);
    return rc ? cli_fail(&e) : 0;
}
