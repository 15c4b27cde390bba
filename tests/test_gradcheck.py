#!/usr/bin/env python3
"""Every differentiable Kiln op's gradient against central finite differences.

Usage: python3 tests/test_gradcheck.py build/kiln [NAME-SUBSTRING]
       KILN_GRADCHECK_FULL=1 ... : every coordinate separately (slow)

Everything is computed by Kiln itself, in f64. For a check of OP with inputs
A (f32-representable values written as f64 literals) and fixed random f64
weights W (so that the gradient is not trivially ones):

    F(a, b) = sum(OP(a, b) * W)
    G = grad(F, k)(A, B)

and G is compared with central differences of F in argument k, X:
  - arguments of 1-2 elements (and every argument with KILN_GRADCHECK_FULL=1):
    FD = sum over i of (F(.., X + h*E_i, ..) - F(.., X - h*E_i, ..)) / (2h) * E_i
    with E_i the i-th one-hot tensor, h = 1e-6; the error printed is
    max(abs(G - FD)) / (max(abs(FD)) + 1e-12);
  - larger ones along NDIR random directions D (entries ~1e-6, literals):
    (F(.., X + D, ..) - F(.., X - D, ..)) / 2 must equal sum(G * D); the
    error printed is the largest difference over the largest difference
    quotient. Every F evaluation compiles kernels of its own, so this keeps a
    check at ~15 kernels instead of 2N+; a wrong gradient component escapes
    only if its error is orthogonal to every random direction.
FD is assembled from nothing but + - * / and F. The FD error is ~1e-10
relative; the tolerance is 1e-6 unless a check says otherwise. Each check also
prints G itself, whose shape must be the argument's. Inputs stay away from
kinks (abs, relu, floor, max ties, ...).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_testlib import lit, f32, main  # noqa: E402

H = "1e-6"
TOL = 1e-6
# KILN_GRADCHECK_FULL=1: the full finite-difference gradient, one coordinate at
# a time, for every check. It is thorough but slow: every F evaluation compiles
# its own kernels, so a 24-element input costs 48 of them. By default arguments
# of more than 2 elements are checked along NDIR random directions instead,
# which catches any wrong gradient component unless the error happens to be
# orthogonal to every direction (probability ~0).
FULL = os.environ.get("KILN_GRADCHECK_FULL", "") not in ("", "0")
NDIR = 2


PRINTED = 1000   # elements a printed tensor shows whole


def verify(tol, shape):
    big = int(np.prod(shape)) > PRINTED

    def check(vals):
        err = vals[0]
        if err.shape != ():
            return "expected a scalar error, got %s" % err
        if len(vals) > 1:   # the gradient, or its shape where it is too large to print whole
            got = tuple(int(d) for d in np.ravel(vals[1])) if big else vals[1].shape
            if got != tuple(shape):
                return "gradient has shape %s, the argument %s" % (got, tuple(shape))
        if not (float(err) <= tol):
            return "relative error %.3g > %.1g (gradient vs central differences)" % (float(err), tol)
        return None
    return check


class GC:
    def __init__(self, S, rng):
        self.S, self.rng = S, rng

    def weights(self, shape):
        return f32(self.rng.uniform(0.5, 1.5, shape) * np.where(self.rng.random(shape) < 0.5, -1, 1))

    def core(self, name, setup, fname, args, argnum=0, tol=TOL, fd_fname=None, fd_h=H, full=False):
        """setup defines fname (and fd_fname, the function to difference; by
        default fname). args: list of (array, dtype)."""
        S = self.S
        lines = list(setup)
        names = []
        for i, (v, dt) in enumerate(args):
            n = S.fresh("A")
            lines.append("%s = %s" % (n, lit(v, dt)))
            names.append(n)
        g = S.fresh("G")
        lines.append("%s = grad(%s, %d)(%s)" % (g, fname, argnum, ", ".join(names)))
        x = np.asarray(args[argnum][0])
        fdf = fd_fname or fname
        dt = args[argnum][1]
        h = float(fd_h)

        def call(pert, sign):
            a = list(names)
            a[argnum] = "%s %s %s" % (names[argnum], sign, pert)
            return "%s(%s)" % (fdf, ", ".join(a))

        if FULL or full or x.size <= 2:
            # one coordinate at a time: FD = sum_i (F(x + h e_i) - F(x - h e_i)) / 2h * e_i
            terms = []
            for i in range(x.size):
                e = np.zeros(x.size)
                e[i] = 1
                en = lit(e.reshape(x.shape), dt) if x.ndim else "cast(1, %s)" % dt
                pe = "%s * %s" % (fd_h, en)
                terms.append("(%s - %s) / (2 * %s) * %s" % (call(pe, "+"), call(pe, "-"), fd_h, en))
            fd = S.fresh("FD")
            lines.append("%s = %s" % (fd, " + ".join(terms)))
            err = "max(abs(%s - %s)) / (max(abs(%s)) + 1e-12)" % (g, fd, fd)
        else:
            # directional: for random directions d (entries ~h, written as
            # literals), (F(x + d) - F(x - d)) / 2 must equal sum(G * d)
            fds, gds = [], []
            for k in range(NDIR):
                d = f32(self.rng.standard_normal(x.shape) * h)
                dn = S.fresh("D")
                lines.append("%s = %s" % (dn, lit(d, dt)))
                fds.append("(%s - %s) / 2" % (call(dn, "+"), call(dn, "-")))
                gds.append("sum(%s * %s)" % (g, dn))
            num = den = None
            for f, gd in zip(fds, gds):
                fn_ = S.fresh("FD")
                lines.append("%s = %s" % (fn_, f))
                e1, e2 = "abs(%s - %s)" % (gd, fn_), "abs(%s)" % fn_
                num = e1 if num is None else "maximum(%s, %s)" % (num, e1)
                den = e2 if den is None else "maximum(%s, %s)" % (den, e2)
            # (the floor plays the part of the 1e-12 above, in units of F * h)
            err = "%s / (%s + 1e-18)" % (num, den)
        # (a gradient too large to print whole is checked by its shape)
        S.add("grad " + name, lines, [err, g if x.size <= PRINTED else "shape(%s)" % g], verify(tol, x.shape))

    def op(self, name, kexpr, np_fn, args, argnum=0, tol=TOL, params="a, b, c", full=False):
        """F(params) = sum((kexpr) * W) with W random of the output's shape."""
        vals = [np.asarray(v) for v, _ in args]
        out = np.asarray(np_fn(*vals))
        fn, wn = self.S.fresh("F"), self.S.fresh("W")
        p = ", ".join(params.split(", ")[:len(args)])
        setup = ["%s = %s" % (wn, lit(self.weights(out.shape), "f64")),
                 "%s(%s) = sum((%s) * %s)" % (fn, p, kexpr, wn)]
        self.core(name, setup, fn, args, argnum, tol, full=full)


