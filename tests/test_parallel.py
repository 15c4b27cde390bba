#!/usr/bin/env python3
"""A train statement over several devices: `--device cuda:0,1` (data parallel over
GPUs, the gradients all-reduced by NCCL) and `--device cuda+cpu` (the GPU and the
CPU's threads, each taking a share of every batch in proportion to its measured
speed; the gradients summed on the host).

Usage: python3 tests/test_parallel.py build/kiln [--real]

Without a GPU (CI) the devices are two of the fake driver's (tests/fakecuda,
KILN_FAKE_CUDA_DEVICES=2) and NCCL is fakecuda/fake_nccl.c, which sums the ranks'
buffers at ncclGroupEnd and refuses what real NCCL would hang on or reject (a
collective outside a group, ranks queueing different calls, a stream of another
device). The fake driver refuses work queued on a stream while another device's
context is current, so one thread driving both devices must switch between them.

* the logistic regression and the MLP of examples/: every step's loss (--log)
  and the accuracy as on the CPU (rtol 1e-4): the shares' gradients, each of its
  loss scaled by its share of the batch, sum to the batch's; over two GPUs with
  NCCL, over two GPUs without it (the host sums), over the GPU and the CPU;
* the checkpoint saved during training (the state on the GPUs) is the state at
  the end, and the CPU's within 1e-3;
* a model with batch norm and dropout trains over both splits, its running
  statistics updated;
* what stderr says: the split, how gradients are summed, the measured speeds;
* the REPL's :device cuda:0,1;
* refusals: a device that is not there, a repeated device, a batch smaller
  than the devices, a data input whose first axis is not the batch;
* a binary built with --arch (runtime/model_par.c): the MLP's `train --device`
  over each split ends with the binary's CPU weights (1e-3) and accuracy, with
  the split on stderr and the shares copied ahead; batch norm and dropout; the
  refusals, `predict` over several devices and a binary without kernels too.

With --real the same runs go to the machine's GPUs (two or more for cuda:0,1,
KILN_TEST_GPUS=2; otherwise only cuda+cpu runs).
"""
import os
import re
import subprocess
import sys

import numpy as np

import test_cuda_run as base
from test_cuda_run import fmnist_dir, load_st, losses, run

REAL = base.REAL
GPUS = int(os.environ.get("KILN_TEST_GPUS", "1")) if REAL else 2
ROOT = base.ROOT


def env(nccl=True):
    if REAL:
        return {}
    lib = os.path.join(os.path.dirname(base.KILN), "tests")
    return {"KILN_FAKE_CUDA_DEVICES": "2",
            "KILN_NCCL": os.path.join(lib, "libkiln_fakenccl.so") if nccl else "/nonexistent/libnccl.so.2"}


def splits():
    out = []
    if GPUS >= 2:
        out += [("cuda:0,1", True, "by NCCL"), ("cuda:0,1", False, "on the host")]
    out.append(("cuda+cpu", True, "on the host"))
    return out


def model_file(tmp, model, data):
    src = open(os.path.join(ROOT, "examples", model + ".kiln")).read().replace('"%s"' % base.FMNIST, '"%s"' % data)
    path = os.path.join(tmp, model + ".kiln")
    import re
    with open(path, "w") as f:
        f.write(re.sub(r'(?m)^save .*$', '', src) + 'save "%s"\n' % os.path.join(tmp, model + "-end.safetensors"))
    return path


