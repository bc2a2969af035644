/* Communication accounting across communicators and ranks: tallies by tag,
 * the training log's step fields, the reports; see stats.h. */
#include "comm/stats.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- tallies */

static void stat_add(cb_comm_stat *a, const cb_comm_stat *b) {
    a->bytes_sent += b->bytes_sent;
    a->bytes_recv += b->bytes_recv;
    a->calls += b->calls;
    a->seconds += b->seconds;
}

/* The entry of tag in t, added if new (the last one is "other" when full). */
static cb_comm_stat *tally_slot(cb_comm_tally *t, const char *tag) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->tag[i].tag, tag)) return &t->tag[i];
    if (t->n == CB_COMM_TALLY_MAX) return &t->tag[CB_COMM_TALLY_MAX - 1];
    cb_comm_stat *s = &t->tag[t->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->tag, sizeof s->tag, "%s", t->n == CB_COMM_TALLY_MAX ? "other" : tag);
    return s;
}

void cb_comm_tally_take(cb_comm_tally *t, cb_comm *const *cs, int n) {
    t->n = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < cs[i]->ntags; j++) stat_add(tally_slot(t, cs[i]->tags[j].tag), &cs[i]->tags[j]);
}

void cb_comm_tally_diff(cb_comm_tally *out, const cb_comm_tally *now, const cb_comm_tally *before) {
    out->n = 0;
    for (int i = 0; i < now->n; i++) {
        cb_comm_stat d = now->tag[i];
        for (int j = 0; j < before->n; j++) {
            const cb_comm_stat *b = &before->tag[j];
            if (strcmp(b->tag, d.tag)) continue;
            d.bytes_sent -= b->bytes_sent, d.bytes_recv -= b->bytes_recv;
            d.calls -= b->calls, d.seconds -= b->seconds;
        }
        if (d.calls) out->tag[out->n++] = d;
    }
}

cb_comm_stat cb_comm_tally_total(const cb_comm_tally *t) {
    cb_comm_stat s = {.tag = "total"};
    for (int i = 0; i < t->n; i++) stat_add(&s, &t->tag[i]);
    return s;
}

/* ---------------------------------------------------------------- step log */

int cb_comm_steplog_init(cb_comm_steplog *l, cb_comm *world, cb_comm *const *cs, int n, cb_err *e) {
    memset(l, 0, sizeof *l);
    l->world = world, l->cs = cs, l->n = n;
    if (world->rank == 0 && !(l->ranks = calloc((size_t)world->size, sizeof *l->ranks)))
        return cb_fail(e, CB_ENOMEM, "out of memory for the per-rank communication counters");
    cb_comm_steplog_mark(l);
    return CB_OK;
}

void cb_comm_steplog_free(cb_comm_steplog *l) {
    free(l->ranks);
    memset(l, 0, sizeof *l);
}

void cb_comm_steplog_mark(cb_comm_steplog *l) { cb_comm_tally_take(&l->before, l->cs, l->n); }

/* The 4 figures a rank contributes, as doubles: exact up to 2^53 bytes. */
enum { RF_SENT, RF_RECV, RF_CALLS, RF_SECONDS, RF_N };

/* Every rank's step total to world rank 0's l->ranks (control traffic). */
static void gather_ranks(cb_comm_steplog *l) {
    cb_comm_stat t = cb_comm_tally_total(&l->step);
    double mine[RF_N] = {(double)t.bytes_sent, (double)t.bytes_recv, (double)t.calls, t.seconds};
    int p = l->world->size, root = l->world->rank == 0;
    double *all = root ? malloc(sizeof(double) * RF_N * (size_t)p) : NULL;
    if (root && !all) cb_comm_fatal_code(CB_ENOMEM, "out of memory gathering the step's counters");
    cb_comm_gather_bytes(l->world, CB_COMM_CONTROL, mine, all, sizeof mine, 0);
    for (int r = 0; root && r < p; r++) {
        const double *v = all + RF_N * r;
        l->ranks[r] = (cb_comm_stat){.bytes_sent = (uint64_t)v[RF_SENT], .bytes_recv = (uint64_t)v[RF_RECV],
                                     .calls = (uint64_t)v[RF_CALLS], .seconds = v[RF_SECONDS]};
    }
    free(all);
    l->gathered = root;
}

