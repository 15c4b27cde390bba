#!/usr/bin/env python3
"""Standalone binaries (kiln build) against kiln run, on examples/mlp.kiln.

Usage: bench.py --kiln build/kiln --harness KILN_HARNESS [--torch-python PY] [--threads 1] [--out DIR]

Measures: the size of what ships (the executable, stripped, the library; and
what kiln run needs installed), the time from process start to the first
prediction (one example: the built binary with weights loaded or embedded,
`kiln run` with a warm and a cold compile cache, PyTorch's TorchScript export
loaded by Python when --torch-python is given), and the latency of one
forward call in process at batch 1 and 128 (the library's mlp_forward, the
JIT's graph through the C API as benchmarks/train_speed's kiln_harness does,
PyTorch eager and TorchScript). Writes results.md next to this script.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = "/usr/share/datasets/fashion-mnist"


def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def wall(args, n, env=None, cwd=None, before=None):
    """The median wall time of a command in ms, over n runs (before(): run first, untimed)."""
    ts = []
    for _ in range(n):
        if before:
            before()
        t0 = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True, env=env, cwd=cwd)
        ts.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ts)


def size(path):
    return os.path.getsize(path)


def mb(n):
    return "%.1f MB" % (n / 1e6)


def torch_part(py, tmp, weights, threads):
    """PyTorch's exported form of the same MLP with the same weights: TorchScript."""
    from safetensors.numpy import load_file
    import numpy as np
    np.savez(os.path.join(tmp, "w.npz"), **load_file(weights))
    weights = os.path.join(tmp, "w.npz")
    script = r'''
import sys, time, statistics, numpy, torch
torch.set_num_threads(%d)
w = {k: torch.from_numpy(v) for k, v in numpy.load(%r).items()}
m = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
with torch.no_grad():
    for i, k in ((0, 1), (2, 2), (4, 3)):
        m[i].weight.copy_(w["dense.%%d.W" %% k].T)
        m[i].bias.copy_(w["dense.%%d.b" %% k])
m.eval()
ts = torch.jit.trace(m, torch.zeros(1, 784))
ts.save(%r)
def lat(f, B):
    x = torch.rand(B, 784)
    with torch.no_grad():
        f(x)
        t0 = time.perf_counter(); f(x); one = time.perf_counter() - t0
        reps = max(5, min(200, int(1.0 / max(one, 1e-9))))
        s = []
        for _ in range(reps):
            t0 = time.perf_counter(); f(x); s.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(s)
for B in (1, 128):
    print("EAGER", B, lat(m, B))
    print("SCRIPT", B, lat(torch.jit.load(%r), B))
''' % (threads, weights, os.path.join(tmp, "mlp.pt"), os.path.join(tmp, "mlp.pt"))
    out = sh([py, "-c", script]).stdout
    res = {}
    for kind, b, ms in re.findall(r"^(EAGER|SCRIPT) (\d+) (\S+)$", out, re.M):
        res[(kind, int(b))] = float(ms)
    first = ("import torch; torch.set_num_threads(%d); m = torch.jit.load(%r); "
             "print(m(torch.rand(1, 784)).argmax().item())" % (threads, os.path.join(tmp, "mlp.pt")))
    res["startup"] = wall([py, "-c", first], 5)
    res["size"] = size(os.path.join(tmp, "mlp.pt"))
    res["version"] = sh([py, "-c", "import torch; print(torch.__version__)"]).stdout.strip()
    tdir = sh([py, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"]).stdout.strip()
    res["install"] = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tdir) for f in fs)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--harness", required=True)
    ap.add_argument("--lib-latency-src", default=os.path.join(HERE, "lib_latency.c"))
    ap.add_argument("--torch-python")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=HERE)
    a = ap.parse_args()
    kiln = os.path.abspath(a.kiln)
    T = a.threads
    tmp = tempfile.mkdtemp(prefix="kiln-standalone-bench-")
    os.environ["KILN_CACHE_DIR"] = os.path.join(tmp, "cache")
    ex = os.path.join(ROOT, "examples", "mlp.kiln")
    p = lambda *x: os.path.join(tmp, *x)
    # the artifacts
    sh([kiln, "build", ex, "-o", p("mlp")])
    sh([kiln, "build", ex, "-o", p("mlp_native"), "--target-cpu=native"])
    sh([p("mlp_native"), "train", "--epochs", "1", "--max-steps", "50", "--out", p("w.safetensors"), "--progress", "lines"])
    sh([kiln, "build", ex, "-o", p("mlp_embedded"), "--embed-weights", p("w.safetensors")])
    os.makedirs(p("lib"))
    sh([kiln, "build", ex, "--lib", "-o", p("lib", "libmlp"), "--target-cpu=native"])
    shutil.copy(p("mlp"), p("mlp_stripped"))
    sh(["strip", p("mlp_stripped")])
    # one example as .npy, written by the binary's own loader from an IDX file would need
    # the data set; numpy is at hand in the test environment
    import numpy as np
    np.save(p("x1.npy"), np.random.default_rng(0).random((1, 784), dtype=np.float32))
    # kiln run: the model, the weights, one prediction
    text = open(ex).read()
    lines = [l for l in text.splitlines() if not re.match(r"(data|train|evaluate|save|loss) |input y", l)]
    text = "\n".join(l if not l.startswith("input x") else "x = uniform([1, 784], seed=3)" for l in lines)
    with open(p("first.kiln"), "w") as f:
        f.write(text + '\nload "%s"\nprint logits\n' % p("w.safetensors"))
    run_first = [kiln, "run", p("first.kiln"), "--threads", str(T)]
    sh(run_first)   # warms the cache
    cold_env = dict(os.environ)

    def fresh_cache():
        shutil.rmtree(p("cold"), ignore_errors=True)
        cold_env["KILN_CACHE_DIR"] = p("cold")

    r = {}
    r["start_bin"] = wall([p("mlp"), "predict", "--threads", str(T), "--weights", p("w.safetensors"), p("x1.npy"), "-o", p("o.npy")], 20)
    r["start_emb"] = wall([p("mlp_embedded"), "predict", "--threads", str(T), p("x1.npy"), "-o", p("o.npy")], 20)
    r["start_warm"] = wall(run_first, 10)
    r["start_cold"] = wall(run_first, 3, env=cold_env, before=fresh_cache)
    # latency in process
    cc = os.environ.get("CC", "cc")
    sh([cc, "-O2", "-I", p("lib"), a.lib_latency_src, p("lib", "libmlp.a"), "-lblis", "-lz", "-lm", "-lmvec",
        "-lpthread", "-fopenmp", "-o", p("lib_latency")])
    lib = dict((int(b), float(ms)) for b, ms in re.findall(r"^LIB (\d+) (\S+)$", sh([p("lib_latency"), str(T), p("w.safetensors")]).stdout, re.M))
    jit = dict((int(b), float(ms)) for b, ms in re.findall(r"^INFER (\d+) (\S+)$", sh([a.harness, str(T), "infer", ex]).stdout, re.M))
    tor = torch_part(a.torch_python, tmp, p("w.safetensors"), T) if a.torch_python else None
    # what kiln run needs installed: the executable and the LLVM/Clang libraries it loads
    ldd = sh(["ldd", kiln]).stdout
    big = [m for m in re.findall(r"=> (\S+)", ldd) if re.search(r"LLVM|clang", m)]
    kiln_install = size(kiln) + sum(size(os.path.realpath(m)) for m in big)
    cpu = re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read())
    w = []
    w.append("# Standalone binaries against kiln run (examples/mlp.kiln)\n")
    w.append("Run %s on %s, %d thread%s; medians (start-up: 20 runs of the binaries, 10 warm and 3 cold of kiln run%s; "
             "latency: repetitions filling about 1 s after a warm-up). A shared machine: compare ratios. "
             "`benchmarks/standalone/run.sh` repeats it.\n" %
             (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cpu.group(1).strip() if cpu else "this machine", T,
              "" if T == 1 else "s", ", 5 of PyTorch" if tor else ""))
    w.append("## Size of what ships\n")
    w.append("| artifact | size |\n|---|---:|")
    w.append("| `kiln build` executable (portable x86-64-v2; runtime, BLIS, zlib and the 2.7 MB of initial parameters inside) | %s |" % mb(size(p("mlp"))))
    w.append("| the same, stripped | %s |" % mb(size(p("mlp_stripped"))))
    w.append("| with `--embed-weights` (trained weights too) | %s |" % mb(size(p("mlp_embedded"))))
    w.append("| `--lib`: libmlp.so (BLIS and zlib linked dynamically) | %s |" % mb(size(p("lib", "libmlp.so"))))
    w.append("| `--lib`: libmlp.a | %s |" % mb(size(p("lib", "libmlp.a"))))
    w.append("| what `kiln run` needs: the kiln executable and its LLVM/Clang libraries | %s |" % mb(kiln_install))
    if tor:
        w.append("| PyTorch %s: TorchScript file (needs libtorch: the installed torch package is %s) | %s |" %
                 (tor["version"], mb(tor["install"]), mb(tor["size"])))
    w.append("\n## Start-up to the first prediction (one example, whole process)\n")
    w.append("| | ms |\n|---|---:|")
    w.append("| built executable, `--weights FILE` | %.1f |" % r["start_bin"])
    w.append("| built executable, embedded weights | %.1f |" % r["start_emb"])
    w.append("| `kiln run`, warm compile cache | %.1f |" % r["start_warm"])
    w.append("| `kiln run`, empty compile cache (compiles the graph) | %.1f |" % r["start_cold"])
    if tor:
        w.append("| Python + PyTorch, `torch.jit.load` of the TorchScript export | %.1f |" % tor["startup"])
    w.append("\n## Forward latency in process (ms per call)\n")
    w.append("| | batch 1 | batch 128 |\n|---|---:|---:|")
    w.append("| built library, `mlp_forward` (native) | %.4f | %.4f |" % (lib[1], lib[128]))
    w.append("| `kiln run`'s JIT graph through the C API (`kiln_run`) | %.4f | %.4f |" % (jit[1], jit[128]))
    if tor:
        w.append("| PyTorch eager | %.4f | %.4f |" % (tor[("EAGER", 1)], tor[("EAGER", 128)]))
        w.append("| PyTorch TorchScript | %.4f | %.4f |" % (tor[("SCRIPT", 1)], tor[("SCRIPT", 128)]))
    w.append("\nONNX Runtime is not installed here, so PyTorch's ONNX export is not measured; TorchScript is its exported form that runs without the Python model code.")
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(w) + "\n")
    print("\n".join(w))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
