#!/usr/bin/python3
"""Checks the communication fields of `cubist train --log` (src/comm/stats.h).

    comm_log_check.py fields NAME LOG NP [--symmetric]
        every step has comm_bytes, comm_bytes_recv, comm_calls, comm_ms,
        comm_ranks with NP entries per array, comm_by_tag and opt_state_bytes;
        rank 0's entry of comm_ranks equals the totals, and the totals equal
        the sums over comm_by_tag; --symmetric: every rank received what it
        sent, in total and per tag (all-reduce, reduce-scatter, all-gather)
    comm_log_check.py same-calls NAME LOG_A LOG_B
        comm_calls, and the calls of every tag, equal step by step
        (gradient accumulation reduces once per step, not per micro-batch)
    comm_log_check.py opt NAME LOG_DENSE LOG_ZERO P
        opt_state_bytes under ZeRO-1 is rank 0's shard of the dense figure:
        8 * floor(n / P) for n = dense / 8 parameters
    comm_log_check.py tags NAME LOG PREFIX=BYTES:CALLS ...
        per step, the tags starting with PREFIX sum to BYTES sent (and
        received) in CALLS calls

Prints one PASS or FAIL line."""
import json
import sys


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def report(name, errs, ok_detail):
    if errs:
        print("FAIL %s: %d problems, first: %s" % (name, len(errs), errs[0]))
    else:
        print("PASS %s: %s" % (name, ok_detail))


def fields(name, path, np_, symmetric):
    errs, rs = [], rows(path)
    keys = ("comm_bytes", "comm_bytes_recv", "comm_calls", "comm_ms", "comm_ranks", "comm_by_tag",
            "opt_state_bytes")
    for r in rs:
        s = r["step"]
        missing = [k for k in keys if k not in r]
        if missing:
            errs.append("step %d lacks %s" % (s, missing))
            continue
        cr, tags = r["comm_ranks"], r["comm_by_tag"]
        for k in ("sent", "recv", "calls", "ms"):
            if len(cr.get(k, [])) != np_:
                errs.append("step %d: comm_ranks.%s has %d entries, want %d" % (s, k, len(cr.get(k, [])), np_))
        if errs:
            continue
        mine = (cr["sent"][0], cr["recv"][0], cr["calls"][0])
        if mine != (r["comm_bytes"], r["comm_bytes_recv"], r["comm_calls"]):
            errs.append("step %d: comm_ranks rank 0 %s != totals %s" % (
                s, mine, (r["comm_bytes"], r["comm_bytes_recv"], r["comm_calls"])))
        if abs(cr["ms"][0] - r["comm_ms"]) > 2e-3:
            errs.append("step %d: comm_ranks.ms[0] %g != comm_ms %g" % (s, cr["ms"][0], r["comm_ms"]))
        sums = tuple(sum(t[k] for t in tags.values()) for k in ("bytes", "bytes_recv", "calls"))
        if sums != (r["comm_bytes"], r["comm_bytes_recv"], r["comm_calls"]):
            errs.append("step %d: comm_by_tag sums %s != totals %s" % (
                s, sums, (r["comm_bytes"], r["comm_bytes_recv"], r["comm_calls"])))
        if symmetric:
            if cr["sent"] != cr["recv"]:
                errs.append("step %d: per-rank sent %s != recv %s" % (s, cr["sent"], cr["recv"]))
            errs += ["step %d tag %s: sent %d != recv %d" % (s, k, t["bytes"], t["bytes_recv"])
                     for k, t in tags.items() if t["bytes"] != t["bytes_recv"]]
    if not rs:
        errs.append("empty log")
    report(name, errs, "%d steps, %d ranks each, rank 0 = totals = sum over %d tags%s" % (
        len(rs), np_, len(rs[0]["comm_by_tag"]) if rs else 0, ", recv = sent" if symmetric else ""))


def calls(r):
    return r["comm_calls"], {k: t["calls"] for k, t in r["comm_by_tag"].items()}


def same_calls(name, a, b):
    ra, rb = rows(a), rows(b)
    errs = ["step %d: %s vs %s" % (x["step"], calls(x), calls(y)) for x, y in zip(ra, rb) if calls(x) != calls(y)]
    if len(ra) != len(rb) or not ra:
        errs.append("%d steps vs %d" % (len(ra), len(rb)))
    g = ra[-1]["comm_by_tag"].get("grad", {}).get("calls", 0) if ra else 0
    report(name, errs, "%d steps, %d calls per step (grad: %d buckets)" % (len(ra), ra[-1]["comm_calls"] if ra else 0, g))


def opt(name, dense, zero, p):
    d, z = rows(dense)[0]["opt_state_bytes"], rows(zero)[0]["opt_state_bytes"]
    n = d // 8
    want = 8 * (n // p)
    errs = [] if d == 8 * n and z == want else ["dense %d (n=%d), zero %d, want %d" % (d, n, z, want)]
    report(name, errs, "dense %d bytes (m and v of %d parameters), ZeRO-1 rank 0 %d = 8 * floor(n/%d) (%.4f of dense)" % (
        d, n, z, p, z / d))


def tags(name, path, specs):
    errs, rs = [], rows(path)
    for spec in specs:
        prefix, want = spec.split("=")
        wb, wc = (int(x) for x in want.split(":"))
        for r in rs:
            sel = [t for k, t in r["comm_by_tag"].items() if k.startswith(prefix)]
            got = (sum(t["bytes"] for t in sel), sum(t["bytes_recv"] for t in sel), sum(t["calls"] for t in sel))
            if got != (wb, wb, wc):
                errs.append("step %d %s*: sent/recv/calls %s, want %s" % (r["step"], prefix, got, (wb, wb, wc)))
    if not rs:
        errs.append("empty log")
    report(name, errs, "%d steps: %s" % (len(rs), ", ".join(specs)))


def main(argv):
    cmd, name = argv[1], argv[2]
    if cmd == "fields":
        fields(name, argv[3], int(argv[4]), "--symmetric" in argv)
    elif cmd == "same-calls":
        same_calls(name, argv[3], argv[4])
    elif cmd == "opt":
        opt(name, argv[3], argv[4], int(argv[5]))
    elif cmd == "tags":
        tags(name, argv[3], argv[4:])
    else:
        print("FAIL comm_log_check: unknown command %s" % cmd)


if __name__ == "__main__":
    main(sys.argv)