void cb_comm_steplog_end(cb_comm_steplog *l, int gather) {
    cb_comm_tally now;
    cb_comm_tally_take(&now, l->cs, l->n);
    cb_comm_tally_diff(&l->step, &now, &l->before);
    l->gathered = 0;
    if (gather) gather_ranks(l);
    cb_comm_steplog_mark(l);
}

/* Appends to a snprintf-like buffer; *len counts what was needed. */
__attribute__((format(printf, 4, 5)))
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *len += (size_t)k;
}

/* Tag and communicator names are short identifiers; quotes and backslashes
 * are replaced so the output stays valid JSON whatever a caller passes. */
static void json_name(char *buf, size_t cap, size_t *len, const char *name) {
    put(buf, cap, len, "\"");
    for (const char *p = name; *p; p++)
        put(buf, cap, len, "%c", (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) ? '_' : *p);
    put(buf, cap, len, "\"");
}

/* "key":[v_0,..,v_{p-1}] of one field of every rank */
static void rank_array(char *buf, size_t cap, size_t *len, const cb_comm_steplog *l, const char *key, int field) {
    put(buf, cap, len, "\"%s\":[", key);
    for (int r = 0; r < l->world->size; r++) {
        const cb_comm_stat *s = &l->ranks[r];
        if (field == RF_SECONDS) put(buf, cap, len, "%s%.3f", r ? "," : "", s->seconds * 1e3);
        else put(buf, cap, len, "%s%llu", r ? "," : "",
                 (unsigned long long)(field == RF_SENT ? s->bytes_sent : field == RF_RECV ? s->bytes_recv : s->calls));
    }
    put(buf, cap, len, "]");
}

size_t cb_comm_steplog_json(const cb_comm_steplog *l, char *buf, size_t cap) {
    size_t len = 0;
    if (cap) buf[0] = '\0';
    cb_comm_stat t = cb_comm_tally_total(&l->step);
    put(buf, cap, &len, ",\"comm_bytes\":%llu,\"comm_bytes_recv\":%llu,\"comm_calls\":%llu,\"comm_ms\":%.3f",
        (unsigned long long)t.bytes_sent, (unsigned long long)t.bytes_recv, (unsigned long long)t.calls,
        t.seconds * 1e3);
    if (l->gathered) {
        put(buf, cap, &len, ",\"comm_ranks\":{");
        rank_array(buf, cap, &len, l, "sent", RF_SENT);
        put(buf, cap, &len, ",");
        rank_array(buf, cap, &len, l, "recv", RF_RECV);
        put(buf, cap, &len, ",");
        rank_array(buf, cap, &len, l, "calls", RF_CALLS);
        put(buf, cap, &len, ",");
        rank_array(buf, cap, &len, l, "ms", RF_SECONDS);
        put(buf, cap, &len, "}");
    }
    put(buf, cap, &len, ",\"comm_by_tag\":{");
    for (int i = 0; i < l->step.n; i++) {
        const cb_comm_stat *s = &l->step.tag[i];
        put(buf, cap, &len, "%s", i ? "," : "");
        json_name(buf, cap, &len, s->tag);
        put(buf, cap, &len, ":{\"bytes\":%llu,\"bytes_recv\":%llu,\"calls\":%llu,\"ms\":%.3f}",
            (unsigned long long)s->bytes_sent, (unsigned long long)s->bytes_recv, (unsigned long long)s->calls,
            s->seconds * 1e3);
    }
    put(buf, cap, &len, "}");
    return len;
}

/* ---------------------------------------------------------------- this rank's reports */

static void json_stat(char *buf, size_t cap, size_t *len, const cb_comm_stat *s) {
    put(buf, cap, len, "\"bytes_sent\":%llu,\"bytes_recv\":%llu,\"calls\":%llu,\"seconds\":%.6f",
        (unsigned long long)s->bytes_sent, (unsigned long long)s->bytes_recv,
        (unsigned long long)s->calls, s->seconds);
}

