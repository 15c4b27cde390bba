"""Shared helpers for the Python test scripts (test_ops.py, test_gradcheck.py).

A Suite collects checks. Each check is some Kiln source (setup lines: function
definitions, assignments; self-contained, as checks may run in any program)
plus one print statement whose values are handed back, parsed, to a Python
verifier. The checks go into a few generated .kiln programs (one per worker:
KILN_TEST_JOBS, default the number of CPUs up to 4), each run by one kiln
process, so the run time is a few process starts plus one graph compile per
print (the disk cache makes reruns fast). When kiln stops early (an error, a
crash, a hang) the check it stopped in is marked failed with kiln's message
and the checks after it run again in a fresh program, so one bug costs one
check, not the whole suite. KILN_TEST_KEEP=DIR saves every program run.

Output: one line per check in a fixed order, `ok  NAME` or
`FAIL NAME: details`, then `N passed, N failed`; exit status 1 when anything
failed.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

# ---- named checks, for the scripts that run their own (test_train.py, test_build.py, ...)
class Tally:
    """Prints each check as `ok   NAME` or `FAIL NAME` with the detail indented
    under it, and counts them for the closing `N passed, N failed`."""

    def __init__(self):
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   " + name)
        else:
            self.failed += 1
            print("FAIL " + name + ("\n  " + str(detail).replace("\n", "\n  ") if detail else ""))
        return ok

    def summary(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed else 0


# ---- writing values into a program ----------------------------------------------


def num(v, dtype="f32"):
    """One number as Kiln source text.

    Tensor literals are f32 in Kiln (a literal cast to f64 keeps its f32
    value), so f32/f64 values must already be f32-representable: use f32() on
    inputs. repr() of the (exactly f32) double gives the value exactly."""
    if dtype in ("i32", "i64"):
        return str(int(v))
    if dtype == "bool":
        return "true" if v else "false"
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError("nan/inf cannot be written as a literal")
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def _nested(a, dtype):
    if a.ndim == 0:
        return num(a.item(), dtype)
    return "[" + ", ".join(_nested(s, dtype) for s in a) + "]"


def lit(a, dtype=None):
    """A NumPy array (or number, or nested list) as a Kiln expression of that
    dtype: a tensor literal, with cast(..., dtype) unless it is f32. Empty
    arrays become zeros(shape, dtype=...)."""
    a = np.asarray(a)
    if dtype is None:
        # floats are written as f32 (what a bare literal is), integers as i32
        dtype = "bool" if a.dtype == bool else "i32" if a.dtype.kind in "iu" else "f32"
    if a.size == 0:
        return "zeros([%s], dtype=%s)" % (", ".join(str(d) for d in a.shape), dtype)
    if dtype == "bool":
        body = _nested(a.astype(bool), "bool")
        return body if a.ndim else "cast(%s, bool)" % body
    if dtype in ("f32", "f64"):
        body = _nested(np.asarray(a, np.float64), "f32")
    else:
        body = _nested(np.asarray(a, np.int64), dtype)
    if dtype == "f32" and a.ndim > 0:
        return body
    return "cast(%s, %s)" % (body, dtype)


def f32(a):
    """Round to f32 and widen to f64: values a Kiln literal holds exactly."""
    return np.asarray(a, np.float32).astype(np.float64)


# ---- reading printed values back ------------------------------------------------

_TOK = re.compile(r"-?\binf\b|\bnan\b")


def parse_value(text):
    """One printed value (nested lists, %g numbers, true/false, nan, inf) as a
    NumPy array: bool for bools, float64 otherwise."""
    t = text.strip()
    js = _TOK.sub(lambda m: {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[m.group(0)], t)
    v = json.loads(js)
    a = np.array(v)
    if a.dtype == object:
        raise ValueError("ragged value: " + text[:200])
    if a.dtype == bool:
        return a
    return a.astype(np.float64)


def short(a, n=300):
    s = np.array2string(np.asarray(a), precision=8, threshold=40, max_line_width=10**6)
    s = " ".join(s.split())
    return s if len(s) <= n else s[:n] + "..."


# ---- verifiers: given the parsed values, return None (pass) or a message ----------


def expect_close(want, rtol=1e-5, atol=1e-6, shape=None):
    want = np.asarray(want)
    wshape = want.shape if shape is None else tuple(shape)

    def check(vals):
        got = vals[0]
        if got.size == 0 and want.size == 0:
            return None
        if got.shape != wshape:
            return "shape %s, expected %s (got %s)" % (got.shape, wshape, short(got))
        if want.dtype == bool or got.dtype == bool:
            if got.dtype != bool:
                return "expected bools %s, got %s" % (short(want), short(got))
            if not np.array_equal(got, want):
                return "got %s, expected %s" % (short(got), short(want))
            return None
        w = want.astype(np.float64)
        if not np.allclose(got, w, rtol=rtol, atol=atol, equal_nan=True) or \
                not np.array_equal(np.isnan(got), np.isnan(w)):
            with np.errstate(invalid="ignore"):
                err = np.nanmax(np.abs(got - w)) if got.size else 0
            return "got %s, expected %s (max abs err %.3g)" % (short(got), short(w), err)
        return None
    return check


def _g(v):
    return v if not np.isfinite(v) else float("%g" % v)


def expect_exact(want, shape=None):
    """Exactly the expected values, as the printer shows them: a float prints
    with %g (6 significant digits), an integer with all its digits."""
    want = np.asarray(want)
    base = expect_close(want, rtol=0, atol=0, shape=shape)

    def check(vals):
        m = base(vals)
        if m is None or want.dtype == bool or vals[0].dtype == bool or vals[0].shape != want.shape:
            return m
        w = want.astype(np.float64)
        shown = np.vectorize(_g, otypes=[np.float64])(w) if w.size else w
        ok = (vals[0] == w) | (vals[0] == shown) | (np.isnan(vals[0]) & np.isnan(w))
        return None if ok.all() else m
    return check


def expect_f64(ref32, want, rtol=1e-11, atol=1e-300):
    """For a printed residual r = kiln_value - ref32 (ref32: want rounded to f32,
    subtracted inside Kiln in f64): kiln_value = ref32 + r, which recovers ~13
    significant digits although the printer shows 6."""
    want = np.asarray(want, np.float64)
    ref32 = np.asarray(ref32, np.float64)

    def check(vals):
        r = vals[0]
        if r.shape != want.shape:
            return "shape %s, expected %s" % (r.shape, want.shape)
        got = ref32 + r
        bad = ~(np.abs(got - want) <= atol + rtol * np.abs(want))
        if bad.any():
            rel = np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-300))
            return "f64 value off by rel %.3g (limit %.1g): got %s, expected %s" % (
                rel, rtol, short(got), short(want))
        return None
    return check


def expect_small(tol, what="error"):
    """The first printed value is a scalar that must be <= tol (and not nan)."""
    def check(vals):
        e = vals[0]
        if e.shape != ():
            return "expected a scalar %s, got %s" % (what, short(e))
        if not (float(e) <= tol):
            return "%s %.3g > %.1g" % (what, float(e), tol)
        return None
    return check


# ---- the suite ---------------------------------------------------------------------


class Check:
    def __init__(self, name, setup, exprs, verify, threads=None, env=None):
        self.name, self.setup, self.exprs, self.verify = name, setup, exprs, verify
        self.threads = threads
        self.env = tuple(sorted(env.items())) if env else ()


class Suite:
    CHUNK = 150   # checks per kiln process

    def __init__(self, kiln, timeout=None):
        self.kiln = os.path.abspath(kiln)
        # seconds per program (KILN_TEST_TIMEOUT: test.sh raises it for the sanitized build)
        self.timeout = timeout or int(os.environ.get("KILN_TEST_TIMEOUT", "300"))
        self.checks = []
        self.names = set()
        self.n = 0
        self.passed = 0
        self.failed = 0
        self.failures = []
        self.threads = None   # kiln run --threads for the checks added while set
        self.env = None       # environment variables (a dict) for the checks added while set

    def fresh(self, base="t"):
        """A new, unused Kiln identifier."""
        self.n += 1
        return "%s_%d" % (base, self.n)

    def add(self, name, setup, exprs, verify, threads=None):
        """setup: Kiln source lines (str or list); exprs: the expression(s) to
        print (str or list); verify: function(list of arrays) -> None | message;
        threads: run with `kiln run --threads N` (None: kiln's default)."""
        if name in self.names:
            raise ValueError("duplicate check name " + name)
        self.names.add(name)
        if isinstance(setup, str):
            setup = [l for l in setup.split("\n") if l.strip()]
        if isinstance(exprs, str):
            exprs = [exprs]
        self.checks.append(Check(name, list(setup), list(exprs), verify,
                                 threads if threads is not None else self.threads, self.env))

    # Checks run in batches; a batch is one program.
    def _program(self, checks):
        lines, owner = [], []
        for i, c in enumerate(checks):
            for l in c.setup:
                lines.append(l)
                owner.append(i)
            items = ['"@@%d"' % i]
            for j, e in enumerate(c.exprs):
                if j:
                    items.append('"|"')
                items.append(e)
            lines.append("print " + ", ".join(items))
            owner.append(i)
        return "\n".join(lines) + "\n", owner

    def _report(self, c, msg):
        with self.lock:
            self.results[id(c)] = msg

    def _print(self, c, msg):
        if msg is None:
            self.passed += 1
            print("ok  " + c.name)
        else:
            self.failed += 1
            msg = " ".join(str(msg).split())
            if len(msg) > 600:
                msg = msg[:600] + "..."
            self.failures.append((c.name, msg))
            print("FAIL %s: %s" % (c.name, msg))

    def _kiln(self, path, threads=None, env=()):
        args = [self.kiln, "run", path] + (["--threads", str(threads)] if threads else [])
        environ = dict(os.environ, **dict(env)) if env else None
        if os.environ.get("KILN_TEST_DEVICE"):   # e.g. cuda, with the fake driver (tests/fakecuda)
            args += ["--device", os.environ["KILN_TEST_DEVICE"]]
        for attempt in range(10):
            try:
                return subprocess.run(args, capture_output=True, text=True,
                                      timeout=self.timeout, env=environ)
            except OSError:   # e.g. the binary is being relinked: wait for it
                if attempt == 9:
                    raise
                time.sleep(3)

    def _run_batch(self, checks, path):
        """Runs checks; returns the ones that still need running."""
        src, owner = self._program(checks)
        with open(path, "w") as f:
            f.write(src)
        keep = os.environ.get("KILN_TEST_KEEP")
        if keep:   # keep every program run, for reproducing a failure by hand
            os.makedirs(keep, exist_ok=True)
            with self.lock:
                self.nprog += 1
                n = self.nprog
            with open(os.path.join(keep, "program%03d.kiln" % n), "w") as f:
                f.write(src)
        try:
            p = self._kiln(path, checks[0].threads, checks[0].env)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = "kiln timed out after %ds" % self.timeout
            rc = None
        got = {}
        for line in out.split("\n"):
            if line.startswith("@@"):
                tag, _, rest = line.partition(" ")
                try:
                    got[int(tag[2:])] = rest
                except ValueError:
                    pass
        done = 0
        for i, c in enumerate(checks):
            if i not in got:
                break
            try:
                vals = [parse_value(t) for t in got[i].split(" | ")]
                msg = c.verify(vals)
            except Exception as e:  # unparsable output or a verifier crash
                msg = "could not check the output %r: %s: %s" % (got[i][:200], type(e).__name__, e)
            self._report(c, msg)
            done = i + 1
        if done == len(checks):
            if rc != 0:
                # Everything printed but kiln still failed (e.g. at exit).
                c = Check("kiln exit status after %s" % checks[-1].name, [], [], None)
                with self.lock:
                    self.extra.append(c)
                self._report(c, "kiln exited with status %s after the last check: %s" % (rc, err.strip()[:300]))
            return []
        # kiln stopped in checks[done] (or, for an error with a location, in the
        # check that owns that line: a parse error stops the whole program).
        blame = done
        m = re.search(re.escape(os.path.basename(path)) + r":(\d+):(\d+): error", err)
        if m:
            ln = int(m.group(1)) - 1
            if 0 <= ln < len(owner) and owner[ln] >= done:
                blame = owner[ln]
        why = err.strip()
        if rc is not None and rc < 0:
            why = "kiln crashed (signal %d) %s" % (-rc, why)
        elif rc is not None:
            why = "kiln exited with status %d: %s" % (rc, why)
        first_line = why.split("\n")[0]
        if m:  # the message plus the offending source line
            first_line = " ".join(why.split("\n")[:2])
        if not why:
            first_line = "kiln stopped (status %s) without printing the value" % rc
        self._report(checks[blame], first_line)
        return checks[done:blame] + checks[blame + 1:]

    def _worker(self, groups, path):
        """groups: lists of checks, each run with its own thread count."""
        for checks in groups:
            try:
                while checks:
                    checks = self._run_batch(checks, path)
            except BaseException as e:  # reported below as failures of the checks left
                for c in checks:
                    self._report(c, "the test harness failed: %s: %s" % (type(e).__name__, e))

    def run(self, jobs=None):
        """Runs the checks in `jobs` kiln processes at once (default: the
        number of CPUs, at most 4; KILN_TEST_JOBS overrides), then prints one
        line per check in the order they were added."""
        t0 = time.time()
        if jobs is None:
            jobs = int(os.environ.get("KILN_TEST_JOBS", "0")) or min(os.cpu_count() or 1, 4)
        jobs = max(1, min(jobs, len(self.checks)))
        self.lock = threading.Lock()
        self.results, self.extra, self.nprog = {}, [], 0
        with tempfile.TemporaryDirectory(prefix="kiln_test_") as tmp:
            threads = []
            # a batch is one kiln process, so checks that ask for a thread count
            # or an environment run in batches of their own
            groups = {}
            for c in self.checks:
                groups.setdefault((c.threads, c.env), []).append(c)
            for j in range(jobs):   # interleaved, so each worker gets a mix of cheap and costly checks
                # at most CHUNK checks a program: no one process runs for minutes, and a
                # crash or a timeout costs only its own chunk
                mine = [chunk for g in groups.values() for chunk in
                        (g[j::jobs][k:k + self.CHUNK] for k in range(0, len(g[j::jobs]), self.CHUNK))]
                t = threading.Thread(target=self._worker, args=(mine, os.path.join(tmp, "batch%d.kiln" % j)))
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
        for c in self.checks + self.extra:
            self._print(c, self.results.get(id(c), "no result (test harness error)"))
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.stdout.flush()
        sys.stderr.write("(%.1f s)\n" % (time.time() - t0))
        return 1 if self.failed else 0


def main(build):
    """Common entry point: build(suite, rng) adds the checks."""
    if len(sys.argv) < 2:
        sys.stderr.write("usage: %s PATH/TO/kiln [NAME-SUBSTRING]\n" % sys.argv[0])
        sys.exit(2)
    s = Suite(sys.argv[1])
    rng = np.random.default_rng(20240611)
    build(s, rng)
    if len(sys.argv) > 2:
        s.checks = [c for c in s.checks if sys.argv[2] in c.name]
    sys.exit(s.run())
