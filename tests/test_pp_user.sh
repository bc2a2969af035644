#!/usr/bin/env bash
# A user's own model (examples/mlp_lm, a declared graph) given the
# pipeline flags: every schedule and recompute runs (test_example.sh checks
# the numbers); what cannot apply is refused with one line, exit 2 on every
# rank: --virtual-stages without --schedule interleaved, interleaved or
# --partition at --pp 1, --recompute-layers / --recompute-method without
# --recompute block, unknown values. --no-profile (the partition comes
# from FLOP counts) is accepted under --pp and changes nothing: the same
# 10-step losses as without it. --max-memory: a model over the limit ends
# every rank with status 4 (out of memory, not bad input) and one line
# naming the bytes and the limit, before anything is allocated; under it,
# the run is the same; `cubist train --max-memory` likewise. One parser's
# rules (src/api/dist.c, api/flags.h): the user's program and `cubist
# train` refuse the same bad layout, pipeline, recompute, ZeRO and memory
# flags with the same line, read by one reader (the syntax too: --flag=value,
# a switch's 0/1, the last of a repeated flag, a missing value).
set -u
. "$(dirname "$0")/launcher.sh"
root=$ROOT
EX="$BUILD/examples/mlp_lm"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
/usr/bin/python3 "$root/tests/gen_text.py" 60000 > text.txt
"$BUILD/cubist" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL pp user: prepare"; exit 1; }
refuse() { # label pattern flags...
    local label=$1 pat=$2; shift 2
    timeout "$(tmo 60)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 2 "$@" >out.txt 2>&1
    local rc=$? n
    n=$(wc -l <out.txt)
    if [ "$rc" = 2 ] && [ "$n" -eq 1 ] && grep -q -- "$pat" out.txt; then
        echo "PASS user model refuses $label: exit 2, $(cat out.txt)"
    else echo "FAIL user model refuses $label: exit $rc, $n lines: $(head -c 300 out.txt)"; fi
}
refuse "--virtual-stages 2 with 1f1b" "needs --schedule interleaved" --pp 2 --virtual-stages 2
refuse "--schedule interleaved at --pp 1" "needs --pp > 1" --schedule interleaved
refuse "--partition at --pp 1" "needs --pp > 1" --partition 0,3,13
refuse "--recompute-layers 1 without block" "needs --recompute block" --pp 2 --recompute-layers 1
refuse "--recompute-method uniform with selective" "needs --recompute block" --pp 2 --recompute selective --recompute-method uniform
refuse "--recompute-method zigzag" "use block or uniform" --pp 2 --recompute block --recompute-method zigzag
refuse "--max-memory 12Q" "takes a size in bytes" --max-memory 12Q
refuse "--recompute everything" "use none, block or selective" --pp 2 --recompute everything
refuse "--schedule zigzag" "zigzag" --pp 2 --schedule zigzag
if timeout "$(tmo 120)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 10 --pp 2 >a.log 2>&1 &&
   timeout "$(tmo 120)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 10 --pp 2 \
        --no-profile --recompute none >b.log 2>&1; then
    /usr/bin/python3 "$root/tests/compare.py" logs b.log a.log --tol 0 \
        --label "user model --no-profile --recompute none accepted, same losses"
else echo "FAIL user model accepts --no-profile: $(tail -c 300 a.log b.log)"; fi