def examples(T, tmp):
    data = fmnist_dir(tmp)
    for model, steps in [("logreg", 12), ("mlp", 6)]:
        path = model_file(tmp, model, data)
        runs = {}
        for dev, nccl, how in [("cpu", True, "")] + splits():
            tag = "%s%s" % (dev, "" if nccl else " without NCCL")
            log = os.path.join(tmp, "%s-%s.csv" % (model, tag.replace(" ", "_")))
            ck = os.path.join(tmp, "%s-%s.safetensors" % (model, tag.replace(" ", "_")))
            copies = os.path.join(tmp, "%s-%s-copies.log" % (model, tag.replace(" ", "_")))
            e = dict(env(nccl), KILN_FAKE_CUDA_LOG=copies)
            p = run(["run", path, "--epochs", "1", "--max-steps", str(steps), "--checkpoint", ck, "--eval-examples",
                     "500", "--progress", "lines", "--device", dev, "--log", log], env=e)
            acc = [l for l in p.stdout.split("\n") if l.startswith("accuracy:")]
            runs[tag] = (p, losses(log) if p.returncode == 0 else [], acc, ck)
            if dev == "cpu":
                continue
            l0, a0 = runs["cpu"][1], runs["cpu"][2]
            ok = p.returncode == 0 and len(runs[tag][1]) == steps
            T.check("%s over %s trains: %d steps" % (model, tag, steps), ok, p.stderr[-1500:])
            T.check("%s over %s: every step's loss as on the CPU (rtol 1e-4)" % (model, tag),
                    ok and np.allclose(l0, runs[tag][1], rtol=1e-4, atol=1e-5), "cpu %s\n%s %s" % (l0, tag, runs[tag][1]))
            T.check("%s over %s: the same accuracy (%s)" % (model, tag, acc[0] if acc else "none"), ok and acc == a0 and acc,
                    "%s %s" % (a0, acc))
            T.check("%s over %s: stderr says how the batch splits and how the gradients are summed" % (model, tag),
                    "the training step splits each batch of " in p.stderr and "the gradients are summed " + how in p.stderr
                    and "kiln: each batch was split " in p.stderr and " examples/s, " in p.stderr, p.stderr[-1500:])
            if not REAL:   # each GPU's share of the next batch is copied while the step before runs
                gpus = dev.count(",") + 1 if dev.startswith("cuda:") else 1
                batch = int(re.search(r"batch=(\d+)", open(path).read()).group(1))
                own, ahead = base.batch_copies(copies, 784 * 4, batch, gpus)
                T.check("%s over %s: each GPU's share of the next batch copied on a copy stream while the step before "
                        "ran (%d there, %d with their step)" % (model, tag, ahead, own),
                        ok and ahead >= 2 * (steps - 2) * gpus and own <= 2 * gpus)
            if not nccl:
                T.check("%s over %s: why NCCL is not used, on stderr" % (model, tag),
                        "(NCCL not found: KILN_NCCL=/nonexistent/libnccl.so.2 does not load" in p.stderr, p.stderr[-1500:])
            if ok:
                mid, end, cpu = load_st(ck), load_st(os.path.join(tmp, model + "-end.safetensors")), load_st(runs["cpu"][3])
                T.check("%s over %s: the checkpoint saved during training is the state at the end, bit for bit" % (model, tag),
                        mid.keys() == end.keys() and all(np.array_equal(mid[k], end[k]) for k in mid))
                T.check("%s over %s: and the CPU's, within 1e-3 of each tensor's largest value" % (model, tag),
                        mid.keys() == cpu.keys() and all(np.abs(mid[k] - cpu[k]).max() <= 1e-3 * np.abs(cpu[k]).max() + 1e-12
                                                         for k in mid))


def batch_norm(T, tmp):
    """Batch statistics per share (one share's kept) and dropout per device: not the
    CPU's numbers, but a model that trains and a running mean that moved."""
    data = fmnist_dir(tmp)
    path = os.path.join(tmp, "bn.kiln")
    out = os.path.join(tmp, "bn.safetensors")
    with open(path, "w") as f:
        f.write('import "nn"\ndata fmnist = idx("%s", normalize=true)\ninput x : f32[B, 784]\ninput y : i32[B]\n'
                'h = dropout(relu(batchnorm(dense(x, 64))), 0.2)\nlogits = dense(h, 10)\n'
                'loss = mean(softmax_cross_entropy(logits, y))\n'
                'train loss on fmnist.train with adam(lr=1e-3), batch=64, epochs=1, seed=1\nsave "%s"\n' % (data, out))
    for dev, nccl, _ in splits():
        if not nccl:
            continue
        log = os.path.join(tmp, "bn.csv")
        p = run(["run", path, "--max-steps", "10", "--device", dev, "--log", log], env=env())
        l = losses(log) if p.returncode == 0 else []
        st = load_st(out) if p.returncode == 0 else {}
        T.check("batch norm and dropout over %s: 10 finite losses, the last below the first" % dev,
                len(l) == 10 and np.all(np.isfinite(l)) and l[-1] < l[0], p.stderr[-1500:] + str(l))
        T.check("batch norm over %s: the running mean moved from zero, the variance from one" % dev,
                "batchnorm.1.mean" in st and np.abs(st["batchnorm.1.mean"]).max() > 0
                and np.abs(st["batchnorm.1.var"] - 1).max() > 0, str(st.keys()))


