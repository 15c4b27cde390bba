#!/usr/bin/env python3
"""CPU speed: Kiln against PyTorch (eager and torch.compile), JAX, TensorFlow,
PyTensor and tinygrad on the examples' models, plus GEMM, an elementwise chain
and the machine's own peak FLOP/s and triad bandwidth.

Run through ./run.sh, which makes the virtual environment and builds the C
helpers. Every system is measured in this one run, for each thread count (1 and
all cores), systems alternating inside each repetition (their order rotating
from one repetition to the next) so that drift of this shared machine hits all
of them alike; the tables give medians over the repetitions. Each run is its own
process pinned with `taskset` to THREADS cores, with the library's own thread
setting at THREADS too. Writes results.md, results.json and chart.png here.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEERS = ["torch", "torch_compile", "jax", "tensorflow", "pytensor", "tinygrad"]
SYSTEMS = ["kiln"] + PEERS
NAME = {"kiln": "Kiln", "torch": "PyTorch eager", "torch_compile": "torch.compile", "jax": "JAX jit",
        "tensorflow": "TF/Keras XLA", "pytensor": "PyTensor", "tinygrad": "tinygrad", "blis": "BLIS direct"}
IMPORT = {"torch": "torch", "torch_compile": "torch", "jax": "jax", "tensorflow": "tensorflow",
          "pytensor": "pytensor", "tinygrad": "tinygrad"}
MODELS = ["logreg", "mlp", "cnn", "transformer"]
TTA_MODELS = ["logreg", "mlp", "cnn"]   # the transformer: throughput and inference only
# the processes run here: what the examples save (mlp.safetensors, ...) lands in it
WORKDIR = tempfile.mkdtemp(prefix="kiln-speed-")
BATCH = {"logreg": 64, "mlp": 128, "cnn": 128, "transformer": 128}
TRAIN_N = 60000   # Fashion-MNIST's training images
WARMUP = 2   # steps each system runs before its timed steps
# Kiln's epoch line: epoch, ex/s, and the share of the time spent waiting for batches.
KILN_EPOCH = r"^epoch (\d+)/\d+: loss \S+, ([\d.]+) ex/s, [\d.]+ s(?: \(data ([\d.]+)%\))?"
# Time to accuracy: the examples' test-accuracy targets, and the most epochs tried.
TARGET = {"logreg": 0.815, "mlp": 0.875, "cnn": 0.895}
TTA_EPOCHS = {"logreg": 5, "mlp": 6, "cnn": 2}
GEMM_SIZES = [256, 512, 1024, 2048]
GEMM_PAIRS = 3


# ------------------------------------------------------------ FLOPs per image
def model_flops():
    """Forward and training FLOPs per image, from the layer shapes (a multiply-add
    is 2 FLOPs; elementwise ops, pooling and the optimizer are left out). A
    training step is the forward pass plus, per layer, the weight gradient and
    (except for the first layer, whose input needs none) the input gradient,
    each as many FLOPs as the forward product."""
    def dense(i, o):
        return 2 * i * o
    def conv(c, o, hw, k):
        return 2 * c * o * hw * hw * k * k
    # the transformer's products per image: 28 tokens through the embedding, q, k,
    # v, the scores and the weighted values (4 heads of 16: 28 x 28 x 64 each),
    # the output and the MLP; the classifier once
    t = 28
    attn = [t * dense(28, 64), 3 * t * dense(64, 64), 2 * t * t * 64, 2 * t * t * 64, t * dense(64, 64),
            t * dense(64, 128), t * dense(128, 64), dense(64, 10)]
    layers = {"logreg": [dense(784, 10)], "transformer": attn,
              "mlp": [dense(784, 512), dense(512, 512), dense(512, 10)],
              "cnn": [conv(1, 32, 28, 5), conv(32, 64, 14, 5), dense(64 * 7 * 7, 1024), dense(1024, 10)]}
    out = {}
    for m, ls in layers.items():
        fwd = sum(ls)
        out[m] = {"forward": fwd, "train": fwd + sum(ls) + sum(ls[1:])}
    return out


# ------------------------------------------------------------------ running
def run_proc(cmd, threads, timeout, env=None):
    """Run pinned to THREADS cores; (returncode, stdout, stderr, peak RSS MiB, seconds)."""
    cores = ",".join(str(i) for i in range(threads))
    full_env = dict(os.environ)
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS", "KILN_THREADS"):
        full_env[v] = str(threads)
    if threads == 1:
        full_env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    full_env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    full_env.update(env or {})
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(["taskset", "-c", cores] + cmd, stdout=fo, stderr=fe, env=full_env, cwd=WORKDIR)
        deadline = t0 + timeout
        status, ru = 0, None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                status = -9
                break
            time.sleep(0.05)
        p.returncode = 0
        dt = time.perf_counter() - t0
        fo.seek(0); fe.seek(0)
        out, err = fo.read().decode(errors="replace"), fe.read().decode(errors="replace")
    rc = -9 if status == -9 else os.waitstatus_to_exitcode(status)
    return rc, out, err, ru.ru_maxrss / 1024, dt


def why(rc, err, timeout):
    if rc == -9:
        return f"timed out after {timeout} s"
    lines = [l for l in err.strip().splitlines() if l.strip()]
    for l in reversed(lines):
        if re.match(r"^\w*(Error|Exception)\b", l) or "Error:" in l:
            return l.strip()[:200]
    return (lines[-1].strip()[:200] if lines else f"exit status {rc}")


class Bench:
    def __init__(self, a):
        self.a = a
        self.py = a.python
        self.kiln = a.kiln
        self.bin = a.bindir
        self.res = {"train": {}, "rss": {}, "infer": {}, "gemm": {}, "ew": {}, "conv": {}, "conv_layer": {}, "conv_pick": {},
                    "tta": {},
                    "peak": {}, "peak_avx2": {}, "triad": {}, "failed": {}}
        self.failed = self.res["failed"]

    def log(self, *msg):
        print(f"[{time.strftime('%H:%M:%S')}]", *msg, file=sys.stderr, flush=True)

    def add(self, table, key, value):
        self.res[table].setdefault(key, []).append(value)

    def fail(self, system, what, reason):
        self.log(f"  {system} {what} failed: {reason}")
        self.failed[f"{system}|{what}"] = reason

    def is_failed(self, system, what):
        return f"{system}|{what}" in self.failed or f"{system}|all" in self.failed

    # the machine ---------------------------------------------------------
    def machine(self, threads):
        rc, out, err, _, _ = run_proc([os.path.join(self.bin, "fma_peak"), str(threads)], threads, 120)
        m = re.search(r"GFLOPS (\S+)", out)
        if m: self.add("peak", threads, float(m.group(1)))
        m = re.search(r"GFLOPS_AVX2 (\S+)", out)
        if m: self.add("peak_avx2", threads, float(m.group(1)))
        rc, out, err, _, _ = run_proc([os.path.join(self.bin, "triad"), str(threads)], threads, 120)
        m = re.search(r"GBS (\S+)", out)
        if m: self.add("triad", threads, float(m.group(1)))

    # training + inference ------------------------------------------------
    def kiln_epoch_time(self, model, threads, steps):
        """Seconds of training in one epoch cut at `steps` steps (the epoch line's time
        counts training alone), less its share spent waiting for batches (the line's
        "(data N%)": the peers build their batches before timing), the process's peak
        RSS; None when it failed."""
        cmd = [self.kiln, "run", os.path.join(ROOT, "examples", f"{model}.kiln"), "--epochs", "1", "--max-steps",
               str(steps), "--eval-examples", "100", "--threads", str(threads), "--progress", "lines"]
        rc, out, err, rss, dt = run_proc(cmd, threads, self.a.timeout)
        m = re.search(KILN_EPOCH, err, re.M)
        if rc or not m or float(m.group(2)) <= 0:
            self.fail("kiln", f"train-{model}", why(rc, err, self.a.timeout))
            return None, rss
        return steps * BATCH[model] / float(m.group(2)) * (1 - float(m.group(3) or 0) / 100), rss

    def train(self, system, model, threads):
        what = f"train-{model}"
        if self.is_failed(system, what):
            return
        steps = self.a.steps[model]
        t0 = time.time()
        if system == "kiln":
            # Like the peers' 2 warm-up steps: the time of a 2-step run (its first step
            # touches the scratch memory for the first time) comes off a 2 + N step run.
            short, _ = self.kiln_epoch_time(model, threads, WARMUP)
            full, rss = self.kiln_epoch_time(model, threads, WARMUP + steps)
            if short is None or full is None:
                return
            if full <= short:
                return self.fail(system, what, f"{WARMUP + steps} steps took no longer than {WARMUP}")
            self.add("train", (model, threads, system), steps * BATCH[model] / (full - short))
        else:
            cmd = [self.py, os.path.join(HERE, "peers.py"), system, "train", model, str(steps), str(threads)]
            rc, out, err, rss, dt = run_proc(cmd, threads, self.a.timeout)
            m = re.search(r"^RESULT (.*)$", out, re.M)
            if rc or not m:
                return self.fail(system, what, why(rc, err, self.a.timeout))
            r = json.loads(m.group(1))
            self.add("train", (model, threads, system), r["ex_per_s"])
            for b, ms in r["infer_ms"].items():
                self.add("infer", (model, int(b), threads, system), ms)
        self.add("rss", (model, threads, system), rss)
        self.log(f"  {system:13s} {model:6s} T={threads}: {self.res['train'][(model, threads, system)][-1]:9.1f} ex/s,"
                 f" {rss:6.0f} MiB, {time.time() - t0:5.1f} s wall")

    def tta(self, system, model, threads):
        """Training seconds until test accuracy reaches TARGET[model]: whole epochs,
        evaluation after each (not timed). Kiln: the example file as it is, its epoch
        lines' training times summed."""
        what = f"tta-{model}"
        epochs = TTA_EPOCHS[model]
        if system == "kiln":
            cmd = [self.kiln, "run", os.path.join(ROOT, "examples", f"{model}.kiln"), "--epochs", str(epochs),
                   "--threads", str(threads), "--progress", "lines"]
        else:
            cmd = [self.py, os.path.join(HERE, "peers.py"), system, "tta", model, str(epochs), str(threads)]
        rc, out, err, rss, dt = run_proc(cmd, threads, self.a.tta_timeout)
        if rc:
            return self.fail(system, what, why(rc, err, self.a.tta_timeout))
        if system == "kiln":
            total, accs, sec = 0.0, [], None
            for n, rate, data, acc in re.findall(KILN_EPOCH + r".*?, accuracy ([\d.]+)", err, re.M):
                total += TRAIN_N / float(rate) * (1 - float(data or 0) / 100)   # finer than the line's 0.1 s
                accs.append(float(acc))
                if sec is None and float(acc) >= TARGET[model]:
                    sec, ep = total, int(n)
            r = {"seconds": sec, "epochs": ep if sec is not None else len(accs), "accuracy": accs}
        else:
            m = re.search(r"^RESULT (.*)$", out, re.M)
            if not m:
                return self.fail(system, what, why(rc, err, self.a.tta_timeout))
            r = json.loads(m.group(1))
        self.res["tta"][(model, threads, system)] = r
        self.log(f"  {system:13s} {model:6s} T={threads}: time to {TARGET[model]:.1%}: "
                 f"{r['seconds'] if r['seconds'] is not None else 'not reached'} s, accuracy {r['accuracy']}")

    def kiln_harness(self, threads, *args, timeout=None):
        rc, out, err, _, _ = run_proc([os.path.join(self.bin, "kiln_harness"), str(threads)] + list(args),
                                      threads, timeout or self.a.timeout)
        if rc:
            self.fail("kiln", "harness-" + args[0], why(rc, err, self.a.timeout))
        return out

    def kiln_infer(self, model, threads):
        out = self.kiln_harness(threads, "infer", os.path.join(ROOT, "examples", f"{model}.kiln"))
        for b, ms in re.findall(r"^INFER (\d+) (\S+)", out, re.M):
            self.add("infer", (model, int(b), threads, "kiln"), float(ms))

    # Each conv layer of the CNN and of a CIFAR-shaped variant in every lowering,
    # forward and training share (the harness lists the layers), and the
    # lowering Kiln's cost model (or a cached --tune decision) picks for it,
    # read from `kiln ir`'s note on the layer.
    def conv_layers(self, threads):
        out = self.kiln_harness(threads, "conv", "im2col")   # cheap: just the list of layers and one lowering
        for model, layer, c, hw, o, k, st, first in re.findall(
                r"^CONVLAYER (\S+) (\S+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d)", out, re.M):
            self.res["conv_layer"][(model, layer)] = (int(c), int(hw), int(o), int(k), int(st))
            self.res["conv_pick"][(model, layer)] = self.conv_pick(int(c), int(hw), int(o), int(k), int(st), first == "1")
            lo = self.kiln_harness(threads, "conv", f"{model}/{layer}", timeout=max(self.a.timeout, 1200))
            for low, pas, ms in re.findall(r"^CONV \S+ \S+ (\S+) (\S+) (\S+)", lo, re.M):
                self.add("conv", (model, layer, low, pas, threads), float(ms))

    # A first layer reads the data; a later one's input reaches a parameter (here
    # a bias), so its training step computes the input's gradient, as the
    # harness times it.
    def conv_pick(self, c, hw, o, k, stride, first):
        src = "x" if first else "(x + a)"
        prog = (f"input x : f32[B, {c}, {hw}, {hw}]\nparam a : f32[{c}, 1, 1] = zeros\n"
                f"param K : f32[{o}, {c}, {k}, {k}] = he\n"
                f"y = conv2d({src}, K, stride={stride}, pad=\"same\")\n")
        p = subprocess.run([self.kiln, "ir", "-e", prog], capture_output=True, text=True, cwd=WORKDIR)
        m = re.search(r"conv2d \[[^]]*\] x \[[^]]*\]: (\w+)", p.stdout + p.stderr)
        return m.group(1) if m else "?"

    # GEMM, elementwise chain, conv layers -----------------------------------
    # Kiln's GEMM and BLIS's, GEMM_PAIRS times alternating in each micro
    # repetition: a few seconds a pair, where one sample of each moved by up
    # to 10% from run to run on a shared VM (2 threads, n = 1024: 0.90-0.96).
    def gemm_pair(self, threads):
        sizes = [str(n) for n in GEMM_SIZES]
        out = self.kiln_harness(threads, "gemm", *sizes)
        for n, g in re.findall(r"^GEMM (\d+) (\S+)", out, re.M):
            self.add("gemm", (int(n), threads, "kiln"), float(g))
        rc, out, err, _, _ = run_proc([os.path.join(self.bin, "blis_gemm"), str(threads)] + sizes,
                                      threads, self.a.timeout)
        if rc:
            self.fail("blis", "gemm", why(rc, err, self.a.timeout))
        for n, g in re.findall(r"^GEMM (\d+) (\S+)", out, re.M):
            self.add("gemm", (int(n), threads, "blis"), float(g))

    def micro(self, system, threads):
        if system == "kiln":
            for _ in range(GEMM_PAIRS):   # a second each; one sample moved by 2x on a busy VM
                out = self.kiln_harness(threads, "ew")
                for g in re.findall(r"^EW (\S+)", out, re.M):
                    self.add("ew", (threads, "kiln"), float(g))
            self.conv_layers(threads)
            return
        if self.is_failed(system, "micro"):
            return
        rc, out, err, _, _ = run_proc([self.py, os.path.join(HERE, "peers.py"), system, "micro", "-", "-",
                                       str(threads)], threads, self.a.timeout)
        m = re.search(r"^RESULT (.*)$", out, re.M)
        if rc or not m:
            return self.fail(system, "micro", why(rc, err, self.a.timeout))
        r = json.loads(m.group(1))
        for n, g in r["gemm"].items():
            self.add("gemm", (int(n), threads, system), g)
        self.add("ew", (threads, system), r["ew_gbs"])

    # the whole run -------------------------------------------------------
    def check_peers(self):
        notes = {}
        path = os.path.join(os.path.dirname(self.py), "..", "install-notes.txt")
        if os.path.exists(path):
            for line in open(path):
                if ":" in line:
                    k, v = line.split(":", 1)
                    notes[k.strip()] = v.strip()
        for s in self.a.systems:
            if s == "kiln":
                continue
            r = subprocess.run([self.py, "-c", f"import {IMPORT[s]}"], capture_output=True, text=True)
            if r.returncode:
                reason = notes.get(IMPORT[s]) or notes.get(s) or why(r.returncode, r.stderr, 0)
                self.fail(s, "all", "not installable/importable here: " + reason)

    def run(self):
        a = self.a
        t_start = time.time()
        self.check_peers()
        if "transformer" in a.models:
            # the same graph everywhere: the transformer's logits on the same weights
            p = subprocess.run([self.py, os.path.join(HERE, "peers.py"), "agree", self.kiln], capture_output=True,
                               text=True, cwd=WORKDIR)
            self.res["agree"] = [l for l in p.stdout.splitlines() if "max |logits" in l or "not importable" in l]
            self.log(*self.res["agree"])
        for T in a.threads:
            self.machine(T)
        for rep in range(a.reps):
            for T in a.threads:
                for i, model in enumerate(a.models):
                    order = a.systems[(rep + i) % len(a.systems):] + a.systems[:(rep + i) % len(a.systems)]
                    self.log(f"rep {rep + 1}/{a.reps}, {T} thread(s), {model}")
                    for s in order:
                        self.train(s, model, T)
                    self.kiln_infer(model, T)
        for T in a.tta_threads:
            for model in (m for m in TTA_MODELS if m in a.models):
                for s in a.systems:
                    if model in a.tta_models.get(s, MODELS):
                        self.log(f"time to accuracy, {T} thread(s), {model}, {s}")
                        self.tta(s, model, T)
                    elif T == a.tta_threads[0]:
                        self.fail(s, f"tta-{model}", a.tta_why)
        for rep in range(a.micro_reps):
            for T in a.threads:
                self.log(f"micro rep {rep + 1}/{a.micro_reps}, {T} thread(s)")
                for _ in range(GEMM_PAIRS):
                    self.gemm_pair(T)
                for s in a.systems:
                    self.micro(s, T)
        for T in a.threads:
            self.machine(T)
        self.res["seconds"] = time.time() - t_start
        return self.res