size_t cb_comm_report_json(cb_comm *const *cs, int n, char *buf, size_t cap) {
    size_t len = 0;
    if (cap) buf[0] = '\0';
    put(buf, cap, &len, "{");
    for (int i = 0; i < n; i++) {
        cb_comm_stat t = cb_comm_stats_total(cs[i]);
        json_name(buf, cap, &len, cs[i]->name);
        put(buf, cap, &len, ":{");
        json_stat(buf, cap, &len, &t);
        put(buf, cap, &len, ",\"tags\":{");
        for (int j = 0, first = 1; j < cs[i]->ntags; j++) {
            if (cs[i]->tags[j].calls == 0) continue; /* reset since last use */
            if (!first) put(buf, cap, &len, ",");
            first = 0;
            json_name(buf, cap, &len, cs[i]->tags[j].tag);
            put(buf, cap, &len, ":{");
            json_stat(buf, cap, &len, &cs[i]->tags[j]);
            put(buf, cap, &len, "}");
        }
        put(buf, cap, &len, "}},");
    }
    cb_comm_stat all = cb_comm_stats_sum(cs, n);
    put(buf, cap, &len, "\"total\":{");
    json_stat(buf, cap, &len, &all);
    put(buf, cap, &len, "}}");
    return len;
}

static void table_row(char *buf, size_t cap, size_t *len, const char *comm, const cb_comm_stat *s) {
    put(buf, cap, len, "%-20s %-16s %10llu %14.3f %14.3f %10.4f\n", comm, s->tag,
        (unsigned long long)s->calls, s->bytes_sent / 1e6, s->bytes_recv / 1e6, s->seconds);
}

size_t cb_comm_report_table(cb_comm *const *cs, int n, char *buf, size_t cap) {
    size_t len = 0;
    if (cap) buf[0] = '\0';
    put(buf, cap, &len, "%-20s %-16s %10s %14s %14s %10s\n", "group", "tag", "calls", "sent MB", "recv MB", "seconds");
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < cs[i]->ntags; j++)
            if (cs[i]->tags[j].calls) table_row(buf, cap, &len, cs[i]->name, &cs[i]->tags[j]);
        cb_comm_stat t = cb_comm_stats_total(cs[i]);
        table_row(buf, cap, &len, cs[i]->name, &t);
    }
    cb_comm_stat all = cb_comm_stats_sum(cs, n);
    table_row(buf, cap, &len, "all", &all);
    return len;
}

/* ---------------------------------------------------------------- over ranks */

/* One (group, tag) row of one rank's cumulative counters, flat for MPI. */
typedef struct report_row {
    char group[32], tag[CB_COMM_TAG_LEN];
    double v[RF_N];
} report_row;

static void row_set(report_row *w, const char *group, const cb_comm_stat *s) {
    snprintf(w->group, sizeof w->group, "%s", group);
    snprintf(w->tag, sizeof w->tag, "%s", s->tag);
    w->v[RF_SENT] = (double)s->bytes_sent, w->v[RF_RECV] = (double)s->bytes_recv;
    w->v[RF_CALLS] = (double)s->calls, w->v[RF_SECONDS] = s->seconds;
}

/* This rank's rows: each used tag of each group, the group's total, and
 * "all"; rows[per] with unused rows left empty (group ""). */
static void report_rows(cb_comm *const *cs, int n, report_row *rows) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < cs[i]->ntags; j++)
            if (cs[i]->tags[j].calls) row_set(&rows[k++], cs[i]->name, &cs[i]->tags[j]);
        cb_comm_stat t = cb_comm_stats_total(cs[i]);
        row_set(&rows[k++], cs[i]->name, &t);
    }
    cb_comm_stat all = cb_comm_stats_sum(cs, n);
    row_set(&rows[k], "all", &all);
}

static const report_row *find_row(const report_row *rows, int per, const report_row *key) {
    for (int i = 0; i < per && rows[i].group[0]; i++)
        if (!strcmp(rows[i].group, key->group) && !strcmp(rows[i].tag, key->tag)) return &rows[i];
    return NULL;
}

/* min and max over the p ranks' blocks of one key (absent: zeros), and the
 * rank with the most seconds */
