#!/usr/bin/env bash
# The format checks in C, then the safetensors files read back in Python.
set -u
BUILD=${BUILD:-build}
"$BUILD/tests/test_formats" || rc=1
/usr/bin/python3 tests/test_safetensors_torch.py "$BUILD" || rc=1
exit ${rc:-0}
