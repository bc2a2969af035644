/* `cubist train --model bert|roberta`: masked-language-model training of
 * cb_model_declare_bert on a token file (the files GPT reads), by the one
 * training loop (cb_train_run with the BERT task, src/train/task_bert.c):
 * this file parses the flags and prints. docs/bert.md has the recipes. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "data/tokenizer.h"
#include "train/check.h"
#include "train/train.h"

static const char EPILOG[] =
    "BERT (--model bert) and RoBERTa (--model roberta): Hugging Face BertForMaskedLM's\n"
    "network (post-LN, GELU erf, learned positions, token types, MLM head with the\n"
    "decoder tied to the word embeddings plus its own bias), loss = cross-entropy\n"
    "over the masked positions, mean over the step's. Special ids follow the text\n"
    "vocabulary V (--text-vocab, default the token file's: 256 bytes, 50257 gpt2):\n"
    "[PAD] = B, [CLS] = B+1, [SEP] = B+2, [MASK] = B+3 for B = --special-base\n"
    "(default V), vocabulary B+4. Sequence k of the stream (T-3 text tokens for\n"
    "bert, T-2 for roberta, read in order, epochs repeating): bert: [CLS] A [SEP]\n"
    "B [SEP] (types 0, then 1 from B on), 10% of sequences cut to a length drawn\n"
    "in [8, T) and padded; its masks are fixed per sequence by --seed. roberta:\n"
    "[CLS] text [SEP] at full length, type 0, masks drawn afresh each time a\n"
    "sequence is seen (dynamic). Masking: --mask-prob (0.15) of the text\n"
    "positions, of those 80% [MASK], 10% a random text token, 10% kept.\n"
    "Parallel flags: --dp --zero --tp --tp-mode --pp --schedule --micro-batches\n"
    "--virtual-stages --partition --recompute (the MLM head under every layout);\n"
    "--grad-accum M is --micro-batches M. Lines `step N loss L grad_norm G`;\n"
    "--log JSONL; --dump-batches F writes each step's rows (int32: T ids, T\n"
    "types, T targets (-1: not masked), length) for the PyTorch test;\n"
    "--dump-grads F step 1's gradients. --val-data F (one process): at the end and\n"
    "every --eval-every steps, every 7th text token of each sequence of F is\n"
    "masked ([MASK]) and scored: `eval step N val_loss (nats) val_acc val_top5`\n"
    "of the model, `freq_acc freq_top5` of guessing the training text's most\n"
    "frequent tokens, `unigram_acc unigram_loss` of a guess drawn from its token\n"
    "frequencies, `val_masked` the count (also in --log). --fill N after\n"
    "training masks one word in each of N sequences of F and prints its verse,\n"
    "the answer and the model's five best guesses.\n"
    "Checkpoints and stops as for the GPT (the one training loop, src/train/run.c):\n"
    "--save F writes F and F.state (AdamW moments, step); --save DIR/ one pair per\n"
    "save (--save-every, --keep-last); --resume continues bit for bit (rows and\n"
    "masks follow from --seed and the step); SIGTERM, SIGINT or --exit-signal save\n"
    "and exit 75.\n";

int cmd_train_bert(int argc, char **argv) {
    cb_train_opts o;
    cb_train_defaults(&o);
    o.steps = 100, o.seed = 1337;
    o.opt = (cb_adamw_config){.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .eps = 1e-6f, .weight_decay = 0.01f, .clip = 1.0f,
                              .decay_embeddings = 1}; /* all but biases and LayerNorm, as HF's run_mlm */
    cb_bert_task_opts bt = {.layers = 2, .d_model = 128, .heads = 4, .seq_len = 64,
                            .special_base = -1, .mask_prob = 0.15f, .dropout = 0.1f,
                            .attn_dropout = 0.1f,
                            .fill_out = stdout};
    o.family = &cb_train_bert, o.family_opts = &bt;
    const char *model = NULL;
    int batch = 8;
    cli_flag flags[80] = {
        {"model", ARG_STR, &model, "bert or roberta here (gpt: the default trainer)"},
        {"data", ARG_STR, &o.data, "training tokens (a file, glob or comma list, as for gpt)"},
        {"val-data", ARG_STR, &o.val_data, "held-out tokens: masked-token accuracy at the end (one process)"},
        {"eval-every", ARG_INT, &o.eval_every, "also every N steps (needs --val-data)"},
        {"fill", ARG_INT, &bt.fill, "after training, guess a masked word in N held-out sequences (0)"},
        {"bpe-dir", ARG_STR, &bt.bpe_dir, "GPT-2 tokenizer files for --fill (" CB_BPE_DIR ")"},
        {"layers", ARG_INT, &bt.layers, "encoder blocks (2)"},
        {"d-model", ARG_INT, &bt.d_model, "hidden width (128)"},
        {"heads", ARG_INT, &bt.heads, "attention heads (4)"},
        {"seq-len", ARG_INT, &bt.seq_len, "tokens per sequence, specials included (64)"},
        {"text-vocab", ARG_INT, &bt.text_vocab, "the text's vocabulary (default: the file's tokenizer)"},
        {"special-base", ARG_INT, &bt.special_base, "first special id, >= the text vocabulary (default: it)"},
        {"mask-prob", ARG_FLOAT, &bt.mask_prob, "share of text positions masked (0.15)"},
        {"dropout", ARG_FLOAT, &bt.dropout, "hidden dropout, the same mask under every layout (0.1)"},
        {"attn-dropout", ARG_FLOAT, &bt.attn_dropout, "dropout of the attention probabilities, likewise (0.1)"},
        {"batch", ARG_INT, &batch, "sequences per step over every data-parallel rank (8)"},
        {"seed", ARG_U64, &o.seed, "seed of initialisation, lengths and masks (1337)"},
        {"dump-batches", ARG_STR, &bt.dump_batches, "write every step's rows (int32, see below)"},
    };
    int n = 0, help = 0;
    while (flags[n].name) n++;
    n += cli_train_opt_flags(&o, flags + n);
    n += cli_train_run_flags(&o, flags + n);
    cli_grad_accum_alias(argc, argv);
    cb_err e = {0};
    int rc = cli_train_parse(argc, argv, flags, n, "--model bert|roberta --data TOKENS [flags]", EPILOG, &o, &help, &e);
    if (help && !rc) return 0;
    bt.roberta = model && !strcmp(model, "roberta");
    if (!rc && !o.data)
        rc = cb_fail(&e, CB_EINPUT, "--model %s needs --data TOKENS (`cubist prepare`)", model);
    return cli_train_family_run(argc, argv, &o, batch, "tokens_per_s", rc, &e);
}
