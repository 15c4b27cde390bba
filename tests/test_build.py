#!/usr/bin/env python3
"""kiln build: standalone executables and libraries, checked against `kiln run`.

Usage: python3 tests/test_build.py build/kiln [NAME-SUBSTRING]

Each example model (examples/logreg.kiln, mlp.kiln, cnn.kiln) is built with
--target-cpu=native and trained a few steps on a small generated data set in
Fashion-MNIST's layout, once by `kiln run` and once by the binary (train
--data DIR): the two checkpoints must hold the same tensors to the last bit
(one thread). The binary's predictions with `kiln run`'s weights must equal,
bit for bit, what `kiln run` computes for the same inputs (an evaluate
statement counts the outputs that differ). Also: info; embedded weights; a
portable build (the default --target-cpu) close to native; a binary copied to
an empty directory and run with an empty environment, needing no LLVM, Clang
or Kiln library (ldd); the library (--lib) with examples/embed/main.c against
libmlp.a and libmlp.so; IDX and CSV inputs; --resume (the binary's and kiln
run's, across each other's checkpoints); Ctrl-C; a float64 input converted; and bad inputs (wrong shape,
missing or corrupt weights, weights of another model, no weights,
bad options) ending in a message and exit status 1 or 2, never a crash. Ends
with "N passed, N failed".
"""
import gzip
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

from kiln_testlib import Tally

KILN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
ONLY = sys.argv[2] if len(sys.argv) > 2 else None
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TMP = tempfile.mkdtemp(prefix="kiln-build-test-")
FM = os.path.join(TMP, "fm")
STEPS = {"logreg": 30, "mlp": 8, "cnn": 2}
NPRED = 200
SAN = False


TALLY = Tally()
check = TALLY.check


