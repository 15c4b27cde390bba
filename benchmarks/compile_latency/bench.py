#!/usr/bin/env python3
"""Compile latency: time from source to first result, Kiln vs PyTensor vs Theano.

Run through ./run.sh (which sets up the virtual environments).  Everything is
measured in one run, systems alternating inside each repetition so that drift of
the machine hits all of them alike.  Writes results.md next to this file and
prints it.

Two programs, the same for every system:

  one   the 1-line expression   sum(exp([1, 2, 3]) * 2)
  g20   a 20-op elementwise/reduction function of a 64-vector and its gradient
        f(x) = sum(tanh(x) * sigmoid(x) + exp(-x^2) - softplus(x) * sin(x)
                   + relu(x) * cos(x) / sqrt(x * x + 1))
        evaluated at x = linspace(-2, 2, 64): print f(x), grad(f)(x)

Kiln is timed as a whole process (`kiln run -e CODE`), and in-process through one
long-running REPL fed over a pipe.  The peers are timed in a fresh Python
subprocess per repetition; the subprocess reports its own in-process time (graph
construction + grad + function() compile + first call, after the imports), and
the parent times the whole process (interpreter start, imports, all of it).

The script doubles as that worker: `bench.py --worker SYSTEM GRAPH`.  The worker
part imports nothing beyond the standard library at module level, so it also runs
under the Theano virtual environment's interpreter.
"""
import argparse
import json
import os
import platform
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

F_KILN = ("f(x) = sum(tanh(x) * sigmoid(x) + exp(-x ^ 2) - softplus(x) * sin(x)"
          " + relu(x) * cos(x) / sqrt(x * x + 1))")
PROGRAMS = {
    "one": "print sum(exp([1, 2, 3]) * 2)",
    # one print of both values: Kiln compiles them as one graph, as the peers'
    # function([x], [f, grad]) does
    "g20": F_KILN + "\nx = linspace(-2, 2, 64)\nprint f(x), grad(f)(x)\n",
}
EXPECT = {"one": 60.3857, "g20": 16.3562}   # first printed value, for a sanity check
GRAPH_TITLE = {
    "one": "1-line expression `sum(exp([1, 2, 3]) * 2)`",
    "g20": "20-op graph of a 64-vector and its gradient: `f(x)` and `grad(f)(x)`",
}


# --------------------------------------------------------------------- worker
def worker(system, graph, second=False):
    """Runs in a fresh interpreter: build, compile and call once; print JSON.

    With second=True it then does the same for a variant of the graph, in the now
    warmed-up process: the analogue of a new statement in Kiln's running REPL.  The
    variant swaps ops (one: exp -> sin; g20: sin <-> cos) rather than changing a
    constant, because PyTensor and Theano can reuse compiled code across constants
    (sum(exp(x) * 3) after sum(exp(x) * 2) compiles nothing), while a Kiln graph
    with another constant is new C code."""
    t0 = time.perf_counter()
    if system == "theano":
        import theano as th
        import theano.tensor as T
        sigmoid, softplus = T.nnet.sigmoid, T.nnet.softplus
        mode = None                      # Theano's default: cvm (C)
    else:
        import pytensor as th
        import pytensor.tensor as T
        sigmoid, softplus = T.sigmoid, T.softplus
        mode = {"pytensor": None,        # PyTensor's default (3.x: Numba)
                "pytensor_c": "CVM"}[system]
    import numpy as np
    t1 = time.perf_counter()

    def build_compile_call(variant):
        x = T.vector("x", dtype="float32")
        if graph == "one":
            op = T.sin if variant else T.exp
            outs = [T.sum(op(x) * 2)]
            xv = np.array([1, 2, 3], dtype="float32")
        elif graph == "g20":
            s1, s2 = (T.cos, T.sin) if variant else (T.sin, T.cos)
            f = T.sum(T.tanh(x) * sigmoid(x) + T.exp(-x ** 2) - softplus(x) * s1(x)
                      + T.maximum(x, 0) * s2(x) / T.sqrt(x * x + 1))
            outs = [f, th.grad(f, x)]
            xv = np.linspace(-2, 2, 64).astype("float32")
        elif graph == "prime":           # unrelated graph, to warm support code only
            outs = [x * 2 + 1]
            xv = np.ones(4, dtype="float32")
        else:
            raise SystemExit("unknown graph " + graph)
        fn = th.function([x], outs, mode=mode)
        return fn, fn(xv)

    def cache_files():
        return sum(len(files) for _, _, files in os.walk(th.config.base_compiledir))

    fn, res = build_compile_call(False)
    t2 = time.perf_counter()
    out = {"import_s": t1 - t0, "inproc_s": t2 - t1,
           "value": float(np.asarray(res[0]).ravel()[0]),
           "version": th.__version__, "linker": type(fn.maker.linker).__name__}
    if second:
        n = cache_files()
        t2 = time.perf_counter()
        build_compile_call(True)
        out["second_s"] = time.perf_counter() - t2
        out["second_new_files"] = cache_files() - n
    print(json.dumps(out))


