#!/usr/bin/env python3
"""Kiln's safetensors files against Python's `safetensors` package, both ways.

    test_safetensors.py BUILD_DIR

Drives BUILD_DIR/tests/st_tool: `st_tool write PATH` writes a fixed set of tensors that
safetensors.numpy must read back exactly; files the package writes (every dtype Kiln
loads, bfloat16 through the package's raw serializer) must come back from `st_tool dump`
with the same values. One line per check, then "N passed, N failed".
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

npass = nfail = 0


def check(ok, what):
    global npass, nfail
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        npass += 1
    else:
        nfail += 1


def st_tool(*args):
    return subprocess.run([TOOL, *args], capture_output=True, text=True)


def dump(path):
    """st_tool dump PATH -> (metadata dict, {name: (dtype, shape, values)}) in file order."""
    r = st_tool("dump", path)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    unhex = lambda s: "" if s == "-" else bytes.fromhex(s).decode("utf-8")
    meta, tensors = {}, {}
    for line in r.stdout.splitlines():
        f = line.split(" ")
        if f[0] == "meta":
            meta[unhex(f[1])] = unhex(f[2])
        else:
            shape = () if f[3] == "-" else tuple(int(d) for d in f[3].split(","))
            tensors[unhex(f[1])] = (f[2], shape, f[4:])
    return meta, tensors


def as_array(dtype, shape, words):
    """The dumped text as a NumPy array of Kiln's dtype."""
    npt = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
           "bool": np.bool_}[dtype]
    if dtype in ("f32", "f64"):
        vals = [float(w) for w in words]
    else:
        vals = [int(w) for w in words]
    return np.array(vals, dtype=npt).reshape(shape)


