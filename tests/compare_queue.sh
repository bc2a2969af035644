# Sourced by the scripts that compare many runs with tests/compare.py: each
# comparison is queued (cmp_q, compare.py's arguments) and cmp_flush runs
# the queue in one Python process after the runs, so a script pays one
# numpy start (about 0.2 s of CPU) instead of one per comparison, where its
# tiny runs take 0.1 to 1 s each. The files compared must outlive the
# queue: each queued comparison names its own. Needs $d, the script's
# scratch directory, and $ROOT (tests/launcher.sh).
cmp_q() { local IFS=$'\t'; echo "$*" >> "$d/cmp.queue"; }
# cmp_flush: compare.py's lines; FAIL lines count in $failed, and a crash or a
# non-zero exit without a FAIL line is a FAIL
cmp_flush() {
    [ -s "$d/cmp.queue" ] || return 0
    local out rc
    out=$(/usr/bin/python3 "$ROOT/tests/compare.py" batch "$d/cmp.queue" 2>&1)
    rc=$?
    rm -f "$d/cmp.queue"
    grep '^PASS\|^FAIL' <<<"$out"
    failed=$((${failed:-0} + $(grep -c '^FAIL' <<<"$out")))
    if [ $rc != 0 ] && ! grep -q '^FAIL' <<<"$out"; then
        echo "FAIL compare.py batch: exit $rc: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
        failed=$((failed + 1))
    fi
    return 0
}