def away_from(rng, shape, kinks, lo=-2.5, hi=2.5, gap=0.1):
    """Uniform values at least gap away from every point in kinks."""
    x = rng.uniform(lo, hi, shape)
    for _ in range(100):
        bad = np.zeros(np.shape(x), bool)
        for k in kinks:
            bad |= np.abs(x - k) < gap
        if not bad.any():
            break
        x = np.where(bad, rng.uniform(lo, hi, np.shape(x)), x)
    return f32(x)


def _any(rng, s):
    return f32(rng.uniform(-2, 2, s))


UNARY = {
    "neg": (lambda x: -x, _any),
    "exp": (np.exp, _any),
    "log": (np.log, lambda r, s: f32(r.uniform(0.2, 3, s))),
    "log1p": (np.log1p, lambda r, s: f32(r.uniform(-0.8, 3, s))),
    "expm1": (np.expm1, _any),
    "sqrt": (np.sqrt, lambda r, s: f32(r.uniform(0.2, 3, s))),
    "rsqrt": (lambda x: 1 / np.sqrt(x), lambda r, s: f32(r.uniform(0.2, 3, s))),
    "abs": (np.abs, lambda r, s: away_from(r, s, [0])),
    "sign": (np.sign, lambda r, s: away_from(r, s, [0])),
    "tanh": (np.tanh, _any),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda r, s: f32(r.uniform(-4, 4, s))),
    "relu": (lambda x: np.maximum(x, 0), lambda r, s: away_from(r, s, [0])),
    "softplus": (lambda x: np.logaddexp(0, x), lambda r, s: f32(r.uniform(-4, 4, s))),
    "sin": (np.sin, _any),
    "cos": (np.cos, _any),
    "floor": (np.floor, lambda r, s: away_from(r, s, range(-3, 4))),
    "ceil": (np.ceil, lambda r, s: away_from(r, s, range(-3, 4))),
    "round": (np.round, lambda r, s: away_from(r, s, np.arange(-3.5, 4))),
}