# ------------------------------------------------------------------ utilities
class Fail(Exception):
    pass


def med(samples):
    return statistics.median(samples) if samples else None


def fmt(samples):
    """'median (min)' in ms, or a dash."""
    if not samples:
        return "–"
    m, lo = med(samples) * 1e3, min(samples) * 1e3
    if m >= 1000:
        return f"{m:,.0f} ({lo:,.0f})"
    if m >= 10:
        return f"{m:.1f} ({lo:.1f})"
    return f"{m:.2f} ({lo:.2f})"


def ratio(peer, kiln):
    if not peer or not kiln:
        return "–"
    r = med(peer) / med(kiln)
    return f"{r:,.0f}×" if r >= 10 else f"{r:.1f}×"


def check_value(label, text, want):
    try:
        got = float(text.split()[0].strip("[],"))
    except (ValueError, IndexError):
        raise Fail(f"{label}: cannot read a number from {text!r}")
    if abs(got - want) > 1e-3 * abs(want):
        raise Fail(f"{label}: printed {got}, expected {want}")


# ----------------------------------------------------------------------- Kiln
class Kiln:
    def __init__(self, binary):
        self.bin = binary

    def run(self, code, cache_dir, expect=None):
        """(whole-process wall time of `kiln run -e CODE`, JIT compile time) in
        seconds; the second is the sum of what KILN_JIT_VERBOSE reports as
        'compile N ms' (Clang + LLVM codegen), None when it reports nothing."""
        env = dict(os.environ, KILN_CACHE_DIR=cache_dir, KILN_JIT_VERBOSE="1")
        t = time.perf_counter()
        p = subprocess.run([self.bin, "run", "-e", code], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        dt = time.perf_counter() - t
        if p.returncode != 0:
            raise Fail(f"`{self.bin} run -e {code!r}` failed ({p.returncode}): {p.stderr.strip()}")
        if expect is not None:
            check_value("kiln", p.stdout, expect)
        jit = [float(m) for m in re.findall(r"compile ([0-9.]+) ms", p.stderr)]
        return dt, (sum(jit) / 1e3 if jit else None)


class Repl:
    """One long-running `kiln` REPL; statements in over a pipe, one line back each."""

    def __init__(self, binary, cache_dir):
        self.err = tempfile.TemporaryFile()
        env = dict(os.environ, KILN_CACHE_DIR=cache_dir)
        self.t_spawn = time.perf_counter()
        self.p = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, env=env, bufsize=0)
        self.buf = b""

    def send(self, line):
        self.p.stdin.write(line.encode() + b"\n")

    def read_line(self, timeout=120.0):
        deadline = time.perf_counter() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.perf_counter()
            r, _, _ = select.select([self.p.stdout], [], [], max(left, 0))
            if not r:
                raise Fail("REPL gave no answer in time" + self.stderr())
            chunk = os.read(self.p.stdout.fileno(), 1 << 16)
            if not chunk:
                raise Fail("REPL exited" + self.stderr())
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def round_trip(self, stmt):
        """Seconds from writing the statement to having read its printed line."""
        t = time.perf_counter()
        self.send(stmt)
        out = self.read_line()
        return time.perf_counter() - t, out

    def stderr(self):
        self.err.seek(0)
        s = self.err.read().decode(errors="replace").strip()
        return (": " + s[-2000:]) if s else ""

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:
            self.p.kill()
            self.p.wait()
        self.err.close()


