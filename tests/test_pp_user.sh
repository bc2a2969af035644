#!/usr/bin/env bash
# A user's own model (examples/mlp_lm) given `cubist train`'s pipeline
# flags: its loop returns the loss before it declares the backward, so its
# pipeline is GPipe, and it keeps the activations it declares. --schedule
# 1f1b / interleaved, --virtual-stages and --recompute block / selective
# (and its -layers / -method) are refused with one line, exit 2 on every
# rank; --schedule gpipe and --no-profile (its partition always comes from
# FLOP counts) are accepted and change nothing: the same 10-step losses as
# without them.
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
    timeout "$(tmo 60)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 2 --pp 2 "$@" >out.txt 2>&1
    local rc=$? n
    n=$(wc -l <out.txt)
    if [ "$rc" = 2 ] && [ "$n" -eq 1 ] && grep -q -- "$pat" out.txt; then
        echo "PASS user model refuses $label: exit 2, $(cat out.txt)"
    else echo "FAIL user model refuses $label: exit $rc, $n lines: $(head -c 300 out.txt)"; fi
}
refuse "--schedule 1f1b" "use gpipe" --schedule 1f1b
refuse "--schedule interleaved" "use gpipe" --schedule interleaved
refuse "--virtual-stages 2" "use gpipe" --virtual-stages 2
refuse "--recompute block" "drop --recompute" --recompute block
refuse "--recompute selective" "drop --recompute" --recompute selective
refuse "--recompute-layers 1" "drop --recompute-layers" --recompute-layers 1
if timeout "$(tmo 120)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 10 --pp 2 >a.log 2>&1 &&
   timeout "$(tmo 120)" "${launch[@]}" -np 2 "$EX" --data train.bin --steps 10 --pp 2 --schedule gpipe \
        --no-profile --recompute none >b.log 2>&1; then
    /usr/bin/python3 "$root/tests/compare.py" logs b.log a.log --tol 0 \
        --label "user model --schedule gpipe --no-profile --recompute none accepted, same losses"
else echo "FAIL user model accepts --schedule gpipe --no-profile: $(tail -c 300 a.log b.log)"; fi