def repl(T, tmp):
    if GPUS < 2:
        return
    prog = base.small_training(tmp) + "print sum(W * W)\n"
    cpu = run([], stdin=prog)
    gpu = run([], stdin=":device cuda:0,1\n" + prog, env=env())
    want = cpu.stdout.strip().split("\n")[-1]
    got = gpu.stdout.strip().split("\n")
    T.check("REPL :device cuda:0,1 names both, and a train statement there ends with the CPU's weights (to 5 digits)",
            cpu.returncode == 0 and gpu.returncode == 0 and "each training batch split with cuda:1" in got[0]
            and abs(float(got[-1]) - float(want)) <= 1e-5 * abs(float(want)), cpu.stdout + gpu.stdout + gpu.stderr)


def refusals(T, tmp):
    if REAL:
        return
    data = fmnist_dir(tmp)
    path = model_file(tmp, "logreg", data)
    p = run(["run", path, "--device", "cuda:0,5"], env=env())
    T.check("--device cuda:0,5 on a machine with two: which is missing, before anything runs",
            p.returncode == 1 and "kiln: --device cuda:0,5: no CUDA device 5: this machine has 2" in p.stderr, p.stderr)
    for bad in ["cuda:0,0", "cuda:1,", "cpu+cuda", "cuda:0,1+gpu", "cuda+", "cuda:,1"]:
        p = run(["run", path, "--device", bad], env=env())
        T.check("--device %s: refused, with the forms a device takes" % bad, p.returncode == 1 and
                "kiln: --device %s: a device is cpu, cuda, cuda:N, cuda:0,1 (several GPUs) or cuda+cpu" % bad in p.stderr,
                p.stderr)
    p = run(["run", path, "--device", "cuda:0,1", "--batch", "1"], env=env())
    T.check("a batch smaller than the devices: refused at the train statement",
            p.returncode == 1 and "logreg.kiln:12:1: error: batch 1 is smaller than the 2 devices it is split over"
            in p.stderr, p.stderr)
    fixed = os.path.join(tmp, "fixed.kiln")
    with open(fixed, "w") as f:
        f.write(open(path).read().replace("input x : f32[B, 784]", "input x : f32[64, 784]").replace("input y : i32[B]",
                                                                                                   "input y : i32[64]"))
    p = run(["run", fixed, "--device", "cuda+cpu", "--max-steps", "2"], env=env())
    T.check("a data input with a fixed first axis: refused, with its shape", p.returncode == 1 and
            "needs every data input's first axis to be the batch (a symbolic size such as B); 'x' has shape [64, 784]"
            in p.stderr, p.stderr)


