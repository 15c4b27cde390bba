#!/usr/bin/env python3
"""End-to-end training tests: model files that train on small generated data
sets, through `kiln run`.

Usage: python3 tests/test_train.py build/kiln [NAME-SUBSTRING]

Covers: every loader format (IDX gz, CIFAR-10 binary, CSV, .npy), every
optimizer and schedule, clipping, dropout, batch norm, embeddings, the loss
going below a threshold, evaluate's output, checkpoints (safetensors, read
back by Python's safetensors package with identical values), load, --resume
giving bit-identical weights to an uninterrupted run, one seed giving
bit-identical weights twice, Ctrl-C saving a checkpoint, --log and --plot, the
errors for bad data, and conv2d's lowering choice (the cost model's picks
shown by `kiln ir`, lowering=, --tune writing and reusing its disk cache). Ends with "N passed, N failed".
"""
import gzip
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

import philox_ref
from kiln_testlib import Tally

KILN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
ONLY = sys.argv[2] if len(sys.argv) > 2 else None
TMP = tempfile.mkdtemp(prefix="kiln-train-")
TALLY = Tally()
check = TALLY.check


def kiln(src, *args, name="m.kiln", timeout=300, env=None):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(src)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([KILN, "run", path, "--progress", "lines"] + list(args), cwd=TMP, capture_output=True,
                       text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def metric(out, name):
    m = re.search(r"^%s: (\S+)$" % re.escape(name), out, re.M)
    return float(m.group(1)) if m else None


# ---- data sets ------------------------------------------------------------------
def blobs(n, d, classes, rng, spread=0.6):
    centers = rng.normal(0, 2, (classes, d))
    y = rng.integers(0, classes, n)
    x = centers[y] + rng.normal(0, spread, (n, d))
    return x.astype(np.float32), y.astype(np.int32)


def write_idx(path, arr, code):
    head = struct.pack(">BBBB", 0, 0, code, arr.ndim) + b"".join(struct.pack(">I", s) for s in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(head + arr.astype(">u1" if code == 8 else ">f4").tobytes())


def make_data():
    rng = np.random.default_rng(7)
    x, y = blobs(600, 6, 3, rng)
    xt, yt = x[:500], y[:500]
    xv, yv = x[500:], y[500:]
    np.save(os.path.join(TMP, "x.npy"), xt)
    np.save(os.path.join(TMP, "y.npy"), yt)
    np.save(os.path.join(TMP, "xv.npy"), xv)
    np.save(os.path.join(TMP, "yv.npy"), yv)
    for nm, xx, yy in (("train.csv", xt, yt), ("test.csv", xv, yv)):
        with open(os.path.join(TMP, nm), "w") as f:
            f.write("f1,f2,f3,f4,f5,f6,label\n")
            for r, l in zip(xx, yy):
                f.write(",".join("%.6g" % v for v in r) + ",%d\n" % l)
    # images: class k has a bright k-th quadrant (8x8 pictures)
    imgs = rng.integers(0, 60, (400, 8, 8)).astype(np.uint8)
    lab = rng.integers(0, 4, 400).astype(np.uint8)
    for i, k in enumerate(lab):
        r, c = divmod(int(k), 2)
        imgs[i, 4 * r:4 * r + 4, 4 * c:4 * c + 4] += 150
    os.makedirs(os.path.join(TMP, "idx"), exist_ok=True)
    for split, sl in (("train", slice(0, 320)), ("t10k", slice(320, 400))):
        write_idx(os.path.join(TMP, "idx", "%s-images-idx3-ubyte.gz" % split), imgs[sl], 8)
        write_idx(os.path.join(TMP, "idx", "%s-labels-idx1-ubyte.gz" % split), lab[sl], 8)
    # CIFAR-10 records: a label byte, 3x32x32 pixels; class k brightens channel k % 3
    os.makedirs(os.path.join(TMP, "cifar"), exist_ok=True)
    for name, n in [("data_batch_%d.bin" % i, 40) for i in range(1, 6)] + [("test_batch.bin", 50)]:
        recs = bytearray()
        for _ in range(n):
            k = int(rng.integers(0, 3))
            px = rng.integers(0, 80, (3, 32, 32)).astype(np.uint8)
            px[k] += 120
            recs += bytes([k]) + px.tobytes()
        with open(os.path.join(TMP, "cifar", name), "wb") as f:
            f.write(bytes(recs))
    # token ids: the class is which of 5 ids appears most
    ids = rng.integers(0, 20, (400, 4)).astype(np.int32)
    cls = rng.integers(0, 3, 400).astype(np.int32)
    ids[:, :3] = cls[:, None] * 5 + rng.integers(0, 5, (400, 3))
    np.save(os.path.join(TMP, "ids.npy"), ids)
    np.save(os.path.join(TMP, "cls.npy"), cls)


CSV_MODEL = """import "nn"
data d = csv(train="train.csv", test="test.csv", label=-1)
input x : f32[B, 6]
input y : i32[B]
logits = dense(relu(dense(x, 16)), 3)
loss = mean(softmax_cross_entropy(logits, y))
train loss on d.train with %s, batch=32, epochs=%d, seed=3%s
evaluate accuracy(logits, y), loss on d.test
"""


def json_list(text):
    import json
    return json.loads(text)


def weights(path):
    from safetensors.numpy import load_file
    return load_file(path)


def same_weights(a, b):
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


# ---- tests ------------------------------------------------------------------------
def t_optimizers():
    for opt, extra in (("sgd(lr=0.1)", ""), ("sgd(lr=0.05, momentum=0.9)", ""),
                       ("sgd(lr=0.05, momentum=0.9, nesterov=true, weight_decay=1e-4)", ", schedule=\"step\", step_size=2, gamma=0.5"),
                       ("adam(lr=0.01)", ", clip=1.0"), ("adamw(lr=0.01, weight_decay=0.05)", ", schedule=\"cosine\", warmup=5"),
                       ("adam(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-7)", "")):
        rc, out, err = kiln(CSV_MODEL % (opt, 6, extra), "--log", "log.csv")
        acc, loss = metric(out, "accuracy"), metric(out, "loss")
        ok = rc == 0 and acc is not None and acc > 0.9 and loss is not None and loss < 0.35
        check("trains with %s%s: accuracy %s, loss %s" % (opt, extra, acc, loss), ok, err[-2000:])
        rows = open(os.path.join(TMP, "log.csv")).read().splitlines() if os.path.exists(os.path.join(TMP, "log.csv")) else []
        last = [r for r in rows if ",loss," in r]
        check("--log has a header and per-step rows (%s)" % opt, rows[:1] == ["epoch,step,name,value"] and
              len(last) == 6 * 16 and sum(",train_loss," in r for r in rows) == 6 and
              sum(",eval_accuracy," in r for r in rows) == 6 and sum(",eval_loss," in r for r in rows) == 6,
              "\n".join(rows[:3]))


def t_formats():
    src = """import "nn"
data d = npy(train=["x.npy", "y.npy"], test=["xv.npy", "yv.npy"])
input x : f32[B, 6]
input y : i32[B]
logits = dense(x, 3)
train mean(softmax_cross_entropy(logits, y)) on d.train with sgd(lr=0.2), batch=50, epochs=5
evaluate accuracy(logits, y) on d.test
"""
    rc, out, err = kiln(src)
    check("npy columns train", rc == 0 and (metric(out, "accuracy") or 0) > 0.9, out + err[-1500:])
    # NumPy's narrow types (uint8 pixels, int16, float16, uint8 labels) are read widened,
    # exactly: the same training as from the f32 and int32 copies of the same values.
    rng = np.random.default_rng(11)
    pix = rng.integers(0, 256, (120, 6)).astype(np.uint8)
    lab = (pix[:, 0] > 127).astype(np.uint8)
    for name, arr in (("pu1", pix), ("pi2", pix.astype(np.int16) - 128), ("pf2", pix.astype(np.float16)),
                      ("pf4", pix.astype(np.float32)), ("lu1", lab), ("li4", lab.astype(np.int32))):
        np.save(os.path.join(TMP, name + ".npy"), arr)
    narrow = """import "nn"
data d = npy(["%s.npy", "%s.npy"])
input x : f32[B, 6]
input y : i32[B]
logits = dense((x + %d) / 255, 2)
train mean(softmax_cross_entropy(logits, y)) on d with sgd(lr=0.5), batch=20, epochs=3, seed=4
save "%s.safetensors"
"""
    got = {}
    for xs, ys, shift in (("pf4", "li4", 0), ("pu1", "lu1", 0), ("pi2", "lu1", 128), ("pf2", "li4", 0)):
        rc, out, err = kiln(narrow % (xs, ys, shift, xs))
        got[xs] = weights(os.path.join(TMP, xs + ".safetensors")) if rc == 0 else None
        if xs != "pf4":
            same = got[xs] is not None and got["pf4"] is not None and \
                all(np.array_equal(got[xs][k], got["pf4"][k]) for k in got["pf4"])
            check("npy %s pixels and %s labels train exactly as their f32 and i32 copies" % (
                {"pu1": "uint8", "pi2": "int16", "pf2": "float16"}[xs], "uint8" if ys == "lu1" else "int32"),
                same, err[-800:])
    # .npz archives: np.savez (stored) and np.savez_compressed (deflated, Zip64 headers),
    # the whole archive or ARCHIVE:NAME members, train exactly as the .npy files.
    np.savez(os.path.join(TMP, "st.npz"), pf4=np.load(os.path.join(TMP, "pf4.npy")),
             li4=np.load(os.path.join(TMP, "li4.npy")))
    np.savez_compressed(os.path.join(TMP, "cz.npz"), y=np.load(os.path.join(TMP, "li4.npy")),
                        x=np.load(os.path.join(TMP, "pu1.npy")))
    for tag, files in (("np.savez archive", '"st.npz"'), ("np.savez_compressed members", '"cz.npz:x", "cz.npz:y"')):
        rc, out, err = kiln(narrow.replace('"%s.npy", "%s.npy"', files) % (0, "npz"))
        w = weights(os.path.join(TMP, "npz.safetensors")) if rc == 0 else None
        check("npz: %s trains exactly as the .npy files" % tag, w is not None and got["pf4"] is not None and
              all(np.array_equal(w[k], got["pf4"][k]) for k in got["pf4"]), err[-800:])
    raw = bytearray(open(os.path.join(TMP, "cz.npz"), "rb").read())
    raw[60] ^= 0xFF   # inside the first member's deflated data
    open(os.path.join(TMP, "bad.npz"), "wb").write(raw)
    open(os.path.join(TMP, "cut.npz"), "wb").write(raw[:len(raw) // 2])
    for name, want in (("bad.npz", "bad.npz: y: "), ("cut.npz", "cut.npz: not a readable .npz archive"),
                       ("cz.npz:z", "cz.npz: no array named 'z' (it has y, x)")):
        rc, out, err = kiln('data d = npy(["%s"])\ninput x : f32[B, 6]\nevaluate sum(x) on d.train\n' % name)
        check("npz: %s is an error" % name, rc == 1 and want in err, err[-800:])
    src = """import "nn"
data im = idx("idx", normalize=true)
input x : f32[B, 1, 8, 8]
input y : i32[B]
h = maxpool2d(relu(conv(x, 4, 3)), 2)
logits = dense(flatten(h), 4)
train mean(softmax_cross_entropy(logits, y)) on im.train with adam(lr=0.02), batch=16, epochs=4, seed=2
evaluate accuracy(logits, y) on im.test
"""
    rc, out, err = kiln(src)
    check("IDX (gzip) images train a conv net", rc == 0 and (metric(out, "accuracy") or 0) > 0.9, out + err[-1500:])
    src = """import "nn"
data c = cifar10("cifar", normalize=true)
input x : f32[B, 3, 32, 32]
input y : i32[B]
h = avgpool2d(relu(batchnorm(conv(x, 4, 3, stride=2))), 4)
logits = dense(dropout(flatten(h), 0.1), 3)
train mean(softmax_cross_entropy(logits, y)) on c.train with adam(lr=0.02), batch=20, epochs=5, seed=2
evaluate accuracy(logits, y) on c.test, batch=7
save "bn.safetensors"
"""
    rc, out, err = kiln(src)
    check("CIFAR-10 batches train with batchnorm and dropout", rc == 0 and (metric(out, "accuracy") or 0) > 0.8,
          out + err[-1500:])
    if rc == 0:
        w = weights(os.path.join(TMP, "bn.safetensors"))
        mean, var = w.get("batchnorm.1.mean"), w.get("batchnorm.1.var")
        check("batch norm's running statistics moved and were saved", mean is not None and var is not None and
              np.abs(mean).sum() > 0 and not np.allclose(var, 1), str(sorted(w)))
    src = """import "nn"
data t = npy(["ids.npy", "cls.npy"])
input ids : i32[B, 4]
input y : i32[B]
e = embedding(ids, 20, 8)
logits = dense(flatten(e), 3)
train mean(softmax_cross_entropy(logits, y)) on t with adam(lr=0.05), batch=40, epochs=8, seed=1
evaluate accuracy(logits, y) on t.train
"""
    rc, out, err = kiln(src)
    check("embedding lookup trains (scatter-add gradient)", rc == 0 and (metric(out, "accuracy") or 0) > 0.9,
          out + err[-1500:])

    # Sizes from dim() in shape lists: reshape(x, [dim(x, 0), -1]) and zeros([dim(x, 0), 3])
    # train exactly as reshape(x, [-1, ...]) without the zeros.
    sym = """import "nn"
data t = npy(["ids.npy", "cls.npy"])
input ids : i32[B, 4]
input y : i32[B]
e = embedding(ids, 20, 8)
logits = dense(%s, 3)%s
train mean(softmax_cross_entropy(logits, y)) on t with adam(lr=0.05), batch=40, epochs=2, seed=1
save "%s.safetensors"
"""
    rc1, o1, e1 = kiln(sym % ("reshape(e, [-1, 32])", "", "flat"))
    rc2, o2, e2 = kiln(sym % ("reshape(e, [dim(e, 0), 2 * dim(e, 1) * 4])", " + zeros([dim(ids, 0), 3])", "symb"))
    same = rc1 == 0 and rc2 == 0 and same_weights(os.path.join(TMP, "flat.safetensors"), os.path.join(TMP, "symb.safetensors"))
    check("dim() of the batch in shape lists trains as -1 does", same, e1[-600:] + e2[-600:])
    rc, out, err = kiln('data t = npy(["ids.npy", "cls.npy"])\ninput ids : i32[B, 4]\ninput y : i32[B]\n'
                        'evaluate mean(ids), mean(y), mean(ids * 2) on t.train\n')
    names = [l.split(":")[0] for l in out.splitlines()]
    check("evaluate names repeated metrics apart (mean, mean.2, mean.3)", rc == 0 and names == ["mean", "mean.2", "mean.3"],
          out + err[-600:])
    # evaluate ... save=: a row per example, in the split's order, across batches and a remainder
    ids = np.load(os.path.join(TMP, "ids.npy"))
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    rc, out, err = kiln('data t = npy(["ids.npy", "cls.npy"])\ninput ids : i32[B, 4]\n'
                        'param W : f32[4, 3] = reshape(arange(12), [4, 3]) / 10\n'
                        'evaluate cast(ids, f32) @ W on t.train, save="rows.npy", batch=7\n'
                        'evaluate ids[:, 0] on t.train, save="first.npy"\n')
    rows = np.load(os.path.join(TMP, "rows.npy")) if rc == 0 else None
    first = np.load(os.path.join(TMP, "first.npy")) if rc == 0 else None
    check("evaluate save= writes every example's row in order (f32 [N, 3], i32 [N])",
          rows is not None and rows.shape == (len(ids), 3) and np.allclose(rows, ids.astype(np.float32) @ w, rtol=1e-6)
          and first.dtype == np.int32 and np.array_equal(first, ids[:, 0]) and "saved to rows.npy" in out, out + err[-600:])


def t_checkpoints():
    base = CSV_MODEL % ("adam(lr=0.01)", 4, "") + 'save "a.safetensors"\nprint parameter("dense.2.W")\n'
    rc, out, err = kiln(base, "--threads", "1")
    acc = metric(out, "accuracy")
    shutil.copy(os.path.join(TMP, "a.safetensors"), os.path.join(TMP, "a1.safetensors"))
    rc2, out2, _ = kiln(base, "--threads", "1")
    check("one seed gives bit-identical weights twice (1 thread)", rc == 0 and rc2 == 0 and
          same_weights(os.path.join(TMP, "a.safetensors"), os.path.join(TMP, "a1.safetensors")))
    w = weights(os.path.join(TMP, "a.safetensors"))
    printed = np.array(json_list(out.strip().splitlines()[-1]))
    check("Python's safetensors reads the values Kiln trained", "dense.2.W" in w and
          printed.shape == w["dense.2.W"].shape and np.allclose(printed, w["dense.2.W"], rtol=1e-5, atol=1e-7),
          out[-400:])
    check("checkpoint holds parameters, optimizer state and names by call site",
          {"dense.1.W", "dense.1.b", "dense.2.W", "dense.2.b", "optimizer.m.dense.1.W", "optimizer.v.dense.2.b"} <= set(w),
          str(sorted(w)))
    from safetensors import safe_open
    with safe_open(os.path.join(TMP, "a.safetensors"), "np") as f:
        meta = f.metadata()
    check("checkpoint metadata (optimizer, step, epoch)", meta.get("optimizer") == "adam" and meta.get("epoch") == "4" and
          meta.get("step") == str(4 * 16), str(meta))
    # load into a fresh program: same evaluation, and printed values equal the file's
    src = """import "nn"
data d = csv(train="train.csv", test="test.csv")
input x : f32[B, 6]
input y : i32[B]
logits = dense(relu(dense(x, 16)), 3)
load "a.safetensors"
evaluate accuracy(logits, y) on d.test
print parameter("dense.2.W")
"""
    rc, out2, err = kiln(src)
    check("load restores the trained model (same accuracy)", rc == 0 and metric(out2, "accuracy") == acc,
          "%s vs %s %s" % (metric(out2, "accuracy"), acc, err[-500:]))
    check("save then load gives the same parameter values", rc == 0 and
          out2.strip().splitlines()[-1] == out.strip().splitlines()[-1], out2[-300:])
    # --resume: 2 epochs, then 2 more from the checkpoint == 4 epochs at once
    two = CSV_MODEL % ("adam(lr=0.01)", 2, "")
    rc1, _, e1 = kiln(two, "--threads", "1", "--checkpoint", "r.safetensors")
    rc2, _, e2 = kiln(two, "--threads", "1", "--resume", "r.safetensors", "--epochs", "4", "--checkpoint", "r.safetensors")
    rc3, _, e3 = kiln(two, "--threads", "1", "--epochs", "4", "--checkpoint", "full.safetensors")
    check("--resume continues at epoch 3", rc2 == 0 and "epoch 3/4" in e2 and "epoch 1/4" not in e2, e2[-800:])
    check("resumed training gives bit-identical weights to an uninterrupted run", rc1 == rc2 == rc3 == 0 and
          same_weights(os.path.join(TMP, "r.safetensors"), os.path.join(TMP, "full.safetensors")), e1 + e2 + e3)
    # two train statements in one file: the second runs its own epochs
    rc, out, err = kiln(CSV_MODEL % ("adam(lr=0.01)", 1, "") + "train loss on d.train with sgd(lr=0.01), epochs=2, warmup=4\n",
                        "--log", "two.csv")
    lines = [l for l in err.splitlines() if l.startswith("epoch ")]
    check("a second train statement runs all its epochs", rc == 0 and len(lines) == 3 and
          lines[-1].startswith("epoch 2/2"), err[-600:])
    lrs = [float(r.split(",")[3]) for r in open(os.path.join(TMP, "two.csv")).read().splitlines() if ",lr," in r] if rc == 0 else []
    check("a second train statement's schedule starts at its own first step", len(lrs) == 48 and lrs[16] == 0.0025 and
          lrs[19] == 0.01, str(lrs[14:22]))
    # Python's safetensors writes a file; Kiln loads it and prints the values.
    from safetensors.numpy import save_file
    W = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    save_file({"W": W, "b": np.array([0.5, -1.5, 2.0], np.float32)}, os.path.join(TMP, "py.safetensors"))
    rc, out, err = kiln('param W : f32[2, 3]\nparam b : f32[3]\nload "py.safetensors"\nprint W, b\n')
    got = re.findall(r"[-0-9.e]+", out)
    check("a file written by Python's safetensors loads in Kiln", rc == 0 and
          np.allclose([float(v) for v in got], list(W.ravel()) + [0.5, -1.5, 2.0], rtol=1e-5), out + err)
    rc, out, err = kiln('param W : f32[3, 3]\nload "py.safetensors"\n')
    check("loading a tensor of the wrong shape is an error", rc == 1 and "tensor 'W' is f32[2, 3], but the parameter is f32[3, 3]" in err, err)
    rc, out, err = kiln('param V : f32[3]\nload "py.safetensors"\n')
    check("a parameter missing from the file is an error", rc == 1 and "no tensor for 1 parameter: 'V'" in err, err)


def t_batchnorm_step():
    """One SGD step through batch_norm in training mode against NumPy: the
    gradients of gamma, beta and a weight through the batch statistics, and
    the running statistics' update."""
    rng = np.random.default_rng(3)
    x = rng.normal(1.0, 2.0, (8, 3)).astype(np.float32)
    y = np.zeros(8, np.int32)
    np.save(os.path.join(TMP, "bx.npy"), x)
    np.save(os.path.join(TMP, "by.npy"), y)
    W0 = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5], [-1.0, 1.0, 0.75]], np.float32)
    src = """data d = npy(["bx.npy", "by.npy"])
input x : f32[B, 3]
input y : i32[B]
param W : f32[3, 3] = %s
param gamma : f32[3] = [1.5, 0.5, 2]
param beta : f32[3] = [0.1, -0.2, 0.3]
state rm : f32[3] = zeros
state rv : f32[3] = ones
h = batch_norm(x @ W, rm, rv, gamma, beta, momentum=0.25, eps=0.001)
loss = mean(h ^ 2 * [1, 2, 3]) + 0 * cast(sum(y), f32)
train loss on d with sgd(lr=1), batch=8, epochs=1, shuffle=false
save "bn1.safetensors"
""" % np.array2string(W0, separator=", ")
    rc, out, err = kiln(src)
    if rc != 0:
        check("batch_norm training step runs", False, err[-1000:])
        return
    w = weights(os.path.join(TMP, "bn1.safetensors"))
    # NumPy reference, in float64
    x64, W, g, b = x.astype(np.float64), W0.astype(np.float64), np.array([1.5, 0.5, 2]), np.array([0.1, -0.2, 0.3])
    c = np.array([1.0, 2.0, 3.0])
    z = x64 @ W
    m, v = z.mean(0), z.var(0)
    zh = (z - m) / np.sqrt(v + 1e-3)
    h = zh * g + b
    n = h.size
    dh = 2 * h * c / n
    dg, db = (dh * zh).sum(0), dh.sum(0)
    dzh = dh * g
    dz = (dzh - dzh.mean(0) - zh * (dzh * zh).mean(0)) / np.sqrt(v + 1e-3)
    dW = x64.T @ dz
    ok = np.allclose(w["gamma"], g - dg, rtol=1e-4, atol=1e-5) and np.allclose(w["beta"], b - db, rtol=1e-4, atol=1e-5) \
        and np.allclose(w["W"], W - dW, rtol=1e-4, atol=1e-4)
    check("batch_norm's training-mode gradients match NumPy (one SGD step)", ok,
          "gamma %s vs %s\nW %s vs %s" % (w["gamma"], g - dg, w["W"].ravel(), (W - dW).ravel()))
    ok = np.allclose(w["rm"], 0.25 * m, rtol=1e-5, atol=1e-6) and \
        np.allclose(w["rv"], 0.75 + 0.25 * z.var(0, ddof=1), rtol=1e-5, atol=1e-6)
    check("batch_norm's running statistics move by momentum (unbiased variance)", ok, "%s %s" % (w["rm"], w["rv"]))


def t_dropout_masks():
    """In a training step dropout keeps the mean (scaling by 1/(1-p)) and draws
    a new mask every step; the loss per step is read from --log."""
    np.save(os.path.join(TMP, "ones.npy"), np.ones((256, 1000), np.float32))
    src = """data d = npy(["ones.npy"])
input x : f32[B, 1000]
param W : f32[3] = zeros
loss = mean(dropout(x, 0.3)) + 0 * sum(W)
zeros_frac = mean(cast(dropout(x, 0.3) == 0, f32))
train loss on d with sgd, batch=64, epochs=2
"""
    rc, out, err = kiln(src, "--log", "drop.csv")
    rows = [r.split(",") for r in open(os.path.join(TMP, "drop.csv")).read().splitlines()[1:]] if rc == 0 else []
    losses = [float(r[3]) for r in rows if r[2] == "loss"]
    ok = len(losses) == 8 and all(abs(v - 1) < 0.02 for v in losses) and len(set(losses)) == 8
    check("dropout keeps the expected value and draws a new mask each step", ok, "%s %s" % (losses, err[-500:]))


def t_random_streams():
    """uniform() and normal() as generated code computes them (inline, in
    vectorized loops) against a NumPy Philox (philox_ref.py): the same bits in
    f32 and f64, at one and two threads."""
    n = 4099
    seeds = {"u": 123456789012345, "d": 12, "z": 987654321098, "w": 14}
    src = (f"param u : f32[{n}] = uniform([{n}], seed={seeds['u']})\n"
           f"param d : f64[{n}] = uniform([{n}], seed={seeds['d']}, dtype=f64)\n"
           f"param z : f32[{n}] = normal([{n}], seed={seeds['z']})\n"
           f"param w : f64[{n}] = normal([{n}], seed={seeds['w']}, dtype=f64)\n"
           "save \"rand.safetensors\"\n")
    idx = np.arange(n, dtype=np.uint64)
    refs = {"u": philox_ref.uniform_f32, "d": philox_ref.uniform_f64, "z": philox_ref.normal_f32,
            "w": philox_ref.normal_f64}
    for threads in ("1", "2"):
        rc, out, err = kiln(src, "--threads", threads)
        got = weights(os.path.join(TMP, "rand.safetensors")) if rc == 0 else {}
        if not got:
            check("random streams: the program runs (%s threads)" % threads, False, err[-500:])
            continue
        for name, ref in refs.items():
            want = ref(seeds[name], idx)
            first = np.flatnonzero(got[name] != want)[:3]
            check("random streams: %s %s matches NumPy's Philox bit for bit (%s threads)" % (name, want.dtype, threads),
                  got[name].tobytes() == want.tobytes(), "first differences at %s: %s vs %s" % (first, got[name][first], want[first]))


def t_interrupt():
    big = CSV_MODEL % ("sgd(lr=0.01)", 100000, "")
    path = os.path.join(TMP, "long.kiln")
    with open(path, "w") as f:
        f.write(big)
    p = subprocess.Popen([KILN, "run", path, "--progress", "lines", "--checkpoint", "int.safetensors"], cwd=TMP,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    ck = os.path.join(TMP, "int.safetensors")
    while time.time() < deadline and not os.path.exists(ck):
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    check("Ctrl-C stops training with status 130 and saves a checkpoint", p.returncode == 130 and
          "interrupted; checkpoint saved to int.safetensors" in err and os.path.exists(ck), "rc %s %s" % (p.returncode, err[-800:]))
    check("the interrupted run's summary says where it stopped", "stopped" in err, err[-400:])
    try:
        weights(ck)
        check("the interrupt checkpoint loads", True)
    except Exception as e:  # noqa: BLE001
        check("the interrupt checkpoint loads", False, str(e))


def t_cli_and_output():
    rc, out, err = kiln(CSV_MODEL % ("sgd(lr=0.1)", 5, ""), "--epochs", "2", "--batch", "100", "--lr", "0.2", "--seed", "9")
    lines = [l for l in err.splitlines() if l.startswith("epoch ")]
    check("--epochs overrides the train statement", rc == 0 and len(lines) == 2 and lines[-1].startswith("epoch 2/2"), err)
    check("one summary line per epoch when stderr is not a terminal", all("ex/s" in l and "loss" in l for l in lines), err)
    check("each epoch line says how much of its time went to waiting for batches",
          all(re.search(r" [0-9.]+ s \(data [0-9]+%\), accuracy", l) for l in lines), err)
    check("a final summary with time, throughput and the best metric",
          re.search(r"trained 2 epochs in [0-9.]+ s \([0-9]+ ex/s\); best accuracy", err) is not None, err)
    check("evaluate prints one 'name: value' line per metric", re.search(r"^accuracy: [0-9.]+\nloss: [0-9.]+$", out, re.M)
          is not None, out)
    rc, out, err = kiln(CSV_MODEL % ("adam(lr=0.01)", 2, ""), "--plot", "curves.png")
    png = os.path.join(TMP, "curves.png")
    if "without PLplot" in err:
        check("--plot says when PLplot is missing", rc == 0, err)
    else:
        check("--plot writes a PNG", rc == 0 and os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", err)


def t_errors():
    cases = [
        ('data d = idx("nowhere")\ninput x : f32[B, 4]\ninput y : i32[B]\nparam W : f32[4, 2]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d.train with sgd\n', "nowhere"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 5]\ninput y : i32[B]\nparam W : f32[5, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd\n', "examples of shape [6]"),
        ('data d = npy(["x.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd\n', "has 1 column"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[4, 6]\ninput y : i32[4]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd\n', "batch size name"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train softmax_cross_entropy(x @ W, y) on d with sgd\n', "must be a scalar"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with rmsprop\n', "unknown optimizer"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd, epoch=3\n', "no option 'epoch'"),
        ('data d = npy(["x.npy", "y.npy"])\nprint d.valid\n', "not .valid"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'evaluate accuracy(x @ W, y) on d\n', "d has no test split: give npy(train=..., test=...), or evaluate on d.train"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd(-0.1)\n', "lr must be a finite number >= 0"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd, epochs=1e300\n',
         "epochs must be a whole number from 0 to 2147483647"),
        # a fraction or a count past int was cast without a word (3e9 epochs wrapped to none)
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd, batch=2.5\n',
         "batch must be a whole number from 1 to 2147483647"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd, epochs=3000000000\n',
         "epochs must be a whole number from 0 to 2147483647"),
        ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd, seed=1e16\n',
         "seed must be a whole number from 0 to 9007199254740992"),
        ('data d = csv("bad.csv")\ninput x : f32[B, 2]\ninput y : i32[B]\nparam W : f32[2, 2]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd\n', "bad.csv:3"),
        # labels 1..2 for 2 classes: the loss is NaN at the first batch holding a 2, and
        # training stops there rather than carry NaN parameters on (and save them)
        ('data d = csv("badlabel.csv")\ninput x : f32[B, 2]\ninput y : i32[B]\nparam W : f32[2, 2]\n'
         'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd, batch=2, epochs=3, shuffle=false\nsave "nan.safetensors"\n',
         "the loss became nan at epoch 1, step 2, and training stopped"),
        ('data d = idx(train=["idx/bad-images.gz", "idx/train-labels-idx1-ubyte.gz"])\ninput x : f32[B, 64]\n'
         'input y : i32[B]\nparam W : f32[64, 2]\ntrain mean(softmax_cross_entropy(x @ W, y)) on d with sgd\n', "magic"),
    ]
    with open(os.path.join(TMP, "bad.csv"), "w") as f:
        f.write("1,2,0\n3,4,1\n5,x,1\n")
    with open(os.path.join(TMP, "badlabel.csv"), "w") as f:
        f.write("1,2,1\n3,4,1\n5,6,2\n7,8,1\n")
    with gzip.open(os.path.join(TMP, "idx", "bad-images.gz"), "wb") as f:
        f.write(b"\x01\x02\x08\x03" + b"\x00" * 40)
    for i, (src, want) in enumerate(cases):
        rc, out, err = kiln(src, name="err%d.kiln" % i)
        located = re.search(r"err%d\.kiln:\d+:\d+: error: " % i, err) is not None
        check("error %d names the problem (%s)" % (i, want), rc == 1 and want in err and located and "^" in err,
              "rc %d\n%s" % (rc, err))
    check("a NaN loss saves nothing after it", not os.path.exists(os.path.join(TMP, "nan.safetensors")))
    # Saves that would fail are said before training, not after it.
    prog = ('data d = npy(["x.npy", "y.npy"])\ninput x : f32[B, 6]\ninput y : i32[B]\nparam W : f32[6, 3]\n'
            'train mean(softmax_cross_entropy(x @ W, y)) on d with sgd%s\n%s')
    for what, src, want in (("a checkpoint", prog % (', checkpoint="nowhere/ck.safetensors"', ""),
                             "the checkpoint: nowhere/ck.safetensors: cannot save here: nowhere"),
                            ("a later save", prog % ("", 'print 1\nsave "nowhere/w.safetensors"\n'),
                             "this save would fail after training: nowhere/w.safetensors: cannot save here")):
        rc, out, err = kiln(src, name="early.kiln")
        check("%s into a missing directory is an error before the first step" % what,
              rc == 1 and want in err and "epoch 1/" not in err and re.search(r"early\.kiln:\d+:1: error", err), err)
    # The command line's counts and seed: whole numbers in range, or a clear refusal.
    for args, want in ((("--epochs", "2.5"), "--epochs needs a whole number from 1 to 2147483647, not '2.5'"),
                       (("--batch", "3000000000"), "--batch needs a whole number from 1 to 2147483647"),
                       (("--max-steps", "0"), "--max-steps needs a whole number from 1"),
                       (("--threads", "abc"), "--threads needs a whole number from 1 to 4096, not 'abc'"),
                       (("--seed", "-1"), "--seed needs a whole number from 0 to 18446744073709551615, not '-1'"),
                       (("--seed", "12x"), "--seed needs a whole number")):
        rc, out, err = kiln("print 1\n", *args, name="cli.kiln")
        check("kiln run %s refused: %s" % (" ".join(args), want), rc != 0 and want in err, "rc %d\n%s" % (rc, err))
    rc, out, err = kiln("print 1\n", "--seed", "18446744073709551615", "--threads", "2", name="cli.kiln")
    check("kiln run --seed 2^64-1 --threads 2 runs", rc == 0 and out.strip() == "1", "rc %d\n%s" % (rc, err))


CONV_LAYERS = """import "nn"
input x : f32[B, 1, 28, 28]
h = maxpool2d(relu(conv(x, 32, 5)), 2)
h = conv(h, 64, 5)
"""
TUNE_MODEL = """x = normal([4, 3, 8, 8], seed=1)
w = normal([5, 3, 3, 3], seed=2)
print sum(conv2d(x, w, pad=1) ^ 2)
"""
# The same layer on a parameter: its step computes the input's gradient too.
TUNE_PARAM_MODEL = """param x : f32[4, 3, 8, 8] = glorot
w = normal([5, 3, 3, 3], seed=2)
print sum(conv2d(x, w, pad=1) ^ 2)
"""


# Epilogue fusion (passes/epilogue.c) reorders nothing a value depends on and
# runs the same per-element arithmetic: training with it and without it
# (KILN_FUSE_EPILOGUE=0) must give the same weights, bit for bit, with 1 and 3
# threads (3: uneven blocks per thread), and the schedule must show the groups.
EPI_MODEL = """import "nn"
data d = csv(train="train.csv", test="test.csv", label=-1)
input x : f32[B, 6]
input y : i32[B]
logits = dense(tanh(dense(relu(dense(x, 200)), 96)), 3)
loss = mean(softmax_cross_entropy(logits, y))
train loss on d.train with adam(lr=0.01), batch=50, epochs=2, seed=5
evaluate accuracy(logits, y) on d.test
save "epi.safetensors"
"""


def t_epilogue_fusion():
    rc, out, err = kiln_ir(EPI_MODEL, "--after=epilogue")
    groups = [l for l in out.splitlines() if "[epilogue of k" in l]
    check("kiln ir --after=epilogue shows kernels run in GEMM epilogues", rc == 0 and len(groups) >= 6, out + err)
    rc, out, err = kiln_ir(EPI_MODEL, "--stats")
    check("kiln ir --stats names each product's epilogue", rc == 0 and "; epilogue k" in out, out + err)
    # batch 3: the products sized by B take their loops branch, the epilogue's kernels then run after them
    for threads, batch in (("1", "50"), ("3", "50"), ("2", "3")):
        got = []
        for fuse in ("1", "0"):
            rc, out, err = kiln(EPI_MODEL, "--threads", threads, "--batch", batch, env={"KILN_FUSE_EPILOGUE": fuse})
            path = os.path.join(TMP, "epi-%s.safetensors" % fuse)
            if rc == 0:
                shutil.move(os.path.join(TMP, "epi.safetensors"), path)
            got.append((rc, out, path))
        ok = all(r == 0 for r, _, _ in got) and same_weights(got[0][2], got[1][2]) and got[0][1] == got[1][1]
        check("epilogue fusion gives the same weights and output bit for bit (%s threads, batch %s)" % (threads, batch), ok,
              got[0][1] + got[1][1] + err[-2000:])


# Implicit im2col (runtime/gemm_win.c): the convolutions' products pack their
# windows from the image instead of reading a materialized window matrix, and
# the packed panels hold the same values, so training must give the same
# weights bit for bit as with KILN_IMPLICIT_IM2COL=0, with 1 and 3 threads;
# layers with padding, a stride, no padding, and the kernel lowering (whose
# gradient reads dy's windows) included.
WIN_MODEL = """import "nn"
data d = idx("idx", normalize=true)
input x : f32[B, 1, 8, 8]
input y : i32[B]
h = relu(conv(x, 6, 3))
h = relu(conv(h, 5, 3, stride=2, pad=1))
h = relu(conv(h, 4, 2, pad="valid", lowering="kernel"))
logits = dense(flatten(h), 4)
loss = mean(softmax_cross_entropy(logits, y))
train loss on d.train with adam(lr=0.01), batch=32, epochs=2, seed=3
evaluate accuracy(logits, y) on d.test
save "win.safetensors"
"""


def t_implicit_im2col():
    rc, out, err = kiln_ir(WIN_MODEL, "--after=lower")
    n = out.count("(implicit im2col)")
    check("kiln ir --after=lower shows products reading their windows from the image", rc == 0 and n >= 4, out + err)
    # The two im2col layers' bias gradients are the last rows of their kernels' (passes/biasgrad.c).
    n = out.count("A^T and a row of ones (the bias's gradient)")
    check("the im2col layers' bias gradients come out of their kernels' products (%d)" % n, rc == 0 and n == 2, out + err)
    rc, out, err = kiln_ir(WIN_MODEL, "--after=lower", env={"KILN_IMPLICIT_IM2COL": "0"})
    check("KILN_IMPLICIT_IM2COL=0 materializes the windows", rc == 0 and "(implicit im2col)" not in out and " im2col f32" in out,
          out + err)
    for threads in ("1", "3"):
        got = []
        for on in ("1", "0"):
            rc, out, err = kiln(WIN_MODEL, "--threads", threads, env={"KILN_IMPLICIT_IM2COL": on})
            path = os.path.join(TMP, "win-%s.safetensors" % on)
            if rc == 0:
                shutil.move(os.path.join(TMP, "win.safetensors"), path)
            got.append((rc, out, path))
        ok = all(r == 0 for r, _, _ in got) and same_weights(got[0][2], got[1][2]) and got[0][1] == got[1][1]
        check("implicit im2col gives the same weights and output bit for bit (%s threads)" % threads, ok,
              got[0][1] + got[1][1] + err[-2000:])


def t_profile():
    """--profile times each kernel of the training step: a table whose shares
    add up to 100%, GEMMs named with their epilogues; the weights are the same."""
    rc, out0, err0 = kiln(EPI_MODEL, "--threads", "2")
    path0 = os.path.join(TMP, "prof-0.safetensors")
    if rc == 0:
        shutil.move(os.path.join(TMP, "epi.safetensors"), path0)
    rc, out, err = kiln(EPI_MODEL, "--threads", "2", "--profile")
    lines = err.splitlines()
    head = [i for i, l in enumerate(lines) if l.startswith("profile: training step of ")]
    ok = rc == 0 and len(head) == 1 and " calls, " in lines[head[0]] and lines[head[0] + 1].split() == ["ms/call", "share", "kernel"]
    rows = []
    if ok:
        for l in lines[head[0] + 2:]:
            m = re.match(r"^ *([0-9.]+) +([0-9.]+)% +(.*)$", l)
            if not m:
                break
            rows.append((float(m.group(1)), float(m.group(2)), m.group(3)))
    total = sum(r[1] for r in rows)
    kernels = [r for r in rows if not r[2].endswith("under 0.5% each")]   # the last row may sum the rest
    check("--profile prints the training step's kernels by time, shares adding up to 100%",
          ok and len(kernels) >= 3 and abs(total - 100) < 1.5 and kernels == sorted(kernels, key=lambda r: -r[1]),
          err[-3000:])
    check("--profile names GEMMs and their epilogues", any("matmul (gemm)" in r[2] and "+ epilogue k" in r[2] for r in rows),
          err[-3000:])
    check("--profile does not change the results", rc == 0 and out == out0 and same_weights(path0, os.path.join(TMP, "epi.safetensors")),
          out0 + out)


def kiln_ir(src, *args, env=None):
    path = os.path.join(TMP, "ir.kiln")
    with open(path, "w") as f:
        f.write(src)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([KILN, "ir", path] + list(args), cwd=TMP, capture_output=True, text=True, timeout=300, env=e)
    return p.returncode, p.stdout, p.stderr


def t_conv_lowering():
    cache = os.path.join(TMP, "tune-cache")
    env = {"KILN_CACHE_DIR": cache}
    rc, out, err = kiln_ir(CONV_LAYERS, "--after=lower", env=env)
    notes = [l for l in out.splitlines() if l.startswith("# conv2d")]
    check("kiln ir shows each conv layer's lowering and why", rc == 0 and len(notes) == 2 and
          all("(why: cost model" in l for l in notes), out + err)
    # direct's generated loops decompose each window index with divisions, so
    # today im2col wins even for 1 input channel (see conv.c's measurements)
    check("the cost model lowers the 1-channel first layer to im2col and shows every estimate",
          any(l.startswith("# conv2d [B, 1, 28, 28] x [32, 1, 5, 5]: im2col+GEMM (why: cost model (batch taken as 32): im2col ")
              and ", kernel " in l and ", direct " in l for l in notes), out)
    check("the cost model lowers the 32-channel second layer to im2col",
          any(l.startswith("# conv2d [B, 32, 14, 14] x [64, 32, 5, 5]: im2col+GEMM") for l in notes), out)
    # The first layer reads the data: training never computes its input's
    # gradient, and the estimates leave it out; the second's input reaches the
    # first's weights.
    check("the first layer's estimate leaves out the input's gradient, the second's does not",
          len(notes) == 2 and notes[0].endswith("; no input gradient (x reaches no parameter))") and
          "no input gradient" not in notes[1], out)
    # CIFAR-shaped layers with many input channels: the kernel lowering (im2col's
    # costs with C and O swapped) for 8 outputs. For 16 outputs of 5x5, im2col,
    # whose products run as Winograd's F(4, 5) (6.25x fewer multiplies); without
    # it (KILN_WINOGRAD=0) its products are 16 columns wide and the GEMM's
    # micro-tile decides (the benchmark's measurements): a whole AVX2 tile, so
    # im2col, whose windows the GEMM packs from the image; half an AVX-512
    # tile, so the kernel lowering.
    # (Later layers: their input reaches a parameter, a.)
    few = ("input x0 : f32[B, 64, 8, 8]\nparam a : f32[64, 1, 1] = zeros\nx = x0 + a\n"
           "param K : f32[8, 64, 3, 3] = he\nparam L : f32[16, 64, 5, 5] = he\n"
           "y = conv2d(x, K, pad=\"same\")\nz = conv2d(x, L, pad=\"same\")\n")
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    kinds = [("kiln-avx2", "1", "im2col+GEMM"), ("kiln-avx2", "0", "im2col+GEMM")] if " avx2" in flags else []
    if " avx512f" in flags and " avx512vl" in flags:
        kinds += [("kiln-avx512", "1", "im2col+GEMM"), ("kiln-avx512", "0", "kernel lowering+GEMM+aggregate")]
    for gemm, wino, want in kinds:
        rc, out, err = kiln_ir(few, "--after=lower", env=dict(env, KILN_GEMM=gemm, KILN_WINOGRAD=wino))
        check("the cost model lowers 64->8 3x3 by the kernel and 64->16 5x5 by %s with KILN_GEMM=%s KILN_WINOGRAD=%s"
              % (want.split("+")[0], gemm, wino),
              rc == 0 and "x [8, 64, 3, 3]: kernel lowering+GEMM+aggregate (why: cost model" in out and
              "x [16, 64, 5, 5]: %s (why: cost model" % want in out, out + err)
    rc, out, err = kiln_ir(CONV_LAYERS.replace("conv(h, 64, 5)", "conv(h, 64, 5, lowering=\"kernel\")"), env=env)
    check("lowering= forces a lowering", rc == 0 and "x [64, 32, 5, 5]: kernel lowering+GEMM+aggregate (why: lowering= asked"
          in out, out + err)
    rc, out1, err = kiln(TUNE_MODEL, "--tune", env=env)
    entries = [f for f in os.listdir(cache) if f.startswith("conv-")] if os.path.isdir(cache) else []
    check("--tune times each lowering and caches the winner", rc == 0 and "kiln --tune: conv2d" in err and len(entries) == 1,
          err + repr(entries))
    check("--tune leaves out the gradient of an input that reaches no parameter",
          "dilation 1,1, no input gradient: im2col " in err, err)
    rc, outp, errp = kiln(TUNE_PARAM_MODEL, "--tune", env=env)
    entries = [f for f in os.listdir(cache) if f.startswith("conv-")] if os.path.isdir(cache) else []
    check("--tune times a layer whose input is a parameter with its input's gradient, as a decision of its own",
          rc == 0 and "dilation 1,1: im2col " in errp and "no input gradient" not in errp and len(entries) == 2,
          errp + repr(entries))
    rc, out2, err = kiln(TUNE_MODEL, "--tune", env=env)
    check("--tune reuses its cached decision", rc == 0 and "kiln --tune" not in err and out2 == out1, err + out1 + out2)
    rc, out, err = kiln_ir(TUNE_MODEL, "--after=lower", env=env)
    check("without --tune a cached tuned decision is used", rc == 0 and "(why: tuned on this machine" in out, out + err)
    rc, out, err = kiln_ir(TUNE_MODEL, env={"KILN_CACHE_DIR": os.path.join(TMP, "empty-cache")})
    check("with no cached decision the cost model decides", rc == 0 and "(why: cost model" in out, out + err)


def main():
    if not KILN:
        sys.stderr.write("usage: test_train.py PATH/TO/kiln [NAME]\n")
        return 2
    make_data()
    t0 = time.time()
    tests = [t_optimizers, t_formats, t_checkpoints, t_batchnorm_step, t_dropout_masks, t_random_streams, t_interrupt, t_cli_and_output, t_errors,
             t_conv_lowering, t_epilogue_fusion, t_implicit_im2col, t_profile]
    for t in tests:
        if ONLY and ONLY not in t.__name__:
            continue
        try:
            t()
        except Exception as e:  # noqa: BLE001
            check(t.__name__ + " ran", False, repr(e))
    shutil.rmtree(TMP, ignore_errors=True)
    rc = TALLY.summary()
    print("(%.1f s)" % (time.time() - t0))
    return rc


if __name__ == "__main__":
    sys.exit(main())
