#!/usr/bin/env bash
# Checkpoints are layout independent: 30 steps run as 3-D tp 8 (8 steps),
# then 1-D tp 2 (8), one process (7), 2-D tp 4 (7), each resuming the
# previous one's checkpoint, follow the uninterrupted single-process
# trajectory (loss and gradient norm) and end at its parameters, to 1e-5.
set -u
. "$(dirname "$0")/launcher.sh"
C="$BUILD/cubist"
CMP="/usr/bin/python3 $ROOT/tests/compare.py"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cd "$d"
/usr/bin/python3 "$ROOT/tests/gen_text.py" 160000 > text.txt
"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL roundtrip: prepare"; exit 1; }
A=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 8 --steps 30
   --lr 1e-3 --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --quiet --peak-gflops 100)
"$C" train "${A[@]}" --log ref.jsonl --save ref.st --dump-grads ref.grads.st || { echo "FAIL roundtrip: reference"; exit 1; }
leg() { # np, then flags; every leg but the first resumes ck.st
    local np=$1; shift
    if [ "$np" = 1 ]; then timeout "$(tmo 120)" "$C" train "${A[@]}" --save ck.st "$@" 2>>err.txt
    else timeout "$(tmo 120)" "${launch[@]}" -np "$np" "$C" train "${A[@]}" --save ck.st "$@" 2>>err.txt; fi
}
if leg 8 --tp 8 --tp-mode 3d --log l1.jsonl --exit-after 8 &&
   leg 2 --tp 2 --tp-mode 1d --resume ck.st --log l2.jsonl --exit-after 8 &&
   leg 1 --resume ck.st --log l3.jsonl --exit-after 7 &&
   leg 4 --tp 4 --tp-mode 2d --resume ck.st --log l4.jsonl; then
    cat l1.jsonl l2.jsonl l3.jsonl l4.jsonl > all.jsonl
    $CMP logs all.jsonl ref.jsonl --label "checkpoint 3d tp8 -> 1d tp2 -> serial -> 2d tp4: 30 steps"
    $CMP st ck.st ref.st --label "checkpoint 3d -> 1d -> serial -> 2d: final parameters" --grads ref.grads.st
else
    echo "FAIL roundtrip: a leg failed: $(head -c 400 err.txt)"
fi
