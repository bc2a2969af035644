#!/usr/bin/env bash
# Every layout operator against the serial one (tests/test_layout.c), at
# the tensor-parallel sizes the issue names: 1-D on 2 and 4 ranks, 2-D on 4
# (2x2), 3-D on 8 (2x2x2) and 27 (3x3x3), oversubscribed on this machine.
set -u
. "$(dirname "$0")/launcher.sh"
run() { # mode np
    timeout "$(tmo 120)" "${launch[@]}" -np "$2" "$BUILD/tests/test_layout" --tp-mode "$1" || echo "FAIL test_layout $1 np=$2 exited $?"
}
run 1d 2
run 1d 4
run 2d 4
run 3d 8
run 3d 27