# ---------------------------------------------------------------------- peers
class Peer:
    def __init__(self, key, label, python, flags_var, extra_flags=""):
        self.key, self.label, self.python = key, label, python
        self.flags_var, self.extra_flags = flags_var, extra_flags
        self.version = self.linker = None

    def run(self, graph, base_dir, second=False):
        """(whole-process seconds, worker's JSON) for one fresh subprocess."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTENSOR_FLAGS", "THEANO_FLAGS", "NUMBA_CACHE_DIR")}
        env[self.flags_var] = f"base_compiledir={base_dir}" + self.extra_flags
        env["NUMBA_CACHE_DIR"] = os.path.join(base_dir, "numba-global")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        cmd = [self.python, os.path.abspath(__file__), "--worker", self.key, graph]
        if second:
            cmd.append("--second")
        t = time.perf_counter()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        dt = time.perf_counter() - t
        if p.returncode != 0:
            raise Fail(f"{self.label} worker failed ({p.returncode}): {p.stderr.strip()[-3000:]}")
        info = json.loads(p.stdout.strip().splitlines()[-1])
        if graph in EXPECT:
            check_value(f"{self.label} {graph}", str(info["value"]), EXPECT[graph])
        self.version, self.linker = info["version"], info["linker"]
        return dt, info


# ---------------------------------------------------------------- the bench
def machine():
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout.splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return model, os.cpu_count()


# REPL statements, by graph, with a constant K to vary: a different K is different
# C source, so a miss in the REPL's in-process program cache (and in the disk cache
# unless that K was compiled before).
REPL_DEF = {"one": "", "g20": F_KILN}
REPL_STMT = {"one": lambda k: f"sum(exp([1, 2, 3]) * {k})",
             "g20": lambda k: f"print f(linspace(-2, {k}, 64)), grad(f)(linspace(-2, {k}, 64))"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("SYSTEM", "GRAPH"), help=argparse.SUPPRESS)
    ap.add_argument("--second", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", os.path.join(ROOT, "build", "kiln")))
    ap.add_argument("--theano-python", default="", help="interpreter with Theano ('' = skip)")
    ap.add_argument("--theano-flags", default=",blas.ldflags=",
                    help="extra THEANO_FLAGS (default works around numpy.distutils' missing blas_opt_info)")
    ap.add_argument("--theano-note", default="", help="why Theano is missing, for the report")
    ap.add_argument("--kiln-cold", type=int, default=5)
    ap.add_argument("--kiln-warm", type=int, default=10)
    ap.add_argument("--repl", type=int, default=10, help="REPL statements per REPL measurement")
    ap.add_argument("--peer-cold", type=int, default=3)
    ap.add_argument("--peer-warm", type=int, default=5)
    ap.add_argument("--no-c-backend", action="store_true", help="skip PyTensor's CVM (C) mode")
    ap.add_argument("--quick", action="store_true", help="1 repetition of everything (smoke test)")
    ap.add_argument("--out", default=os.path.join(HERE, "results.md"))
    a = ap.parse_args()
    if a.worker:
        worker(*a.worker, second=a.second)
        return
    if a.quick:
        a.kiln_cold = a.kiln_warm = a.peer_cold = a.peer_warm = 1
        a.repl = 2
    t_start = time.perf_counter()
    a.load_start = os.getloadavg()
    tmp_root = tempfile.mkdtemp(prefix="kiln-bench-")
    try:
        R, peers, theano_note = measure(a, tmp_root, t_start)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    md = report(a, R, peers, theano_note, time.perf_counter() - t_start)
    with open(a.out, "w") as fh:
        fh.write(md)
    if os.path.abspath(a.out) == os.path.join(HERE, "results.md"):
        update_readme(md)
    print(md)


def update_readme(md):
    """Put the results, less their title, between the README's markers."""
    path = os.path.join(HERE, "README.md")
    begin, end = "<!-- results: begin (written by bench.py) -->", "<!-- results: end -->"
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        return
    body = md.split("\n", 1)[1].strip().replace("\n## ", "\n### ")
    with open(path, "w") as fh:
        fh.write(text[:i + len(begin)] + "\n" + body + "\n" + text[j:])