def unary(T, rng):
    for op, (fn, dom) in UNARY.items():
        for s in ((2, 3), ()):
            x = dom(rng, s)
            sh = "x".join(map(str, s)) or "scalar"
            T.op("%s %s" % (op, sh), "%s(a)" % op, fn, [(x, "f64")])
    x = _any(rng, (2, 3))
    T.op("unary minus operator", "-a", lambda a: -a, [(x, "f64")])
    T.op("exp of a 1x1x1", "exp(a)", np.exp, [(_any(rng, (1, 1, 1)), "f64")])
    T.op("composite tanh(sin(a)) * exp(-a^2)", "tanh(sin(a)) * exp(-a ^ 2)", lambda a: a, [(x, "f64")])
    # erf and the activations built on it and on others, on a generator of their
    # own (the checks after them draw what they drew before they existed)
    r2 = np.random.default_rng(78)
    T2 = GC(T.S, r2)
    for s in ((2, 3), ()):
        T2.op("erf %s" % ("x".join(map(str, s)) or "scalar"), "erf(a)", lambda a: a, [(_any(r2, s), "f64")])
    for name, expr in (("gelu", "gelu(a)"), ("gelu tanh", "gelu(a, approximate=\"tanh\")"), ("silu", "silu(a)"),
                       ("leaky_relu", "leaky_relu(a, 0.1)"), ("elu", "elu(a, alpha=1.5)")):
        T2.op(name, expr, lambda a: a, [(away_from(r2, (2, 3), [0]), "f64")])
    for name, expr, out in (("var axis 1", "var(a, axis=1)", (2,)), ("std", "std(a)", ()),
                            ("std keepdims", "std(a, axis=0, keepdims=true)", (1, 3))):
        T2.op(name, expr, lambda a, out=out: np.zeros(out), [(_any(r2, (2, 3)), "f64")])
    tgt = f32(r2.uniform(0, 1, (2, 3)))
    for k in (0, 1):
        T2.op("sigmoid_cross_entropy wrt %s" % "zt"[k], "sigmoid_cross_entropy(a, b)", lambda a, b: a,
              [(_any(r2, (2, 3)), "f64"), (tgt, "f64")], argnum=k)


BIN = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
    "^": lambda a, b: a ** b, "maximum": np.maximum, "minimum": np.minimum,
}
# same shapes, a row broadcast, an outer broadcast, scalar with tensor; the
# last two only for + and / (the broadcasting code is shared by all ops)
BSHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2, 3))]
BSHAPES_MORE = [((2, 3), ()), ((3, 1, 2), (2,)), ((1,), (2, 2))]