def run(args, timeout=600, env=None, cwd=TMP):
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def write_idx(path, arr, code):
    head = struct.pack(">BBBB", 0, 0, code, arr.ndim) + b"".join(struct.pack(">I", s) for s in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(head + arr.astype(">u1").tobytes())


def make_data():
    """28x28 images in Fashion-MNIST's file layout: class k brightens one of ten bands."""
    rng = np.random.default_rng(5)
    os.makedirs(FM, exist_ok=True)
    for split, n in (("train", 512), ("t10k", 256)):
        lab = rng.integers(0, 10, n).astype(np.uint8)
        img = rng.integers(0, 80, (n, 28, 28)).astype(np.uint8)
        for i, k in enumerate(lab):
            img[i, 2 * k:2 * k + 3, :] += 150
        write_idx(os.path.join(FM, "%s-images-idx3-ubyte.gz" % split), img, 8)
        write_idx(os.path.join(FM, "%s-labels-idx1-ubyte.gz" % split), lab, 8)
        if split == "t10k":
            x = (img[:NPRED].astype(np.float32) / np.float32(255))
            np.save(os.path.join(TMP, "x_flat.npy"), x.reshape(NPRED, 784))
            np.save(os.path.join(TMP, "x_img.npy"), x.reshape(NPRED, 1, 28, 28))
            np.save(os.path.join(TMP, "y0.npy"), np.zeros(NPRED, np.int32))


def example_text(name):
    with open(os.path.join(ROOT, "examples", name + ".kiln")) as f:
        return f.read().replace("/usr/share/datasets/fashion-mnist", FM)


def load_st(path):
    from safetensors.numpy import load_file
    return load_file(path)


def same_tensors(a, b):
    if sorted(a) != sorted(b):
        return "names differ: %s vs %s" % (sorted(a), sorted(b))
    for k in a:
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes():
            return "tensor %s differs (max |diff| %g)" % (k, float(np.max(np.abs(a[k].astype(np.float64) - b[k]))))
    return ""


def build(src, out, *extra):
    return run([KILN, "build", src, "-o", out] + list(extra))


# ---- each example: train and predict, binary against kiln run ------------------------
def example(name):
    steps = str(STEPS[name])
    ref, binw = os.path.join(TMP, name + "_ref.safetensors"), os.path.join(TMP, name + "_bin.safetensors")
    src = os.path.join(TMP, name + ".kiln")
    with open(src, "w") as f:
        f.write(example_text(name) + '\nsave "%s"\n' % ref)
    rc, out, err = run([KILN, "run", src, "--threads", "1", "--epochs", "1", "--max-steps", steps,
                        "--eval-examples", "100", "--progress", "lines"])
    check("%s: kiln run trains %s steps" % (name, steps), rc == 0 and os.path.exists(ref), out + err[-2000:])
    exe = os.path.join(TMP, name)
    rc, out, err = build(os.path.join(ROOT, "examples", name + ".kiln"), exe, "--target-cpu=native")
    check("%s: kiln build" % name, rc == 0 and os.access(exe, os.X_OK), err[-3000:])
    if rc:
        return
    global SAN   # a sanitizer build's runtime makes sanitized binaries (test.sh's asan run)
    SAN = "libasan" in run(["ldd", exe])[1]
    rc, out, err = run([exe, "info"])
    check("%s: info shows inputs, output, parameters and memory" % name,
          rc == 0 and re.search(r"x : f32\[B, ", out) and "logits : f32[B, 10]" in out
          and re.search(r"parameters: \d+ values", out) and "planned peak memory" in out, out + err)
    rc, out, err = run([exe, "train", "--data", FM, "--threads", "1", "--epochs", "1", "--max-steps", steps,
                        "--eval-examples", "100", "--progress", "lines", "--out", binw])
    ok = rc == 0 and os.path.exists(binw) and os.path.exists(ref)
    diff = same_tensors(load_st(ref), load_st(binw)) if ok else "no checkpoint"
    check("%s: the binary's training gives kiln run's weights and optimizer state, bit for bit" % name,
          ok and not diff, diff + "\n" + out + err[-2000:])
    if not os.path.exists(ref):
        return
    x = os.path.join(TMP, "x_img.npy" if name == "cnn" else "x_flat.npy")
    pred = os.path.join(TMP, name + "_pred.npy")
    rc, out, err = run([exe, "predict", "--threads", "1", "--weights", ref, x, "-o", pred])
    check("%s: predict writes [%d, 10]" % (name, NPRED),
          rc == 0 and os.path.exists(pred) and np.load(pred).shape == (NPRED, 10), out + err)
    if rc:
        return
    # kiln run computes the same logits from the same weights; evaluate counts differing values.
    body = "".join(l + "\n" for l in example_text(name).splitlines()
                   if not re.match(r"(train|evaluate|save) ", l))
    cmp_src = os.path.join(TMP, name + "_cmp.kiln")
    with open(cmp_src, "w") as f:
        f.write(body + 'input p : f32[B, 10]\nload "%s"\n' % ref
                + 'data cmp = npy(test=["%s", "%s", "%s"])\n' % (x, os.path.join(TMP, "y0.npy"), pred)
                + "evaluate sum(cast(logits != p, f32), axis=1) on cmp.test\n")
    rc, out, err = run([KILN, "run", cmp_src, "--threads", "1"])
    m = re.search(r"^sum: (\S+)$", out, re.M)
    check("%s: predictions equal kiln run's to the last bit" % name, rc == 0 and m and float(m.group(1)) == 0,
          out + err[-2000:])
    if name == "logreg":   # the comparison sees a one-bit change
        p = np.load(pred)
        p.view(np.uint32)[3, 4] ^= 1
        np.save(pred + ".bad.npy", p)
        with open(cmp_src, "w") as f:
            f.write(body + 'input p : f32[B, 10]\nload "%s"\n' % ref
                    + 'data cmp = npy(test=["%s", "%s", "%s"])\n' % (x, os.path.join(TMP, "y0.npy"), pred + ".bad.npy")
                    + "evaluate sum(cast(logits != p, f32), axis=1) on cmp.test\n")
        rc, out, err = run([KILN, "run", cmp_src, "--threads", "1"])
        m = re.search(r"^sum: (\S+)$", out, re.M)
        check("%s: the comparison sees one flipped bit" % name, rc == 0 and m and abs(float(m.group(1)) - 1 / NPRED) < 1e-9,
              out + err[-2000:])
    return exe, ref, pred


# ---- artifacts beyond the examples ----------------------------------------------------
def other_weights():
    """A checkpoint of some other model."""
    from safetensors.numpy import save_file
    path = os.path.join(TMP, "other.safetensors")
    save_file({"W": np.zeros((784, 10), np.float32), "b": np.zeros(10, np.float32)}, path)
    return path


def embedded(mlp):
    exe, ref, pred = mlp
    out_e = os.path.join(TMP, "mlp_embedded")
    rc, out, err = build(os.path.join(ROOT, "examples", "mlp.kiln"), out_e, "--target-cpu=native", "--embed-weights", ref)
    check("embed-weights: builds", rc == 0, err[-2000:])
    p2 = os.path.join(TMP, "pred_e.npy")
    rc, out, err = run([out_e, "predict", "--threads", "1", os.path.join(TMP, "x_flat.npy"), "-o", p2])
    check("embed-weights: predict needs no --weights and gives the same outputs",
          rc == 0 and np.load(p2).tobytes() == np.load(pred).tobytes(), out + err)
    rc, out, err = run([out_e, "info"])
    check("embed-weights: info says so", rc == 0 and "weights embedded" in out, out + err)
    bad = other_weights()
    rc, out, err = build(os.path.join(ROOT, "examples", "mlp.kiln"), os.path.join(TMP, "never"), "--embed-weights", bad)
    check("embed-weights: another model's weights are refused at build time",
          rc == 1 and "parameter" in err and not os.path.exists(os.path.join(TMP, "never")), err[-1000:])


def portable(mlp):
    exe, ref, pred = mlp
    out_p = os.path.join(TMP, "mlp_portable")
    rc, out, err = build(os.path.join(ROOT, "examples", "mlp.kiln"), out_p)
    check("portable build (default --target-cpu x86-64-v2)", rc == 0, err[-2000:])
    rc, out, err = run([out_p, "info"])
    check("portable build: info names its target", rc == 0 and "x86-64-v2" in out, out + err)
    p3 = os.path.join(TMP, "pred_p.npy")
    rc, out, err = run([out_p, "predict", "--weights", ref, os.path.join(TMP, "x_flat.npy"), "-o", p3])
    ok = rc == 0 and np.allclose(np.load(p3), np.load(pred), rtol=1e-4, atol=1e-5)
    check("portable build: predictions within 1e-4 of native", ok, out + err)


def clean_dir(mlp):
    exe, ref, pred = mlp
    d = tempfile.mkdtemp(prefix="kiln-clean-")
    shutil.copy(exe, d)
    shutil.copy(ref, os.path.join(d, "w.safetensors"))
    shutil.copy(os.path.join(TMP, "x_flat.npy"), d)
    rc, out, err = run(["./mlp", "predict", "--threads", "1", "--weights", "w.safetensors", "x_flat.npy", "-o", "p.npy"],
                       env={}, cwd=d)
    check("a copy in an empty directory runs with an empty environment",
          rc == 0 and np.load(os.path.join(d, "p.npy")).tobytes() == np.load(pred).tobytes(), out + err)
    rc, out, err = run(["ldd", os.path.join(d, "mlp")])
    libs = re.findall(r"^\s*(\S+)", out, re.M)
    if SAN:   # the sanitizers' runtimes come with libstdc++
        out = re.sub(r".*(libasan|libubsan|libstdc\+\+|libgcc_s).*\n", "", out)
    check("ldd: no LLVM, Clang, Kiln, BLIS or zlib library (%s)" % " ".join(libs),
          rc == 0 and not re.search(r"llvm|clang|kiln|blis|libz\.|ffi|plplot|stdc\+\+", out, re.I), out)
    shutil.rmtree(d, ignore_errors=True)


def library(mlp):
    exe, ref, pred = mlp
    lib = os.path.join(TMP, "lib", "libmlp")
    os.makedirs(os.path.dirname(lib), exist_ok=True)
    rc, out, err = run([KILN, "build", os.path.join(ROOT, "examples", "mlp.kiln"), "--lib", "-o", lib, "--target-cpu=native"])
    files = ["libmlp.a", "libmlp.so", "mlp.h"]
    check("--lib makes %s" % ", ".join(files),
          rc == 0 and all(os.path.exists(os.path.join(TMP, "lib", f)) for f in files), err[-2000:])
    if rc:
        return
    raw = os.path.join(TMP, "x5.f32")
    np.load(os.path.join(TMP, "x_flat.npy"))[:5].astype("<f4").tofile(raw)
    want = np.load(pred)[:5]
    main_c = os.path.join(ROOT, "examples", "embed", "main.c")
    links = {
        "static": [os.path.join(TMP, "lib", "libmlp.a"), "-lblis", "-lz", "-lm", "-lmvec", "-lpthread", "-fopenmp"],
        "shared": ["-L" + os.path.join(TMP, "lib"), "-lmlp", "-Wl,-rpath," + os.path.join(TMP, "lib")],
    }
    for kind, flags in links.items():
        if SAN:   # a sanitized runtime inside: the program links the sanitizers' runtimes first
            flags = flags + ["-fsanitize=address,undefined"]
        prog = os.path.join(TMP, "embed_" + kind)
        rc, out, err = run(["cc", "-O2", "-I", os.path.join(TMP, "lib"), main_c, "-o", prog] + flags)
        check("examples/embed compiles against libmlp (%s)" % kind, rc == 0, err[-2000:])
        if rc:
            continue
        rc, out, err = run([prog, ref, raw])
        rows = [l.split(":")[2].split() for l in out.splitlines() if l.startswith("example ")]
        got = np.array(rows, np.float32) if rows else np.zeros(0)
        check("examples/embed (%s) predicts as the binary, to the bit, and trains a step" % kind,
              rc == 0 and got.shape == want.shape and got.tobytes() == want.tobytes() and "loss" in out, out + err)


def input_formats(mlp):
    """IDX and CSV inputs give what the same rows as .npy give."""
    exe, ref, pred = mlp
    idx = os.path.join(FM, "t10k-images-idx3-ubyte.gz")
    out = os.path.join(TMP, "pred_idx.npy")
    rc, o, err = run([exe, "predict", "--threads", "1", "--batch", str(NPRED), "--weights", ref, idx, "-o", out])
    ok = rc == 0 and np.load(out).shape == (256, 10) and np.load(out)[:NPRED].tobytes() == np.load(pred).tobytes()
    check("predict reads an IDX file (normalized as the data statement says)", ok, o + err)
    x = np.load(os.path.join(TMP, "x_flat.npy"))[:5]
    csv, npy5 = os.path.join(TMP, "x5.csv"), os.path.join(TMP, "x5.npy")
    with open(csv, "w") as f:
        for r in x:
            f.write(",".join("%.9g" % v for v in r) + "\n")
    np.save(npy5, x)
    rc1, o1, e1 = run([exe, "predict", "--threads", "1", "--weights", ref, csv, "-o", out])
    a = np.load(out) if rc1 == 0 else None
    rc2, o2, e2 = run([exe, "predict", "--threads", "1", "--weights", ref, npy5, "-o", out])
    ok = rc1 == 0 and rc2 == 0 and a.tobytes() == np.load(out).tobytes()
    check("predict reads a CSV file", ok, o1 + e1 + o2 + e2)
    rc, o, err = run([exe, "predict", "--threads", "1", "--weights", ref, npy5])
    check("predict without -o prints the values", rc == 0 and o.startswith("[[") and o.count("[") == 6, o + err)
    # Another dtype than the input's is converted as training converts its data:
    # NumPy's default float64, and uint8 pixels (Fashion-MNIST's own bytes, scaled in the model).
    ref5 = np.load(out) if rc2 == 0 else None
    npy64 = os.path.join(TMP, "x5_f64.npy")
    np.save(npy64, x.astype(np.float64))
    rc, o, err = run([exe, "predict", "--threads", "1", "--weights", ref, npy64, "-o", out])
    check("predict converts a float64 file to the input's f32 (the same outputs)",
          rc == 0 and ref5 is not None and np.load(out).tobytes() == ref5.tobytes(), o + err)
    # An array of an .npz archive (np.savez_compressed: deflated, Zip64 local headers).
    npz = os.path.join(TMP, "x5.npz")
    np.savez_compressed(npz, x=x, other=np.zeros(3))
    rc, o, err = run([exe, "predict", "--threads", "1", "--weights", ref, npz + ":x", "-o", out])
    check("predict reads ARCHIVE.npz:NAME", rc == 0 and ref5 is not None and np.load(out).tobytes() == ref5.tobytes(),
          o + err)
    rc, o, err = run([exe, "predict", "--threads", "1", "--weights", ref, npz, "-o", out])
    check("predict on an archive of two arrays asks for a name",
          rc == 1 and "holds 2 arrays: name one, as %s:x" % npz in err, o + err)
    one = os.path.join(TMP, "x5one.npz")
    np.savez(one, inputs=x)
    rc, o, err = run([exe, "predict", "--threads", "1", "--weights", ref, one, "-o", out])
    check("predict reads an archive of one array without its name",
          rc == 0 and ref5 is not None and np.load(out).tobytes() == ref5.tobytes(), o + err)


def resume(lr):
    """Two epochs at once, one and then one more with --resume, and kiln run --resume of
    the binary's checkpoint: the same weights."""
    exe = lr[0]
    p = lambda n: os.path.join(TMP, n)
    common = ["--data", FM, "--threads", "1", "--progress", "lines", "--eval-examples", "50"]
    r1 = run([exe, "train", "--epochs", "2", "--out", p("two.safetensors")] + common)
    r2 = run([exe, "train", "--epochs", "1", "--out", p("one.safetensors")] + common)
    r3 = run([exe, "train", "--epochs", "2", "--resume", p("one.safetensors"), "--out", p("resumed.safetensors")] + common)
    ok = all(r[0] == 0 for r in (r1, r2, r3))
    diff = same_tensors(load_st(p("two.safetensors")), load_st(p("resumed.safetensors"))) if ok else "a run failed"
    check("binary: train --resume continues to the same weights", ok and not diff, diff + r3[1] + r3[2])
    src = p("lr_resume.kiln")
    with open(src, "w") as f:
        f.write(example_text("logreg") + '\nsave "%s"\n' % p("kiln_resumed.safetensors"))
    rc, out, err = run([KILN, "run", src, "--threads", "1", "--epochs", "2", "--eval-examples", "50",
                        "--resume", p("one.safetensors"), "--progress", "lines"])
    diff = same_tensors(load_st(p("two.safetensors")), load_st(p("kiln_resumed.safetensors"))) if rc == 0 else "kiln run failed"
    check("kiln run --resume continues a binary's checkpoint to the same weights", not diff, diff + out + err[-2000:])


def interrupt(lr):
    """Ctrl-C stops training, saves the checkpoint, exit status 130."""
    import signal
    import time
    exe = lr[0]
    out = os.path.join(TMP, "stopped.safetensors")
    pr = subprocess.Popen([exe, "train", "--data", FM, "--epochs", "100000", "--progress", "lines", "--out", out],
                          cwd=TMP, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    pr.send_signal(signal.SIGINT)
    o, e = pr.communicate(timeout=60)
    check("binary: Ctrl-C saves the checkpoint and exits with 130",
          pr.returncode == 130 and os.path.exists(out) and "interrupted" in e, "rc %d\n%s" % (pr.returncode, e[-1500:]))


def no_training():
    """A program that only computes: two inputs, no parameters, no train statement."""
    src = os.path.join(TMP, "two.kiln")
    with open(src, "w") as f:
        f.write("input b : f32[B, 2]\ninput a : f32[B, 2]\noutput = a * 2 - b\ntotal = sum(a, axis=0)\n")
    exe = os.path.join(TMP, "two")
    rc, out, err = build(src, exe)
    check("a program without parameters or training builds", rc == 0, err)
    if rc:
        return
    rc, out, err = run([exe, "info"])
    check("info lists the inputs in declaration order", rc == 0 and re.search(r"b : f32\[B, 2\]\n  a : ", out), out + err)
    a, b = np.arange(6, dtype=np.float32).reshape(3, 2), np.float32(0.5) + np.ones((3, 2), np.float32)
    np.save(os.path.join(TMP, "in_a.npy"), a)
    np.save(os.path.join(TMP, "in_b.npy"), b)
    res = os.path.join(TMP, "two_out.npy")
    rc, out, err = run([exe, "predict", os.path.join(TMP, "in_b.npy"), os.path.join(TMP, "in_a.npy"), "-o", res])
    check("predict takes the inputs in that order and needs no weights",
          rc == 0 and np.array_equal(np.load(res), a * 2 - b), out + err)
    rc, out, err = run([exe, "train"])
    check("train without a train statement is an error", rc == 1 and "no train statement" in err, out + err)
    rc, out, err = build(src, exe + "_total", "--output", "total")
    rc2, out2, err2 = run([exe + "_total", "predict", "--batch", "2", os.path.join(TMP, "in_a.npy")]) if rc == 0 else (1, "", "")
    check("--output: a value without a row per example is computed in one call",
          rc == 0 and rc2 == 0 and out2.strip() == "[6, 9]", err + out2 + err2)


def state_and_dropout():
    """Batch-norm statistics (state the step updates), dropout (salted by the step number),
    AdamW with a cosine schedule and warmup, and clipping: the binary trains as kiln run."""
    text = ('import "nn"\ndata fm = idx("%s", normalize=true)\ninput x : f32[B, 784]\ninput y : i32[B]\n'
            "h = dropout(relu(batchnorm(dense(x, 32))), 0.3)\nlogits = dense(h, 10)\n"
            "loss = mean(softmax_cross_entropy(logits, y))\n"
            'train loss on fm.train with adamw(lr=3e-3), batch=32, epochs=2, seed=4, schedule="cosine", warmup=3, clip=1\n'
            "evaluate accuracy(logits, y) on fm.test\n" % FM)
    src, ref, binw = (os.path.join(TMP, n) for n in ("bn.kiln", "bn_ref.safetensors", "bn_bin.safetensors"))
    with open(src, "w") as f:
        f.write(text + 'save "%s"\n' % ref)
    r1 = run([KILN, "run", src, "--threads", "1", "--progress", "lines", "--eval-examples", "64"])
    exe = os.path.join(TMP, "bn")
    r2 = build(src, exe, "--target-cpu=native")
    r3 = run([exe, "train", "--threads", "1", "--progress", "lines", "--eval-examples", "64", "--out", binw]) if not r2[0] else r2
    ok = r1[0] == 0 and r3[0] == 0
    diff = same_tensors(load_st(ref), load_st(binw)) if ok else "a run failed"
    acc = re.search(r"^accuracy: (\S+)$", r1[1], re.M), re.search(r"^accuracy: (\S+)$", r3[1], re.M)
    check("batch norm, dropout, AdamW, cosine schedule, clipping: the binary trains as kiln run, bit for bit",
          ok and not diff and acc[0] and acc[1] and acc[0].group(1) == acc[1].group(1),
          diff + "\n" + r1[1] + r1[2][-1500:] + r3[1] + r3[2][-1500:])


def bad_inputs(mlp):
    exe, ref, pred = mlp
    x = os.path.join(TMP, "x_flat.npy")

    def bad(name, args, pattern, want_rc=1):
        rc, out, err = run([exe] + args)
        check("bad input: %s -> exit %d and a message" % (name, want_rc),
              rc == want_rc and re.search(pattern, err), "rc %d\n%s%s" % (rc, out, err))

    np.save(os.path.join(TMP, "wrong_shape.npy"), np.zeros((4, 783), np.float32))
    np.save(os.path.join(TMP, "scalar.npy"), np.float32(1))
    with open(os.path.join(TMP, "corrupt.safetensors"), "wb") as f:
        f.write(open(ref, "rb").read()[:1000])
    with open(os.path.join(TMP, "garbage.npy"), "wb") as f:
        f.write(b"not an npy file at all")
    bad("wrong shape", ["predict", "--weights", ref, os.path.join(TMP, "wrong_shape.npy")], r"error: .*784.*783")
    bad("a 0-d input", ["predict", "--weights", ref, os.path.join(TMP, "scalar.npy")], r"error: ")
    bad("not an .npy file", ["predict", "--weights", ref, os.path.join(TMP, "garbage.npy")], r"error: .*garbage\.npy")
    bad("missing input file", ["predict", "--weights", ref, os.path.join(TMP, "nope.npy")], r"error: .*nope\.npy")
    bad("missing weights file", ["predict", "--weights", os.path.join(TMP, "nope.safetensors"), x], r"error: .*nope\.safetensors")
    bad("corrupt weights file", ["predict", "--weights", os.path.join(TMP, "corrupt.safetensors"), x], r"error: .*corrupt\.safetensors")
    bad("another model's weights", ["predict", "--weights", other_weights(), x], r"error: .*no tensor")
    bad("no weights", ["predict", x], r"no weights")
    bad("no input", ["predict", "--weights", ref], r"takes 1 input file")
    bad("bad training data dir", ["train", "--data", os.path.join(TMP, "nowhere"), "--max-steps", "1"], r"error: .*nowhere")
    # labels past the 10 classes: the loss is NaN, training stops and saves nothing
    badfm = os.path.join(TMP, "badlabels")
    os.makedirs(badfm, exist_ok=True)
    for split, n in (("train", 64), ("t10k", 32)):
        write_idx(os.path.join(badfm, "%s-images-idx3-ubyte.gz" % split), np.zeros((n, 28, 28), np.uint8), 8)
        write_idx(os.path.join(badfm, "%s-labels-idx1-ubyte.gz" % split), np.full(n, 12, np.uint8), 8)
    nan_out = os.path.join(TMP, "nan.safetensors")
    bad("labels outside the classes", ["train", "--data", badfm, "--out", nan_out],
        r"error: the loss became nan at epoch 1, step 1, and training stopped")
    check("a NaN loss saves no checkpoint", not os.path.exists(nan_out))
    bad("train --out into a missing directory (said before training)",
        ["train", "--out", os.path.join(TMP, "nowhere", "w.safetensors")], r"error: .*nowhere/w\.safetensors: cannot save here")
    bad("unknown command", ["fly"], r"unknown command", 2)
    bad("bad number", ["train", "--epochs", "zero"], r"--epochs needs a number from 1", 2)
    bad("bad progress", ["train", "--progress", "dots"], r"--progress is bar or lines", 2)
    rc, out, err = run([KILN, "build", os.path.join(TMP, "missing.kiln"), "-o", os.path.join(TMP, "x")])
    check("kiln build: a missing program is an error", rc == 1 and "cannot read" in err, err)
    rc, out, err = run([KILN, "build", os.path.join(ROOT, "examples", "intro.kiln"), "-o", os.path.join(TMP, "x")])
    check("kiln build: a program with nothing to predict or train is an error", rc == 1 and "nothing to build" in err, err)
    rc, out, err = run([KILN, "build", os.path.join(ROOT, "examples", "mlp.kiln"), "-o", os.path.join(TMP, "nowhere", "x")])
    check("kiln build: an output directory that is not there is said before compiling",
          rc != 0 and "nowhere/x: cannot save here: " in err and "No such file or directory" in err and "collect2" not in err, err)
    rc, out, err = run([KILN, "build", "--help"])
    check("kiln build --help says what the binary needs", rc == 0 and "libc" in out and "--target-cpu" in out, out + err)


def main():
    if not KILN:
        print(__doc__)
        sys.exit(2)
    make_data()
    results = {}
    for name in ("logreg", "mlp", "cnn"):
        extras = ("embed", "lib", "bad", "clean", "portable", "input", "resume", "interrupt")
        if ONLY and ONLY not in name and ONLY not in extras:
            continue
        if ONLY in extras and name == "cnn":
            continue
        results[name] = example(name)
    mlp, lr = results.get("mlp"), results.get("logreg")
    if mlp:
        for fn in (embedded, portable, clean_dir, library, input_formats, bad_inputs):
            if not ONLY or ONLY in fn.__name__ or ONLY == "mlp":
                fn(mlp)
    if not ONLY or ONLY in "no_training":
        no_training()
    if not ONLY or ONLY in "state_and_dropout":
        state_and_dropout()
    if lr:
        for fn in (resume, interrupt):
            if not ONLY or ONLY in fn.__name__ or ONLY == "logreg":
                fn(lr)
    shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(TALLY.summary())


if __name__ == "__main__":
    main()