def measure(a, tmp_root, t_start):
    fresh = lambda tag: tempfile.mkdtemp(prefix=tag + "-", dir=tmp_root)
    graphs = ["one", "g20"]
    log = lambda *m: print(f"[{time.perf_counter() - t_start:6.1f}s]", *m, file=sys.stderr, flush=True)

    kiln = Kiln(a.kiln)
    for g in graphs:        # fail fast, before minutes of peers, if Kiln cannot run these
        kiln.run(PROGRAMS[g], fresh("kiln-preflight"), EXPECT[g])
    peers = [Peer("pytensor", "PyTensor, default mode (Numba)", sys.executable, "PYTENSOR_FLAGS")]
    if not a.no_c_backend:
        peers.append(Peer("pytensor_c", "PyTensor, mode=\"CVM\" (C)", sys.executable, "PYTENSOR_FLAGS"))
    theano_note = a.theano_note
    if a.theano_python:
        th = Peer("theano", "Theano, default mode (cvm, C)", a.theano_python, "THEANO_FLAGS", a.theano_flags)
        try:
            th.run("prime", fresh("theano-probe"))
            peers.append(th)
        except Fail as e:
            theano_note = "could not run: " + str(e).splitlines()[-1]
            log("Theano " + theano_note)

    # R[system][graph][kind] = list of seconds
    R = {s: {g: {} for g in graphs} for s in ["kiln", "repl"] + [p.key for p in peers]}
    add = lambda s, g, k, v: R[s][g].setdefault(k, []).append(v)

    # Support-code templates for the peers' "cold graph" case: a base_compiledir in
    # which an unrelated graph (v * 2 + 1) was compiled and run, so the runtime's own
    # C modules / Numba helpers are cached but nothing of the measured graphs is.
    templates = {}
    for p in peers:
        templates[p.key] = d = fresh(p.key + "-template")
        p.run("prime", d)
    log("peer templates ready")

    # ---- cold: a fresh cache per repetition, systems alternating
    last_cold = {}
    reps = max(a.kiln_cold, a.peer_cold)
    for i in range(reps):
        for g in graphs:
            if i < a.kiln_cold:
                last_cold[("kiln", g)] = d = fresh("kiln-cold")
                wall, jit = kiln.run(PROGRAMS[g], d, EXPECT[g])
                add("kiln", g, "cold", wall)
                if jit is not None:
                    add("kiln", g, "cold_jit", jit)
            if i < a.peer_cold:
                for p in peers:
                    last_cold[(p.key, g)] = d = fresh(p.key + "-cold")
                    wall, info = p.run(g, d)
                    add(p.key, g, "cold", wall)
                    add(p.key, g, "cold_in", info["inproc_s"])
                    add(p.key, g, "import", info["import_s"])
                    d = fresh(p.key + "-newgraph")
                    shutil.rmtree(d)
                    shutil.copytree(templates[p.key], d, symlinks=True)
                    wall, info = p.run(g, d, second=True)
                    add(p.key, g, "newgraph", wall)
                    add(p.key, g, "newgraph_in", info["inproc_s"])
                    add(p.key, g, "newgraph_2nd", info["second_s"])
                    add(p.key, g, "newgraph_2nd_files", info["second_new_files"])
        log(f"cold rep {i + 1}/{reps}")

    # ---- warm: the cache that the last cold repetition left, kept.  The peers'
    # caches get one untimed run first so that the second graph is in them too.
    for g in graphs:
        for p in peers:
            p.run(g, last_cold[(p.key, g)], second=True)
    reps = max(a.kiln_warm, a.peer_warm)
    for i in range(reps):
        for g in graphs:
            if i < a.kiln_warm:
                d = last_cold[("kiln", g)]
                n = len(os.listdir(d))
                add("kiln", g, "warm", kiln.run(PROGRAMS[g], d, EXPECT[g])[0])
                if g == "one":      # baseline: a process that compiles nothing
                    add("kiln", g, "empty", kiln.run("", d)[0])
                if len(os.listdir(d)) != n:
                    raise Fail("a warm `kiln run` wrote to the cache: it missed")
            if i < a.peer_warm:
                for p in peers:
                    wall, info = p.run(g, last_cold[(p.key, g)], second=True)
                    add(p.key, g, "warm", wall)
                    add(p.key, g, "warm_in", info["inproc_s"])
                    add(p.key, g, "warm_2nd", info["second_s"])
                    add(p.key, g, "warm_2nd_files", info["second_new_files"])
        log(f"warm rep {i + 1}/{reps}")

    # ---- Kiln REPL round trips
    n = a.repl
    disk_ks = list(range(100, 100 + n))       # compiled into the disk cache beforehand
    new_ks = list(range(1000, 1000 + n))      # never compiled before
    rcache = fresh("kiln-repl")
    for g in graphs:
        pre = "" if g == "g20" else "print "
        code = REPL_DEF[g] + "\n" + "\n".join(pre + REPL_STMT[g](k) for k in [2] + disk_ks)
        if g == "one":
            code += "\nprint 1 + 2"
        kiln.run(code, rcache)
    repl = Repl(a.kiln, rcache)
    try:
        dt, out = repl.round_trip("1 + 2")
        R["repl"]["one"]["startup"] = [time.perf_counter() - repl.t_spawn]
        for g in graphs:
            stmt = REPL_STMT[g]
            if REPL_DEF[g]:
                repl.send(REPL_DEF[g])
            dt, out = repl.round_trip(stmt(2))           # disk hit, first time in this process
            check_value(f"kiln REPL {g}", out, EXPECT[g])
            for _ in range(n):                           # the same statement again
                add("repl", g, "hit", repl.round_trip(stmt(2))[0])
            before = len(os.listdir(rcache))
            for k in disk_ks:                            # new to the process, on disk
                add("repl", g, "disk", repl.round_trip(stmt(k))[0])
            if len(os.listdir(rcache)) != before:
                raise Fail(f"REPL {g}: statements compiled by `kiln run` before missed the disk cache")
            for k in new_ks:                             # nothing cached: compiles
                add("repl", g, "cold", repl.round_trip(stmt(k))[0])
            if len(os.listdir(rcache)) < before + n:     # at least one new object each
                raise Fail(f"REPL {g}: new statements did not all compile and cache")
    finally:
        repl.close()
    log("REPL done")
    return R, peers, theano_note


