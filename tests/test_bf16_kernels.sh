#!/usr/bin/env bash
# tests/test_bf16.c (the bf16 kernels against fp32 and a reference path,
# bounds in the file) on this CPU's bf16 path, then again with
# CB_BF16_EMULATE=1, the path of a CPU without bf16 instructions: the same
# bounds hold there, and the program's first line says it emulates; and
# once more with CB_BF16_PACK=1, so that the kept-weight checks at 1024
# rows read oneDNN's own layout on a CPU with AMX too (where the table
# keeps the plain copy by default); and with CB_BF16_BLOCK_ROWS=1 and
# CB_BF16_HEAD_K=64, so that causal attention runs in blocks of query rows
# and the LM head's dX in chunks of its reduction (src/kernels/bf16.c) at
# the test's small T and V too (by default a block has at least 64 rows
# and a chunk 16384 of V), the fp32 table's causal attention, the
# reference, in blocks of 3 rows (CB_CPU_BLOCK_ROWS, src/kernels/cpu.c);
# small blocks take the fused causal path where there is no dropout, so
# they run once more with it off (CB_BF16_FUSED=0), the unfused blocks.
# The small blocks run on two threads: the fused path gives each OpenMP
# thread its own oneDNN primitives and buffers.
set -u
. "$(dirname "$0")/launcher.sh"
"$BUILD/tests/test_bf16"
native=$?
CB_BF16_PACK=1 "$BUILD/tests/test_bf16" 2>&1 | sed 's/^\(PASS\|FAIL\) /\1 kept layout: /'
packed=${PIPESTATUS[0]}
OMP_NUM_THREADS=2 CB_BF16_BLOCK_ROWS=1 CB_BF16_HEAD_K=64 CB_CPU_BLOCK_ROWS=3 "$BUILD/tests/test_bf16" 2>&1 |
    sed 's/^\(PASS\|FAIL\) /\1 small blocks: /'
blocked=${PIPESTATUS[0]}
CB_BF16_FUSED=0 CB_BF16_BLOCK_ROWS=1 CB_CPU_BLOCK_ROWS=3 "$BUILD/tests/test_bf16" 2>&1 |
    sed 's/^\(PASS\|FAIL\) /\1 unfused small blocks: /'
unfused=${PIPESTATUS[0]}
out=$(CB_BF16_EMULATE=1 "$BUILD/tests/test_bf16" 2>&1)
emulated=$?
sed 's/^\(PASS\|FAIL\) /\1 emulated: /' <<<"$out"
if head -1 <<<"$out" | grep -q "oneDNN emulates, expect it to be slow"; then
    echo "PASS emulated: the first line warns: $(head -1 <<<"$out")"
else
    echo "FAIL emulated: no warning on the first line: $(head -1 <<<"$out")"
fi
[ $native = 0 ] && [ $packed = 0 ] && [ $blocked = 0 ] && [ $unfused = 0 ] && [ $emulated = 0 ]
