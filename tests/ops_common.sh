# Sourced by the operations tests (checkpoints under kills, signals, the
# stall watchdog, disk full): the launcher (tests/launcher.sh), a scratch
# directory with a small token file, a tiny model (these tests exercise the
# protocol, not the arithmetic) and helpers.
. "$(dirname "${BASH_SOURCE[0]}")/launcher.sh"
C="$BUILD/cubist"
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() { [ "$failed" = 0 ]; }
d=$(mktemp -d)
cleanup_dirs=("$d")
trap 'for m in "${mounts[@]:-}"; do [ -n "$m" ] && umount "$m" 2>/dev/null; done; rm -rf "${cleanup_dirs[@]}"' EXIT
mounts=()
cd "$d" || exit 1
/usr/bin/python3 -c "import base64, random; random.seed(7); print(base64.encodebytes(bytes(random.getrandbits(8) for _ in range(60000))).decode())" > text.txt
"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL ops: prepare"; exit 1; }
# shuffled batches and a warm-up + cosine schedule: the data RNG and the
# schedule must travel through every checkpoint for the trajectory to match
TINY=(--data train.bin --layers 1 --d-model 32 --heads 2 --seq-len 16 --batch 4 --warmup 3
      --lr 3e-3 --min-lr 1e-4 --clip 0.5 --seed 5 --quiet --peak-gflops 100)
# step loss lr grad_norm tokens of every logged step
fields() { sed -E 's/.*"step":([0-9]+),"loss":([^,]*),"lr":([^,]*),"grad_norm":([^,]*),"tokens":([0-9]+),.*/\1 \2 \3 \4 \5/' "$@"; }
# a checkpoint file without its id (a fresh random value per save)
noid() { sed -E 's/"ckpt_id":"[0-9a-f]{16}"/"ckpt_id":"-"/' "$1"; }
same_ckpt() { # a b: weights and state equal byte for byte but for the id
    cmp -s <(noid "$1") <(noid "$2") && cmp -s <(noid "$1.state") <(noid "$2.state")
}
# pending or temporary checkpoint files in a directory (a save in flight)
pending() { compgen -G "$1/*.tmp" >/dev/null || compgen -G "$1/*.next*" >/dev/null; }
# tests/fs_shim.c: slow or failing writes to chosen files (LD_PRELOAD)
SHIM=$d/fs_shim.so
${CC:-cc} -shared -fPIC -O1 "$ROOT/tests/fs_shim.c" -o "$SHIM" -ldl || { echo "FAIL ops: building tests/fs_shim.c"; exit 1; }
# an ASan build (make asan) needs its runtime first in the preload list
PRELOAD=$SHIM
_asan=$(ldd "$C" | awk '/libasan/ {print $3}')
[ -n "$_asan" ] && PRELOAD="$_asan $SHIM"
# the cubist processes under a launcher's pid (OpenMPI's ranks are its
# children, MPICH's the children of hydra's proxies), in pid order; by
# executable, since cubist re-executes itself (its name becomes "exe")
CREAL=$(readlink -f "$C")
ranks_of() {
    local p kids; kids=$(pgrep -P "$1")
    for p in $kids; do
        [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$CREAL" ] && echo "$p"
        ranks_of "$p"
    done | sort -n
}