static void row_spread(const report_row *all, int per, int p, const report_row *key, double *mn, double *mx, int *slowest) {
    for (int r = 0; r < p; r++) {
        const report_row *w = find_row(all + (size_t)r * per, per, key);
        for (int f = 0; f < RF_N; f++) {
            double x = w ? w->v[f] : 0;
            if (r == 0 || x < mn[f]) mn[f] = x;
            if (r == 0 || x > mx[f]) mx[f] = x;
            if (f == RF_SECONDS && (r == 0 || x >= mx[f])) *slowest = r;
        }
    }
}

/* Was key already printed: a row of an earlier rank, or earlier in its own? */
static int seen_before(const report_row *all, int per, int r, int i) {
    const report_row *key = &all[(size_t)r * per + i];
    for (int q = 0; q < r; q++)
        if (find_row(all + (size_t)q * per, per, key)) return 1;
    return find_row(all + (size_t)r * per, i, key) != NULL;
}

static void print_row(const report_row *all, int per, int p, const report_row *key, FILE *f, double *secs) {
    double mn[RF_N] = {0}, mx[RF_N] = {0};
    int slow = 0;
    row_spread(all, per, p, key, mn, mx, &slow);
    fprintf(f, "%-20s %-16s %9.0f / %-7.0f %10.3f / %-10.3f %10.3f / %-10.3f %8.4f / %-7.4f (%d)\n", key->group,
            key->tag, mn[RF_CALLS], mx[RF_CALLS], mn[RF_SENT] / 1e6, mx[RF_SENT] / 1e6, mn[RF_RECV] / 1e6,
            mx[RF_RECV] / 1e6, mn[RF_SECONDS], mx[RF_SECONDS], slow);
    secs[0] = mn[RF_SECONDS], secs[1] = mx[RF_SECONDS];
}

/* Groups in rank 0's order (every rank has the same groups); in each, the
 * tags any rank used, then the group's total; "all" last. */
static void print_spread(const report_row *all, int per, int p, FILE *f) {
    fprintf(f, "communication per group and tag over the %d world ranks: min / max over ranks "
               "(MB as ring volume per rank)\n%-20s %-16s %-19s %-23s %-23s %s\n", p, "group", "tag",
            "  calls min / max", "  sent MB min / max", "  recv MB min / max", "seconds min / max (slowest rank)");
    double secs[2] = {0, 0};
    for (int g = 0; g < per && all[g].group[0]; g++) {
        if (strcmp(all[g].tag, "total")) continue; /* one group per total row of rank 0 */
        for (int r = 0; r < p; r++)
            for (int i = 0; i < per && all[(size_t)r * per + i].group[0]; i++) {
                const report_row *key = &all[(size_t)r * per + i];
                if (strcmp(key->group, all[g].group) || !strcmp(key->tag, "total") || seen_before(all, per, r, i))
                    continue;
                print_row(all, per, p, key, f, secs);
            }
        print_row(all, per, p, &all[g], f, secs); /* the total; "all" comes last */
    }
    fprintf(f, "communication seconds over the %d ranks: min %.4f max %.4f\n", p, secs[0], secs[1]);
}

struct cb_comm_spread {
    int per, p;       /* rows per rank, ranks */
    report_row *rows; /* p x per */
};

cb_comm_spread *cb_comm_spread_gather(cb_comm *world, cb_comm *const *cs, int n) {
    int per = n * (CB_COMM_MAX_TAGS + 1) + 1, p = world->size;
    report_row *mine = calloc((size_t)per, sizeof *mine), *all = NULL;
    cb_comm_spread *s = NULL;
    if (world->rank == 0) all = calloc((size_t)per * p, sizeof *all), s = malloc(sizeof *s);
    if (!mine || (world->rank == 0 && (!all || !s)))
        cb_comm_fatal_code(CB_ENOMEM, "out of memory for --comm-report");
    report_rows(cs, n, mine);
    cb_comm_gather_bytes(world, CB_COMM_CONTROL, mine, all, sizeof *mine * per, 0);
    free(mine);
    if (s) *s = (cb_comm_spread){per, p, all};
    return s;
}

void cb_comm_spread_print(const cb_comm_spread *s, FILE *f) { print_spread(s->rows, s->per, s->p, f); }

void cb_comm_spread_free(cb_comm_spread *s) {
    if (s) free(s->rows);
    free(s);
}