def binary(T, rng):
    for op, fn in BIN.items():
        for sa, sb in BSHAPES + (BSHAPES_MORE if op in ("+", "/") else []):
            a = _any(rng, sa)
            b = _any(rng, sb)
            if op == "/":
                b = away_from(rng, sb, [0], gap=0.3)
            if op == "^":
                a = f32(rng.uniform(0.3, 2.5, sa))
            if op in ("maximum", "minimum"):
                for _ in range(100):   # no ties, not even close ones
                    if np.min(np.abs(np.subtract(a, b))) > 0.05:
                        break
                    b = _any(rng, sb)
            kexpr = "%s(a, b)" % op if op in ("maximum", "minimum") else "a %s b" % op
            tag = "%s %s" % ("x".join(map(str, sa)) or "s", "x".join(map(str, sb)) or "s")
            for k in (0, 1):
                T.op("%s %s wrt %s" % (op, tag, "ab"[k]), kexpr, fn, [(a, "f64"), (b, "f64")], argnum=k)
    # % and //, on a generator of their own (the checks after them draw what
    # they drew before these existed); a / b kept 0.2 or more from an integer
    r2 = np.random.default_rng(80)
    T2 = GC(T.S, r2)
    b = f32(np.where(r2.random((2, 3)) < 0.5, -1, 1) * r2.uniform(0.5, 2, (2, 3)))
    a = f32(b * (r2.integers(-3, 4, (2, 3)) + r2.uniform(0.2, 0.8, (2, 3))))
    for k in (0, 1):
        T2.op("mod a %% b wrt %s" % "ab"[k], "a % b", np.remainder, [(a, "f64"), (b, "f64")], argnum=k)
        T2.op("floordiv a // b wrt %s (zero)" % "ab"[k], "a // b", np.floor_divide, [(a, "f64"), (b, "f64")], argnum=k)
    T2.op("tril of a batch", "tril(a, -1) * a", lambda a: a, [(_any(r2, (2, 3, 4)), "f64")])
    T2.op("triu", "triu(a) ^ 2", lambda a: a, [(_any(r2, (3, 3)), "f64")])
    for spec, sa, sb in (("ij,jk->ik", (2, 3), (3, 4)), ("bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 2, 4)),
                         ("i,j->ij", (3,), (2,)), ("ij,ij->i", (2, 3), (2, 3)), ("...j,jk", (2, 2, 3), (3, 2))):
        for k in (0, 1):
            T2.op("einsum %s wrt %s" % (spec, "ab"[k]), "einsum(\"%s\", a, b)" % spec, lambda a, b, spec=spec: np.einsum(spec, a, b),
                  [(_any(r2, sa), "f64"), (_any(r2, sb), "f64")], argnum=k)
    T2.op("einsum diagonal ii->i", "einsum(\"ii->i\", a) ^ 2", lambda a: np.diagonal(a), [(_any(r2, (3, 3)), "f64")])
    T2.op("pad", "pad(a, [[1, 0], [2, 1]], value=3) ^ 2", lambda a: np.pad(a, ((1, 0), (2, 1))), [(_any(r2, (2, 3)), "f64")])
    T2.op("repeat", "repeat(a, 3, axis=1) ^ 2", lambda a: np.repeat(a, 3, axis=1), [(_any(r2, (2, 2)), "f64")])
    T2.op("tile", "tile(a, [2, 1, 3]) ^ 2", lambda a: np.tile(a, (2, 1, 3)), [(_any(r2, (2, 2)), "f64")])
    T2.op("squeeze and expand_dims", "expand_dims(squeeze(a), 0) ^ 3", lambda a: np.expand_dims(np.squeeze(a), 0),
          [(_any(r2, (1, 3, 1)), "f64")])
    for ax in (0, 1):
        T2.op("cumsum axis %d" % ax, "cumsum(a, axis=%d) ^ 2" % ax, lambda a: a, [(_any(r2, (3, 4)), "f64")])
    T2.op("cumsum of a cumsum", "cumsum(cumsum(a) * a)", lambda a: a, [(_any(r2, (5,)), "f64")])
    T2.op("mod by a scalar", "mod(a, 0.75) * a", lambda a: a, [(f32(r2.uniform(0.1, 0.6, (4,)) + 0.75 * r2.integers(-2, 3, 4)), "f64")])

    # powers with constant exponents, including negative bases
    x = away_from(rng, (2, 3), [0], gap=0.2)
    for e in ("2", "3", "-1", "0.5 * 2", "-2"):
        T.op("pow a ^ %s (negative bases)" % e, "a ^ (%s)" % e, lambda a: a, [(x, "f64")])
    p = f32(rng.uniform(0.3, 2, (2, 3)))
    T.op("pow a ^ 0.5", "a ^ 0.5", np.sqrt, [(p, "f64")])
    T.op("pow 2 ^ a", "2 ^ a", np.exp, [(x, "f64")])
    T.op("pow a ^ a", "a ^ a", np.exp, [(p, "f64")])
    T.op("pow call", "pow(a, b)", lambda a, b: a ** b, [(p, "f64"), (x, "f64")], argnum=1)
    for op in ("add", "sub", "mul", "div"):
        T.op("%s call wrt b" % op, "%s(a, b)" % op, lambda a, b: a * b, [(x, "f64"), (p, "f64")], argnum=1)
    T.op("same tensor both sides a * a", "a * a", lambda a: a, [(x, "f64")])
    T.op("same tensor a / (a + 3)", "a / (a + 3)", lambda a: a, [(p, "f64")])
    # where: the condition is a constant, both branches differentiable
    c = rng.random((2, 1)) < 0.5
    c[0, 0], c[1, 0] = True, False
    a = _any(rng, (2, 3))
    b = _any(rng, (3,))
    cl = lit(c, "bool")
    for k in (0, 1):
        T.op("where broadcast wrt %s" % "ab"[k], "where(%s, a, b)" % cl, lambda a, b: np.where(c, a, b),
             [(a, "f64"), (b, "f64")], argnum=k)
    T.op("where from a comparison", "where(a > 0, a ^ 2, -a)", lambda a: a, [(away_from(rng, (2, 3), [0]), "f64")])
    T.op("where scalar branch", "where(a > 0, a, 0)", lambda a: a, [(away_from(rng, (5,), [0]), "f64")])
    # clip: values away from the bounds; the bounds as tensors get the gradient where they bind
    lo, hi = -0.4, 0.6
    xc = away_from(rng, (2, 3), [lo, hi], gap=0.1)
    T.op("clip scalar bounds", "clip(a, %g, %g)" % (lo, hi), lambda a: np.clip(a, lo, hi), [(xc, "f64")])
    T.op("clip high only", "clip(a, high=%g)" % hi, lambda a: np.clip(a, None, hi), [(xc, "f64")])
    bl = f32(np.array([-2.0, 0.3, 0.0]))
    xs = f32(np.array([[-1.0, 0.5, 0.7], [1.2, -0.5, -0.2]]))
    for k in (0, 1):
        T.op("clip tensor low wrt %s" % "ab"[k], "clip(a, b, 1)", lambda a, b: np.clip(a, b, 1),
             [(xs, "f64"), (bl, "f64")], argnum=k)


def reductions(T, rng):
    # 3-D inputs have 24 elements, so 48 evaluations of F each: a few axis
    # choices per op keep the compile time down while covering int, negative,
    # multiple and no axes across the ops.
    cases = {"sum": [None, 1, (0, 2), -1], "mean": [None, 0, (-1, -2)], "prod": [None, 2, (0, 1)],
             "max": [None, 1, (0, 2)], "min": [None, -1, (1, 2)]}
    fns = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean}
    for op, fn in fns.items():
        for shape, axes in (((2, 3, 4), cases[op]), ((3, 4), [None, 0, 1, -1]), ((5,), [None, 0])):
            for ax in axes:
                x = f32(rng.uniform(0.5, 1.5, shape) * np.where(rng.random(shape) < 0.3, -1, 1))
                kw = "" if ax is None else ", axis=%s" % (list(ax) if isinstance(ax, tuple) else ax)
                sh = "x".join(map(str, shape))
                T.op("%s %s axis=%s" % (op, sh, ax if not isinstance(ax, tuple) else list(ax)),
                     "%s(a%s)" % (op, kw), lambda a, ax=ax, fn=fn: fn(a, axis=ax), [(x, "f64")])
        x = f32(rng.uniform(0.5, 1.5, (3, 4)))
        T.op("%s keepdims" % op, "%s(a, axis=1, keepdims=true)" % op, lambda a, fn=fn: fn(a, axis=1, keepdims=True),
             [(x, "f64")])
    # prod with zeros: d/dx_i is the product of the others (no division by x_i)
    z = f32([[0.5, 0.0, 2.0], [1.5, -1.0, 0.75]])
    T.op("prod with one zero", "prod(a, axis=1)", lambda a: np.prod(a, 1), [(z, "f64")])
    z2 = f32([[0.5, 0.0, 0.0], [0.0, -1.0, 0.75]])
    # (coordinate-wise: the gradient is exactly 0 here, and along a random
    # direction the difference quotient keeps a third-order term ~h^3)
    T.op("prod with several zeros", "prod(a)", np.prod, [(z2, "f64")], full=True)
    # sum of a broadcast, mean over a batch of 1
    T.op("mean over a batch of 1", "mean(a, axis=0)", lambda a: np.mean(a, 0), [(_any(rng, (1, 4)), "f64")])
    T.op("sum then broadcast", "a - mean(a, axis=1, keepdims=true)", lambda a: a, [(_any(rng, (2, 3)), "f64")])
    T.op("variance", "mean((a - mean(a)) ^ 2)", np.var, [(_any(rng, (7,)), "f64")])
    T.op("normalize by max", "a / max(a, axis=0)", lambda a: a, [(f32(rng.uniform(0.5, 2, (3, 2))), "f64")])