def same_bits(a, b):
    """Equal dtype, shape and bytes: nan, -0 and denormals must survive exactly."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# What `st_tool write` writes (see st_tool.c).
EXPECTED = {
    "f32": (np.arange(6, dtype=np.float32) * np.float32(0.1) - np.float32(1)).reshape(2, 3),
    "f64": np.array([1e-300, -2.5, 3.141592653589793, 1e300]),
    "i32": np.array([-2**31, -1, 0, 2**31 - 1], dtype=np.int32).reshape(2, 2),
    "i64_scalar": np.array(-9007199254740993, dtype=np.int64),
    "bool": np.array([1, 0, 0, 1, 1], dtype=np.bool_),
    "empty": np.zeros((0, 4), dtype=np.float32),
    "special": np.array([np.inf, -np.inf, -0.0, 2.0**-149, np.nan, 3.4028235e38],
                        dtype=np.float32),
}
EXPECTED_META = {"epoch": "3", "note": "a \"quote\", a \\ and \u2603 \U0001d11e\n",
                 "format": "np"}


def kiln_writes(tmp):
    path = os.path.join(tmp, "kiln.safetensors")
    r = st_tool("write", path)
    check(r.returncode == 0, "st_tool write " + r.stderr.strip())
    try:
        got = load_file(path)
    except Exception as e:  # the package refused the file
        check(False, f"safetensors.numpy.load_file reads Kiln's file: {e}")
        return
    check(set(got) == set(EXPECTED), "Python sees the same tensor names")
    for name, want in EXPECTED.items():
        g = got.get(name)
        ok = g is not None and same_bits(g, want)
        check(ok, f"Kiln -> Python: {name} {want.dtype}{list(want.shape)} identical"
              + ("" if ok or g is None else f" (got {g.dtype}{list(g.shape)} {g})"))
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        keys = list(f.keys())
    check(meta == EXPECTED_META, f"Kiln -> Python: metadata {meta!r}")
    check(sorted(keys) == sorted(EXPECTED), "safe_open lists every tensor")
    # Kiln reads its own file the same way Python did.
    m, t = dump(path)
    check(m == EXPECTED_META and list(t) == list(EXPECTED), "Kiln reads back its names in order")


def raw_serialize(path, specs, metadata):
    """Write dtypes NumPy lacks (bfloat16) through the package's serializer, from the bit
    patterns in a uint16 array. specs: {name: (dtype name, shape, array)}."""
    TensorSpec = getattr(safetensors, "TensorSpec", None)
    if TensorSpec is not None:   # safetensors >= 0.7
        flat = {k: TensorSpec(dtype=d, shape=list(s), data_ptr=a.ctypes.data, data_len=a.nbytes)
                for k, (d, s, a) in specs.items()}
    else:
        flat = {k: {"dtype": d, "shape": list(s), "data": a.tobytes()}
                for k, (d, s, a) in specs.items()}
    safetensors.serialize_file(flat, path, metadata=metadata)


def python_writes(tmp):
    rng = np.random.default_rng(7)
    f16 = np.array([1, -2, 65504, 2.0**-24, np.inf, -0.0, np.nan, 0.1], dtype=np.float16)
    arrays = {
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f64": rng.standard_normal(5),
        "i32": rng.integers(-2**31, 2**31, (2, 3), dtype=np.int32),
        "i64": np.array([-2**63, 2**63 - 1, 9007199254740993], dtype=np.int64),
        "bool": rng.random((2, 2, 2)) < 0.5,
        "f16": f16,
        "i8": np.array([-128, -1, 0, 127], dtype=np.int8),
        "u8": np.array([0, 1, 128, 255], dtype=np.uint8),
        "i16": np.array([[-32768, -1], [0, 32767]], dtype=np.int16),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((2, 0, 3), dtype=np.float64),
        "deep": np.arange(16, dtype=np.int32).reshape(2, 1, 2, 1, 2, 1, 2, 1),
        "na\u00efve/\u2603 \"name\"": np.array([1.0], dtype=np.float32),
    }
    meta = {"who": "numpy", "quote": "\"\\", "unicode": "\u00e9\u2603\U0001d11e"}
    path = os.path.join(tmp, "py.safetensors")
    save_file(arrays, path, metadata=meta)
    try:
        m, t = dump(path)
    except RuntimeError as e:
        check(False, f"Kiln reads the package's file: {e}")
        return
    check(m == meta, f"Python -> Kiln: metadata {m!r}")
    kiln_dtype = {np.float32: np.float32, np.float64: np.float64, np.int32: np.int32,
                  np.int64: np.int64, np.bool_: np.bool_, np.float16: np.float32,
                  np.int8: np.int32, np.uint8: np.int32, np.int16: np.int32}
    for name, a in arrays.items():
        want = a.astype(kiln_dtype[a.dtype.type])
        got = t.get(name)
        ok = got is not None and same_bits(as_array(*got), want)
        check(ok, f"Python -> Kiln: {name} {a.dtype}{list(a.shape)} identical"
              + ("" if got is None or a.dtype == want.dtype else f" as {want.dtype}"))

    # bfloat16: the top 16 bits of an f32, written by the package from bit patterns.
    f = np.array([1.0, -5.0, 3.140625, 1e-38, np.inf, -np.inf, np.nan, -0.0], dtype=np.float32)
    bits = (f.view(np.uint32) >> 16).astype(np.uint16)
    path = os.path.join(tmp, "bf16.safetensors")
    try:
        raw_serialize(path, {"bf": ("bfloat16", bits.shape, bits),
                             "h": ("float16", f16.shape, f16.view(np.uint16))}, None)
    except Exception as e:
        check(True, f"bfloat16 skipped: the package cannot write it here ({e})")
        return
    m, t = dump(path)
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    check(m == {} and same_bits(as_array(*t["bf"]), want), "Python -> Kiln: bfloat16 to f32 exact")
    check(same_bits(as_array(*t["h"]), f16.astype(np.float32)),
          "Python -> Kiln: float16 through the raw serializer too")


def refused(tmp):
    path = os.path.join(tmp, "u32.safetensors")
    save_file({"ok": np.zeros(2, np.float32), "u": np.zeros(3, np.uint32)}, path)
    r = st_tool("dump", path)
    check(r.returncode == 1 and "tensor 'u': unsupported dtype 'U32'" in r.stderr
          and path in r.stderr, f"Python -> Kiln: uint32 refused by name: {r.stderr.strip()}")
    path = os.path.join(tmp, "none.safetensors")
    save_file({}, path)
    m, t = dump(path)
    check(m == {} and t == {}, "Python -> Kiln: an empty file")


def main():
    global TOOL
    if len(sys.argv) != 2:
        sys.exit("usage: test_safetensors.py BUILD_DIR")
    TOOL = os.path.join(sys.argv[1], "tests", "st_tool")
    if not os.access(TOOL, os.X_OK):
        print(f"FAIL no {TOOL}; build first")
        print("0 passed, 1 failed")
        sys.exit(1)
    print(f"# safetensors {safetensors.__version__}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for part in (kiln_writes, python_writes, refused):
            try:
                part(tmp)
            except Exception as e:  # report and go on: one broken part is one failure
                check(False, f"{part.__name__}: {type(e).__name__}: {e}")
    print(f"{npass} passed, {nfail} failed")
    sys.exit(1 if nfail else 0)


if __name__ == "__main__":
    main()
