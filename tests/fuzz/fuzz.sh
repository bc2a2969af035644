#!/usr/bin/env bash
# The file readers under fuzzing: safetensors (cb_st_open), token files
# (cb_tokens_open), JSON (json_parse). Harnesses in tests/fuzz/fuzz_*.c,
# seeds in tests/fuzz/corpus/<name>/.
#   tests/fuzz/fuzz.sh fuzz [SECONDS]  libFuzzer (clang) on each, SECONDS each
#                                      (default 60); new inputs and crashes go
#                                      to $BUILD/fuzz/ (make fuzz)
#   tests/fuzz/fuzz.sh replay          each seed once through each harness,
#                                      built with $CC and ASan/UBSan, no
#                                      libFuzzer (tests/test_fuzz_corpus.sh)
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
SRC=(src/formats/json.c src/formats/safetensors.c src/formats/fileio.c src/data/tokens.c src/util/err.c)
FLAGS=(-std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc -Itests/fuzz -fno-omit-frame-pointer)
out=$BUILD/fuzz
mkdir -p "$out"
mode=${1:-replay}
status=0
for h in safetensors tokens json; do
    if [ "$mode" = fuzz ]; then
        command -v clang >/dev/null || { echo "make fuzz needs clang (make deps installs it)"; exit 2; }
        clang "${FLAGS[@]}" -fsanitize=fuzzer,address,undefined tests/fuzz/fuzz_$h.c "${SRC[@]}" -o "$out/fuzz_$h" || exit 1
        mkdir -p "$out/corpus_$h" "$out/crashes_$h"
        "$out/fuzz_$h" -max_total_time="${2:-60}" -artifact_prefix="$out/crashes_$h/" -print_final_stats=1 \
            "$out/corpus_$h" "tests/fuzz/corpus/$h" 2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY" || true
        compgen -G "$out/crashes_$h/*" >/dev/null && { echo "FAIL fuzz $h: crashes in $out/crashes_$h"; status=1; }
    else
        ${CC:-cc} "${FLAGS[@]}" -fsanitize=address,undefined -fno-sanitize-recover=undefined tests/fuzz/fuzz_$h.c \
            tests/fuzz/replay.c "${SRC[@]}" -o "$out/replay_$h" || { echo "FAIL fuzz $h: build"; status=1; continue; }
        seeds=(tests/fuzz/corpus/$h/*)
        if r=$(ASAN_OPTIONS=detect_leaks=1 "$out/replay_$h" "${seeds[@]}" 2>&1); then
            echo "PASS fuzz corpus $h: $r (ASan, UBSan)"
        else
            echo "FAIL fuzz corpus $h: $(echo "$r" | head -c 600)"; status=1
        fi
    fi
done
exit $status