def movement(T, rng):
    x = _any(rng, (2, 3, 4))
    for s in ([-1], [4, -1, 3]):
        T.op("reshape %s" % s, "reshape(a, %s)" % s, lambda a, s=s: a.reshape(s), [(x, "f64")])
    T.op("flatten", "flatten(a)", lambda a: a.reshape(2, -1), [(x, "f64")])
    T.op("reshape 2-D [3, -1, 1]", "reshape(a, [3, -1, 1])", lambda a: a.reshape(3, -1, 1), [(x[0], "f64")])
    for p in ((1, 0, 2), (2, 0, 1), (0, 2, 1)):
        T.op("transpose %s" % (p,), "transpose(a, %s)" % list(p), lambda a, p=p: np.transpose(a, p), [(x, "f64")])
    T.op("transpose default", "transpose(a)", np.transpose, [(x, "f64")])
    y = _any(rng, (5, 6))
    for ix in ("::2", "::-1", "1:4", "-1", "1:, ::-2", ":, 4:0:-2", "::2, ::3", "-2:, 1", "1, ::-1", "3:0:-1, -3:"):
        T.op("slice a[%s]" % ix, "a[%s]" % ix, lambda a, ix=ix: eval("a[%s]" % ix), [(y, "f64")])
    T.op("slice 3-D a[:, ::-1, 1::2]", "a[:, ::-1, 1::2]", lambda a: a[:, ::-1, 1::2], [(x, "f64")])
    T.op("slice overlapping uses", "a[1:] * a[:-1]", lambda a: a[1:] * a[:-1], [(y, "f64")])
    a = _any(rng, (2, 3))
    b = _any(rng, (2, 2))
    for k in (0, 1):
        T.op("concat axis 1 wrt %s" % "ab"[k], "concat([a, b, a], axis=1)",
             lambda a, b: np.concatenate([a, b, a], 1), [(a, "f64"), (b, "f64")], argnum=k)
    T.op("concat axis 0 with itself", "concat([a, a * a], axis=0)", lambda a: np.concatenate([a, a]), [(a, "f64")])
    T.op("concat axis -1 3-D", "concat([a, sin(a)], axis=-1)", lambda a: np.concatenate([a, a], -1), [(x, "f64")])
    T.op("stack axis 0", "stack([a, a * a])", lambda a: np.stack([a, a]), [(a, "f64")])
    T.op("stack axis -1", "stack([a, exp(a), a], axis=-1)", lambda a: np.stack([a, a, a], -1), [(a, "f64")])
    for src, dst in (((3,), (2, 3)), ((3, 1), (2, 3, 4)), ((), (2, 2)), ((1, 4), (3, 4))):
        T.op("broadcast_to %s -> %s" % (src, dst), "broadcast_to(a, %s)" % list(dst),
             lambda a, dst=dst: np.broadcast_to(a, dst), [(_any(rng, src), "f64")])


