#!/usr/bin/env python3
"""GPU speed: Kiln's `--device cuda` against PyTorch eager and torch.compile on one GPU.

Usage: python3 benchmarks/gpu/bench.py KILN [--steps N] [--reps N] [--out DIR] [--torch-device cuda|cpu]

Measures, in one run, on the machine's GPU 0:

* copy: a device-to-device copy of 256 MiB through PyTorch (bytes read and
  written over the time, CUDA events, best of 10): the bandwidth the
  elementwise chain is compared with;
* chain: Kiln's `z = relu(a * b + 1) * a - b * 0.5` on two 16M-float vectors,
  its kernel's time from `kiln run --profile` (CUDA events), 12 bytes an element;
  PyTorch eager and compiled on the same expression (events);
* NVRTC: each graph of examples/mlp.kiln and cnn.kiln compiled for the GPU's
  architecture (`kiln emit-cuda --arch`), cold (an empty cache) and again
  (every image from the disk cache): milliseconds per graph, and the wall time
  of each whole command;
* training throughput, examples/s, MLP and CNN as in examples/ (Adam 1e-3,
  batch 128): Kiln `kiln run --device cuda --epochs 1 --max-steps N` twice
  (2 and 2 + N steps; the difference of the epochs' training times, as
  benchmarks/train_speed does), PyTorch eager and torch.compile (2 warm-up
  steps, then N, synchronised). Kiln trains on Fashion-MNIST-shaped random
  IDX files written here, since the GPU machine has no dataset; throughput
  does not depend on the values.

Writes results.md (the table, with the card's name) and results.json to --out
(default benchmarks/gpu). --torch-device cpu runs the peers on the CPU: a dry
run of the script on a machine without a GPU (Kiln then needs the fake driver,
KILN_LIBCUDA and friends; its numbers mean nothing there).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EPOCH = r"^epoch (\d+)/\d+: loss \S+, ([\d.]+) ex/s, ([\d.]+) s(?: \(data ([\d.]+)%\))?"
N_CHAIN = 16 * 1024 * 1024


def log(msg):
    print(msg, flush=True)


def write_idx(path, arr):
    """An IDX file: magic (unsigned byte data, ndim), the dimensions big-endian, the bytes."""
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, arr.ndim]))
        for d in arr.shape:
            f.write(int(d).to_bytes(4, "big"))
        f.write(arr.astype(np.uint8).tobytes())


def fake_fmnist(d):
    rng = np.random.default_rng(0)
    for split, n in [("train", 60000), ("t10k", 10000)]:
        write_idx(os.path.join(d, "%s-images-idx3-ubyte" % split), rng.integers(0, 256, (n, 28, 28)))
        write_idx(os.path.join(d, "%s-labels-idx1-ubyte" % split), rng.integers(0, 10, n))


def kiln(args, kiln_bin, env=None, timeout=600):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([kiln_bin] + args, capture_output=True, text=True, timeout=timeout, env=e)


def kiln_train_time(kiln_bin, model, steps, data, tmp, device="cuda", res=None):
    """Seconds for `steps` training steps: two runs, 2 and 2 + steps, their epochs' training times apart.
    With device cuda+cpu (the batch split between the GPU and the CPU's threads), the split stderr reports goes
    to res["split_MODEL"]."""
    src = open(os.path.join(ROOT, "examples", model + ".kiln")).read()
    src = src.replace('"/usr/share/datasets/fashion-mnist"', '"%s"' % data)
    src = re.sub(r"(?m)^save .*$", "", src)
    path = os.path.join(tmp, model + ".kiln")
    with open(path, "w") as f:
        f.write(src)
    t = {}
    for n in (2, 2 + steps):
        p = kiln(["run", path, "--device", device, "--epochs", "1", "--max-steps", str(n), "--eval-examples", "128",
                  "--progress", "lines"], kiln_bin)
        split = re.search(r"(?m)^kiln: each batch was split (.*)$", p.stderr)
        if res is not None and split:
            res["split_" + model] = split.group(1)
        m = re.search(EPOCH, p.stderr + p.stdout, re.M)
        if p.returncode or not m:
            raise RuntimeError("kiln %s: %s" % (model, (p.stderr + p.stdout)[-600:]))
        t[n] = float(m.group(3)) * (1 - float(m.group(4) or 0) / 100)
    return t[2 + steps] - t[2]


def torch_models(torch, dev):
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(1)

    def glorot(i, o, shape):
        lim = (6 / (i + o)) ** 0.5
        return (torch.rand(shape, generator=g) * 2 - 1) * lim

    def param(t):
        return torch.nn.Parameter(t.to(dev))

    def mlp():
        P = [param(glorot(784, 512, (784, 512))), param(torch.zeros(512)), param(glorot(512, 512, (512, 512))),
             param(torch.zeros(512)), param(glorot(512, 10, (512, 10))), param(torch.zeros(10))]

        def fwd(x):
            h = F.relu(x @ P[0] + P[1])
            h = F.relu(h @ P[2] + P[3])
            return h @ P[4] + P[5]
        return P, fwd, (128, 784)

    def cnn():
        P = [param(torch.randn((32, 1, 5, 5), generator=g) * (2 / 25) ** 0.5), param(torch.zeros(32)),
             param(torch.randn((64, 32, 5, 5), generator=g) * (2 / 800) ** 0.5), param(torch.zeros(64)),
             param(glorot(3136, 1024, (3136, 1024))), param(torch.zeros(1024)),
             param(glorot(1024, 10, (1024, 10))), param(torch.zeros(10))]

        def fwd(x):
            h = F.max_pool2d(F.relu(F.conv2d(x, P[0], P[1], padding=2)), 2)
            h = F.max_pool2d(F.relu(F.conv2d(h, P[2], P[3], padding=2)), 2)
            h = F.relu(h.flatten(1) @ P[4] + P[5])
            return h @ P[6] + P[7]
        return P, fwd, (128, 1, 28, 28)
    return {"mlp": mlp, "cnn": cnn}


def torch_train_time(torch, dev, model, steps, compiled):
    import torch.nn.functional as F
    P, fwd, shape = torch_models(torch, dev)[model]()
    opt = torch.optim.Adam(P, lr=1e-3)

    def loss_fn(x, y):
        return F.cross_entropy(fwd(x), y)
    if compiled:
        loss_fn = torch.compile(loss_fn)
    xs = [torch.rand(shape, device=dev) for _ in range(4)]
    ys = [torch.randint(0, 10, (128,), device=dev) for _ in range(4)]

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss_fn(xs[i % 4], ys[i % 4]).backward()
        opt.step()
    for i in range(2):
        step(i)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    sync()
    return time.perf_counter() - t0


def event_ms(torch, dev, fn, reps=10):
    """Best time of fn in ms: CUDA events on a GPU, the wall clock on a CPU."""
    fn()
    best = float("inf")
    for _ in range(reps):
        if dev == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            best = min(best, a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            best = min(best, 1e3 * (time.perf_counter() - t0))
    return best


def copy_and_chain(torch, dev, kiln_bin, tmp, res):
    n = 64 * 1024 * 1024   # 256 MiB of f32
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    ms = event_ms(torch, dev, lambda: dst.copy_(src))
    res["copy_GBs"] = 2 * 4 * n / ms / 1e6
    log("copy: %.0f GB/s (read + written)" % res["copy_GBs"])
    a, b = torch.rand(N_CHAIN, device=dev), torch.rand(N_CHAIN, device=dev)

    def chain(a, b):
        return torch.relu(a * b + 1) * a - b * 0.5
    res["chain_torch_GBs"] = 12 * N_CHAIN / event_ms(torch, dev, lambda: chain(a, b)) / 1e6
    cc = torch.compile(chain)
    res["chain_torch_compile_GBs"] = 12 * N_CHAIN / event_ms(torch, dev, lambda: cc(a, b)) / 1e6
    path = os.path.join(tmp, "chain.kiln")
    with open(path, "w") as f:
        f.write("param a : f32[%d] = uniform(low=0, high=1)\nparam b : f32[%d] = uniform(low=0, high=1)\n" % (N_CHAIN, N_CHAIN))
        for _ in range(10):
            f.write("z = relu(a * b + 1) * a - b * 0.5\nprint z[0]\n")
    p = kiln(["run", path, "--device", "cuda", "--profile"], kiln_bin)
    # the chain's graph: the one whose kernel computes the whole f32[N] (the fastest call of it)
    times = [float(m.group(1)) for m in re.finditer(r"^\s+([\d.]+)\s+[\d.]+%\s+k\d+ \w+ f32\[" + str(N_CHAIN) + r"\]",
                                                     p.stderr, re.M)]
    if p.returncode or not times:
        raise RuntimeError("kiln chain: " + p.stderr[-600:])
    res["chain_kiln_GBs"] = 12 * N_CHAIN / min(times) / 1e6
    log("chain: kiln %.0f GB/s, torch %.0f, torch.compile %.0f" % (res["chain_kiln_GBs"], res["chain_torch_GBs"],
                                                                   res["chain_torch_compile_GBs"]))


def nvrtc_latency(kiln_bin, arch, tmp, res):
    cache = os.path.join(tmp, "nvrtc-cache")
    for model in ("mlp", "cnn"):
        path = os.path.join(ROOT, "examples", model + ".kiln")
        walls, per = [], []
        for run in ("cold", "cached"):
            t0 = time.perf_counter()
            p = kiln(["emit-cuda", path, "--arch", "sm_%d" % arch], kiln_bin, {"KILN_CACHE_DIR": cache})
            walls.append(time.perf_counter() - t0)
            if p.returncode:
                raise RuntimeError("emit-cuda: " + p.stderr[-600:])
            lines = re.findall(r"^// NVRTC .*, (compiled in ([\d.]+) ms|from the cache)$", p.stdout, re.M)
            per.append(lines)
        cold = [float(ms) for _, ms in per[0] if ms]
        res["nvrtc_" + model] = {"graphs": len(per[0]), "cold_ms_median": statistics.median(cold) if cold else None,
                                 "cold_ms_max": max(cold) if cold else None, "cold_wall_s": walls[0],
                                 "cached_hits": sum(1 for w, _ in per[1] if w == "from the cache"),
                                 "cached_wall_s": walls[1]}
        log("nvrtc %s: %s" % (model, res["nvrtc_" + model]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--torch-device", default="cuda")
    ap.add_argument("--models", default="mlp,cnn")
    o = ap.parse_args()
    import torch
    dev = o.torch_device
    kiln_bin = os.path.abspath(o.kiln)
    res = {"card": torch.cuda.get_device_name(0) if dev == "cuda" else "CPU (dry run)", "steps": o.steps}
    arch = 90
    if dev == "cuda":
        major, minor = torch.cuda.get_device_capability(0)
        arch = 10 * major + minor
    res["arch"] = arch
    log("card: %s (sm_%d)" % (res["card"], arch))
    with tempfile.TemporaryDirectory(prefix="kiln_gpu_bench_") as tmp:
        data = os.path.join(tmp, "fmnist")
        os.makedirs(data)
        fake_fmnist(data)
        copy_and_chain(torch, dev, kiln_bin, tmp, res)
        nvrtc_latency(kiln_bin, arch, tmp, res)
        for model in o.models.split(","):
            for system in ("kiln", "kiln_hybrid", "torch", "torch.compile"):
                ts = []
                for _ in range(o.reps):
                    if system == "kiln":
                        ts.append(kiln_train_time(kiln_bin, model, o.steps, data, tmp))
                    elif system == "kiln_hybrid":   # the GPU and this machine's CPU threads, each a share of the batch
                        ts.append(kiln_train_time(kiln_bin, model, o.steps, data, tmp, "cuda+cpu", res))
                    else:
                        ts.append(torch_train_time(torch, dev, model, o.steps, system == "torch.compile"))
                res["train_%s_%s" % (model, system)] = 128 * o.steps / statistics.median(ts)
                log("train %s %s: %.0f ex/s" % (model, system, res["train_%s_%s" % (model, system)]))
    os.makedirs(o.out, exist_ok=True)
    with open(os.path.join(o.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(o.out, "results.md"), "w") as f:
        f.write(table(res))
    print(table(res))


def table(r):
    t = ["# GPU speed: %s (sm_%d)\n" % (r["card"], r["arch"]), "",
         "| workload | Kiln | PyTorch eager | torch.compile | Kiln / eager | Kiln / compile |", "|---|---|---|---|---|---|"]
    for m in ("mlp", "cnn"):
        if "train_%s_kiln" % m not in r:
            continue
        k, e, c = r["train_%s_kiln" % m], r["train_%s_torch" % m], r["train_%s_torch.compile" % m]
        t.append("| %s training, ex/s | %.0f | %.0f | %.0f | %.2f | %.2f |" % (m.upper(), k, e, c, k / e, k / c))
        h = r.get("train_%s_kiln_hybrid" % m)
        if h:
            t.append("| %s training, GPU + CPU (`--device cuda+cpu`), ex/s | %.0f | %.0f | %.0f | %.2f | %.2f |"
                     % (m.upper(), h, e, c, h / e, h / c))
    k, e, c = r["chain_kiln_GBs"], r["chain_torch_GBs"], r["chain_torch_compile_GBs"]
    t.append("| elementwise chain, GB/s | %.0f | %.0f | %.0f | %.2f | %.2f |" % (k, e, c, k / e, k / c))
    for m in ("mlp", "cnn"):
        if "split_" + m in r:
            t += ["", "%s over the GPU and the CPU: each batch was split %s; %.2fx Kiln on the GPU alone."
                  % (m.upper(), r["split_" + m], r["train_%s_kiln_hybrid" % m] / r["train_%s_kiln" % m])]
    t += ["", "Device-to-device copy: %.0f GB/s; the chain reaches %.0f%% of it (target: 80%%)."
          % (r["copy_GBs"], 100 * r["chain_kiln_GBs"] / r["copy_GBs"]), "",
          "| NVRTC | graphs | cold, median ms per graph | cold, max | cold command, s | cached: hits, command s |",
          "|---|---|---|---|---|---|"]
    for m in ("mlp", "cnn"):
        n = r["nvrtc_" + m]
        t.append("| examples/%s.kiln | %d | %s | %s | %.2f | %d, %.2f |" % (
            m, n["graphs"], "%.1f" % n["cold_ms_median"] if n["cold_ms_median"] else "-",
            "%.1f" % n["cold_ms_max"] if n["cold_ms_max"] else "-", n["cold_wall_s"], n["cached_hits"], n["cached_wall_s"]))
    return "\n".join(t) + "\n"


if __name__ == "__main__":
    sys.exit(main())
