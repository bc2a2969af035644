#!/usr/bin/env bash
# A disk that fills up (a small tmpfs mounted here when running as root, else
# tests/fs_shim.c failing writes with ENOSPC past a byte budget) during the
# weights, during the optimizer state, and during the log: the run reports
# the failure in one line with a non-zero status that is not 2 (a resource,
# not bad input), leaves no temporary or pending file, and the previous
# checkpoint stays resumable, unchanged. A --dump-grads that cannot be
# written is one warning line and the run goes on. OPS_FORCE_SHIM=1 tries the shim as root.
set -u
. "$(dirname "$0")/ops_common.sh"
mkdir mnt
if [ -z "${OPS_FORCE_SHIM:-}" ] && mount -t tmpfs -o size=64k tmpfs mnt 2>/dev/null; then
    umount mnt; how=tmpfs
else
    how="write-failure shim"
fi
# full FREE_KB CMD...: CMD with mnt/ holding its present files and FREE_KB more
full() {
    local free=$1; shift
    if [ "$how" = tmpfs ]; then
        local used; used=$(du -sk mnt | cut -f1)
        mkdir -p keep && cp -a mnt/. keep/ && rm -rf mnt/*
        mount -t tmpfs -o size=$((used + free))k tmpfs mnt && mounts=("$d/mnt")
        cp -a keep/. mnt/ && rm -rf keep
        "$@"; local rc=$?
        cp -a mnt/. keep/ 2>/dev/null; umount mnt; mounts=(); mkdir -p keep; cp -a keep/. mnt/; rm -rf keep
        return $rc
    fi
    LD_PRELOAD=$PRELOAD CUBIST_SHIM_PATH=mnt/ CUBIST_SHIM_LIMIT=$((free * 1024)) "$@"
}
"$C" train "${TINY[@]}" --steps 2 --save base.st || fail "base run"
W=$(stat -c %s base.st); S=$(stat -c %s base.st.state)

# FREE_KB: the old pair stays, the new weights (W) or state (S) do not fit
for what in weights state; do
    rm -rf mnt/*; cp base.st base.st.state mnt/
    [ "$what" = weights ] && free=$((W / 2048)) || free=$(((W + S / 2) / 1024))
    full $free "$C" train "${TINY[@]}" --steps 4 --resume mnt/base.st --save mnt/base.st 2>err.txt
    rc=$?
    left=$(ls mnt | grep -v '^base\.st\(\.state\)\?$' | tr '\n' ' ')
    if [ $rc -ne 0 ] && [ $rc -ne 2 ] && [ "$(wc -l <err.txt)" = 1 ] && grep -qi "no space left" err.txt \
            && cmp -s base.st mnt/base.st && cmp -s base.st.state mnt/base.st.state && [ -z "$left" ]; then
        pass "disk full ($how) during the $what: exit $rc, previous checkpoint unchanged, nothing left over: $(cat err.txt)"
    else
        fail "disk full during the $what: exit $rc, left over '$left', $(wc -l <err.txt) lines: $(head -c 300 err.txt)"
    fi
    "$C" train "${TINY[@]}" --steps 4 --resume mnt/base.st --log r.jsonl 2>/dev/null && [ "$(head -c 10 r.jsonl)" = '{"step":3,' ] \
        && pass "disk full during the $what: the previous checkpoint resumes at step 3" \
        || fail "disk full during the $what: the previous checkpoint does not resume"
done

# the log: 8 KB hold a dozen lines; checkpoints every 2 steps elsewhere
rm -rf mnt/* ck
full 8 "$C" train "${TINY[@]}" --steps 200 --save ck/ --save-every 2 --log mnt/l.jsonl 2>err.txt
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 2 ] && [ "$(wc -l <err.txt)" = 1 ] && grep -q -- "--log mnt/l.jsonl: writing step [0-9]* failed" err.txt; then
    pass "disk full ($how) during the log: exit $rc: $(cat err.txt)"
else
    fail "disk full during the log: exit $rc: $(head -c 300 err.txt)"
fi
"$C" train "${TINY[@]}" --steps 200 --resume ck --exit-after 1 2>/dev/null \
    && pass "disk full during the log: the newest checkpoint resumes" || fail "disk full during the log: no resume"

# --dump-grads that cannot be written (1 KB free) is a warning, printed by
# the command line from step 1's record: the run goes on, the log is whole
rm -rf mnt/*
full 1 "$C" train "${TINY[@]}" --steps 3 --dump-grads mnt/g.st --log l.jsonl 2>err.txt
rc=$?
if [ $rc = 0 ] && [ "$(wc -l <err.txt)" = 1 ] && grep -q "^cubist: warning: .*mnt/g.st" err.txt \
        && [ "$(wc -l <l.jsonl)" = 3 ] && [ ! -e mnt/g.st ]; then
    pass "disk full ($how) during --dump-grads: exit 0, one warning line, 3 logged steps: $(cat err.txt)"
else
    fail "disk full during --dump-grads: exit $rc, $(wc -l <err.txt) lines: $(head -c 300 err.txt)"
fi
finish