def built(T, tmp):
    """A binary built with --arch splits its training step too: `OUT train --device
    cuda:0,1` (NCCL, or the host without it) and `cuda+cpu`, from the gradient and
    update graphs the build adds; the same refusals as kiln run's."""
    d = os.path.join(tmp, "built")
    os.makedirs(d, exist_ok=True)
    data = fmnist_dir(tmp)
    exe = os.path.join(d, "mlp")
    b = run(["build", os.path.join(ROOT, "examples", "mlp.kiln"), "-o", exe, "--arch", "sm_90"])
    T.check("kiln build --arch sm_90 of the MLP", b.returncode == 0, b.stderr)
    if b.returncode:
        return
    i = subprocess.run([exe, "info"], capture_output=True, text=True)
    T.check("its info says that train splits over several devices",
            "several devices: train splits each batch over GPUs (--device cuda:0,1) or GPU and CPU (--device cuda+cpu)"
            in i.stdout, i.stdout)

    def train(dev, nccl=True, extra=(), tag=None):
        tag = tag or "%s%s" % (dev, "" if nccl else "-host")
        out = os.path.join(d, "w-%s.safetensors" % tag)
        copies = os.path.join(d, "copies-%s.log" % tag)
        e = dict(os.environ)
        e.update(base.device_env())
        e.update(env(nccl))
        e["KILN_FAKE_CUDA_LOG"] = copies
        p = subprocess.run([exe, "train", "--data", data, "--epochs", "1", "--max-steps", "6", "--eval-examples", "300",
                            "--progress", "lines", "--device", dev, "--out", out] + list(extra),
                           capture_output=True, text=True, env=e, timeout=900)
        return p, (load_st(out) if p.returncode == 0 and os.path.exists(out) else None), copies

    cpu, w_cpu, _ = train("cpu")
    acc = [l for l in cpu.stdout.split("\n") if l.startswith("accuracy:")]
    for dev, nccl, how in splits():
        p, w, copies = train(dev, nccl)
        tag = "%s%s" % (dev, "" if nccl else " without NCCL")
        ok = w is not None and w_cpu is not None and w.keys() == w_cpu.keys()
        T.check("the built MLP over %s: 6 steps, then weights and Adam's moments as on the CPU (1e-3 of each's max)" % tag,
                ok and all(np.abs(w[k] - w_cpu[k]).max() <= 1e-3 * np.abs(w_cpu[k]).max() + 1e-12 for k in w),
                p.stderr[-1500:])
        T.check("the built MLP over %s: the CPU's accuracy after the epoch (%s)" % (tag, acc[0] if acc else "none"),
                ok and acc and [l for l in p.stdout.split("\n") if l.startswith("accuracy:")] == acc, p.stdout + cpu.stdout)
        T.check("the built MLP over %s: stderr names the devices, how the gradients are summed, and the split" % tag,
                "; each training batch split with " in p.stderr and "the gradients summed " + how in p.stderr
                and re.search(r"each batch was split cuda:0 \d+% \(\d+ examples/s\), (cuda:1|the CPU) \d+%.*examples/s, "
                              r"[\d.]+x ", p.stderr), p.stderr[-1500:])
        if not REAL:
            gpus = dev.count(",") + 1 if dev.startswith("cuda:") else 1
            own, ahead = base.batch_copies(copies, 784 * 4, 128, gpus)
            T.check("the built MLP over %s: each GPU's share of the next batch copied while a step ran (%d there, %d "
                    "with their step)" % (tag, ahead, own), ok and ahead >= 2 * 4 * gpus and own <= 2 * gpus)
    if REAL:
        return
    # batch norm and dropout: one share's statistics kept, a stream per device
    bn = os.path.join(d, "bn.kiln")
    with open(bn, "w") as f:
        f.write('import "nn"\ndata fmnist = idx("%s", normalize=true)\ninput x : f32[B, 784]\ninput y : i32[B]\n'
                'h = dropout(relu(batchnorm(dense(x, 64))), 0.2)\nlogits = dense(h, 10)\n'
                'loss = mean(softmax_cross_entropy(logits, y))\n'
                'train loss on fmnist.train with adam(lr=1e-3), batch=64, epochs=1, seed=1\n' % data)
    bexe = os.path.join(d, "bn")
    b = run(["build", bn, "-o", bexe, "--arch", "sm_90"])
    e = dict(os.environ)
    e.update(base.device_env())
    e.update(env())
    for dev in ("cuda:0,1", "cuda+cpu"):
        out = os.path.join(d, "bn-%s.safetensors" % dev)
        p = subprocess.run([bexe, "train", "--data", data, "--max-steps", "10", "--device", dev, "--out", out,
                            "--progress", "lines"], capture_output=True, text=True, env=e, timeout=900)
        st = load_st(out) if p.returncode == 0 and os.path.exists(out) else {}
        T.check("a built model with batch norm and dropout over %s: trains, its running mean moved from zero, the "
                "variance from one" % dev, b.returncode == 0 and "batchnorm.1.mean" in st
                and np.abs(st["batchnorm.1.mean"]).max() > 0 and np.abs(st["batchnorm.1.var"] - 1).max() > 0
                and all(np.all(np.isfinite(v)) for v in st.values()), b.stderr + p.stderr[-1500:])

    def refused(args, want, rc=1, binary=exe):
        p = subprocess.run([binary] + args, capture_output=True, text=True, env=e)
        T.check("the built binary refuses %s: %s" % (" ".join(args), want), p.returncode == rc and want in p.stderr,
                "rc %d\n%s" % (p.returncode, p.stderr))

    refused(["train", "--data", data, "--device", "cuda:0,5"], "no CUDA device 5: this machine has 2")
    refused(["train", "--data", data, "--device", "cuda:0,0"], "--device is cpu, cuda, cuda:N, cuda:0,1 (several GPUs) "
            "or cuda+cpu (GPU and CPU threads), not 'cuda:0,0'", rc=2)
    refused(["train", "--data", data, "--device", "cuda:0,1", "--batch", "1"],
            "batch 1 is smaller than the 2 devices it is split over")
    npy = os.path.join(d, "x.npy")
    np.save(npy, np.zeros((2, 784), np.float32))
    refused(["predict", npy, "--device", "cuda:0,1"], "several devices split training batches; predict runs on one", rc=2)
    # A library built with --arch: NAME_device(m, "cuda:0,1") splits its NAME_train_step.
    lib = os.path.join(d, "libmlp")
    b = run(["build", os.path.join(ROOT, "examples", "mlp.kiln"), "--lib", "-o", lib, "--arch", "sm_90"])
    app = os.path.join(d, "app.c")
    with open(app, "w") as f:
        f.write('#include "mlp.h"\n#include <stdio.h>\n#include <stdlib.h>\n'
                'int main(int argc, char **argv) {\n  char err[512];\n  mlp_model *m = mlp_create(1, err, sizeof err);\n'
                '  if (!m || mlp_device(m, argv[1], err, sizeof err)) { fprintf(stderr, "%s\\n", err); return 1; }\n'
                '  static float x[64 * 784]; static int y[64]; double loss = 0;\n'
                '  for (int s = 0; s < 4; s++) {\n'   # the last a batch of 1: fewer rows than devices
                '    for (int i = 0; i < 64 * 784; i++)\n'   # hashed: periodic values leave Adam's first steps ill-conditioned
                '      x[i] = (float)((((unsigned)i * 2654435761u + (unsigned)s * 40503u) >> 12) & 1023) / 1023.0f;\n'
                '    for (int i = 0; i < 64; i++) y[i] = (int)((((unsigned)i * 2246822519u + (unsigned)s * 3266489917u) >> 20) % 10);\n'
                '    if (mlp_train_step(m, x, y, s < 3 ? 64 : 1, -1, &loss, err, sizeof err)) {\n'
                '      fprintf(stderr, "%s\\n", err);\n      return 1;\n    }\n'
                '    printf("%.6f\\n", loss);\n  }\n'
                '  if (mlp_save(m, argv[2], err, sizeof err)) { fprintf(stderr, "%s\\n", err); return 1; }\n'
                '  mlp_free(m);\n  return 0;\n}\n')
    cc = base.compile_app(d, app, lib + ".so")
    lib_w, lib_out = {}, {}
    for dev in ("cpu", "cuda:0,1", "cuda+cpu"):
        w = os.path.join(d, "lib-%s.safetensors" % dev)
        p = subprocess.run([os.path.join(d, "app"), dev, w], capture_output=True, text=True, env=e)
        lib_w[dev] = load_st(w) if p.returncode == 0 and os.path.exists(w) else None
        lib_out[dev] = p.stdout + p.stderr
    for dev in ("cuda:0,1", "cuda+cpu"):
        a, c = lib_w[dev], lib_w["cpu"]
        T.check("a library built with --arch: mlp_device(m, \"%s\") splits mlp_train_step, the CPU's weights after 4 "
                "steps, the last of 1 example (1e-3)" % dev, b.returncode == 0 and cc.returncode == 0 and a is not None and c is not None
                and a.keys() == c.keys() and all(np.abs(a[k] - c[k]).max() <= 1e-3 * np.abs(c[k]).max() + 1e-12 for k in a),
                b.stderr + cc.stderr + lib_out[dev] + lib_out["cpu"])
    plain = os.path.join(d, "plain")
    b = run(["build", os.path.join(ROOT, "examples", "mlp.kiln"), "-o", plain])
    refused(["train", "--data", data, "--device", "cuda+cpu"], "carries no CUDA kernels (kiln build --arch sm_XX makes "
            "them, and the training step split over several devices)", binary=plain)


def main():
    base.run_checks(sys.argv[0], "kiln_parallel_", [refusals, repl, examples, batch_norm, built])


if __name__ == "__main__":
    main()