def kiln_source():
    """Which source the Kiln binary was built from, as far as git can tell (read-only)."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD", "--", ".", ":!benchmarks"],
                               stderr=subprocess.DEVNULL).returncode
    except OSError:
        return "source unknown"
    if not head:
        return "source unknown"
    return f"source at commit {head}" + (" plus uncommitted changes" if dirty else "")


def report(a, R, peers, theano_note, total):
    model, cores = machine()
    kv = subprocess.run([a.kiln, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    gcc = subprocess.run(["g++", "--version"], stdout=subprocess.PIPE, text=True).stdout.splitlines()[0]
    L = []
    w = L.append
    w("# Compile latency: Kiln vs PyTensor vs Theano\n")
    w(f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}")
    w(f"- Machine: {model}, {cores} cores ({platform.machine()}, Linux {platform.release()})")
    w(f"- Kiln: `{kv}`, {kiln_source()}")
    for p in peers:
        w(f"- {p.label}: {p.key.split('_')[0]} {p.version}, linker `{p.linker}`")
    if theano_note:
        w(f"- Theano: {theano_note}")
    w(f"- Peers run on Python {platform.python_version()}; their C compiler is {gcc}.")
    w(f"- Repetitions: Kiln {a.kiln_cold} cold, {a.kiln_warm} warm, {a.repl} REPL statements per REPL row; "
      f"peers {a.peer_cold} cold, {a.peer_cold} cold-graph, {a.peer_warm} warm, each a fresh process. "
      "Systems alternate within each repetition.")
    la, lb = a.load_start, os.getloadavg()
    w(f"- Whole benchmark run: {total:.0f} s (`benchmarks/compile_latency/run.sh`); load average "
      f"{la[0]:.2f} at the start, {lb[0]:.2f} at the end (1-minute; other work on the machine shows here).\n")
    w("All times in **milliseconds, median (min)**. Ratio = peer median / Kiln median, "
      "for the same kind of measurement.\n")
    w("- *whole process*: wall time of a fresh process from spawn to exit: what a user running a script waits. "
      "Kiln: `kiln run -e CODE`. Peers: `python bench.py --worker ...`: interpreter start + `import` + build + "
      "compile + first call.")
    w("- *in-process*: the same work inside a process that is already running. Peers: graph construction + "
      "`grad` + `function()` + first call, timed inside the worker after its imports, for the first graph of the "
      "process and for a second graph (ops swapped, so new code) right after it. Kiln: REPL round trip, from writing a "
      "statement to the REPL's stdin pipe to reading its printed result.")
    w("- *cold*: empty caches. Kiln: a fresh empty `KILN_CACHE_DIR`. Peers: fresh `base_compiledir` and "
      "`NUMBA_CACHE_DIR`, so they also compile their own support code (C VM, Numba helpers).")
    w("- *cold graph* (peers): the cache holds what an unrelated graph (`v * 2 + 1`) left: support code cached, "
      "nothing of this graph. Kiln compiles no support code, so its cold is already this case.")
    w("- *warm*: the same program again with its compiled code in the disk cache.\n")

    for g in ["one", "g20"]:
        k, kr = R["kiln"][g], R["repl"][g]
        w(f"## {GRAPH_TITLE[g]}\n")
        w("Whole process:\n")
        w("| system | cold | cold graph | warm | cold ratio | cold-graph ratio | warm ratio |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        w(f"| **Kiln** (`kiln run -e`) | {fmt(k.get('cold'))} | = cold | {fmt(k.get('warm'))} | 1 | 1 | 1 |")
        if k.get("cold_jit"):
            w(f"| of which Kiln's JIT compile (C to machine code; `KILN_JIT_VERBOSE`) | {fmt(k['cold_jit'])} | | | | | |")
        if k.get("empty"):
            w(f"| Kiln process start and exit: `kiln run -e ''` (no graph) | | | {fmt(k['empty'])} | | | |")
        for p in peers:
            s = R[p.key][g]
            w(f"| {p.label} | {fmt(s.get('cold'))} | {fmt(s.get('newgraph'))} | {fmt(s.get('warm'))} | "
              f"{ratio(s.get('cold'), k.get('cold'))} | {ratio(s.get('newgraph'), k.get('cold'))} | "
              f"{ratio(s.get('warm'), k.get('warm'))} |")
        w("\nIn-process:\n")
        w("| system | cold | cold graph | warm | cold ratio | cold-graph ratio | warm ratio |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        kc, kd = kr.get("cold"), kr.get("disk")
        w(f"| **Kiln** REPL, new statement | {fmt(kc)} | = cold | {fmt(kd)} | 1 | 1 | 1 |")
        for p in peers:
            s = R[p.key][g]
            w(f"| {p.label}, 1st graph in process | {fmt(s.get('cold_in'))} | {fmt(s.get('newgraph_in'))} | "
              f"{fmt(s.get('warm_in'))} | {ratio(s.get('cold_in'), kc)} | {ratio(s.get('newgraph_in'), kc)} | "
              f"{ratio(s.get('warm_in'), kd)} |")
        for p in peers:
            s = R[p.key][g]
            w(f"| {p.label}, 2nd graph in process | – | {fmt(s.get('newgraph_2nd'))} | {fmt(s.get('warm_2nd'))} | "
              f"– | {ratio(s.get('newgraph_2nd'), kc)} | {ratio(s.get('warm_2nd'), kd)} |")
        files = [(p.label, min(R[p.key][g]["newgraph_2nd_files"]), max(R[p.key][g]["warm_2nd_files"]))
                 for p in peers if R[p.key][g].get("newgraph_2nd_files")]
        if files:
            w("\nThe peers' 2nd graph swaps ops (" + ("`exp` -> `sin`" if g == "one" else "`sin` <-> `cos`") +
              "); files it added to the peer's cache, fewest in a cold-graph run / most in a warm run "
              "(should be > 0 / 0): " + ", ".join(f"{l} {c} / {m}" for l, c, m in files) + ".")
        w("")
        w(f"Kiln REPL round trips ({a.repl} statements each; one long-running `kiln` fed over a pipe):\n")
        w("| statement | round trip |")
        w("|---|---:|")
        w(f"| the same statement again (in-process program cache hit) | {fmt(kr.get('hit'))} |")
        w(f"| new statement, its code in the disk cache: **warm-cache round trip** | {fmt(kd)} |")
        w(f"| new statement, nothing cached: trace, optimize, emit C, Clang, ORC link, run | {fmt(kc)} |")
        if g == "one":
            w(f"| REPL process start to first result (`1 + 2`, code on disk) | {fmt(R['repl']['one'].get('startup'))} |")
        w("")
        w("Peers' `import` time, part of their whole-process cold numbers: " +
          ", ".join(f"{p.label} {fmt(R[p.key][g].get('import'))}" for p in peers) + ".\n")

    w("## Against the targets\n")
    d1, d20 = med(R["repl"]["one"]["disk"]) * 1e3, med(R["repl"]["g20"]["disk"]) * 1e3
    met = "met" if max(d1, d20) < 50 else "**not met**"
    w(f"- Warm-cache REPL round trip under 50 ms: {met}: {d1:.2f} ms (1-line), {d20:.2f} ms (20-op graph and "
      f"gradient). Even with nothing cached a new statement takes {med(R['repl']['one']['cold']) * 1e3:.0f} ms / "
      f"{med(R['repl']['g20']['cold']) * 1e3:.0f} ms.")
    kc = {g: med(R["kiln"][g]["cold"]) for g in ["one", "g20"]}
    for p in peers:
        r = [med(R[p.key][g]["cold"]) / kc[g] for g in kc]
        rn = [med(R[p.key][g]["newgraph"]) / kc[g] for g in kc]
        w(f"- Cold compile, whole process, vs {p.label}: Kiln {r[0]:.0f}× faster on the 1-line expression, "
          f"{r[1]:.0f}× on the 20-op graph ({rn[0]:.0f}× and {rn[1]:.0f}× against the peer's cold-graph case).")
    w("")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    try:
        main()
    except Fail as e:
        print("bench.py:", e, file=sys.stderr)
        sys.exit(1)