def matmuls(T, rng):
    cases = [((2, 3), (3, 4)), ((2, 2, 3), (2, 3, 2)), ((2, 3), (2, 3, 2)), ((1, 2, 3), (2, 3, 2)),
             ((2, 1, 1, 3), (2, 3, 2)), ((3,), (3, 2)), ((2, 3), (3,)), ((3,), (3,)), ((2, 2, 3), (3,)),
             ((1, 1), (1, 1))]
    for sa, sb in cases:
        a = _any(rng, sa)
        b = _any(rng, sb)
        tag = "%s @ %s" % ("x".join(map(str, sa)), "x".join(map(str, sb)))
        # (each check compiles 2N matmuls: the larger broadcast cases check one side)
        for k in {"1x2x3 @ 2x3x2": (0,), "2x1x1x3 @ 2x3x2": (1,), "1x1 @ 1x1": (1,)}.get(tag, (0, 1)):
            T.op("matmul %s wrt %s" % (tag, "ab"[k]), "a @ b", np.matmul, [(a, "f64"), (b, "f64")], argnum=k)
    # Past lower.c's GEMM threshold (m*n*k >= 4096): the products and their
    # gradients (transposed operands, a broadcast weight) go through rt_gemm.
    for sa, sb in (((24, 20), (20, 30)), ((4, 12, 20), (20, 40)), ((2, 3, 12, 20), (3, 20, 16)),
                   ((2, 3, 12, 20), (20, 16))):
        a = _any(rng, sa)
        b = _any(rng, sb)
        tag = "%s @ %s" % ("x".join(map(str, sa)), "x".join(map(str, sb)))
        # the 4-D cases: b's gradient sums batched products (simplify folds them into
        # one GEMM); a's would print more values than the harness reads back
        for k in ((1,) if len(sa) == 4 else (0, 1)):
            T.op("gemm matmul %s wrt %s" % (tag, "ab"[k]), "a @ b", np.matmul, [(a, "f64"), (b, "f64")], argnum=k)
    a = _any(rng, (3, 3))
    T.op("matmul a @ a", "a @ a", lambda a: a @ a, [(a, "f64")])
    T.op("matmul a @ transpose(a)", "a @ transpose(a)", lambda a: a @ a.T, [(a, "f64")])


def logsoftmax_np(x, axis):
    return x - np.log(np.sum(np.exp(x), axis=axis, keepdims=True))


def rows(T, rng):
    # Row ops compile to big kernels, and F is evaluated 2N times, so the 3-D
    # cases use 12 elements: the axis worked on has size 3, the others 2.
    for ax, shape in ((0, (3, 2, 2)), (1, (2, 3, 2)), (-1, (2, 2, 3))):
        x = f32(rng.uniform(-3, 3, shape))
        sh = "x".join(map(str, shape))
        T.op("softmax %s axis=%d" % (sh, ax), "softmax(a, axis=%d)" % ax, lambda a: a, [(x, "f64")])
        T.op("log_softmax %s axis=%d" % (sh, ax), "log_softmax(a, axis=%d)" % ax, lambda a: a, [(x, "f64")])
        T.op("logsumexp %s axis=%d" % (sh, ax), "logsumexp(a, axis=%d)" % ax,
             lambda a, ax=ax: np.sum(a, axis=ax), [(x, "f64")])
    x2 = f32(rng.uniform(-3, 3, (3, 4)))
    for ax in (0, 1):
        T.op("softmax 3x4 axis=%d" % ax, "softmax(a, axis=%d)" % ax, lambda a: a, [(x2, "f64")])
        T.op("log_softmax 3x4 axis=%d" % ax, "log_softmax(a, axis=%d)" % ax, lambda a: a, [(x2, "f64")])
        T.op("logsumexp 3x4 axis=%d" % ax, "logsumexp(a, axis=%d)" % ax, lambda a, ax=ax: np.sum(a, axis=ax),
             [(x2, "f64")])
    T.op("logsumexp keepdims", "logsumexp(a, axis=1, keepdims=true)", lambda a: np.sum(a, 1, keepdims=True),
         [(x2, "f64")])
    v = f32(rng.uniform(-3, 3, (5,)))
    T.op("softmax 1-D", "softmax(a)", lambda a: a, [(v, "f64")])
    T.op("log_softmax 1-D", "log_softmax(a)", lambda a: a, [(v, "f64")])
    T.op("logsumexp 1-D", "logsumexp(a)", lambda a: np.sum(a), [(v, "f64")])
    T.op("softmax large logits", "softmax(a)", lambda a: a, [(f32([[500.0, 501.0, 499.5], [-700.0, -701.0, -699.0]]), "f64")])
    T.op("logsumexp large logits", "logsumexp(a, axis=1)", lambda a: a.sum(1),
         [(f32([[500.0, 501.0, 499.5], [-700.0, -701.0, -699.0]]), "f64")])
    # softmax_cross_entropy w.r.t. the logits; labels are an i32 argument
    for shape in ((3, 4), (1, 5), (2, 2, 3), (4, 1)):
        lg = f32(rng.uniform(-3, 3, shape))
        lab = rng.integers(0, shape[-1], shape[:-1])
        T.op("sce %s" % "x".join(map(str, shape)), "softmax_cross_entropy(a, b)", lambda a, b: b.astype(float),
             [(lg, "f64"), (lab, "i32")])
    lg = f32(rng.uniform(-3, 3, (3, 4)))
    lab = np.array([0, 3, 1])
    T.op("sce i64 labels", "softmax_cross_entropy(a, b)", lambda a, b: b.astype(float), [(lg, "f64"), (lab, "i64")])
    T.op("sce mean", "mean(softmax_cross_entropy(a, b))", lambda a, b: 0.0, [(lg, "f64"), (lab, "i32")])
    T.op("sce large logits", "softmax_cross_entropy(a, b)", lambda a, b: b.astype(float),
         [(f32([[800.0, 801.0, 799.0], [-600.0, -601.0, -600.5]]), "f64"), (np.array([2, 0]), "i32")])
    T.op("sce labels literal", "softmax_cross_entropy(a, cast([1, 0, 3], i32))", lambda a: a.sum(1), [(lg, "f64")])


