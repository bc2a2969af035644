# Sourced by tests/test_dp*.sh and the tensor-parallel scripts: the binary,
# the launcher (tests/launcher.sh: the one matching the MPI it links), a
# scratch directory with a text file, and the PASS/FAIL helpers.
. "$(dirname "${BASH_SOURCE[0]}")/launcher.sh"
C="$BUILD/cubist"
HERE="$ROOT/tests"
TMO=${TEST_DP_TIMEOUT:-$(tmo 60)}
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
check() { # name ref.jsonl got.jsonl [ref.st got.st]
    local out
    out=$(/usr/bin/python3 "$HERE/dp_compare.py" "$@" 2>&1)
    echo "$out"
    grep -q '^FAIL\|Traceback' <<<"$out" && failed=$((failed + 1))
    return 0
}
logcheck() { # tests/comm_log_check.py COMMAND NAME ...: the log's communication fields
    local out
    out=$(/usr/bin/python3 "$HERE/comm_log_check.py" "$@" 2>&1)
    echo "$out"
    grep -q '^FAIL\|Traceback' <<<"$out" && failed=$((failed + 1))
    return 0
}
finish() { [ "$failed" = 0 ]; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
# fixed data (TEST_DP_SEED): Adam turns last-bit differences of gradients
# near zero into visible steps, so the margin under 1e-5 depends on the data
/usr/bin/python3 -c "import base64, random; random.seed(${TEST_DP_SEED:-1}); print(base64.encodebytes(bytes(random.getrandbits(8) for _ in range(225000))).decode())" > text.txt
echo "# $C ($flavour), launcher: ${launch[*]}, timeout ${TMO}s"
# kjv_tokens NAME: the KJV demo corpus as byte tokens, train.bin and val.bin
# (the last 2%), or a FAIL line naming the test and exit
kjv_tokens() {
    command -v bible >/dev/null || { echo "FAIL $1: the bible command (bible-kjv, make deps) is missing"; exit 1; }
    bible gen1:1-rev22:21 > kjv.txt
    "$C" prepare --input kjv.txt --output train.bin --val-output val.bin --val-fraction 0.02 >/dev/null ||
        { echo "FAIL $1: prepare"; exit 1; }
}
