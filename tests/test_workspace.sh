#!/usr/bin/env bash
# Workspace planned at build (docs/engine.md, "Layout operators, kernels
# and memory"):
# 1. examples/tiny_gpt under 1-D 2, 2-D 4, 3-D 8 (kept gathered inputs),
#    3-D 8 re-gathering (--tp3d-save shard is not a user flag: the default
#    keeps), pp 2 x 3-D 8 with 2 micro-batches in flight and pp 2 x 2-D 4
#    with block recompute: every run trains, no step grows the layout's
#    workspace and every 3-D forward finds its kept-input entry (the engine
#    says "internal: ... plan missed a use" otherwise).
# 2. --max-memory: a limit below the model's planned bytes ends the job at
#    build with status 4 (out of memory, not 2) and one line naming the
#    bytes needed (workspace included) and the limit, under one process and
#    under 1-D 2 and 3-D 8; a limit above them trains with the same losses
#    as no limit, bit for bit.
# 3. A forced allocation failure at build (tests/fail_alloc.c preloaded:
#    every allocation of 300000 bytes or more fails, which MPI's start
#    survives and the model's plan does not) ends with one line naming the
#    bytes, status 4, under one process and under 1-D 2. (3-D 8's buffers
#    are smaller than MPI's own at start: not testable this way.)
set -u
. "$(dirname "$0")/launcher.sh"
EX="$BUILD/examples/tiny_gpt"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
/usr/bin/python3 "$ROOT/tests/gen_text.py" 60000 > text.txt
"$BUILD/cubist" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL workspace: prepare"; exit 1; }

planned() { # label np flags...
    local label=$1 np=$2; shift 2
    if timeout "$(tmo 240)" "${launch[@]}" -np "$np" "$EX" --data train.bin --steps 3 "$@" >"$label.log" 2>&1 &&
       ! grep -q "workspace plan missed" "$label.log"; then
        echo "PASS workspace planned, $label: trains, nothing allocated during a step"
    else echo "FAIL workspace planned, $label: exit or growth: $(tail -c 300 "$label.log")"; fi
}
planned tp1d2 2 --tp 2 --tp-mode 1d
planned tp2d4 4 --tp 4 --tp-mode 2d
planned tp3d8 8 --tp 8 --tp-mode 3d
planned pp2_tp3d8_m2 16 --pp 2 --tp 8 --tp-mode 3d --micro-batches 2
planned pp2_tp2d4_block 8 --pp 2 --tp 4 --tp-mode 2d --micro-batches 4 --recompute block

oom() { # label np flags...
    local label=$1 np=$2; shift 2
    timeout "$(tmo 120)" "${launch[@]}" -np "$np" "$EX" --data train.bin --steps 2 "$@" >out.txt 2>&1
    local rc=$? n
    n=$(wc -l <out.txt)
    if [ "$rc" = 4 ] && [ "$n" -eq 1 ] &&
       grep -q "needs [0-9]* bytes on world rank [0-9]* (.*workspace [0-9]*), over --max-memory 65536;" out.txt; then
        echo "PASS over --max-memory, $label: exit 4, $(cat out.txt)"
    else echo "FAIL over --max-memory, $label: exit $rc, $n lines: $(head -c 300 out.txt)"; fi
}
oom "one process" 1 --max-memory 64K
oom "1-D 2" 2 --tp 2 --tp-mode 1d --max-memory 64K
oom "3-D 8" 8 --tp 8 --tp-mode 3d --max-memory 64K

if timeout "$(tmo 120)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 5 --tp 2 --tp-mode 1d >a.log 2>&1 &&
   timeout "$(tmo 120)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 5 --tp 2 --tp-mode 1d \
        --max-memory 1G >b.log 2>&1; then
    /usr/bin/python3 "$ROOT/tests/compare.py" logs b.log a.log --tol 0 \
        --label "tiny_gpt 1-D 2 under --max-memory 1G: the same losses"
else echo "FAIL tiny_gpt under --max-memory 1G: $(tail -c 300 a.log b.log)"; fi

if cc -shared -fPIC -O2 -o fail_alloc.so "$ROOT/tests/fail_alloc.c" -ldl 2>cc.txt; then
    if [ "$flavour" = mpich ]; then
        pre=(-genv LD_PRELOAD "$PWD/fail_alloc.so" -genv CB_FAIL_ALLOC_MIN 300000)
    else pre=(-x LD_PRELOAD="$PWD/fail_alloc.so" -x CB_FAIL_ALLOC_MIN=300000); fi
    forced() { # label np flags...
        local label=$1 np=$2; shift 2
        timeout "$(tmo 120)" "${launch[@]}" "${pre[@]}" -np "$np" "$EX" --data train.bin --steps 2 "$@" >out.txt 2>&1
        local rc=$? n
        n=$(wc -l <out.txt)
        if [ "$rc" = 4 ] && [ "$n" -eq 1 ] && grep -q "^cubist: out of memory for .*: [0-9]* bytes" out.txt; then
            echo "PASS forced allocation failure at build, $label: exit 4, $(cat out.txt)"
        else echo "FAIL forced allocation failure at build, $label: exit $rc, $n lines: $(head -c 300 out.txt)"; fi
    }
    # Under `make asan` (ASAN_OPTIONS set) ASan's runtime owns malloc and
    # refuses a library preloaded before it; told not to check that order,
    # the wrapper's dlsym recursion crashes (both tried 2026-11-27), and
    # ASan's own max_allocation_size_mb counts whole megabytes, above this
    # model's buffers. So the check runs in `make test`, not under ASan,
    # and says so (neither a pass nor a failure).
    if [ -n "${ASAN_OPTIONS:-}" ]; then
        echo "NOTE forced allocation failure at build: not run under ASan (a preloaded malloc cannot come before ASan's runtime); make test runs it"
    else
        forced "one process" 1
        forced "1-D 2" 2 --tp 2 --tp-mode 1d
    fi
else echo "FAIL building tests/fail_alloc.c: $(head -c 300 cc.txt)"; fi
