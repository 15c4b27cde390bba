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
  than the devices, a data input whose first axis is not the batch.

With --real the same runs go to the machine's GPUs (two or more for cuda:0,1,
KILN_TEST_GPUS=2; otherwise only cuda+cpu runs).
"""
import os
import re
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


def main():
    base.run_checks(sys.argv[0], "kiln_parallel_", [refusals, repl, examples, batch_norm])


if __name__ == "__main__":
    main()
