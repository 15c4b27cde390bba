#!/usr/bin/env python3
"""Graphs run on a CUDA device: `kiln run --device cuda` and the REPL's :device.

Usage: python3 tests/test_cuda_run.py build/kiln [--real]

Without a GPU (CI) the device is the fake driver and NVRTC of tests/fakecuda
(build/tests/libkiln_fakecuda.so and libkiln_fakenvrtc.so, named by
KILN_LIBCUDA and KILN_NVRTC): g++ compiles the generated CUDA C for the host
and the fake driver runs each block's threads as fibers, so everything Kiln
does on the host side (NVRTC, modules, the host function, launches, the device
arenas, copies in and out) runs as on a GPU, and the kernels' results are the
kernels' own. With --real, the same checks go to the machine's driver and NVRTC.

* matrix products, through cuBLAS (the fake's, fakecuda/fake_cublas.c) and
  without it (the tiled kernels) against NumPy: sizes across the 64 x 64
  tiles and the 16-deep steps, transposed operands read in place, batches,
  a weight broadcast over a batch, f64, symbolic sizes, a convolution;
* training: the logistic regression and the MLP of examples/ on Fashion-MNIST,
  every step's loss (--log) and the accuracy as on the CPU, the state kept on
  the device between steps and brought back for the epoch's checkpoint and
  at the end (bit for bit the same), and the CPU's; a train statement in the
  REPL, its weights read after it on the device and on the CPU;
* the REPL's :device, switching between the CPU and the GPU;
* kiln build --arch: the binary's CUDA kernels, predict on the device as on
  the CPU, the refusals (no kernels, none for the device's architecture);
* what is refused, and how: a device that is not there, no device at all,
  a kernel that does not compile, a cuBLAS call that fails; what stderr says
  of the device and of cuBLAS; --profile's table from the device's events.

The op suites themselves (test_ops.py, test_nn.py, test_gradcheck.py) run on
the device from test.sh, with KILN_TEST_DEVICE=cuda.
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kiln_testlib  # noqa: E402
from kiln_testlib import Tally, expect_close, expect_small, lit  # noqa: E402

KILN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
REAL = "--real" in sys.argv
ROOT = os.path.dirname(HERE)


def device_env():
    if REAL:
        return {}
    lib = os.path.join(os.path.dirname(KILN), "tests")
    return {"KILN_LIBCUDA": os.path.join(lib, "libkiln_fakecuda.so"),
            "KILN_NVRTC": os.path.join(lib, "libkiln_fakenvrtc.so"),
            "KILN_CUBLAS": os.path.join(lib, "libkiln_fakecublas.so"),
            "KILN_CUBLASLT": os.path.join(lib, "libkiln_fakecublaslt.so")}


def run(args, env=None, stdin=None, timeout=900, cwd=None):
    e = dict(os.environ)
    e.update(device_env())
    e.update(env or {})
    return subprocess.run([KILN] + args, capture_output=True, text=True, timeout=timeout, env=e, input=stdin, cwd=cwd)


def products(T, blas):
    """Matrix products of every kind on the device, checked against NumPy:
    through cuBLAS where their operands allow (blas), else all as the tiled kernel."""
    os.environ.update(device_env())
    if not blas:
        os.environ["KILN_CUBLAS"] = "/nonexistent/libcublas.so"
    os.environ["KILN_TEST_DEVICE"] = "cuda"
    s = kiln_testlib.Suite(KILN)
    rng = np.random.default_rng(7)
    how = "cuBLAS" if blas else "tiled kernel"

    def mat(*shape, dt=np.float32):
        return rng.normal(0, 1, shape).astype(dt)

    def diff(expr, want, dt="f32"):
        """The largest difference from NumPy's result, printed as one number (a
        large matrix would print elided)."""
        return "max(abs((%s) - %s))" % (expr, lit(want.astype(np.float32 if dt == "f32" else np.float64), dt))

    tol = expect_small(1e-4, "largest difference from NumPy")

    for m, k, n in [(1, 1, 1), (63, 17, 65), (64, 16, 64), (130, 33, 7), (5, 200, 129)]:
        a, b = mat(m, k), mat(k, n)
        s.add("%s: matmul %dx%d @ %dx%d" % (how, m, k, k, n), "",
              diff("%s @ %s" % (lit(a), lit(b)), a.astype(np.float64) @ b), tol)
    a, b = mat(40, 70), mat(90, 70)
    s.add(how + ": a transposed operand, read in place", "",
          diff("%s @ transpose(%s)" % (lit(a), lit(b)), a.astype(np.float64) @ b.T),
          tol)
    a2, b2 = mat(70, 40), mat(30, 70)
    s.add(how + ": both operands transposed", "", diff("transpose(%s) @ transpose(%s)" % (lit(a2), lit(b2)),
                                                a2.T.astype(np.float64) @ b2.T), tol)
    x, w = mat(3, 20, 9), mat(3, 9, 70)
    s.add(how + ": a batch of products", "",
          diff("%s @ %s" % (lit(x), lit(w)), np.matmul(x.astype(np.float64), w)), tol)
    w2 = mat(9, 70)
    s.add(how + ": a weight broadcast over the batch", "",
          diff("%s @ %s" % (lit(x), lit(w2)), np.matmul(x.astype(np.float64), w2)),
          tol)
    a64, b64 = mat(33, 65).astype(np.float64), mat(65, 66).astype(np.float64)   # literals hold f32 values
    s.add(how + ": f64", "", diff("%s @ %s" % (lit(a64, "f64"), lit(b64, "f64")), a64 @ b64, "f64"),
          expect_small(1e-5, "largest difference from NumPy (rounded to f32)"))
    xs = mat(37, 12)
    s.add(how + ": a symbolic batch size, bound at run time",
          ["input Xs : f32[B, 12]", "param Ws : f32[12, 5] = glorot",
           "fn fs(v) { relu(v @ Ws) }"],
          "sum(fs(%s)) - sum(relu(%s @ Ws))" % (lit(xs), lit(xs)), expect_close(np.float64(0), atol=1e-4))
    # a bias (and ReLU) after the product: cuBLASLt's epilogue where cuBLAS runs, else a kernel after it
    xe, we, be, wt = mat(130, 33), mat(33, 70), mat(70), mat(70, 33)
    ref = xe.astype(np.float64) @ we + be
    s.add(how + ": relu(x @ W + b)", "", diff("relu(%s @ %s + %s)" % (lit(xe), lit(we), lit(be)), np.maximum(ref, 0)), tol)
    s.add(how + ": b + x @ W", "", diff("%s + %s @ %s" % (lit(be), lit(xe), lit(we)), ref), tol)
    s.add(how + ": relu(x @ transpose(W) + b)", "", diff("relu(%s @ transpose(%s) + %s)" % (lit(xe), lit(wt), lit(be)),
                                                       np.maximum(xe.astype(np.float64) @ wt.T + be, 0)), tol)
    img, ker = mat(2, 3, 9, 9), mat(4, 3, 3, 3)
    ref = np.zeros((2, 4, 4, 4))
    for i in range(4):
        for j in range(4):
            win = img[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].astype(np.float64)
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", win, ker)
    s.add(how + ": a convolution (stride 2, through the windows)", "",
          diff("conv2d(%s, %s, stride=2)" % (lit(img), lit(ker)), ref),
          tol)
    # A conv layer's kernel and bias gradients in one graph: the bias's is the
    # last row of the kernel's product, the windows with a column of ones
    # (passes/biasgrad.c), read in place by the tiled kernel. Windows of over
    # 4096 values and a computed gradient (sin), so the folder leaves them.
    img, ker, bias = mat(2, 8, 8, 8), mat(4, 8, 3, 3), mat(4, 1, 1)
    pad = np.pad(img.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.stack([np.stack([pad[:, :, i:i + 8, j:j + 8] for j in range(3)], -1) for i in range(3)], -2)
    y = np.einsum("nchwij,ocij->nohw", win, ker) + bias
    adj = mat(*y.shape)
    dy = np.cos(y) * adj
    want = np.concatenate([np.einsum("nchwij,nohw->ocij", win, dy).reshape(-1), dy.sum(axis=(0, 2, 3))])
    fn = "Fb(k, c) = sum(sin(conv2d(%s, k, pad=1, lowering=\"im2col\") + c) * %s)" % (lit(img), lit(adj))
    s.add(how + ": a conv layer's kernel and bias gradients, the bias's a row of the kernel's product", [fn],
          diff("concat([reshape(grad(Fb, 0)(%s, %s), [-1]), reshape(grad(Fb, 1)(%s, %s), [-1])])"
               % (lit(ker), lit(bias), lit(ker), lit(bias)), want), tol)
    rc = s.run(jobs=2)
    del os.environ["KILN_TEST_DEVICE"]
    os.environ.update(device_env())
    T.passed += s.passed
    T.failed += s.failed
    return rc


def losses(path):
    with open(path) as f:
        return [float(r["value"]) for r in csv.DictReader(f) if r["name"] == "loss"]


FMNIST = "/usr/share/datasets/fashion-mnist"


def write_idx(path, arr):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape))
        f.write(arr.astype(np.uint8).tobytes())


def fmnist_dir(tmp):
    if os.path.isdir(FMNIST):
        return FMNIST
    data = os.path.join(tmp, "fmnist")
    if not os.path.isdir(data):
        os.makedirs(data)
        rng = np.random.default_rng(0)
        for split, n in [("train", 60000), ("t10k", 10000)]:
            write_idx(os.path.join(data, split + "-images-idx3-ubyte"), rng.integers(0, 256, (n, 28, 28)))
            write_idx(os.path.join(data, split + "-labels-idx1-ubyte"), rng.integers(0, 10, n))
    return data


def training(T, tmp):
    """The examples as they are, on Fashion-MNIST; where the dataset is not
    installed (a GPU machine), on random IDX files of its shapes."""
    data = fmnist_dir(tmp)
    for model, steps in [("logreg", 30), ("mlp", 12)]:
        src = open(os.path.join(ROOT, "examples", model + ".kiln")).read().replace('"%s"' % FMNIST, '"%s"' % data)
        path = os.path.join(tmp, model + ".kiln")
        with open(path, "w") as f:
            f.write(re.sub(r'(?m)^save .*$', '', src) + 'save "%s"\n' % os.path.join(tmp, model + "-end.safetensors"))
        got = {}
        copies = os.path.join(tmp, "%s-copies.log" % model)
        for dev in ["cpu", "cuda"]:
            log = os.path.join(tmp, "%s-%s.csv" % (model, dev))
            ck = os.path.join(tmp, "%s-%s.safetensors" % (model, dev))
            p = run(["run", path, "--epochs", "1", "--max-steps", str(steps), "--checkpoint", ck,
                     "--eval-examples", "500", "--progress", "lines", "--device", dev, "--log", log],
                    env={"KILN_FAKE_CUDA_LOG": copies})
            acc = [l for l in p.stdout.split("\n") if l.startswith("accuracy:")]
            if dev == "cuda" and p.returncode == 0:   # the epoch's checkpoint, saved while the state was on the device
                mid, end = load_st(ck), load_st(os.path.join(tmp, model + "-end.safetensors"))
                cpu = load_st(os.path.join(tmp, "%s-cpu.safetensors" % model))
                T.check("%s: the checkpoint saved during training on the device is the state at its end, bit for bit"
                        % model, mid.keys() == end.keys() and all(np.array_equal(mid[k], end[k]) for k in mid))
                T.check("%s: and the CPU's, within 1e-3 of each tensor's largest value" % model,
                        mid.keys() == cpu.keys() and all(np.abs(mid[k] - cpu[k]).max() <= 1e-3 * np.abs(cpu[k]).max()
                                                         + 1e-12 for k in mid))
            got[dev] = (p.returncode, losses(log) if p.returncode == 0 else [], acc, p.stderr)
        (rc0, l0, a0, _), (rc1, l1, a1, err) = got["cpu"], got["cuda"]
        ok = rc0 == 0 and rc1 == 0 and len(l0) == steps and len(l1) == steps
        T.check("%s trains on the device: %d steps" % (model, steps), ok, err[-800:])
        close = ok and np.allclose(l0, l1, rtol=1e-4, atol=1e-5)
        T.check("%s: every step's loss as on the CPU (rtol 1e-4)" % model, close,
                "cpu %s\ncuda %s" % (l0[:6], l1[:6]))
        T.check("%s: the same accuracy (%s)" % (model, a1[0] if a1 else "none"), ok and a0 == a1 and a0, "%s %s" % (a0, a1))
        if not REAL:
            batch = int(re.search(r"batch=(\d+)", src).group(1))
            own, ahead = batch_copies(copies, 784 * 4, batch, 1)
            T.check("%s: each batch after the first went to the device on a copy stream while the step before ran "
                    "(%d there, %d with their step)" % (model, ahead, own), ok and own == 1 and ahead >= 2 * (steps - 1))
        T.check("%s: the step's planned device memory, said before the first step" % model,
                re.search(r"CUDA device 0: the training step plans [\d.]+ MiB of device memory at batch \d+: workspace [\d.]+, "
                          r"state kept on the device", err)
                is not None, err[-600:])


# The examples' parameters whose size is a whole number of image rows (logreg's W).
NOT_ROWS = (784 * 10 * 4,)


def batch_copies(log, row_bytes, batch, streams):
    """From the fake driver's log (KILN_FAKE_CUDA_LOG): the copies to the device
    of a batch's images (or a share of one: a whole number of rows, at most a
    batch), on the devices' own streams (the first `streams` made) and on others
    (the next batch's copy streams, which carry nothing else)."""
    own = ahead = 0
    for line in open(log) if os.path.exists(log) else []:
        _, sid, n = line.split()
        if int(sid) >= streams:
            ahead += 1
        elif int(n) % row_bytes == 0 and 0 < int(n) <= batch * row_bytes and int(n) not in NOT_ROWS:
            own += 1
    return own, ahead


def load_st(path):
    """A safetensors file's f32 tensors, read by hand (no package needed)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)
            for k, v in head.items() if k != "__metadata__" and v["dtype"] == "F32"}


def compile_app(d, app, so):
    """cc app.c against a library kiln build --lib wrote in d (so: its .so), with the
    sanitizers when the runtime inside has them; the executable is d/app."""
    san = "libasan" in subprocess.run(["ldd", so], capture_output=True, text=True).stdout
    return subprocess.run(["cc", "-o", os.path.join(d, "app"), app, "-I", d, "-L", d, "-lm", "-Wl,-rpath," + d,
                           "-l:" + os.path.basename(so)] + (["-fsanitize=address,undefined"] if san else []),
                          capture_output=True, text=True)


def built(T, tmp):
    """kiln build --arch: a binary carrying CUBINs runs its graphs on the device."""
    d = os.path.join(tmp, "built")
    os.makedirs(d)
    src = os.path.join(d, "m.kiln")
    with open(src, "w") as f:
        f.write("input x : f32[B, 4]\nparam W : f32[4, 70] = glorot\nparam V : f32[70, 3] = glorot\n"
                "logits = relu(x @ W) @ V\nsave \"%s\"\n" % os.path.join(d, "w.safetensors"))
    np.save(os.path.join(d, "in.npy"), (np.arange(20, dtype=np.float32).reshape(5, 4) / 10))
    p = run(["run", src])
    exe, exe80, plain = (os.path.join(d, n) for n in ("m", "m80", "plain"))
    w = ["--weights", os.path.join(d, "w.safetensors")]
    b = run(["build", src, "-o", exe, "--arch", "sm_80,sm_90"])
    T.check("kiln build --arch sm_80,sm_90 (NVRTC of this run's kind)", p.returncode == 0 and b.returncode == 0,
            p.stderr + b.stderr)
    i = subprocess.run([exe, "info"], capture_output=True, text=True)
    T.check("the binary's info lists its CUDA kernels", "CUDA kernels: sm_80 sm_90 compute_90 (--device cuda)" in i.stdout, i.stdout)
    e = dict(os.environ)
    e.update(device_env())
    cpu = subprocess.run([exe, "predict", os.path.join(d, "in.npy")] + w, capture_output=True, text=True, env=e)
    gpu = subprocess.run([exe, "predict", os.path.join(d, "in.npy"), "--device", "cuda"] + w, capture_output=True,
                         text=True, env=e)
    T.check("the binary predicts on the device what it predicts on the CPU",
            cpu.returncode == 0 and gpu.returncode == 0 and cpu.stdout == gpu.stdout and cpu.stdout.startswith("[["),
            cpu.stdout + gpu.stdout + gpu.stderr)
    T.check("the binary says where it runs", "running on CUDA device 0: " in gpu.stderr, gpu.stderr)
    mlp = os.path.join(d, "mlp")
    b = run(["build", os.path.join(ROOT, "examples", "mlp.kiln"), "-o", mlp, "--arch", "sm_90"])
    ck, shown = {}, {}
    copies = os.path.join(d, "mlp-copies.log")
    for dev in ("cpu", "cuda"):
        out = os.path.join(d, "mlp-%s.safetensors" % dev)
        p = subprocess.run([mlp, "train", "--data", fmnist_dir(tmp), "--epochs", "1", "--max-steps", "6",
                            "--eval-examples", "200", "--progress", "lines", "--device", dev, "--out", out],
                           capture_output=True, text=True, env=dict(e, KILN_FAKE_CUDA_LOG=copies))
        ck[dev] = load_st(out) if p.returncode == 0 and os.path.exists(out) else None
        shown[dev] = p.stdout
    # norm-wise: Adam's first steps move a weight by about lr whatever its gradient's size, so an
    # element whose gradient is near 0 on both may differ by more than a rounding in relative terms
    same = ck["cpu"] is not None and ck["cuda"] is not None and ck["cpu"].keys() == ck["cuda"].keys() and all(
        np.abs(ck["cpu"][k] - ck["cuda"][k]).max() <= 1e-3 * np.abs(ck["cpu"][k]).max() + 1e-12 for k in ck["cpu"])
    T.check("the MLP binary trains 6 steps on the device: weights and Adam's moments as on the CPU (1e-3 of each's max)",
            b.returncode == 0 and same, b.stderr + p.stderr[-800:])
    T.check("and evaluates after the epoch with the trained weights: the CPU's metrics",
            same and shown["cpu"] == shown["cuda"] and "accuracy" in shown["cpu"], shown)
    if not REAL:   # the state stays on the device; the next batch goes there while a step runs
        w1 = [l for l in open(copies)] if os.path.exists(copies) else []
        w1_up = sum(1 for l in w1 if l.split()[2] == str(784 * 512 * 4))
        own, ahead = batch_copies(copies, 784 * 4, 128, 1)
        T.check("the binary keeps the state on the device: tensors of its first layer's size copied there %d times in 6 "
                "steps (the weights and their two Adam moments once each, the weights once more for the evaluation)"
                % w1_up, same and w1_up == 4)
        T.check("the binary copies each batch after the first on a copy stream while the step before runs (%d there, "
                "%d with their step)" % (ahead, own), same and own == 1 and ahead >= 2 * 5)
    # A library (--lib --arch): its C API's m_device moves the model to the GPU.
    lib = os.path.join(d, "libm")
    b = run(["build", src, "--lib", "-o", lib, "--arch", "sm_90"])
    app = os.path.join(d, "app.c")
    with open(app, "w") as f:
        f.write('#include "m.h"\n#include <stdio.h>\n#include <stdlib.h>\n'
                'int main(int argc, char **argv) {\n  char err[512];\n  m_model *m = m_create(1, err, sizeof err);\n'
                '  if (!m || m_load(m, argv[1], err, sizeof err) || (argc > 2 && m_device(m, argv[2], err, sizeof err))) {\n'
                '    fprintf(stderr, "%s\\n", err); return 1;\n  }\n'
                '  float x[8] = {0.1f, 0.2f, 0.3f, 0.4f, -1, 2, -3, 4}, y[6];\n'
                '  if (m_forward(m, x, 2, y, err, sizeof err)) { fprintf(stderr, "%s\\n", err); return 1; }\n'
                '  for (int i = 0; i < 6; i++) printf("%.9g ", y[i]);\n  m_free(m);\n  return 0;\n}\n')
    cc = compile_app(d, app, lib + ".so")
    outs = [subprocess.run([os.path.join(d, "app"), os.path.join(d, "w.safetensors")] + extra, capture_output=True,
                           text=True, env=e) for extra in ([], ["cuda"], ["gpu"])]
    T.check("a library built with --arch: m_device(m, \"cuda\") runs its forward on the device, as on the CPU",
            b.returncode == 0 and cc.returncode == 0 and outs[0].returncode == 0 and outs[1].returncode == 0
            and outs[0].stdout == outs[1].stdout and len(outs[0].stdout.split()) == 6,
            b.stderr + cc.stderr + outs[0].stdout + outs[0].stderr + outs[1].stdout + outs[1].stderr)
    b = run(["build", "m.kiln", "--lib", "-o", "librel"], cwd=d)
    T.check("kiln build --lib with a relative -o (the archive was once written to a literal $OLDPWD)",
            b.returncode == 0 and os.path.exists(os.path.join(d, "librel.a")), b.stderr)
    T.check("m_device with a malformed device: an error", outs[2].returncode == 1 and
            "the device is cpu, cuda, cuda:N, cuda:0,1 or cuda+cpu, not 'gpu'" in outs[2].stderr, outs[2].stderr)
    b = run(["build", src, "-o", plain])
    p = subprocess.run([plain, "predict", os.path.join(d, "in.npy"), "--device", "cuda"] + w, capture_output=True,
                       text=True, env=e)
    T.check("a binary built without --arch: --device cuda is refused, with how to get kernels",
            b.returncode == 0 and p.returncode == 1 and "carries no CUDA kernels (kiln build --arch sm_XX" in p.stderr,
            b.stderr + p.stderr)
    if REAL:
        return
    b = run(["build", src, "-o", exe80, "--arch", "sm_80"])
    p = subprocess.run([exe80, "predict", os.path.join(d, "in.npy"), "--device", "cuda"] + w, capture_output=True,
                       text=True, env=e)
    T.check("kernels for sm_80 only, on an sm_90 device: its PTX (compute_80) runs there, as on the CPU",
            b.returncode == 0 and p.returncode == 0 and p.stdout == cpu.stdout, b.stderr + p.stderr + p.stdout)
    e86 = dict(e, KILN_FAKE_CUDA_SM="86")
    p = subprocess.run([exe, "predict", os.path.join(d, "in.npy"), "--device", "cuda"] + w, capture_output=True,
                       text=True, env=e86)
    T.check("kernels for sm_80 and sm_90, on an sm_86 device: the sm_80 CUBIN runs there",
            p.returncode == 0 and p.stdout == cpu.stdout, p.stderr + p.stdout)
    p = subprocess.run([exe80, "predict", os.path.join(d, "in.npy"), "--device", "cuda"] + w, capture_output=True,
                       text=True, env=dict(e, KILN_FAKE_CUDA_SM="75"))
    T.check("kernels for sm_80 on an sm_75 device: refused, with what it carries and the rebuild to make",
            p.returncode == 1 and "carries CUDA kernels for sm_80, PTX for compute_80, none of which runs on" in p.stderr
            and "(sm_75): rebuild with kiln build --arch sm_75" in p.stderr, p.stderr)
    # The real NVRTC's CUBINs go into a binary too (they cannot run here).
    env = {k: "" for k in ("KILN_NVRTC",)}
    b = run(["build", src, "-o", exe + "-real", "--arch", "sm_80,sm_90"], env=env)
    i = subprocess.run([exe + "-real", "info"], capture_output=True, text=True)
    T.check("with the toolkit's NVRTC: real CUBINs for sm_80 and sm_90 linked in",
            b.returncode == 0 and "CUDA kernels: sm_80 sm_90 compute_90" in i.stdout, b.stderr + i.stdout)
    b = run(["build", src, "-o", exe + "-bad", "--arch", "eighty"])
    T.check("kiln build --arch eighty is refused", b.returncode == 2 and "--arch takes architectures like sm_80,sm_90"
            in b.stderr, b.stderr)


def small_training(tmp):
    """A REPL program that trains a 5 x 2 W for 3 epochs on a small CSV data set it writes."""
    rng = np.random.default_rng(3)
    path = os.path.join(tmp, "small.csv")
    x = rng.normal(0, 1, (300, 5)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", fmt="%.6g")
    return ('data d = csv("%s")\ninput x : f32[B, 5]\ninput y : i32[B]\nparam W : f32[5, 2] = zeros\n'
            'train mean(softmax_cross_entropy(x @ W, y)) on d.train with adam(lr=0.05), batch=32, epochs=3\n' % path)


def repl_training(T, tmp):
    """Training in the REPL on the device, then the weights read on the device and,
    after :device cpu, on the CPU: the state kept on the device during the train
    statement is back on the host after it."""
    prog = small_training(tmp) + "print sum(W * W), W[0, 0]\n"
    cpu = run([], stdin=prog)
    gpu = run([], stdin=":device cuda\n" + prog + ":device cpu\nprint sum(W * W), W[0, 0]\n")
    want = cpu.stdout.strip().split("\n")[-1]
    got = [l for l in gpu.stdout.strip().split("\n") if not l.startswith("CUDA device") and not l.startswith("cpu (")]
    T.check("REPL: a train statement on the device, its weights as on the CPU, read on the device and then on the CPU",
            cpu.returncode == 0 and gpu.returncode == 0 and len(got) == 2 and got[0] == want and got[1] == want,
            cpu.stdout + cpu.stderr + "\n---\n" + gpu.stdout + gpu.stderr)


def repl(T):
    p = run([], stdin="x = [1.0, 2.0, 3.0]\n:device\nsum(exp(x))\n:device cuda\n:device\nsum(exp(x))\n"
                      "softmax(x, axis=0)\n:device cpu\nsum(exp(x))\n:device cuda:7\n:device gpu\n")
    lines = p.stdout.strip().split("\n")
    T.check("REPL :device shows the CPU, switches to the GPU and back",
            len(lines) == 8 and lines[0].startswith("cpu (") and lines[1] == "30.1929" and lines[2].startswith("CUDA device 0: ")
            and lines[3] == lines[2] and lines[4] == "30.1929" and lines[5] == "[0.0900306, 0.244728, 0.665241]"
            and lines[6] == lines[0] and lines[7] == "30.1929", p.stdout + p.stderr)
    T.check("REPL :device refuses a second GPU and a malformed name",
            "a session's graphs use one GPU (start another for cuda:7)" in p.stderr
            and ":device: a device is cpu, cuda, cuda:N, cuda:0,1 (several GPUs) or cuda+cpu (GPU and CPU threads), not 'gpu'"
            in p.stderr, p.stderr)


def epilogues(T, tmp):
    """A dense layer's bias and ReLU applied by cuBLASLt as it writes the product
    (the fake's log shows the calls), as a kernel after it without cuBLASLt, and
    a failing cuBLASLt call reported."""
    prog = os.path.join(tmp, "lt.kiln")
    with open(prog, "w") as f:
        f.write("param W : f32[70, 50] = glorot\nparam V : f32[50, 30] = glorot\nparam b : f32[50] = normal(1.0)\n"
                "param c : f32[30] = normal(1.0)\nparam x : f32[200, 70] = normal(1.0)\n"
                "h = relu(x @ W + b)\ny = h @ V + c\nprint sum(y * y), sum(h), y[3, 4]\n")
    log = os.path.join(tmp, "lt.log")
    cpu = run(["run", prog])
    p = run(["run", prog, "--device", "cuda"], env={"KILN_FAKE_CUBLASLT_LOG": log})
    calls = open(log).read().split("\n") if os.path.exists(log) else []
    T.check("relu(x @ W + b) and h @ V + c: one cuBLASLt call each (RELU_BIAS, BIAS), the CPU's values",
            p.returncode == 0 and p.stdout == cpu.stdout and "50 200 70 6" in calls and "30 200 50 4" in calls,
            cpu.stdout + p.stdout + p.stderr + str(calls))
    T.check("stderr names cuBLASLt", "bias and ReLU epilogues in cuBLASLt (" in p.stderr, p.stderr)
    if REAL:
        return
    q = run(["run", prog, "--device", "cuda"], env={"KILN_CUBLASLT": "/nonexistent/libcublasLt.so"})
    T.check("without cuBLASLt: the epilogues as kernels, the same values, and why on stderr",
            q.returncode == 0 and q.stdout == cpu.stdout and
            "bias and ReLU epilogues as kernels (cuBLASLt not found: KILN_CUBLASLT=/nonexistent" in q.stderr, q.stdout + q.stderr)
    q = run(["run", prog, "--device", "cuda"], env={"KILN_FAKE_CUBLASLT_STATUS": "13"})
    T.check("a failing cuBLASLt call: its status, the statement's location, status 1", q.returncode == 1 and
            "lt.kiln:8:1: error: CUDA device 0: cuBLASLt matmul with a bias and ReLU epilogue (200 x 50 x 70): status 13"
            in q.stderr, q.stderr)


def refusals(T, tmp):
    prog = os.path.join(tmp, "one.kiln")
    with open(prog, "w") as f:
        f.write("x = [1.0, 2.0]\nprint sum(exp(x))\n")
    p = run(["run", prog, "--device", "cuda"])
    T.check("kiln run --device cuda: the value, and the device named on stderr",
            p.returncode == 0 and p.stdout.strip() == "10.1073" and "running on CUDA device 0: " in p.stderr,
            p.stdout + p.stderr)
    T.check("products through cuBLAS, and which library, on stderr", "; products through cuBLAS (" in p.stderr, p.stderr)
    if REAL:
        return
    p = run(["run", prog, "--device", "cuda"], env={"KILN_CUBLAS": "/nonexistent/libcublas.so"})
    T.check("without cuBLAS: the tiled kernels, and why, on stderr", p.returncode == 0 and
            "products through Kiln's tiled kernels (cuBLAS not found: KILN_CUBLAS=/nonexistent/libcublas.so does not load"
            in p.stderr, p.stderr)
    mm = os.path.join(tmp, "mm.kiln")
    with open(mm, "w") as f:
        f.write("a = [[1.0, 2.0], [3.0, 4.0]]\nprint sum(a @ a)\n")
    big = os.path.join(tmp, "big.kiln")
    with open(big, "w") as f:
        f.write("param W : f32[300, 300] = glorot\nprint sum(exp(W @ W))\n")
    p = run(["run", big, "--device", "cuda", "--profile"])
    T.check("--profile on the device: each graph's kernels timed by events, the product among them",
            p.returncode == 0 and "profile: graph of " in p.stderr and "k0 matmul (gemm) f32[300, 300]" in p.stderr,
            p.stderr)
    p = run(["run", mm, "--device", "cuda"], env={"KILN_FAKE_CUBLAS_STATUS": "13"})
    T.check("a failing cuBLAS call: its status, the statement's location, status 1", p.returncode == 1 and
            "mm.kiln:2:1: error: CUDA device 0: cuBLAS SgemmStridedBatched (2 x 2 x 2, batch 1): status 13" in p.stderr,
            p.stderr)
    p = run(["run", prog, "--device", "cuda:3"])
    T.check("a device that is not there: status 1, how many there are",
            p.returncode == 1 and "kiln: --device cuda:3: no CUDA device 3: this machine has 1" in p.stderr
            and not p.stdout, p.stderr)
    p = run(["run", prog, "--device", "cuda"], env={"KILN_FAKE_CUDA_DEVICES": "0"})
    T.check("a driver without devices: status 1, 'no CUDA device'",
            p.returncode == 1 and "kiln: --device cuda: no CUDA device" in p.stderr, p.stderr)
    p = run(["run", prog, "--device", "cuda"], env={"KILN_FAKE_CXX": "false", "KILN_CACHE_DIR": os.path.join(tmp, "c")})
    T.check("a kernel that does not compile: the statement's location, status 1",
            p.returncode == 1 and "one.kiln:2:1: error: could not compile this expression: NVRTC" in p.stderr, p.stderr)


def run_checks(script, prefix, checks):
    """The command line of this file and test_parallel.py: each check(T, tmp) in
    one temporary folder, then the tally's closing line and status."""
    if not KILN:
        sys.stderr.write("usage: %s PATH/TO/kiln [--real]\n" % script)
        sys.exit(2)
    T = Tally()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for check in checks:
            check(T, tmp)
    sys.exit(T.summary())


def main():
    run_checks(sys.argv[0], "kiln_cuda_run_", [
        refusals, epilogues, lambda T, tmp: repl(T), repl_training, built,
        lambda T, tmp: products(T, blas=True), lambda T, tmp: None if REAL else products(T, blas=False), training])


if __name__ == "__main__":
    main()