# ------------------------------------------------------------------ reporting
def med(xs):
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    if x is None:
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}"


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "–"


def report(res, a):
    systems = a.systems
    peers = [s for s in systems if s != "kiln"]
    th = a.threads
    tr = {k: med(v) for k, v in res["train"].items()}
    rss = {k: med(v) for k, v in res["rss"].items()}
    inf = {k: med(v) for k, v in res["infer"].items()}
    gemm = {k: med(v) for k, v in res["gemm"].items()}
    ew = {k: med(v) for k, v in res["ew"].items()}
    conv = {k: med(v) for k, v in res["conv"].items()}
    peak = {t: max(v) for t, v in res["peak"].items()}
    triad = {t: max(v) for t, v in res["triad"].items()}
    peak2 = {t: max(v) for t, v in res["peak_avx2"].items()}
    flops = model_flops()
    L = []
    w = L.append
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip(); break
    except OSError:
        pass
    w("# CPU speed: Kiln against PyTorch, torch.compile, JAX, TensorFlow, PyTensor, tinygrad\n")
    w(f"Run of {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, `run.sh {'--full' if a.full else '--quick'}` "
      f"({res['seconds'] / 60:.0f} min), on {cpu}, {os.cpu_count()} cores, Linux {platform.release()}, "
      f"a shared and noisy virtual machine. Thread counts: {', '.join(map(str, th))}. "
      f"Medians over {a.reps} repetitions (training, inference), {a.micro_reps} (the peers' elementwise chain), {a.micro_reps * GEMM_PAIRS} (Kiln's, and GEMM: Kiln and BLIS alternating); "
      f"systems alternate inside each repetition. Steps per training run: "
      + ", ".join(f"{m} {a.steps[m]}" for m in a.models) + " after 2 warm-up steps (Kiln: a 2-step run's time taken off a 2 + N step run's, each less the share "
      "its epoch line gives to waiting for batches, since the peers build theirs before timing). "
      "Versions: " + ", ".join(f"{k} {v}" for k, v in res.get("versions", {}).items()) + ".\n")

    # headline
    w("## Headline\n")
    T0, T1 = th[0], th[-1]
    for m in (m for m in ("mlp", "cnn", "transformer") if m in a.models):
        parts = [f"{ratio(tr.get((m, t, 'kiln')), tr.get((m, t, 'torch')))} at {t} thread(s)" for t in th]
        w(f"- **{m.upper() if len(m) < 4 else m.capitalize()} training, Kiln / PyTorch eager:** " + "; ".join(parts) + ".")
    for t in th:
        worst = min(((gemm.get((n, t, 'kiln')) or 0) / gemm[(n, t, 'blis')] for n in GEMM_SIZES
                     if gemm.get((n, t, 'blis'))), default=None)
        if worst is None:
            continue
        w(f"- **GEMM, Kiln / BLIS direct, {t} thread(s):** worst over 256..2048 {worst:.2f} "
          f"(target ≥ 0.90: {'met' if worst >= 0.9 else 'not met'}).")
    for t in th:
        if ew.get((t, "kiln")) and triad.get(t):
            f = ew[(t, "kiln")] / triad[t]
            w(f"- **Elementwise chain, {t} thread(s):** Kiln {ew[(t, 'kiln')]:.1f} GB/s = {100 * f:.0f}% of triad "
              f"{triad[t]:.1f} GB/s (target ≥ 70%: {'met' if f >= 0.7 else 'not met'}).")
    for t in th:
        k = tr.get(("cnn", t, "kiln"))
        if k and peak.get(t):
            w(f"- **CNN training, share of peak, {t} thread(s):** Kiln {100 * k * flops['cnn']['train'] / 1e9 / peak[t]:.1f}% "
              f"of {peak[t]:.0f} GFLOP/s.")
    w("")

    w("## The machine\n")
    w("| threads | peak fp32 GFLOP/s (FMA loop, widest vectors, best) | same, 256-bit AVX2 only | triad GB/s (best) |")
    w("|---|---|---|---|")
    for t in th:
        w(f"| {t} | {fmt(peak.get(t))} | {fmt(peak2.get(t))} | {fmt(triad.get(t))} |")
    w("")

    w("## Training throughput (examples/s, higher is better)\n")
    w("| model | threads | " + " | ".join(NAME[s] for s in systems) + " |")
    w("|---|---|" + "---|" * len(systems))
    for m in a.models:
        for t in th:
            w(f"| {m} | {t} | " + " | ".join(fmt(tr.get((m, t, s))) for s in systems) + " |")
    if res.get("agree"):
        w("\nThe transformer is the same graph in every system: its logits for 5 images on the same weights (`peers.py "
          "agree`; Kiln prints 6 digits): " + "; ".join(l.replace("max |logits - ", "max |Δ| from ").replace("'s|", "")
                                                         for l in res["agree"]) + ".")
    w("\nKiln / peer (above 1: Kiln faster):\n")
    w("| model | threads | " + " | ".join(NAME[s] for s in peers) + " |")
    w("|---|---|" + "---|" * len(peers))
    for m in a.models:
        for t in th:
            w(f"| {m} | {t} | " + " | ".join(ratio(tr.get((m, t, 'kiln')), tr.get((m, t, s))) for s in peers) + " |")
    w("")

    w("## CNN: share of the machine's peak FLOP/s while training\n")
    fl = flops["cnn"]
    w(f"FLOPs per image counted from the layer shapes: forward {fl['forward'] / 1e6:.2f} M, "
      f"training step {fl['train'] / 1e6:.2f} M (forward + weight gradients + input gradients of all but the "
      "first layer; elementwise ops, pooling and the optimizer not counted). These are a direct convolution's "
      "multiply-adds: Kiln computes the second conv layer's three products by Winograd's F(4, 5) on 8x8 tiles, with "
      "4.8x fewer multiplies (runtime/wino.c), so its share is an effective rate, the work done as if directly.\n")
    w("| threads | " + " | ".join(NAME[s] for s in systems) + " |")
    w("|---|" + "---|" * len(systems))
    for t in th:
        cells = []
        for s in systems:
            r = tr.get(("cnn", t, s))
            cells.append(f"{100 * r * fl['train'] / 1e9 / peak[t]:.1f}%" if r and peak.get(t) else "–")
        w(f"| {t} | " + " | ".join(cells) + " |")
    w("")

    w("## Time to accuracy (seconds of training, lower is better)\n")
    w("Whole epochs over the 60,000 training images until test accuracy reaches the examples' target "
      "(logreg 81.5%, MLP 87.5%, CNN 89.5%), evaluated after each epoch; the seconds are training steps only "
      "(evaluation and batch conversion not counted; each peer's first step, which holds its compile, counts as "
      "its mean step). Kiln runs the example file itself, its waits for batches (the data share of its epoch "
      "lines) not counted either; its first step includes first-touching its scratch memory. In brackets: the epochs it took.\n")
    tta = res.get("tta", {})
    tta_th = sorted({k[1] for k in tta})
    w("| model | threads | " + " | ".join(NAME[s] for s in systems) + " |")
    w("|---|---|" + "---|" * len(systems))
    for m in (m for m in TTA_MODELS if m in a.models):
        for t in tta_th:
            cells = []
            for s in systems:
                r = tta.get((m, t, s))
                if not r:
                    cells.append("–")
                elif r["seconds"] is None:
                    acc = max(r["accuracy"]) if r["accuracy"] else float("nan")
                    cells.append(f"not in {r['epochs']} ({acc:.1%})")
                else:
                    cells.append(f"{fmt(r['seconds'], 2)} ({r['epochs']})")
            w(f"| {m} | {t} | " + " | ".join(cells) + " |")
    w("")
    kt = [(m, t) for m in TTA_MODELS for t in tta_th if (tta.get((m, t, "kiln")) or {}).get("seconds")]
    if kt and "torch" in systems:
        w("Kiln / PyTorch eager, time to accuracy (above 1: Kiln faster): " + ", ".join(
            f"{m} {t} thread(s) {ratio(tta[(m, t, 'torch')]['seconds'], tta[(m, t, 'kiln')]['seconds'])}"
            for m, t in kt if (tta.get((m, t, "torch")) or {}).get("seconds")) + ".\n")

    w("## Peak resident memory of the training process (MiB)\n")
    w("The whole process: the runtime or interpreter, the framework, the 60,000 training images, the model.\n")
    w("| model | threads | " + " | ".join(NAME[s] for s in systems) + " |")
    w("|---|---|" + "---|" * len(systems))
    for m in a.models:
        for t in th:
            w(f"| {m} | {t} | " + " | ".join(fmt(rss.get((m, t, s))) for s in systems) + " |")
    w("")

    w("## Inference latency (ms per call, lower is better)\n")
    w("| model | batch | threads | " + " | ".join(NAME[s] for s in systems) + " |")
    w("|---|---|---|" + "---|" * len(systems))
    for m in a.models:
        for b in (1, 128):
            for t in th:
                w(f"| {m} | {b} | {t} | " + " | ".join(fmt(inf.get((m, b, t, s)), 3) for s in systems) + " |")
    w("")

    w("## GEMM (fp32 C = A B, n × n, GFLOP/s)\n")
    cols = ["blis"] + systems
    w("| n | threads | " + " | ".join(NAME[s] for s in cols) + " | Kiln / BLIS |")
    w("|---|---|" + "---|" * len(cols) + "---|")
    for n in GEMM_SIZES:
        for t in th:
            w(f"| {n} | {t} | " + " | ".join(fmt(gemm.get((n, t, s))) for s in cols) + " | "
              + ratio(gemm.get((n, t, "kiln")), gemm.get((n, t, "blis"))) + " |")
    w("")

    w("## Elementwise chain, 16M elements (GB/s)\n")
    w("`z = relu(a * b + 1) * a - b * 0.5` over two 16M-float inputs: 12 bytes per element (two reads, "
      "one write), as triad counts.\n")
    w("| threads | triad | " + " | ".join(NAME[s] for s in systems) + " | Kiln / triad |")
    w("|---|---|" + "---|" * len(systems) + "---|")
    for t in th:
        w(f"| {t} | {fmt(triad.get(t))} | " + " | ".join(fmt(ew.get((t, s))) for s in systems) + " | "
          + (f"{100 * ew[(t, 'kiln')] / triad[t]:.0f}%" if ew.get((t, 'kiln')) and triad.get(t) else "–") + " |")
    w("")

    w("## Conv layers of the CNN and a CIFAR-shaped variant: each lowering, batch 128\n")
    w("Each layer alone (`pad=\"same\"`, bias added), forced to each lowering with `lowering=`: the forward pass, "
      "and the layer's share of a training step (forward, weight and bias gradients, and the input's gradient except in a "
      "model's first layer, whose input is the data). *picked* is the lowering "
      "Kiln chooses for the layer (its cost model, or a cached `--tune` decision); picked/best is its time over the "
      "fastest lowering's (target: at most 1.05). A lowering whose first run takes over 2 s is timed once.\n")
    w("| model | layer | shape | pass | threads | im2col ms | kernel ms | direct ms | picked | picked/best |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    lows = ("im2col", "kernel", "direct")
    for (model, layer), (c, hw, o, k, st) in sorted(res["conv_layer"].items()):
        pick = res["conv_pick"].get((model, layer), "?")
        for pas in ("fwd", "train"):
            for t in th:
                ms = {l: conv.get((model, layer, l, pas, t)) for l in lows}
                have = [v for v in ms.values() if v]
                pb = f"{ms[pick] / min(have):.2f}" if ms.get(pick) and have else "–"
                shape = f"{c}→{o}, {hw}×{hw}, {k}×{k}" + (f", stride {st}" if st != 1 else "")
                w(f"| {model} | {layer} | {shape} | {'forward' if pas == 'fwd' else 'training'} | {t} | "
                  + " | ".join(f"{ms[l]:.2f}" if ms[l] else "–" for l in lows) + f" | {pick} | {pb} |")
    w("")

    w("## Systems that could not run\n")
    if res["failed"]:
        w("| system | workload | reason |")
        w("|---|---|---|")
        for k, v in sorted(res["failed"].items()):
            s, what = k.split("|")
            w(f"| {NAME.get(s, s)} | {what} | {v.replace('|', '/')} |")
    else:
        w("None: every system ran every workload.")
    w("")
    w("Method and caveats: see README.md next to this file. Raw numbers: results.json.")
    return "\n".join(L) + "\n"


def chart(res, a, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    systems = a.systems
    tr = {k: med(v) for k, v in res["train"].items()}
    gemm = {k: med(v) for k, v in res["gemm"].items()}
    fig, axes = plt.subplots(1, len(a.models) + 1, figsize=(5 * (len(a.models) + 1), 4.5))
    width = 0.8 / len(a.threads)
    for ax, m in zip(axes, a.models):
        for j, t in enumerate(a.threads):
            vals = [tr.get((m, t, s)) or 0 for s in systems]
            ax.bar([i + j * width for i in range(len(systems))], vals, width, label=f"{t} thread(s)")
        ax.set_xticks([i + width * (len(a.threads) - 1) / 2 for i in range(len(systems))])
        ax.set_xticklabels([NAME[s] for s in systems], rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{m}: training examples/s")
        ax.legend(fontsize=8)
    ax = axes[-1]
    for s in ["blis"] + systems:
        for t in a.threads[-1:]:
            ys = [gemm.get((n, t, s)) for n in GEMM_SIZES]
            if any(ys):
                ax.plot(GEMM_SIZES, [y or float("nan") for y in ys], marker="o", label=NAME[s])
    ax.set_xscale("log", base=2)
    ax.set_title(f"GEMM GFLOP/s, {a.threads[-1]} thread(s)")
    ax.set_xlabel("n")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def versions(py, systems):
    code = ("import importlib.metadata as m, json\nout = {}\n"
            "for p in ['torch', 'jax', 'tensorflow', 'pytensor', 'tinygrad']:\n"
            "    try: out[p] = m.version(p)\n"
            "    except Exception: pass\n"
            "for p in ['tensorflow-cpu']:\n"
            "    try: out['tensorflow'] = m.version(p)\n"
            "    except Exception: pass\n"
            "print(json.dumps(out))")
    r = subprocess.run([py, "-c", code], capture_output=True, text=True)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--python", default=sys.executable, help="the peers' interpreter (the venv's)")
    ap.add_argument("--bindir", required=True, help="where run.sh built the C helpers")
    ap.add_argument("--full", action="store_true", help="more steps and repetitions")
    ap.add_argument("--quick", action="store_true", help="the default")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--models", default=",".join(MODELS), help="a subset of " + ",".join(MODELS))
    ap.add_argument("--timeout", type=int)
    ap.add_argument("--out", default=HERE)
    a = ap.parse_args()
    a.threads = sorted({int(t) for t in a.threads.split(",")})
    a.systems = [s for s in a.systems.split(",") if s]
    a.models = [m for m in MODELS if m in a.models.split(",")]
    if a.full:
        a.steps = {"logreg": 500, "mlp": 200, "cnn": 50, "transformer": 100}
        a.reps = a.reps or 5
        a.micro_reps = 3
        a.timeout = a.timeout or 900
    else:
        a.steps = {"logreg": 100, "mlp": 100, "cnn": 8, "transformer": 30}
        a.reps = a.reps or 2
        a.micro_reps = 1
        a.timeout = a.timeout or 240
    # Time to accuracy runs whole epochs: at all cores only in a quick run, and the
    # CNN (minutes per epoch) for the systems fast enough to matter.
    a.tta_threads = a.threads if a.full else a.threads[-1:]
    a.tta_timeout = 1800
    fast = ("kiln", "torch", "jax") if not a.full else ("kiln", "torch", "torch_compile", "jax", "tensorflow")
    a.tta_models = {s: TTA_MODELS if s in fast else ["logreg", "mlp"] for s in a.systems}
    a.tta_why = ("quick run: CNN time to accuracy for Kiln, PyTorch eager and JAX only (--full adds the others)"
                 if not a.full else "CNN time to accuracy skipped: under 100 images/s, 2 epochs would take over 20 min")
    b = Bench(a)
    res = b.run()
    res["versions"] = {"kiln": subprocess.run([a.kiln, "--version"], capture_output=True, text=True).stdout.split()[1]
                       if os.path.exists(a.kiln) else "?"}
    res["versions"].update(versions(a.python, a.systems))
    md = report(res, a)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"|".join(map(str, k)) if isinstance(k, tuple) else str(k): v
                   for tbl in ("train", "rss", "infer", "gemm", "ew", "conv", "conv_layer", "conv_pick", "tta", "peak",
                               "peak_avx2", "triad")
                   for k, v in [((tbl,) + (kk if isinstance(kk, tuple) else (kk,)), vv) for kk, vv in res[tbl].items()]}
                  | {"failed": res["failed"], "versions": res["versions"], "seconds": res["seconds"],
                     "agree": res.get("agree", [])}, f, indent=1)
    try:
        chart(res, a, os.path.join(a.out, "chart.png"))
    except Exception as e:  # the table matters more than the picture
        print(f"bench.py: no chart: {e}", file=sys.stderr)
    print(md)


if __name__ == "__main__":
    main()