def casts(T, rng):
    S = T.S
    x = f32(rng.uniform(-2, 2, (2, 3)))
    w = lit(T.weights((2, 3)), "f64")
    # Through f32 the gradient carries f32 rounding (~1e-7 relative), so these
    # compare with the f64 reference function's differences at 1e-5 instead.
    for name, body, ref in (("cast f64->f32->f64 linear", "cast(cast(a, f32), f64)", "a"),
                            ("cast f64->f32 tanh ->f64", "cast(tanh(cast(a, f32)), f64)", "tanh(a)"),
                            ("cast f32 exp then f64 square", "cast(exp(cast(a, f32)), f64) ^ 2", "exp(a) ^ 2")):
        fn, rf = S.fresh("F"), S.fresh("R")
        T.core(name, ["%s(a) = sum(%s * %s)" % (fn, body, w), "%s(a) = sum(%s * %s)" % (rf, ref, w)],
               fn, [(x, "f64")], tol=1e-5, fd_fname=rf)
    T.op("cast f64->f64", "cast(a, f64)", lambda a: a, [(x, "f64")])
    # The f32 gradient kernels: OP runs in f32 between casts; its gradient is
    # compared with differences of the same function in f64 (tolerance 1e-5
    # for f32 rounding).
    b = f32(rng.uniform(-2, 2, (3, 2)))
    lab = lit(np.array([2, 0]), "i32")
    for name, body, ref, shape in (
            ("tanh", "tanh(A)", "tanh(A)", (2, 3)), ("sigmoid", "sigmoid(A)", "sigmoid(A)", (2, 3)),
            ("exp", "exp(A)", "exp(A)", (2, 3)), ("log", "log(A * A + 1)", "log(A * A + 1)", (2, 3)),
            ("sqrt", "sqrt(A * A + 1)", "sqrt(A * A + 1)", (2, 3)), ("softplus", "softplus(A)", "softplus(A)", (2, 3)),
            ("softmax", "softmax(A)", "softmax(A)", (2, 3)), ("log_softmax axis 0", "log_softmax(A, axis=0)",
                                                                   "log_softmax(A, axis=0)", (2, 3)),
            ("logsumexp", "logsumexp(A, axis=1)", "logsumexp(A, axis=1)", (2,)),
            ("max axis 1", "max(A, axis=1)", "max(A, axis=1)", (2,)), ("prod", "prod(A, axis=0)", "prod(A, axis=0)", (3,)),
            ("matmul", "A @ B32", "A @ B64", (2, 2)), ("mean", "mean(A ^ 2, axis=0)", "mean(A ^ 2, axis=0)", (3,)),
            ("sce", "softmax_cross_entropy(A, %s)" % lab, "softmax_cross_entropy(A, %s)" % lab, (2,))):
        fn, rf, wn = S.fresh("F"), S.fresh("R"), S.fresh("W")
        setup = ["%s = %s" % (wn, lit(T.weights(shape), "f64")),
                 "B32 = %s" % lit(b, "f32"), "B64 = %s" % lit(b, "f64"),
                 "%s(a) = sum(cast(%s, f64) * %s)" % (fn, body.replace("A", "cast(a, f32)"), wn),
                 "%s(a) = sum((%s) * %s)" % (rf, ref.replace("A", "a"), wn)]
        T.core("f32 kernels %s" % name, setup, fn, [(x, "f64")], tol=1e-5, fd_fname=rf)
    # mixed: an f32 argument differentiated in f32 (loose: f32 differences with h=1e-2)
    fn = S.fresh("F")
    T.core("f32 argument (f32 arithmetic)", ["%s(a) = sum(a * a * %s)" % (fn, lit(T.weights((2, 3))))], fn,
           [(x, "f32")], tol=1e-3, fd_h="0.0078125")