# --max-memory: over the limit, status 4 on every rank and one line
oom() { # label np pattern flags...
    local label=$1 np=$2 pat=$3; shift 3
    timeout "$(tmo 60)" "${launch[@]}" -np "$np" "$EX" --data train.bin --steps 2 "$@" >out.txt 2>&1
    local rc=$? n
    n=$(wc -l <out.txt)
    if [ "$rc" = 4 ] && [ "$n" -eq 1 ] && grep -q -- "$pat" out.txt; then
        echo "PASS user model over --max-memory, $label: exit 4, $(cat out.txt)"
    else echo "FAIL user model over --max-memory, $label: exit $rc, $n lines: $(head -c 300 out.txt)"; fi
}
oom "one process" 1 "over --max-memory 262144; spread it" --max-memory 256K
oom "only pipeline rank 1 over it" 2 "needs [0-9]* bytes on world rank 1 " --pp 2 --partition 0,3,13 --max-memory 800K
oom "pp 2 x dp 2" 4 "needs [0-9]* bytes on world rank [0-9]* (parameters and gradients" --pp 2 --dp 2 --max-memory 100K
if timeout "$(tmo 120)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 10 --pp 2 --max-memory 2G >c.log 2>&1; then
    /usr/bin/python3 "$root/tests/compare.py" logs c.log a.log --tol 0 \
        --label "user model under --max-memory 2G: the same losses"
else echo "FAIL user model under --max-memory 2G: $(tail -c 300 c.log)"; fi

"$BUILD/cubist" train --data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --vocab 257 \
    --steps 2 --quiet --max-memory 64K >out.txt 2>&1
rc=$? n=$(wc -l <out.txt)
if [ "$rc" = 4 ] && [ "$n" -eq 1 ] && grep -q "needs [0-9]* bytes on world rank 0 (.*), over --max-memory 65536; spread it" out.txt; then
    echo "PASS cubist train over --max-memory: exit 4, $(cat out.txt)"
else echo "FAIL cubist train over --max-memory: exit $rc, $n lines: $(head -c 300 out.txt)"; fi
timeout "$(tmo 120)" "${launch[@]}" -np 2 "$BUILD/cubist" train --data train.bin --layers 2 --d-model 32 \
    --heads 4 --seq-len 16 --vocab 257 --steps 2 --quiet --pp 2 --max-memory 64K >out.txt 2>&1
rc=$? n=$(wc -l <out.txt)
if [ "$rc" = 4 ] && [ "$n" -eq 1 ] && grep -q "over --max-memory 65536" out.txt; then
    echo "PASS cubist train --pp 2 over --max-memory: exit 4 on every rank, one line"
else echo "FAIL cubist train --pp 2 over --max-memory: exit $rc, $n lines: $(head -c 300 out.txt)"; fi

# the same bad flags, the same line from both programs (their prefixes aside)
same() { # flags...
    "$EX" --data train.bin --steps 2 "$@" >u.txt 2>&1
    local ru=$?
    "$BUILD/cubist" train --data train.bin --steps 2 --quiet "$@" >t.txt 2>&1
    local rt=$?
    local mu mt
    mu=$(sed 's/^cubist: \(error: \)\{0,1\}//' u.txt) mt=$(sed 's/^cubist: \(error: \)\{0,1\}//' t.txt)
    if [ "$ru" = 2 ] && [ "$rt" = 2 ] && [ "$mu" = "$mt" ] && [ "$(wc -l <u.txt)" -eq 1 ]; then
        echo "PASS one parser: $* refused alike: $mu"
    else echo "FAIL one parser: $*: user exit $ru '$(head -c 200 u.txt)', train exit $rt '$(head -c 200 t.txt)'"; fi
}
same --schedule gpipe
same --partition equal
same --no-profile
same --virtual-stages 0
same --micro-batches 0
same --pp 2 --virtual-stages 2
same --pp 2 --partition-memory-weight 2
same --recompute all
same --recompute block --recompute-method zigzag
same --recompute-layers 2
same --recompute selective --recompute-method uniform
same --recompute block --recompute-layers -1
same --zero 2
same --dp -1
same --tp-mode 4d
same --embed-grad bogus
same --precision fp8
same --comm-dtype fp16
same --max-memory 12Q
# one reader (cb_dist_take): the same syntax in both programs
same --pp=x
same --tp 2.5
same --no-profile 3
same --pp 2 --pp 1 --schedule gpipe
same --zero=1 --dp=1 --max-memory=0
same --recompute
