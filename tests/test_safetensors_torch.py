"""safetensors files of cubist against an independent reader and writer.

    /usr/bin/python3 tests/test_safetensors_torch.py BUILD_DIR

1. test_formats --write-sample writes a file; it is parsed here with json and
   numpy (and the `safetensors` package when installed), checked against the
   layout rules of the reference implementation, and loaded into torch.
2. Files laid out here the way the reference writer lays them out (and one
   with an unpadded, spaced header) are read by test_formats --read-sample;
   shapes, sums and metadata must match.
Prints one PASS/FAIL line per check; exits 1 if any failed.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

failed = 0


def check(ok, name, detail):
    global failed
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    failed += not ok


def parse(path):
    """(header dict, data bytes, header length) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n].decode("utf-8")), raw[8 + n:], n


def expected_sample():
    a = ((np.arange(6, dtype=np.float64) - 2.5).astype(np.float32) / np.float32(4)).reshape(2, 3)
    b = (np.arange(12, dtype=np.float32) * np.float32(0.001)).reshape(3, 2, 2)
    return {"a": a, "b.weight": b, "scalar": np.array(3.25, dtype=np.float32),
            "empty": np.zeros((0, 3), dtype=np.float32)}


def layout_problems(header, data, n):
    """Rules the reference reader enforces: offsets contiguous from 0 and
    covering the whole data section, sizes matching shapes, 8-aligned data."""
    probs = []
    if (8 + n) % 8:
        probs.append(f"data section starts at byte {8 + n}, not a multiple of 8")
    ents = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
    pos = 0
    for (b, e), k in ents:
        if b != pos:
            probs.append(f"{k} begins at {b}, expected {pos}")
        numel = int(np.prod(header[k]["shape"], dtype=np.int64))
        if e - b != 4 * numel:
            probs.append(f"{k} spans {e - b} bytes for {numel} floats")
        pos = e
    if pos != len(data):
        probs.append(f"tensors end at {pos}, data section has {len(data)} bytes")
    return probs


def check_written(exe, tmp):
    path = os.path.join(tmp, "sample.safetensors")
    r = subprocess.run([exe, "--write-sample", path], capture_output=True, text=True)
    check(r.returncode == 0 and os.path.exists(path), "torch_sample_written", f"rc={r.returncode} {r.stderr.strip()}")
    if r.returncode:
        return
    header, data, n = parse(path)
    meta = header.get("__metadata__", {})
    check(meta == {"format": "pt", "note": "quote \" backslash \\ tab \t end"}, "torch_sample_metadata", repr(meta))
    names = [k for k in header if k != "__metadata__"]
    check(names == ["a", "b.weight", "scalar", "empty"], "torch_sample_order", repr(names))
    probs = layout_problems(header, data, n)
    check(not probs, "torch_sample_layout", "; ".join(probs) or f"header {n} bytes, data {len(data)} bytes")
    want = expected_sample()
    for k, w in want.items():
        h = header.get(k, {})
        b, e = h.get("data_offsets", [0, 0])
        arr = np.frombuffer(data[b:e], dtype="<f4").reshape(h.get("shape", [-1]))
        ok = h.get("dtype") == "F32" and arr.shape == w.shape and np.array_equal(arr, w)
        check(ok, f"torch_sample_values_{k}", f"shape {arr.shape}, max |diff| "
              f"{np.abs(arr - w).max() if arr.size and arr.shape == w.shape else 0.0}")
    check_torch(data, header, want)


def check_torch(data, header, want):
    try:
        import torch
    except ImportError:  # make test installs python3-torch: a missing torch is a failure
        check(False, "torch_load", "torch not importable by /usr/bin/python3; run scripts/deps.sh")
        return
    sd = {}
    for k in want:
        b, e = header[k]["data_offsets"]
        sd[k] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").copy()).reshape(header[k]["shape"])
    ok = all(sd[k].dtype == torch.float32 and torch.equal(sd[k], torch.from_numpy(w)) for k, w in want.items())
    check(ok, "torch_load", f"{len(sd)} tensors as torch.float32, exact")


def write_reference(path, tensors, meta, pad=True, spaced=False):
    """Lays a file out as the reference writer does: metadata first, tensors
    sorted by name, compact JSON padded with spaces to a multiple of 8."""
    header, off, blobs = {}, 0, []
    if meta:
        header["__metadata__"] = meta
    for k in sorted(tensors):
        blob = tensors[k].astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(tensors[k].shape), "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(", ", ": ") if spaced else (",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_with_cubist(exe, path):
    r = subprocess.run([exe, "--read-sample", path], capture_output=True, text=True)
    tensors, meta = {}, {}
    for line in r.stdout.splitlines():
        if line.startswith("tensor "):
            f = line.split()
            nd = int(f[2])
            tensors[f[1]] = (tuple(int(x) for x in f[3:3 + nd]), float(f[3 + nd]), float(f[4 + nd]))
        elif line.startswith("meta "):
            k, _, v = line[5:].partition("=")
            meta[k] = v
    return r.returncode, tensors, meta, r.stderr.strip()


def check_read(exe, tmp, name, pad, spaced):
    rng = np.random.default_rng(7)
    t = {"h.0.attn.c_attn.weight": rng.standard_normal((8, 24)).astype(np.float32),
         "h.0.ln_1.bias": rng.standard_normal(8).astype(np.float32),
         "wte": rng.standard_normal((5, 8)).astype(np.float32),
         "z4d": rng.standard_normal((2, 1, 3, 2)).astype(np.float32)}
    meta = {"format": "pt", "cubist": "é \"q\""}
    path = os.path.join(tmp, name + ".safetensors")
    write_reference(path, t, meta, pad=pad, spaced=spaced)
    rc, got, gmeta, err = read_with_cubist(exe, path)
    worst = 0.0
    ok = rc == 0 and set(got) == set(t) and gmeta == meta
    for k, v in t.items():
        if k not in got:
            continue
        flat = v.astype(np.float64).ravel()
        ws = float((np.arange(1, flat.size + 1) * flat).sum())
        shape, s, w = got[k]
        ok = ok and shape == v.shape
        worst = max(worst, abs(s - flat.sum()), abs(w - ws))
    ok = ok and worst < 1e-9
    check(ok, f"cubist_reads_{name}", f"rc={rc} {err} {len(got)} tensors, worst |sum diff| {worst:.2e} (tol 1e-9)")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_safetensors_torch.py BUILD_DIR")
    exe = os.path.join(sys.argv[1], "tests", "test_formats")
    if not os.access(exe, os.X_OK):
        check(False, "torch_setup", f"{exe} not built; run make")
        sys.exit(1)
    tmp = tempfile.mkdtemp(prefix="cubist_st_torch_")
    try:
        check_written(exe, tmp)
        check_read(exe, tmp, "reference_layout", pad=True, spaced=False)
        check_read(exe, tmp, "unpadded_spaced", pad=False, spaced=True)
    finally:
        shutil.rmtree(tmp)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