def second_order(T, rng):
    S = T.S
    x = f32(rng.uniform(-1.5, 1.5, (2, 3)))
    for name, body in (("x^3", "a ^ 3"), ("tanh", "tanh(a)"), ("sigmoid", "sigmoid(a)"), ("exp*sin", "exp(a) * sin(a)"),
                       ("softmax", "softmax(a)"), ("log_softmax axis 0", "log_softmax(a, axis=0)"),
                       ("logsumexp", "logsumexp(a, axis=1)"), ("a @ transpose(a)", "a @ transpose(a)"),
                       ("prod", "prod(a, axis=1)"), ("softplus", "softplus(a)"), ("sqrt(a^2 + 1)", "sqrt(a ^ 2 + 1)")):
        out = {"logsumexp": (2,), "a @ transpose(a)": (2, 2), "prod": (2,)}.get(name, (2, 3))
        f1, f2, w1, w2 = S.fresh("F"), S.fresh("F"), S.fresh("W"), S.fresh("W")
        setup = ["%s = %s" % (w1, lit(T.weights(out), "f64")), "%s = %s" % (w2, lit(T.weights((2, 3)), "f64")),
                 "%s(a) = sum((%s) * %s)" % (f1, body, w1),
                 "%s(a) = sum(grad(%s)(a) * %s)" % (f2, f1, w2)]
        T.core("second order %s" % name, setup, f2, [(x, "f64")])
    # scalar higher order: d2/dt2 t^3 = 6t, d3 = 6
    for name, body in (("t^3", "t ^ 3"), ("tanh(t)", "tanh(t)"), ("exp(t)*sin(t)", "exp(t) * sin(t)")):
        f1 = S.fresh("F")
        f2 = S.fresh("F")
        T.core("second order scalar %s" % name, ["%s(t) = %s" % (f1, body), "%s(t) = grad(%s)(t)" % (f2, f1)],
               f2, [(f32(0.7), "f64")])
    f1, f2, f3 = S.fresh("F"), S.fresh("F"), S.fresh("F")
    T.core("third order t^4", ["%s(t) = t ^ 4" % f1, "%s(t) = grad(%s)(t)" % (f2, f1),
                               "%s(t) = grad(%s)(t)" % (f3, f2)], f3, [(f32(-1.3), "f64")])
    # mixed partial: d/db of dF/da
    f1, f2 = S.fresh("F"), S.fresh("F")
    a = _any(rng, (3,))
    b = _any(rng, (3,))
    T.core("second order mixed partial", ["%s(a, b) = sum(sin(a * b) * a)" % f1,
                                          "%s(a, b) = sum(grad(%s, 0)(a, b) * %s)" % (f2, f1, lit(T.weights((3,)), "f64"))],
           f2, [(a, "f64"), (b, "f64")], argnum=1)


def composite(T, rng):
    S = T.S
    X = f32(rng.standard_normal((4, 3)))
    lab = rng.integers(0, 2, (4,))
    W1 = f32(rng.standard_normal((3, 5)) * 0.5)
    W2 = f32(rng.standard_normal((5, 2)) * 0.5)
    fn = S.fresh("F")
    setup = ["%s(w1, w2) = mean(softmax_cross_entropy(tanh(%s @ w1) @ w2, %s))" % (fn, lit(X, "f64"), lit(lab, "i32"))]
    for k in (0, 1):
        T.core("mlp loss wrt w%d" % (k + 1), setup, fn, [(W1, "f64"), (W2, "f64")], argnum=k)
    fn = S.fresh("F")
    T.core("block function", ["fn %s(a) {" % fn, "  h = relu(a * 2 - 0.1)", "  s = sum(h * h)", "  sqrt(s + 1)", "}"],
           fn, [(away_from(rng, (2, 3), [0.05]), "f64")])
    fn, g = S.fresh("F"), S.fresh("F")
    T.core("function calling a function", ["%s(v) = v * sigmoid(v)" % g, "%s(a) = sum(%s(a) * %s(a + 1))" % (fn, g, g)],
           fn, [(_any(rng, (5,)), "f64")])
    fn = S.fresh("F")
    T.core("layer norm", ["%s(a) = sum(((a - mean(a, axis=-1, keepdims=true)) / sqrt(mean((a - mean(a, axis=-1, keepdims=true)) ^ 2, axis=-1, keepdims=true) + 1e-5)) * %s)"
                          % (fn, lit(T.weights((2, 4)), "f64"))], fn, [(_any(rng, (2, 4)), "f64")])
    fn = S.fresh("F")
    T.core("attention-like", ["%s(q) = sum(softmax(q @ transpose(q) / 2, axis=-1) @ q * %s)"
                              % (fn, lit(T.weights((3, 2)), "f64"))], fn, [(_any(rng, (3, 2)), "f64")])


def build(S, rng):
    T = GC(S, rng)
    unary(T, rng)
    binary(T, rng)
    reductions(T, rng)
    movement(T, rng)
    matmuls(T, rng)
    rows(T, rng)
    casts(T, rng)
    second_order(T, rng)
    composite(T, rng)


if __name__ == "__main__":
    main(build)
