#!/usr/bin/env bash
# The fuzz corpora (tests/fuzz/corpus: valid files, and whatever `make fuzz`
# runs have added) replayed once through the safetensors, token-file and
# JSON harnesses under ASan and UBSan, without libFuzzer.
exec "$(dirname "$0")/fuzz/fuzz.sh" replay
