#!/usr/bin/env python3
"""Forward values of every Kiln op against NumPy.

Usage: python3 tests/test_ops.py build/kiln [NAME-SUBSTRING]

Inputs are random (fixed seed), rounded to f32 so that Kiln's literals hold
them exactly, and written into a few generated programs; see kiln_testlib.py.
Every op runs on inputs of odd shapes (1, 3, 5, 7, batches of 1, empty dims),
in f32, f64 and the integer dtypes where it applies.
f32 results are compared with rtol 1e-5 (the printer shows 6 significant
digits). f64 results are checked to ~1e-11 relative: the program prints
kiln_value - f32(reference) (computed in f64 inside Kiln), which the printer
shows to 6 digits of a residual ~1e-8 of the value.
"""
import os
import sys

import math
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_testlib import lit, f32, expect_close, expect_exact, expect_f64, main  # noqa: E402
import philox_ref  # noqa: E402


def softplus(x):
    return np.logaddexp(0.0, x)


def sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def logsumexp(x, axis, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    r = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return r if keepdims else np.squeeze(r, axis=axis)


# name -> (numpy function, domain sampler)
def _any(rng, s):
    return rng.standard_normal(s) * 2


def _pos(rng, s):
    return rng.uniform(0.05, 4.0, s)


def _gt_m1(rng, s):
    return rng.uniform(-0.9, 3.0, s)


def _round_pts(rng, s):
    # halves (round-half-even), integers, negatives, plain values
    pool = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -3.0, 0.0, 4.0, -0.7, 0.3, 2.7, -1.2, 3.49, -3.51])
    return rng.choice(pool, s) if s else rng.choice(pool)


UNARY = {
    "exp": (np.exp, _any),
    "log": (np.log, _pos),
    "log1p": (np.log1p, _gt_m1),
    "expm1": (np.expm1, _any),
    "sqrt": (np.sqrt, _pos),
    "rsqrt": (lambda x: 1 / np.sqrt(x), _pos),
    "abs": (np.abs, _any),
    "sign": (np.sign, _round_pts),
    "tanh": (np.tanh, _any),
    "sigmoid": (sigmoid, _any),
    "relu": (lambda x: np.maximum(x, 0), _any),
    "softplus": (softplus, _any),
    "sin": (np.sin, _any),
    "cos": (np.cos, _any),
    "floor": (np.floor, _round_pts),
    "ceil": (np.ceil, _round_pts),
    "round": (np.round, _round_pts),   # NumPy rounds half to even, like rint
}

SHAPES = [(7,), (3, 5), (1, 3, 1), ()]


def unary(S, rng):
    for op, (fn, dom) in UNARY.items():
        for s in SHAPES:
            x = f32(dom(rng, s))
            sh = "x".join(map(str, s)) or "scalar"
            S.add("unary %s f32 %s" % (op, sh), [], "%s(%s)" % (op, lit(x, "f32")),
                  expect_close(fn(x), rtol=1e-5, atol=1e-6))
        x = f32(dom(rng, (3, 4)))
        r = fn(x)
        S.add("unary %s f64 3x4" % op, [], "%s(%s) - %s" % (op, lit(x, "f64"), lit(f32(r), "f64")),
              expect_f64(f32(r), r))
    # erf (no NumPy function: math.erf), on a generator of its own so the checks
    # after it draw what they drew before it existed
    r2 = np.random.default_rng(77)
    erf = np.vectorize(math.erf)
    for s in SHAPES:
        x = f32(r2.uniform(-3, 3, s))
        S.add("unary erf f32 %s" % ("x".join(map(str, s)) or "scalar"), [], "erf(%s)" % lit(x), expect_close(erf(x), rtol=1e-5, atol=1e-6))
    x = f32(r2.uniform(-3, 3, (3, 4)))
    S.add("unary erf f64 3x4", [], "erf(%s) - %s" % (lit(x, "f64"), lit(f32(erf(x)), "f64")), expect_f64(f32(erf(x)), erf(x)))
    # negation, both spellings
    x = f32(_any(rng, (2, 3)))
    S.add("unary neg operator", [], "-%s" % lit(x), expect_exact(-x))
    S.add("unary neg call", [], "neg(%s)" % lit(x, "f64"), expect_exact(-x))
    # special values and stability at the extremes
    big = np.array([-100.0, -30.0, 0.0, 30.0, 100.0])
    S.add("unary sigmoid extremes f32", [], "sigmoid(%s)" % lit(big), expect_close(sigmoid(big), atol=1e-30))
    S.add("unary sigmoid extremes f64", [], "sigmoid(%s)" % lit(big, "f64"), expect_close(sigmoid(big), atol=1e-300))
    S.add("unary softplus extremes f32", [], "softplus(%s)" % lit(big), expect_close(softplus(big), atol=1e-30))
    S.add("unary tanh extremes", [], "tanh(%s)" % lit(big), expect_close(np.tanh(big)))
    # Their gradients too: grad differentiates the stable forms (autodiff.c,
    # stable_forward), where the written ones divide 0 by 0 at such logits.
    ext = np.array([-1000.0, -100.0, 0.0, 100.0, 1000.0])
    for name, body, want in (
            ("log(softmax(x))", "sum(log(softmax(x)))", 1 - 5 * np.array([0, 0, 0, 0, 1.0])),
            ("log(sum(exp(x)))", "log(sum(exp(x)))", np.array([0, 0, 0, 0, 1.0])),
            ("log(sigmoid(x))", "sum(log(sigmoid(x)))", 1 - sigmoid(ext)),
            ("log(1 - sigmoid(x))", "sum(log(1 - sigmoid(x)))", -sigmoid(ext)),
            ("log(1 + exp(x))", "sum(log(1 + exp(x)))", sigmoid(ext))):
        S.add("stable gradient of %s at extreme logits" % name, ["fn stab_f(x) { %s }" % body],
              "grad(stab_f)(%s)" % lit(ext), expect_close(want, atol=1e-6))
    onehot = np.array([[0, 1.0, 0], [1.0, 0, 0]])
    z = np.array([[300.0, 0.0, -300.0], [0.0, 200.0, 5.0]])
    sm = np.exp(z - z.max(1, keepdims=True))
    sm /= sm.sum(1, keepdims=True)
    S.add("stable gradient of a hand-written cross-entropy at large logit gaps",
          ["fn stab_ce(z) { -sum(%s * log(softmax(z, axis=1))) }" % lit(onehot)],
          "grad(stab_ce)(%s)" % lit(z), expect_close(sm - onehot, atol=1e-6))
    # a hand-written binary cross-entropy's terms stay finite (stability.c)
    S.add("stable log(sigmoid(x)) and log(1 - sigmoid(x))", [],
          "stack([log(sigmoid(%s)), log(1 - sigmoid(%s))])" % (lit(big), lit(big)),
          expect_close(np.stack([-softplus(-big), -softplus(big)]), rtol=1e-6))
    S.add("unary exp overflow to inf", [], "exp(%s)" % lit([0.0, 100.0, -200.0]),
          expect_close([1.0, np.inf, 0.0]))
    S.add("unary log of 0 and -1", [], "log(%s)" % lit([0.0, -1.0, 1.0]), expect_close([-np.inf, np.nan, 0.0]))
    S.add("unary sqrt of 0 and -1", [], "sqrt(%s)" % lit([0.0, -1.0, 4.0]), expect_close([0.0, np.nan, 2.0]))
    S.add("unary rsqrt of 0", [], "rsqrt(%s)" % lit([0.0, 4.0]), expect_close([np.inf, 0.5]))
    tiny = f32([1e-10, -3e-9, 2e-7])
    S.add("unary log1p tiny f64", [], "log1p(%s) - %s" % (lit(tiny, "f64"), lit(f32(np.log1p(tiny)), "f64")),
          expect_f64(f32(np.log1p(tiny)), np.log1p(tiny)))
    S.add("unary expm1 tiny f64", [], "expm1(%s) - %s" % (lit(tiny, "f64"), lit(f32(np.expm1(tiny)), "f64")),
          expect_f64(f32(np.expm1(tiny)), np.expm1(tiny)))
    S.add("unary log1p tiny f32", [], "log1p(%s)" % lit(tiny), expect_close(np.log1p(tiny), rtol=1e-5, atol=0))
    # integer operands of float ops are promoted (F_FLOAT)
    S.add("unary exp of i32", [], "exp(cast([0, 1, 2], i32))", expect_close(np.exp([0.0, 1, 2])))
    S.add("unary sqrt of i64", [], "sqrt(cast([4, 9, 2], i64))", expect_close(np.sqrt([4.0, 9, 2])))
    S.add("unary abs i32", [], "abs(cast([-3, 0, 5], i32))", expect_exact([3, 0, 5]))
    S.add("unary neg i64", [], "-cast([-3, 0, 5], i64)", expect_exact([3, 0, -5]))
    S.add("unary sign i32", [], "sign(cast([-3, 0, 5], i32))", expect_exact([-1, 0, 1]))
    S.add("unary relu i32", [], "relu(cast([-3, 0, 5], i32))", expect_exact([0, 0, 5]))
    S.add("unary abs f64 exact", [], "abs(%s)" % lit([-2.5, 0.0, 3.0], "f64"), expect_exact([2.5, 0, 3]))


BIN = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}
BSHAPES = [((3, 5), (3, 5)), ((3, 5), (5,)), ((3, 1), (1, 5)), ((2, 1, 4), (3, 1)),
           ((), (3,)), ((1,), (2, 1)), ((4,), ())]


def _bin_expr(op, a, b):
    if op in ("maximum", "minimum", "add", "sub", "mul", "div", "pow"):
        return "%s(%s, %s)" % (op, a, b)
    return "(%s %s %s)" % (a, op, b)


def binary(S, rng):
    for op, fn in BIN.items():
        for sa, sb in BSHAPES:
            a = f32(rng.standard_normal(sa) * 2)
            b = f32(rng.standard_normal(sb) * 2)
            if op == "/":
                b = f32(np.where(np.abs(b) < 0.1, 0.5, b))
            tag = "%s %s" % ("x".join(map(str, sa)) or "s", "x".join(map(str, sb)) or "s")
            S.add("binary %s f32 %s" % (op, tag), [], _bin_expr(op, lit(a, "f32"), lit(b, "f32")),
                  expect_close(fn(a, b), rtol=1e-5, atol=1e-6))
        a = f32(rng.standard_normal((3, 4)))
        b = f32(rng.uniform(0.3, 2, (4,)))
        r = fn(a, b)
        S.add("binary %s f64 3x4 4" % op, [], "%s - %s" % (_bin_expr(op, lit(a, "f64"), lit(b, "f64")),
                                                           lit(f32(r), "f64")), expect_f64(f32(r), r))
    # pow: positive bases with any exponent; any base with integer exponents
    a = f32(rng.uniform(0.1, 3, (3, 4)))
    b = f32(rng.uniform(-2, 2, (3, 4)))
    S.add("binary ^ f32 positive base", [], "(%s ^ %s)" % (lit(a), lit(b)), expect_close(a ** b, rtol=2e-5))
    r = a ** b
    S.add("binary ^ f64", [], "(%s ^ %s) - %s" % (lit(a, "f64"), lit(b, "f64"), lit(f32(r), "f64")),
          expect_f64(f32(r), r))
    neg = f32(rng.uniform(-3, 3, (5,)))
    for e in (2, 3, -1, 0):
        S.add("binary ^ negative base ^ %d" % e, [], "(%s ^ %d)" % (lit(neg), e),
              expect_close(neg ** float(e), rtol=1e-5))
    S.add("binary ^ broadcast exponent", [], "(%s ^ %s)" % (lit(a), lit([1.0, 2.0, 0.5, 3.0])),
          expect_close(a ** np.array([1.0, 2, 0.5, 3]), rtol=2e-5))
    S.add("binary ^ scalar base", [], "(2 ^ %s)" % lit(b), expect_close(2.0 ** b, rtol=2e-5))
    S.add("binary pow call", [], "pow(%s, 2)" % lit(neg), expect_close(neg ** 2.0, rtol=1e-5))
    S.add("binary 0^0 and 0^-1", [], "(%s ^ %s)" % (lit([0.0, 0.0, 0.0]), lit([0.0, -1.0, 2.0])),
          expect_close([1.0, np.inf, 0.0]))
    S.add("binary literal precedence", [], "-2 ^ 2", expect_exact(-4.0))
    S.add("unary minus of a constant expression", [], "-(2 * 3)", expect_exact(-6.0))
    S.add("unary minus of a literal", [], "-3 + 1", expect_exact(-2.0))
    S.add("binary ^ right assoc", [], "2 ^ 3 ^ 2", expect_exact(512.0))
    S.add("binary precedence mix", [], "1 + 2 * 3 - 8 / 4 / 2", expect_exact(6.0))
    S.add("binary division by zero", [], "%s / 0" % lit([1.0, -1.0, 0.0]),
          expect_close([np.inf, -np.inf, np.nan]))
    # dtype promotion: f32 with f64 computes in f64, i32 with f64 too
    S.add("binary f32 + f64 promotes to f64", [], "(%s + cast(%s, f64)) - 1" % (lit([1.0]), lit([2.0 ** -30])),
          expect_close([2.0 ** -30], rtol=1e-6))
    S.add("binary i32 + f64 promotes to f64", [], "(cast(%s, i32) + cast(%s, f64)) - 16777216" % (lit([16777216]), lit([1.0])),
          expect_exact([1.0]))
    S.add("binary f64 * i64", [], "cast(%s, f64) * cast(%s, i64)" % (lit([0.5, 1.5]), lit([3, -2])),
          expect_exact([1.5, -3.0]))
    S.add("binary negative ^ fraction is nan", [], "(%s ^ 0.5)" % lit([-4.0, 4.0]), expect_close([np.nan, 2.0]))
    # the named forms of the operators
    a = f32(rng.standard_normal((2, 3)))
    b = f32(rng.standard_normal((3,)))
    for op, fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide)):
        S.add("binary %s call" % op, [], "%s(%s, %s)" % (op, lit(a), lit(b)), expect_close(fn(a, b), rtol=1e-5))
    # NaN propagation of maximum/minimum (NumPy: nan wins from either side)
    nan = "(%s / 0)" % lit([0.0, 0.0, 1.0])    # [nan, nan, inf]
    S.add("binary maximum nan left", [], "maximum(%s, %s)" % (nan, lit([1.0, -1.0, 2.0])),
          expect_close([np.nan, np.nan, np.inf]))
    S.add("binary maximum nan right", [], "maximum(%s, %s)" % (lit([1.0, -1.0, 2.0]), nan),
          expect_close([np.nan, np.nan, np.inf]))
    S.add("binary minimum nan right", [], "minimum(%s, %s)" % (lit([1.0, -1.0, 2.0]), nan),
          expect_close([np.nan, np.nan, 2.0]))
    # mixed dtypes: a weak scalar takes the tensor's dtype
    x = f32(rng.standard_normal((4,)))
    S.add("binary f64 tensor + scalar", [], "(%s + 0.5) - %s" % (lit(x, "f64"), lit(f32(x + 0.5), "f64")),
          expect_f64(f32(x + 0.5), x + 0.5))


def compare(S, rng):
    a = f32(np.round(rng.standard_normal((3, 4)), 1))
    b = a.copy()
    b[0, :2] += 0.5
    b[2, 3] -= 1
    ops = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
           "==": np.equal, "!=": np.not_equal}
    for op, fn in ops.items():
        S.add("compare %s f32" % op, [], "(%s %s %s)" % (lit(a), op, lit(b)), expect_exact(fn(a, b)))
        S.add("compare %s broadcast" % op, [], "(%s %s %s)" % (lit(a), op, lit(b[1])), expect_exact(fn(a, b[1])))
        S.add("compare %s f64 vs scalar" % op, [], "(%s %s %s)" % (lit(a, "f64"), op, lit(a[1, 1])),
              expect_exact(fn(a, a[1, 1])))
    ia = np.array([[-3, 0, 7], [2, 2, -1]])
    ib = np.array([2, 0, -1])
    for op, fn in ops.items():
        S.add("compare %s i32" % op, [], "(%s %s %s)" % (lit(ia, "i32"), op, lit(ib, "i32")), expect_exact(fn(ia, ib)))
    S.add("compare i64 vs scalar", [], "(%s > 1)" % lit(ia, "i64"), expect_exact(ia > 1))
    S.add("compare bool == bool", [], "(%s == %s)" % (lit([True, False, True], "bool"), lit([True, True, False], "bool")),
          expect_exact([True, False, False]))
    S.add("compare lt call", [], "lt(%s, %s)" % (lit(a), lit(b)), expect_exact(a < b))
    S.add("compare nan", [], "((%s / 0) == (%s / 0))" % (lit([0.0]), lit([0.0])), expect_exact([False]))
    S.add("compare nan !=", [], "((%s / 0) != 1)" % lit([0.0]), expect_exact([True]))
    # logic
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    S.add("logic and", [], "(%s and %s)" % (lit(p, "bool"), lit(q, "bool")), expect_exact(p & q))
    S.add("logic or", [], "(%s or %s)" % (lit(p, "bool"), lit(q, "bool")), expect_exact(p | q))
    S.add("logic not", [], "(not %s)" % lit(p, "bool"), expect_exact(~p))
    S.add("logic !", [], "!%s" % lit(q, "bool"), expect_exact(~q))
    S.add("logic of comparisons", [], "(%s > 0 and %s < 1)" % (lit(a), lit(a)), expect_exact((a > 0) & (a < 1)))
    S.add("logic broadcast", [], "(%s or %s)" % (lit(p.reshape(4, 1), "bool"), lit(q, "bool")),
          expect_exact(p.reshape(4, 1) | q))


def where_ops(S, rng):
    a = f32(rng.standard_normal((3, 4)))
    b = f32(rng.standard_normal((3, 4)))
    S.add("where same shapes", [], "where(%s > 0, %s, %s)" % (lit(a), lit(a), lit(b)),
          expect_exact(np.where(a > 0, a, b)))
    S.add("where scalar branch", [], "where(%s > 0, %s, 0)" % (lit(a), lit(a)), expect_exact(np.where(a > 0, a, 0)))
    S.add("where scalar both", [], "where(%s > 0, 1, -1)" % lit(a), expect_exact(np.where(a > 0, 1.0, -1.0)))
    c = rng.standard_normal((3, 1)) > 0
    x = f32(rng.standard_normal((1, 4)))
    y = f32(rng.standard_normal((4,)))
    S.add("where broadcast all three", [], "where(%s, %s, %s)" % (lit(c, "bool"), lit(x), lit(y)),
          expect_exact(np.where(c, x, y)))
    S.add("where f64", [], "where(%s, %s, %s) - %s" % (lit(c, "bool"), lit(x, "f64"), lit(y, "f64"),
                                                        lit(np.where(c, x, y), "f64")),
          expect_exact(np.zeros((3, 4))))
    S.add("where i32", [], "where(%s, %s, %s)" % (lit([True, False, True], "bool"), lit([1, 2, 3], "i32"),
                                                  lit([-1, -2, -3], "i32")), expect_exact([1, -2, 3]))
    S.add("where bool cond literal", [], "where(%s, %s, %s)" % (lit([[True], [False]], "bool"), lit([1.0, 2.0]),
                                                                 lit([[5.0], [6.0]])),
          expect_exact([[1.0, 2.0], [6.0, 6.0]]))


def clip_ops(S, rng):
    a = f32(rng.standard_normal((3, 4)) * 2)
    lo = f32(rng.standard_normal((4,)) - 1)
    S.add("clip scalars", [], "clip(%s, -0.5, 1)" % lit(a), expect_exact(np.clip(a, -0.5, 1)))
    S.add("clip tensor bounds", [], "clip(%s, %s, 1.5)" % (lit(a), lit(lo)), expect_exact(np.clip(a, lo, 1.5)))
    S.add("clip high only", [], "clip(%s, high=0)" % lit(a), expect_exact(np.clip(a, None, 0)))
    S.add("clip low only", [], "clip(%s, low=0)" % lit(a), expect_exact(np.clip(a, 0, None)))
    S.add("clip low above high", [], "clip(%s, 1, -1)" % lit(a), expect_exact(np.clip(a, 1, -1)))
    S.add("clip nan", [], "clip(%s / %s, 0, 1)" % (lit([0.0, -1.0, 2.0]), lit([0.0, 1.0, 1.0])),
          expect_exact([np.nan, 0.0, 1.0]))
    i = rng.integers(-20, 20, (5,))
    S.add("clip i32", [], "clip(%s, -3, 4)" % lit(i, "i32"), expect_exact(np.clip(i, -3, 4)))
    S.add("clip f64", [], "clip(%s, -0.25, 0.25) - %s" % (lit(a, "f64"), lit(np.clip(np.float64(a), -0.25, 0.25), "f64")),
          expect_exact(np.zeros((3, 4))))


def integers(S, rng):
    a = rng.integers(-20, 20, (3, 4))
    b = rng.integers(1, 9, (4,)) * np.where(rng.random(4) < 0.5, -1, 1)
    for dt in ("i32", "i64"):
        for op, fn in (("+", np.add), ("-", np.subtract), ("*", np.multiply)):
            S.add("int %s %s" % (dt, op), [], "(%s %s %s)" % (lit(a, dt), op, lit(b, dt)), expect_exact(fn(a, b)))
        S.add("int %s maximum" % dt, [], "maximum(%s, %s)" % (lit(a, dt), lit(b, dt)), expect_exact(np.maximum(a, b)))
        S.add("int %s minimum" % dt, [], "minimum(%s, %s)" % (lit(a, dt), lit(b, dt)), expect_exact(np.minimum(a, b)))
        S.add("int %s / is true division" % dt, [], "(%s / %s)" % (lit(a, dt), lit(b, dt)),
              expect_close(a / b, rtol=1e-5))
        S.add("int %s + weak int scalar" % dt, [], "(%s + 3)" % lit(a, dt), expect_exact(a + 3))
        S.add("int %s * 2 - 1" % dt, [], "(%s * 2 - 1)" % lit(a, dt), expect_exact(a * 2 - 1))
        S.add("int %s ^ 2" % dt, [], "(%s ^ 2)" % lit(a, dt), expect_close(a.astype(float) ** 2))
        S.add("int %s sum" % dt, [], "sum(%s)" % lit(a, dt), expect_exact(a.sum()))
        S.add("int %s sum axis 0" % dt, [], "sum(%s, axis=0)" % lit(a, dt), expect_exact(a.sum(0)))
        S.add("int %s max all negative" % dt, [], "max(%s)" % lit(-np.abs(a) - 1, dt), expect_exact((-np.abs(a) - 1).max()))
        S.add("int %s max axis 1" % dt, [], "max(%s, axis=1)" % lit(a, dt), expect_exact(a.max(1)))
        S.add("int %s min all positive" % dt, [], "min(%s)" % lit(np.abs(a) + 1, dt), expect_exact((np.abs(a) + 1).min()))
        S.add("int %s min axis 0" % dt, [], "min(%s, axis=0)" % lit(a, dt), expect_exact(a.min(0)))
        S.add("int %s prod" % dt, [], "prod(%s, axis=1)" % lit(a[:, :3] % 5 + 1, dt),
              expect_exact((a[:, :3] % 5 + 1).prod(1)))
        S.add("int %s argmax" % dt, [], "argmax(%s, axis=1)" % lit(a, dt), expect_exact(a.argmax(1)))
        S.add("int %s argmin" % dt, [], "argmin(%s, axis=0)" % lit(a, dt), expect_exact(a.argmin(0)))
        S.add("int %s mean" % dt, [], "mean(%s, axis=1)" % lit(a, dt), expect_close(a.mean(1), rtol=1e-6))
        S.add("int %s where" % dt, [], "where(%s > 0, %s, 0)" % (lit(a, dt), lit(a, dt)), expect_exact(np.where(a > 0, a, 0)))
        S.add("int %s matmul" % dt, [], "(%s @ %s)" % (lit(a, dt), lit(a.T, dt)), expect_exact(a @ a.T))
        S.add("int %s slice" % dt, [], "%s[::-1, 1::2]" % lit(a, dt), expect_exact(a[::-1, 1::2]))
    # mixing an int tensor with a float scalar must not truncate the scalar
    S.add("int i32 * 0.5", [], "(%s * 0.5)" % lit([1, 2, 3], "i32"), expect_close([0.5, 1.0, 1.5]))
    S.add("int i32 + f32 tensor", [], "(%s + %s)" % (lit([1, 2, 3], "i32"), lit([0.25, 0.5, 0.75])),
          expect_close([1.25, 2.5, 3.75]))
    # i64 beyond the f32 and i32 ranges (arange builds exact integers in f64)
    big = np.arange(3000000000, 3000000005, dtype=np.int64)
    S.add("int i64 large values", [], "arange(3000000000, 3000000005, dtype=i64) * 3 - 1", expect_exact(big * 3 - 1))
    S.add("int i64 large sum", [], "sum(arange(3000000000, 3000000005, dtype=i64))", expect_exact(big.sum()))
    S.add("int i64 large max", [], "max(arange(3000000000, 3000000005, dtype=i64))", expect_exact(big.max()))
    S.add("int i32 exact above 2^24", [], "arange(16777215, 16777219, dtype=i32) + 1",
          expect_exact(np.arange(16777215, 16777219) + 1))


DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.bool_}


def casts(S, rng):
    v = np.array([-2.7, -1.0, -0.5, 0.0, 0.5, 1.5, 3.0, 100.25])
    for src, st in DTYPES.items():
        x = v.astype(np.float32).astype(st)
        for dst, dt in DTYPES.items():
            want = x.astype(dt)
            S.add("cast %s -> %s" % (src, dst), [], "cast(cast(%s, %s), %s)" % (lit(f32(v)), src, dst),
                  expect_exact(want if dst == "bool" else want.astype(np.float64)))
    # f64 -> f32 rounds to nearest
    v3 = f32([1.0, 2.0, -10.0, 0.1])
    S.add("cast f64 -> f32 rounds to nearest", [], "cast(cast(cast(%s, f64) / 3, f32), f64) - %s"
          % (lit(v3), lit(f32(v3 / 3), "f64")), expect_exact(np.zeros(4)))
    S.add("cast f32 -> f64 keeps the value", [], "(cast(%s, f64) * 10 - 1) * 1e9" % lit([0.1]),
          expect_close([14.901161193847656], rtol=1e-5))
    S.add("cast keyword dtype", [], "cast(%s, dtype=i32)" % lit([1.9, -1.9]), expect_exact([1, -1]))
    S.add("cast scalar", [], "cast(2.75, i64)", expect_exact(2))
    S.add("cast bool sum", [], "sum(cast(%s > 0, i32))" % lit([1.0, -1.0, 2.0, 0.0]), expect_exact(2))


def _axes_str(ax):
    return str(list(ax)) if isinstance(ax, tuple) else str(ax)


REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean}


def reductions(S, rng):
    cases = [((3, 5), [None, 0, 1, -1, -2, (0, 1)]),
             ((2, 3, 4), [None, 0, 1, 2, -1, (0, 2), (-1, -3), (1, 2), (0, 1, 2)]),
             ((1, 7), [None, 0, 1]),
             ((5,), [None, 0, -1]),
             ((), [None])]
    for op, fn in REDUCE.items():
        for shape, axes in cases:
            x = f32(rng.uniform(0.6, 1.4, shape) * np.where(rng.random(shape) < 0.3, -1, 1))
            sh = "x".join(map(str, shape)) or "scalar"
            for ax in axes:
                for keep in (False, True):
                    if keep and ax is None and shape == ():
                        continue
                    kw = "" if ax is None else ", axis=%s" % _axes_str(ax)
                    if keep:
                        kw += ", keepdims=true"
                    want = fn(x, axis=ax, keepdims=keep)
                    S.add("reduce %s f32 %s axis=%s%s" % (op, sh, _axes_str(ax), " keepdims" if keep else ""), [],
                          "%s(%s%s)" % (op, lit(x, "f32"), kw), expect_close(want, rtol=1e-5, atol=1e-6))
        x = f32(rng.uniform(0.5, 1.5, (2, 3, 4)))
        for ax in (None, 1, (0, 2)):
            want = fn(x, axis=ax)
            kw = "" if ax is None else ", axis=%s" % _axes_str(ax)
            S.add("reduce %s f64 2x3x4 axis=%s" % (op, _axes_str(ax)), [],
                  "%s(%s%s) - %s" % (op, lit(x, "f64"), kw, lit(f32(want), "f64")),
                  expect_f64(f32(want), want))
    # argmax/argmin: one axis (or none: the flattened index); ties pick the first
    for op, fn in (("argmax", np.argmax), ("argmin", np.argmin)):
        x = f32(np.round(rng.standard_normal((3, 4, 5)), 0))     # many ties
        S.add("reduce %s no axis" % op, [], "%s(%s)" % (op, lit(x)), expect_exact(fn(x)))
        for ax in (0, 1, 2, -1):
            S.add("reduce %s axis=%d (ties)" % (op, ax), [], "%s(%s, axis=%d)" % (op, lit(x), ax),
                  expect_exact(fn(x, axis=ax)))
        S.add("reduce %s keepdims" % op, [], "%s(%s, axis=1, keepdims=true)" % (op, lit(x)),
              expect_exact(fn(x, axis=1, keepdims=True)))
        S.add("reduce %s f64" % op, [], "%s(%s, axis=0)" % (op, lit(x[0], "f64")), expect_exact(fn(x[0], axis=0)))
        S.add("reduce %s 1-D" % op, [], "%s(%s)" % (op, lit(x[0, 0])), expect_exact(fn(x[0, 0])))
    x4 = f32(rng.standard_normal((2, 1, 3, 2)))
    for ax in ((1, 3), (0, 2), (-1, -2, -4)):
        S.add("reduce sum 4-D axis=%s" % list(ax), [], "sum(%s, axis=%s)" % (lit(x4), list(ax)),
              expect_close(x4.sum(ax), rtol=1e-5, atol=1e-6))
        S.add("reduce max 4-D axis=%s keepdims" % list(ax), [], "max(%s, axis=%s, keepdims=true)" % (lit(x4), list(ax)),
              expect_exact(x4.max(ax, keepdims=True)))
    # a short innermost reduced axis under longer ones (partial sums per
    # position along it, cgen.c): a bias gradient's sum over N, H, W
    x5 = f32(rng.standard_normal((5, 3, 6, 7)))
    for ax in ((0, 2, 3), (2, 3), (0, 3)):
        S.add("reduce sum short inner axis=%s" % list(ax), [], "sum(%s, axis=%s)" % (lit(x5), list(ax)),
              expect_close(x5.sum(ax), rtol=1e-5, atol=1e-6))
    S.add("reduce mean short inner axis=[0, 2, 3]", [], "mean(%s, axis=[0, 2, 3])" % lit(x5),
          expect_close(x5.mean((0, 2, 3)), rtol=1e-5, atol=1e-6))
    S.add("reduce sum of bools counts", [], "sum(%s > 0)" % lit(x4), expect_exact((x4 > 0).sum()))
    S.add("reduce mean of bools", [], "mean(%s > 0)" % lit(x4), expect_close((x4 > 0).mean(), rtol=1e-6))
    S.add("reduce argmax with nan (NumPy: the first nan)", [], "argmax(%s / %s)" % (lit([1.0, 0.0, 5.0, 0.0]), lit([1.0, 0.0, 1.0, 0.0])),
          expect_exact(1))
    S.add("reduce max with -inf", [], "max(%s / 0)" % lit([-1.0, -2.0]), expect_close(-np.inf))
    S.add("reduce max nan propagates", [], "max(%s / 0)" % lit([1.0, 0.0, -1.0]), expect_close(np.nan))
    S.add("reduce min nan propagates", [], "min(%s / %s)" % (lit([1.0, 0.0, -1.0]), lit([1.0, 0.0, 1.0])),
          expect_close(np.nan))
    S.add("reduce sum 1000 f32", [], "sum(arange(1000))", expect_close(499500.0, rtol=1e-6))
    S.add("reduce sum 100000 f64", [], "sum(arange(100000, dtype=f64))", expect_exact(4999950000.0))
    S.add("reduce mean keyword axis list", [], "mean(%s, axis=[0, 1])" % lit(np.ones((2, 3, 2))),
          expect_close([1.0, 1.0]))


def rows(S, rng):
    for shape, axes in (((7,), [0, -1]), ((3, 5), [0, 1, -1]), ((2, 3, 4), [0, 1, 2, -2]), ((1, 1), [0, 1])):
        x = f32(rng.standard_normal(shape) * 3)
        sh = "x".join(map(str, shape))
        for ax in axes:
            sm = np.exp(log_softmax(x, ax))
            S.add("row softmax %s axis=%d" % (sh, ax), [], "softmax(%s, axis=%d)" % (lit(x), ax),
                  expect_close(sm, rtol=1e-5, atol=1e-7))
            S.add("row log_softmax %s axis=%d" % (sh, ax), [], "log_softmax(%s, axis=%d)" % (lit(x), ax),
                  expect_close(log_softmax(x, ax), rtol=1e-5, atol=1e-6))
            S.add("row logsumexp %s axis=%d" % (sh, ax), [], "logsumexp(%s, axis=%d)" % (lit(x), ax),
                  expect_close(logsumexp(x, ax), rtol=1e-5, atol=1e-6))
            S.add("row logsumexp %s axis=%d keepdims" % (sh, ax), [],
                  "logsumexp(%s, axis=%d, keepdims=true)" % (lit(x), ax),
                  expect_close(logsumexp(x, ax, True), rtol=1e-5, atol=1e-6))
        S.add("row softmax %s default axis (last)" % sh, [], "softmax(%s)" % lit(x),
              expect_close(np.exp(log_softmax(x, -1)), rtol=1e-5, atol=1e-7))
        S.add("row logsumexp %s positional axis" % sh, [], "logsumexp(%s, 0)" % lit(x),
              expect_close(logsumexp(x, 0), rtol=1e-5, atol=1e-6))
    x = f32(rng.standard_normal((3, 4)) * 3)
    for op, want in (("softmax", np.exp(log_softmax(x, 1))), ("log_softmax", log_softmax(x, 1)),
                     ("logsumexp", logsumexp(x, 1))):
        S.add("row %s f64" % op, [], "%s(%s, axis=1) - %s" % (op, lit(x, "f64"), lit(f32(want), "f64")),
              expect_f64(f32(want), want))
        w0 = {"softmax": np.exp(log_softmax(x, 0)), "log_softmax": log_softmax(x, 0), "logsumexp": logsumexp(x, 0)}[op]
        S.add("row %s f64 axis 0" % op, [], "%s(%s, axis=0) - %s" % (op, lit(x, "f64"), lit(f32(w0), "f64")),
              expect_f64(f32(w0), w0))
    big = np.array([[1000.0, 0.0, -1000.0], [500.0, 500.0, 499.0], [-800.0, -800.0, -801.0]])
    S.add("row softmax large logits", [], "softmax(%s)" % lit(big), expect_close(np.exp(log_softmax(big, 1)), atol=1e-30))
    S.add("row log_softmax large logits", [], "log_softmax(%s)" % lit(big), expect_close(log_softmax(big, 1)))
    S.add("row logsumexp large logits", [], "logsumexp(%s, axis=1)" % lit(big), expect_close(logsumexp(big, 1)))
    S.add("row softmax large logits f64", [], "softmax(%s)" % lit(big, "f64"),
          expect_close(np.exp(log_softmax(big, 1)), atol=1e-300))
    # softmax_cross_entropy(logits, labels) = -log_softmax(logits)[label], per row
    for shape in ((4, 5), (1, 3), (6, 1), (2, 3, 4)):
        x = f32(rng.standard_normal(shape) * 2)
        lab = rng.integers(0, shape[-1], shape[:-1])
        want = -np.take_along_axis(log_softmax(x, -1), lab[..., None], -1)[..., 0]
        sh = "x".join(map(str, shape))
        S.add("row sce %s" % sh, [], "softmax_cross_entropy(%s, %s)" % (lit(x), lit(lab, "i32")),
              expect_close(want, rtol=1e-5, atol=1e-6))
        S.add("row sce %s i64 labels" % sh, [], "softmax_cross_entropy(%s, %s)" % (lit(x), lit(lab, "i64")),
              expect_close(want, rtol=1e-5, atol=1e-6))
        S.add("row sce %s f64" % sh, [], "softmax_cross_entropy(%s, %s) - %s" % (lit(x, "f64"), lit(lab, "i32"),
                                                                              lit(f32(want), "f64")),
              expect_f64(f32(want), want))
    lab = np.array([0, 2, 1])
    S.add("row sce large logits", [], "softmax_cross_entropy(%s, %s)" % (lit(big), lit(lab, "i32")),
          expect_close(-log_softmax(big, 1)[np.arange(3), lab], rtol=1e-5))
    x = f32(rng.standard_normal((5, 3)))
    lab = rng.integers(0, 3, (5,))
    S.add("row sce mean", [], "mean(softmax_cross_entropy(%s, %s))" % (lit(x), lit(lab, "i32")),
          expect_close(np.mean(-log_softmax(x, 1)[np.arange(5), lab]), rtol=1e-5))


def matmuls(S, rng):
    cases = [((3, 5), (5, 4)), ((1, 5), (5, 1)), ((1, 1), (1, 1)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)),
             ((3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 2)), ((2, 1, 3, 4), (1, 5, 4, 2)), ((5,), (5, 3)),
             ((3, 5), (5,)), ((5,), (5,)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((7, 9), (9, 6)),
             ((1, 2, 3), (3, 1))]
    for sa, sb in cases:
        a = f32(rng.standard_normal(sa))
        b = f32(rng.standard_normal(sb))
        tag = "%s @ %s" % ("x".join(map(str, sa)), "x".join(map(str, sb)))
        want = np.matmul(a, b)
        S.add("matmul f32 " + tag, [], "(%s @ %s)" % (lit(a), lit(b)), expect_close(want, rtol=1e-5, atol=1e-5))
        S.add("matmul f64 " + tag, [], "(%s @ %s) - %s" % (lit(a, "f64"), lit(b, "f64"), lit(f32(want), "f64")),
              expect_f64(f32(want), want, rtol=1e-11, atol=1e-13))
    a = f32(rng.standard_normal((3, 4)))
    b = f32(rng.standard_normal((4, 2)))
    S.add("matmul call", [], "matmul(%s, %s)" % (lit(a), lit(b)), expect_close(a @ b, rtol=1e-5, atol=1e-5))
    S.add("matmul chain", [], "(%s @ %s @ %s)" % (lit(a), lit(b), lit(b.T)), expect_close(a @ b @ b.T, rtol=1e-5, atol=1e-5))
    S.add("matmul of transposes", [], "(transpose(%s) @ transpose(%s))" % (lit(b), lit(a)),
          expect_close(b.T @ a.T, rtol=1e-5, atol=1e-5))
    S.add("matmul of a slice", [], "(%s[:, ::2] @ %s[::2, :])" % (lit(a), lit(b)),
          expect_close(a[:, ::2] @ b[::2, :], rtol=1e-5, atol=1e-5))
    S.add("matmul empty inner dim", [], "(zeros([2, 0]) @ zeros([0, 3]))", expect_exact(np.zeros((2, 3))))


def movement(S, rng):
    x = f32(rng.standard_normal((2, 3, 4)))
    # transpose
    S.add("transpose default 2-D", [], "transpose(%s)" % lit(x[0]), expect_exact(x[0].T))
    S.add("transpose default 3-D", [], "transpose(%s)" % lit(x), expect_exact(np.transpose(x)))
    for p in ((0, 1, 2), (1, 0, 2), (2, 0, 1), (1, 2, 0), (0, 2, 1)):
        S.add("transpose axes %s" % (p,), [], "transpose(%s, %s)" % (lit(x), list(p)), expect_exact(np.transpose(x, p)))
    x4 = f32(rng.standard_normal((2, 1, 3, 2)))
    S.add("transpose 4-D", [], "transpose(%s, [3, 1, 0, 2])" % lit(x4), expect_exact(np.transpose(x4, (3, 1, 0, 2))))
    S.add("transpose 4-D default", [], "transpose(%s)" % lit(x4), expect_exact(np.transpose(x4)))
    S.add("softmax 4-D axis 2", [], "softmax(%s, axis=2)" % lit(x4), expect_close(np.exp(log_softmax(x4, 2)), rtol=1e-5))
    S.add("transpose keyword axes", [], "transpose(%s, axes=[2, 1, 0])" % lit(x), expect_exact(np.transpose(x, (2, 1, 0))))
    S.add("transpose 1-D", [], "transpose(%s)" % lit(x[0, 0]), expect_exact(x[0, 0]))
    S.add("transpose then add", [], "(transpose(%s) + %s)" % (lit(x[0]), lit(x[1].T)), expect_exact(x[0].T + x[1].T))
    # reshape
    for s in ([-1], [4, -1], [-1, 4], [4, -1, 3], [2, 12], [24, 1], [1, 2, 1, 12], [3, 2, -1]):
        S.add("reshape %s" % s, [], "reshape(%s, %s)" % (lit(x), s), expect_exact(x.reshape(s)))
    S.add("reshape scalar", [], "reshape(3.5, [1, 1])", expect_exact([[3.5]]))
    S.add("reshape to scalar", [], "reshape(%s, [])" % lit([[2.5]]), expect_exact(2.5))
    S.add("reshape of transpose", [], "reshape(transpose(%s), [-1])" % lit(x[0]), expect_exact(x[0].T.reshape(-1)))
    S.add("reshape keyword shape", [], "reshape(%s, shape=[6, -1])" % lit(x), expect_exact(x.reshape(6, -1)))
    S.add("flatten", [], "flatten(%s)" % lit(x), expect_exact(x.reshape(2, -1)))
    # concat / stack
    a = f32(rng.standard_normal((2, 3)))
    b = f32(rng.standard_normal((2, 1)))
    c = f32(rng.standard_normal((1, 3)))
    S.add("concat axis 0", [], "concat([%s, %s])" % (lit(a), lit(c)), expect_exact(np.concatenate([a, c])))
    S.add("concat axis 1", [], "concat([%s, %s, %s], axis=1)" % (lit(a), lit(b), lit(a)),
          expect_exact(np.concatenate([a, b, a], 1)))
    S.add("concat axis -1", [], "concat([%s, %s], axis=-1)" % (lit(b), lit(a)), expect_exact(np.concatenate([b, a], -1)))
    S.add("concat axis -2", [], "concat([%s, %s], axis=-2)" % (lit(c), lit(a)), expect_exact(np.concatenate([c, a], -2)))
    S.add("concat 3-D axis 2", [], "concat([%s, %s], axis=2)" % (lit(x), lit(x[:, :, :1])),
          expect_exact(np.concatenate([x, x[:, :, :1]], 2)))
    S.add("concat 3-D axis 1", [], "concat([%s, %s], axis=1)" % (lit(x), lit(x[:, :2])),
          expect_exact(np.concatenate([x, x[:, :2]], 1)))
    S.add("concat one tensor", [], "concat([%s])" % lit(a), expect_exact(a))
    S.add("concat 1-D", [], "concat([%s, %s, %s])" % (lit([1.0]), lit([2.0, 3.0]), lit([4.0])), expect_exact([1.0, 2, 3, 4]))
    S.add("concat f64", [], "concat([%s, %s], axis=1) - %s" % (lit(a, "f64"), lit(b, "f64"),
                                                              lit(np.concatenate([a, b], 1), "f64")),
          expect_exact(np.zeros((2, 4))))
    S.add("concat i32", [], "concat([%s, %s])" % (lit([1, 2], "i32"), lit([3], "i32")), expect_exact([1, 2, 3]))
    S.add("concat with an empty part", [], "concat([zeros([0, 3]), %s])" % lit(a), expect_exact(a))
    for ax in (0, 1, 2, -1, -3):
        S.add("stack axis %d" % ax, [], "stack([%s, %s, %s], axis=%d)" % (lit(a), lit(-a), lit(2 * a), ax),
              expect_exact(np.stack([a, -a, 2 * a], ax)))
    S.add("stack scalars", [], "stack([1, 2, 3.5])", expect_exact([1.0, 2.0, 3.5]))
    # lists whose elements are computed (not constant) tensors
    va, vb = "lst_a", "lst_b"
    setup = ["%s = %s * 1" % (va, lit(a)), "%s = %s * 1" % (vb, lit(a[0]))]
    S.add("list literal of computed 1-D tensors", setup, "[%s, %s * 2]" % (vb, vb), expect_exact(np.stack([a[0], a[0] * 2])))
    S.add("list literal of computed scalars", [], "[sum(%s), max(%s), 3]" % (lit(a), lit(a)),
          expect_close([a.sum(), a.max(), 3.0], rtol=1e-5))
    S.add("stack computed 1-D", setup, "stack([%s, -%s], axis=1)" % (vb, vb), expect_exact(np.stack([a[0], -a[0]], 1)))
    S.add("stack computed scalars", setup, "stack([min(%s), max(%s)])" % (va, va), expect_exact([a.min(), a.max()]))
    S.add("concat computed 1-D", setup, "concat([%s, %s * 2])" % (vb, vb), expect_exact(np.concatenate([a[0], a[0] * 2])))
    S.add("concat computed 2-D", setup, "concat([%s, %s * 2], axis=1)" % (va, va),
          expect_exact(np.concatenate([a, a * 2], 1)))
    S.add("stack computed 2-D axis 2", setup, "stack([%s, exp(%s)], axis=2)" % (va, va),
          expect_close(np.stack([a, np.exp(a)], 2), rtol=1e-5))
    S.add("stack of a tensor's rows", [], "stack(%s, axis=1)" % lit(a), expect_exact(np.stack(list(a), 1)))
    # broadcast_to
    for src, dst in (((3,), (2, 3)), ((3, 1), (2, 3, 4)), ((), (2, 2)), ((1, 1), (1, 5)), ((1, 4), (3, 4)),
                     ((2, 1, 3), (2, 4, 3))):
        v = f32(rng.standard_normal(src))
        S.add("broadcast_to %s -> %s" % (src, dst), [], "broadcast_to(%s, %s)" % (lit(v), list(dst)),
              expect_exact(np.broadcast_to(v, dst)))
    S.add("broadcast_to then reduce", [], "sum(broadcast_to(%s, [4, 3]), axis=0)" % lit([1.0, 2.0, 3.0]),
          expect_exact([4.0, 8.0, 12.0]))


SLICES = [
    "0", "-1", "1:3", "-3:", ":-1", "::2", "::-1", "::-2", "5:1:-1", "-1:-5:-2", "1:100", "-100:2",
    "100:-100:-3", "3::-1", ":3:-1",
    "0, 1:4", "-1, ::-1", ":, 0", ":, -1", ":, 1:-1:2", "::2, ::-3", "1:, 4:0:-2", "-2, -2",
    "1:2, 2:3", "::-1, ::-1", "2:4, -1:-6:-1", ":, :, 1", "1, 2, 3", ":, 0:1, ::2", "-1, :, ::-1",
]


def slicing(S, rng):
    x2 = f32(rng.standard_normal((5, 6)))
    x3 = f32(rng.standard_normal((3, 4, 5)))
    v = f32(rng.standard_normal((7,)))
    for ix in SLICES:
        n = ix.count(",") + 1
        if n == 1:
            for name, x in (("1-D", v), ("2-D", x2)):
                S.add("slice %s x[%s]" % (name, ix), [], "%s[%s]" % (lit(x), ix), expect_exact(eval("x[%s]" % ix)))
        elif n == 2:
            S.add("slice 2-D x[%s]" % ix, [], "%s[%s]" % (lit(x2), ix), expect_exact(eval("x2[%s]" % ix)))
            S.add("slice 3-D x[%s]" % ix, [], "%s[%s]" % (lit(x3), ix), expect_exact(eval("x3[%s]" % ix)))
        else:
            S.add("slice 3-D x[%s]" % ix, [], "%s[%s]" % (lit(x3), ix), expect_exact(eval("x3[%s]" % ix)))
    # new axes (None, newaxis) anywhere among the entries, as NumPy places them
    for ix in ("None", ":, None", "None, 1", "1:3, None, ::-1", "None, -1, None", ":, :, None", "None, None, 2:4"):
        S.add("new axis 2-D x[%s]" % ix, [], "%s[%s]" % (lit(x2), ix), expect_exact(eval("x2[%s]" % ix)))
    S.add("new axis 3-D x[1, newaxis]", [], "%s[1, newaxis]" % lit(x3), expect_exact(x3[1, None]))
    S.add("new axis outer product", [], "%s[:, None] * %s[None, :]" % (lit(v), lit(v)),
          expect_close(v[:, None] * v[None, :], rtol=1e-5, atol=1e-6))
    S.add("slice f64", [], "%s[::-2, 1:]" % lit(x2, "f64"), expect_exact(x2[::-2, 1:]))
    S.add("slice of a slice", [], "%s[1:, ::-1][::2, 1:4]" % lit(x2), expect_exact(x2[1:, ::-1][::2, 1:4]))
    S.add("slice then arithmetic", [], "(%s[:, 1:] - %s[:, :-1])" % (lit(x2), lit(x2)),
          expect_close(x2[:, 1:] - x2[:, :-1], rtol=1e-5))
    S.add("slice of an expression", [], "(%s * 2)[-1]" % lit(x2), expect_exact(x2[-1] * 2))
    S.add("slice of a named tensor", ["sl_x = %s" % lit(x3)], "sl_x[1:, ::-1, -1]", expect_exact(x3[1:, ::-1, -1]))
    # empty results (NumPy allows them)
    S.add("slice empty 1-D x[2:1]", [], "%s[2:1]" % lit(v), expect_exact(v[2:1], shape=(0,)))
    S.add("slice empty shape x[:, 0:0]", [], "shape(%s[:, 0:0])" % lit(x2), expect_exact([5, 0]))
    S.add("slice empty value x[:, 0:0]", [], "%s[:, 0:0]" % lit(x2), expect_exact(x2[:, 0:0], shape=(5,)))
    S.add("slice empty then sum", [], "sum(%s[3:3, :], axis=0)" % lit(x2), expect_exact(np.zeros(6)))


def constructors(S, rng):
    S.add("zeros", [], "zeros([3, 2])", expect_exact(np.zeros((3, 2))))
    S.add("zeros i32", [], "zeros([2], dtype=i32)", expect_exact([0, 0]))
    S.add("zeros scalar shape", [], "zeros([])", expect_exact(0.0))
    S.add("ones f64", [], "ones([1, 3], dtype=f64)", expect_exact(np.ones((1, 3))))
    S.add("ones bool", [], "ones([2], dtype=bool)", expect_exact(np.array([True, True])))
    S.add("full", [], "full([2, 3], 7.5)", expect_exact(np.full((2, 3), 7.5)))
    S.add("full i64", [], "full([2], -3, dtype=i64)", expect_exact([-3, -3]))
    S.add("full keyword", [], "full(shape=[1, 2], value=0.25)", expect_exact([[0.25, 0.25]]))
    S.add("zeros empty shape", [], "shape(zeros([2, 0, 3]))", expect_exact([2, 0, 3]))
    S.add("empty list literal", [], "[]", expect_exact(np.zeros(0), shape=(0,)))
    S.add("empty list literal * 2", [], "[] * 2", expect_exact(np.zeros(0), shape=(0,)))
    S.add("large integer literals in full", [], "full([1], 16777217, dtype=i32)", expect_exact([16777217]))
    S.add("large integer literals in arange", [], "arange(16777215, 16777219, dtype=i32)",
          expect_exact(np.arange(16777215, 16777219)))
    S.add("large integer literal cast", [], "cast(16777217, i64)", expect_exact(16777217))
    for args, want in (("5", np.arange(5)), ("2, 9, 3", np.arange(2, 9, 3)), ("5, 0, -1", np.arange(5, 0, -1)),
                       ("-3, 3", np.arange(-3, 3)), ("0, 1, 0.25", np.arange(0, 1, 0.25)),
                       ("1, 2, 0.3", np.arange(1, 2, 0.3)), ("0.5, 4", np.arange(0.5, 4)),
                       ("1", np.arange(1)), ("3, 2.5, -0.5", np.arange(3, 2.5, -0.5))):
        S.add("arange(%s)" % args, [], "arange(%s)" % args, expect_close(want, rtol=1e-5, atol=1e-7))
    S.add("arange(0) empty", [], "shape(arange(0))", expect_exact([0]))
    S.add("arange dtype i32", [], "arange(-2, 3, dtype=i32)", expect_exact(np.arange(-2, 3)))
    S.add("arange dtype f64", [], "arange(0, 1, 0.125, dtype=f64)", expect_exact(np.arange(0, 1, 0.125)))
    S.add("arange keywords", [], "arange(start=1, stop=4)", expect_exact([1.0, 2.0, 3.0]))
    for args, want in (("0, 1, 5", np.linspace(0, 1, 5)), ("-1, 2, 7", np.linspace(-1, 2, 7)),
                       ("3, 3, 1", np.linspace(3, 3, 1)), ("1, 0, 3", np.linspace(1, 0, 3)),
                       ("0, 1", np.linspace(0, 1)), ("2, 4, num=2", np.linspace(2, 4, 2))):
        S.add("linspace(%s)" % args, [], "linspace(%s)" % args, expect_close(want, rtol=1e-5, atol=1e-7))
    S.add("linspace f64", [], "linspace(0, 1, 11, dtype=f64) - %s" % lit(f32(np.linspace(0, 1, 11)), "f64"),
          expect_f64(f32(np.linspace(0, 1, 11)), np.linspace(0, 1, 11)))
    S.add("linspace num 0", [], "shape(linspace(0, 1, 0))", expect_exact([0]))
    for args, want in (("3", np.eye(3)), ("2, 4", np.eye(2, 4)), ("4, 2", np.eye(4, 2)), ("1", np.eye(1))):
        S.add("eye(%s)" % args, [], "eye(%s)" % args, expect_exact(want))
    S.add("eye i32", [], "eye(3, dtype=i32) * 5", expect_exact(np.eye(3) * 5))
    S.add("eye f64", [], "eye(2, dtype=f64)", expect_exact(np.eye(2)))
    S.add("shape of a tensor", [], "shape(%s)" % lit(np.zeros((2, 3, 1)) + 1), expect_exact([2, 3, 1]))
    S.add("shape of a scalar", [], "shape(3)", expect_exact(np.zeros(0), shape=(0,)))
    S.add("dim", [], "dim(zeros([4, 7]), -1)", expect_exact(7))
    # empty dims flowing through ops
    S.add("empty exp", [], "shape(exp(zeros([2, 0])))", expect_exact([2, 0]))
    S.add("empty sum axis 0", [], "sum(zeros([0, 3]), axis=0)", expect_exact([0.0, 0, 0]))
    S.add("empty sum axis 1", [], "sum(zeros([2, 0]), axis=1)", expect_exact([0.0, 0]))
    S.add("empty prod", [], "prod(zeros([0]))", expect_exact(1.0))
    S.add("empty broadcast_to", [], "shape(broadcast_to(zeros([0]), [2, 0]))", expect_exact([2, 0]))
    S.add("empty reshape", [], "shape(reshape(zeros([0, 3]), [3, -1]))", expect_exact([3, 0]))


def exact_f64_lit(a):
    """An f64 array as a literal that holds each double exactly: each innermost
    list leads with cast(v, f64), so its bare numbers follow as doubles."""
    if a.ndim == 1:
        return "[cast(%r, f64), %s]" % (float(a[0]), ", ".join(repr(float(v)) for v in a[1:]))
    return "[%s]" % ", ".join(exact_f64_lit(r) for r in a)


def randoms(S, rng):
    n = 100000
    # Tolerances: 6 standard errors of the statistic, so a correct generator
    # fails with probability ~1e-9 per check (and the seeds are fixed anyway).
    se_mean = 6 / np.sqrt(n)
    se_std = 6 * np.sqrt(0.5 / n)
    z = "normal([%d], seed=7)" % n
    S.add("random normal mean", [], "mean(%s)" % z, expect_close(0.0, atol=se_mean))
    S.add("random normal std", [], "sqrt(mean(%s ^ 2) - mean(%s) ^ 2)" % (z, z), expect_close(1.0, atol=se_std))
    S.add("random normal within 1 sigma", [], "mean(cast(abs(%s) < 1, f32))" % z,
          expect_close(0.682689, atol=6 * np.sqrt(0.68 * 0.32 / n)))
    S.add("random normal within 2 sigma", [], "mean(cast(abs(%s) < 2, f32))" % z,
          expect_close(0.954500, atol=6 * np.sqrt(0.95 * 0.05 / n)))
    S.add("random normal skew ~ 0", [], "mean(%s ^ 3)" % z, expect_close(0.0, atol=6 * np.sqrt(15 / n)))
    S.add("random normal kurtosis ~ 3", [], "mean(%s ^ 4)" % z, expect_close(3.0, atol=6 * np.sqrt(96 / n)))
    S.add("random normal lag-1 correlation", [], "mean(%s[1:] * %s[:-1])" % (z, z), expect_close(0.0, atol=se_mean))
    S.add("random normal finite", [], "sum(cast(%s != %s, f32))" % (z, z), expect_exact(0.0))
    S.add("random normal mean/std args", [], "mean(normal([%d], mean=2, std=0.5, seed=8))" % n,
          expect_close(2.0, atol=0.5 * se_mean))
    S.add("random normal std arg", [], "sqrt(mean((normal([%d], 2, 0.5, seed=8) - 2) ^ 2))" % n,
          expect_close(0.5, atol=0.5 * se_std + 0.5 * se_mean))
    S.add("random normal f64", [], "mean(normal([%d], seed=9, dtype=f64))" % n, expect_close(0.0, atol=se_mean))
    S.add("random normal f64 std", [], "sqrt(mean(normal([%d], seed=9, dtype=f64) ^ 2))" % n,
          expect_close(1.0, atol=se_std + se_mean))
    S.add("random normal 2-D rows", [], "sqrt(mean(mean(normal([400, 250], seed=10), axis=1) ^ 2) * 250)",
          expect_close(1.0, atol=6 * np.sqrt(0.5 / 400)))
    S.add("random normal 2-D columns", [], "sqrt(mean(mean(normal([400, 250], seed=10), axis=0) ^ 2) * 400)",
          expect_close(1.0, atol=6 * np.sqrt(0.5 / 250)))
    u = "uniform([%d], seed=11)" % n
    S.add("random uniform mean", [], "mean(%s)" % u, expect_close(0.5, atol=se_mean / np.sqrt(12)))
    S.add("random uniform var", [], "mean((%s - 0.5) ^ 2)" % u, expect_close(1 / 12, atol=6 * np.sqrt(1 / 180 / n)))
    S.add("random uniform range", [], "min(%s)" % u, expect_close(0.0, atol=1e-3))
    S.add("random uniform range max", [], "max(%s)" % u, expect_close(1.0, atol=1e-3))
    S.add("random uniform in [0, 1)", [], "sum(cast(%s < 0 or %s >= 1, f32))" % (u, u), expect_exact(0.0))
    S.add("random uniform quartile", [], "mean(cast(%s < 0.25, f32))" % u,
          expect_close(0.25, atol=6 * np.sqrt(0.25 * 0.75 / n)))
    S.add("random uniform low/high", [], "mean(uniform([%d], low=-2, high=3, seed=12))" % n,
          expect_close(0.5, atol=5 * se_mean / np.sqrt(12)))
    S.add("random uniform low/high range", [], "stack([min(uniform([%d], -2, 3, seed=12)), max(uniform([%d], -2, 3, seed=12))])" % (n, n),
          expect_close([-2.0, 3.0], atol=5e-3))
    S.add("random uniform f64", [], "mean(uniform([%d], seed=13, dtype=f64))" % n,
          expect_close(0.5, atol=se_mean / np.sqrt(12)))
    S.add("random same seed same values", [], "max(abs(normal([1000], seed=5) - normal([1000], seed=5)))",
          expect_exact(0.0))
    S.add("random same seed same values uniform", [], "max(abs(uniform([3, 7], seed=5) - uniform([3, 7], seed=5)))",
          expect_exact(0.0))
    S.add("random different seeds differ", [], "mean(cast(normal([1000], seed=5) == normal([1000], seed=6), f32))",
          expect_close(0.0, atol=0.01))
    S.add("random unseeded calls differ", [], "mean(cast(normal([1000]) == normal([1000]), f32))",
          expect_close(0.0, atol=0.01))
    S.add("random normal and uniform streams independent", [],
          "mean((normal([%d], seed=14) * (uniform([%d], seed=15) - 0.5)))" % (n, n),
          expect_close(0.0, atol=se_mean / np.sqrt(12)))
    S.add("random small shape", [], "shape(normal([1, 3, 1], seed=1))", expect_exact([1, 3, 1]))
    # Bit for bit against NumPy's own Philox and polynomials (tests/philox_ref.py):
    # odd sizes past the vector widths, a 2-D shape (the row-major index), a seed
    # past 32 bits. The count of elements that differ must be 0.
    for name, fn, ref in (("normal", "normal", philox_ref.normal_f32), ("normal f64", "normal", philox_ref.normal_f64),
                          ("uniform", "uniform", philox_ref.uniform_f32),
                          ("uniform f64", "uniform", philox_ref.uniform_f64)):
        f64 = name.endswith("f64")
        for shape, seed in (([257], 7), ([3, 37], 244837814094590)):
            vals = ref(seed, np.arange(int(np.prod(shape)), dtype=np.uint64)).reshape(shape)
            text = exact_f64_lit(vals) if f64 else lit(vals)
            S.add("random %s bits as NumPy's Philox %s seed %d" % (name, shape, seed), [],
                  "sum(cast(%s(%s, seed=%d%s) != %s, f32))" % (fn, shape, seed, ", dtype=f64" if f64 else "", text),
                  expect_exact(0.0))
    # Printing 1000 values from two runs of the same seed must agree across
    # separate print statements (the values are a function of the seed only).
    S.add("random seeded value repeatable", ["rnd_a = sum(normal([50], seed=21))"],
          "rnd_a - sum(normal([50], seed=21))", expect_exact(0.0))


def large(S, rng):
    """Sizes past the kernels' tiling and threading grains. Inputs are made
    inside Kiln from arange (a literal this size would make a huge program),
    and the results, too big to print, are compared through checksums:
    sum(R * P) for a fixed pattern P (catches misplaced elements), sum(abs(R))."""
    def gen(shape, fn, c, dt="f32"):
        n = int(np.prod(shape))
        k = "%s(reshape(arange(%d, dtype=%s), %s) * %s)" % (fn, n, dt, list(shape), c)
        npdt = np.float32 if dt == "f32" else np.float64
        # a weak scalar takes the tensor's dtype: f32(c) for f32, the exact c for f64
        v = getattr(np, fn)(np.arange(n, dtype=npdt).reshape(shape) * npdt(float(c)))
        return k, v.astype(np.float64)

    def chk(name, expr, want, dt="f32", tol=1e-5):
        want = np.asarray(want, np.float64)
        pk, pv = gen(want.shape, "cos", "0.013", dt)
        ref = np.array([np.sum(want * pv), np.sum(np.abs(want))])
        scale = max(np.sum(np.abs(want)), 1e-30)

        def check(vals, ref=ref, scale=scale):
            got = np.array([float(vals[0]), float(vals[1])])
            # tol relative to sum(abs(R)), plus the printer's 6 significant digits
            if np.any(np.isnan(got)) or np.any(np.abs(got - ref) > tol * scale + 5e-6 * np.abs(ref)):
                return "checksums %s, expected %s (scale %.3g)" % (got, ref, scale)
            return None
        p = "(%s)" % expr
        S.add(name, [], ["sum(%s * %s)" % (p, pk) if want.ndim else "%s * %s" % (p, pk), "sum(abs(%s))" % p], check)

    for sa, sb in (((64, 65), (65, 63)), ((3, 33, 17), (3, 17, 29)), ((1, 130), (130, 7)), ((70, 1), (1, 70)),
                   ((5, 40, 40), (40, 3))):
        tag = "%s @ %s" % ("x".join(map(str, sa)), "x".join(map(str, sb)))
        for dt in ("f32", "f64"):
            ak, av = gen(sa, "sin", "0.37", dt)
            bk, bv = gen(sb, "cos", "0.11", dt)
            chk("large matmul %s %s" % (dt, tag), "%s @ %s" % (ak, bk), np.matmul(av, bv), dt,
                tol=1e-5 if dt == "f32" else 1e-9)
    # Past lower.c's GEMM threshold (m*n*k >= 4096): rt_gemm (its packed GEMM for f32).
    # (sa, sb, ta, tb): a's and b's stored shapes; ta/tb: transpose the last two axes.
    for sa, sb, ta, tb in (((96, 80), (80, 72), 0, 0),             # 2-D
                           ((4, 30, 40), (4, 40, 50), 0, 0),       # batched
                           ((6, 20, 48), (48, 40), 0, 0),          # broadcast weight: one product
                           ((30, 40), (5, 40, 24), 0, 0),          # broadcast left operand
                           ((2, 3, 20, 30), (2, 1, 30, 25), 0, 0),  # two batch axes, one broadcast
                           ((7, 2, 20, 30), (7, 2, 30, 25), 0, 0),  # the longer batch axis first: rt_gemm's batch
                           ((6, 1, 3, 20, 30), (1, 2, 1, 30, 25), 0, 0),  # three batch axes, broadcasts
                           ((9, 2, 30, 20), (9, 2, 25, 30), 1, 1),  # the longer batch axis first, both transposed
                           ((40, 50), (40, 60), 1, 0),             # transpose(a) @ b
                           ((50, 40), (60, 40), 0, 1),             # a @ transpose(b)
                           ((40, 50), (60, 40), 1, 1),             # both
                           ((3, 40, 20), (40, 30), 1, 0),          # transposed batch, broadcast weight
                           ((6, 20, 48), (40, 48), 0, 1),          # broadcast weight stored transposed
                           ((40, 30), (5, 40, 24), 1, 0),          # broadcast left operand, transposed
                           ((3, 4, 6), (5, 6), 0, 1),              # the same, small: loops
                           ((16, 16), (16, 16), 0, 0),             # m*n*k = 4096: gemm
                           ((16, 15), (15, 16), 0, 0),             # 3840: loops
                           ((64, 7), (64, 7), 0, 1),               # inner dimension 7, b transposed: gemm
                           ((64, 7), (7, 64), 0, 0)):              # inner dimension 7: gemm
        for dt in ("f32", "f64"):
            ak, av = gen(sa, "sin", "0.37", dt)
            bk, bv = gen(sb, "cos", "0.11", dt)
            if ta:
                ak, av = "transpose(%s, %s)" % (ak, list(range(len(sa) - 2)) + [len(sa) - 1, len(sa) - 2]), np.swapaxes(av, -1, -2)
            if tb:
                bk, bv = "transpose(%s, %s)" % (bk, list(range(len(sb) - 2)) + [len(sb) - 1, len(sb) - 2]), np.swapaxes(bv, -1, -2)
            tag = "%s%s @ %s%s" % ("x".join(map(str, sa)), "^T" if ta else "", "x".join(map(str, sb)), "^T" if tb else "")
            chk("gemm matmul %s %s" % (dt, tag), "%s @ %s" % (ak, bk), np.matmul(av, bv), dt,
                tol=1e-5 if dt == "f32" else 1e-9)
    xk, x = gen((150, 130), "sin", "0.7")
    xk64, x64 = gen((150, 130), "sin", "0.7", "f64")
    for ax in (0, 1):
        chk("large sum axis %d" % ax, "sum(%s, axis=%d)" % (xk, ax), x.sum(ax))
        chk("large max axis %d" % ax, "max(%s, axis=%d)" % (xk, ax), x.max(ax), tol=1e-6)
        chk("large softmax axis %d" % ax, "softmax(%s, axis=%d)" % (xk, ax), np.exp(log_softmax(x, ax)))
        chk("large logsumexp axis %d" % ax, "logsumexp(%s, axis=%d)" % (xk, ax), logsumexp(x, ax))
        # (on f64 inputs: an f32 sin one ulp off elsewhere could change a near-tie)
        chk("large argmax axis %d" % ax, "argmax(%s, axis=%d)" % (xk64, ax), np.argmax(x64, ax), tol=1e-6)
    chk("large elementwise", "exp(%s) * 2 + tanh(%s)" % (xk, xk), np.exp(x) * 2 + np.tanh(x))
    chk("large transpose", "transpose(%s) + 1" % xk, x.T + 1)
    chk("large softmax of a reshaped transpose", "softmax(reshape(transpose(%s), [1, 130, 1, 150]), axis=1)" % xk,
        np.exp(log_softmax(x.T.reshape(1, 130, 1, 150), 1)))
    chk("large strided slice", "%s[::-3, 7:-5:2]" % xk, x[::-3, 7:-5:2], tol=1e-6)
    # Kernels that write one layout from reads of another run the reads' axis
    # innermost (cgen.c, loop_order): channels last into NCHW, a transpose of
    # the last two axes, average pooling of a transposed value (each with
    # softmax after it, which reads the kernel's output from its buffer).
    # Literal inputs, over the folder's size limit: read from buffers.
    def sm(v, ax):
        return np.exp(log_softmax(v, ax))
    for dt in ("f32", "f64"):
        npdt = np.float32 if dt == "f32" else np.float64
        a4, b4 = (rng.standard_normal((2, 10, 11, 24)).astype(npdt) for _ in range(2))
        ak, bk = lit(a4, dt), lit(b4, dt)
        tol = 1e-5 if dt == "f32" else 1e-9
        # (c, read in the output's order, keeps simplify from moving the transposes out)
        c4 = rng.standard_normal((2, 24, 10, 11)).astype(npdt)
        at, bt = (np.transpose(v, (0, 3, 1, 2)).astype(np.float64) for v in (a4, b4))
        chk("loop order %s: channels last into NCHW" % dt,
            "softmax(transpose(%s, [0, 3, 1, 2]) * transpose(%s, [0, 3, 1, 2]) + transpose(%s, [0, 3, 1, 2]) * %s, axis=3)"
            % (ak, bk, ak, lit(c4, dt)), sm(at * bt + at * c4, 3), dt, tol=tol)
        c4 = rng.standard_normal((2, 10, 24, 11)).astype(npdt)
        at, bt = (np.transpose(v, (0, 1, 3, 2)).astype(np.float64) for v in (a4, b4))
        chk("loop order %s: the last two axes swapped" % dt,
            "softmax(transpose(%s, [0, 1, 3, 2]) * transpose(%s, [0, 1, 3, 2]) + transpose(%s, [0, 1, 3, 2]) * %s, axis=2)"
            % (ak, bk, ak, lit(c4, dt)), sm(at * bt + at * c4, 2), dt, tol=tol)
        pooled = np.maximum(np.transpose(a4, (0, 3, 1, 2)).astype(np.float64), 0)[:, :, :10, :10]
        pooled = pooled.reshape(2, 24, 5, 2, 5, 2).mean(axis=(3, 5))
        chk("loop order %s: average pooling of a transposed value" % dt,
            "softmax(avgpool2d(transpose(relu(%s), [0, 3, 1, 2]), 2), axis=3)" % ak, sm(pooled, 3), dt, tol=tol)
    chk("large f64 sum", "sum(%s, axis=0)" % xk64, x64.sum(0), "f64", tol=1e-9)
    S.add("large sum of ones", [], "sum(ones([1000, 1000]))", expect_exact(1e6))
    S.add("large sum of ones axis 0", [], "max(abs(sum(ones([1000, 1001]), axis=0) - 1000))", expect_exact(0))
    S.add("large mean f64", [], "mean(arange(1000001, dtype=f64))", expect_exact(500000.0))
    S.add("large argmax unique", [], "argmax(-(arange(100000) - 77777) ^ 2)", expect_exact(77777))
    S.add("large argmin unique", [], "argmin((arange(100000) - 12345) ^ 2)", expect_exact(12345))
    S.add("large sce", [], "mean(softmax_cross_entropy(zeros([3000, 10]), cast(arange(3000) * 0, i32)))",
          expect_close(np.log(10), rtol=1e-5))


def divmod_ops(S, rng):
    """// and % (floordiv, mod): NumPy's floor_divide and remainder, in every
    dtype, with negative operands, zero divisors and the most negative integer
    over -1. On a generator of their own (the checks after them draw what they
    drew before these existed)."""
    r = np.random.default_rng(79)
    a = f32(r.standard_normal((3, 4)) * 5)
    b = f32(np.where(r.random(4) < 0.5, -1, 1) * r.uniform(0.3, 3, 4))
    for dt in ("f32", "f64"):
        for op, fn, name in (("//", np.floor_divide, "floordiv"), ("%", np.remainder, "mod")):
            ref = fn(a.astype(np.float32), b.astype(np.float32)).astype(np.float64) if dt == "f32" else fn(a, b)
            S.add("divmod %s %s 3x4 4" % (dt, op), [], "(%s %s %s)" % (lit(a, dt), op, lit(b, dt)), expect_exact(ref))
            S.add("divmod %s %s() scalar divisor" % (dt, name), [], "%s(%s, -2.5)" % (name, lit(a, dt)),
                  expect_exact(fn(a, -2.5)))
    # the quotient agrees with the remainder where floor(a / b) would not
    S.add("divmod 1 // 0.1 is 9", [], "cast(1, f64) // cast(0.1, f64)", expect_exact(9.0))
    S.add("divmod 1 % 0.1", [], "cast(1, f64) % cast(0.1, f64)", expect_exact(np.remainder(1.0, 0.1)))
    S.add("divmod float by zero", [], "%s // 0" % lit([1.0, -1.0, 0.0]), expect_close([np.inf, -np.inf, np.nan]))
    S.add("divmod float mod zero", [], "%s %% 0" % lit([1.0, -1.0, 0.0]), expect_close([np.nan] * 3))
    S.add("divmod signed zeros", [], "1 / (%s %% %s)" % (lit([2.0, -2.0, 2.0]), lit([2.0, 2.0, -2.0])),
          expect_exact([np.inf, np.inf, -np.inf]))
    S.add("divmod infinite divisor", [], "%s %% (1 / 0)" % lit([1.0, -1.0]),
          expect_close(np.remainder([1.0, -1.0], np.inf)))
    ai = r.integers(-20, 20, (3, 4))
    bi = r.integers(1, 7, (4,)) * np.where(r.random(4) < 0.5, -1, 1)
    bz = np.array([3, 0, -1, -4])
    with np.errstate(divide="ignore", over="ignore"):
        for dt, npt in (("i32", np.int32), ("i64", np.int64)):
            for op, fn in (("//", np.floor_divide), ("%", np.remainder)):
                S.add("divmod %s %s" % (dt, op), [], "(%s %s %s)" % (lit(ai, dt), op, lit(bi, dt)), expect_exact(fn(ai, bi)))
                S.add("divmod %s %s by zero and -1" % (dt, op), [], "(%s %s %s)" % (lit(ai, dt), op, lit(bz, dt)),
                      expect_exact(fn(ai, bz)))
                lo = np.array([np.iinfo(npt).min], npt)
                # scalars (a list literal is f32 first); the literal -2^63 is out of range: one more, less 1
                S.add("divmod %s min %s -1" % (dt, op), [], "((cast(%d, %s) - 1) %s cast(-1, %s))" % (lo[0] + 1, dt, op, dt),
                      expect_exact(fn(lo, np.array([-1], npt))[0]))
    # computed by the kernels (arange is not folded): divisors through zero and -1
    for dt, npt in (("f32", np.float32), ("f64", np.float64), ("i32", np.int32), ("i64", np.int64)):
        x = np.arange(-60, 60).astype(npt)
        if dt in ("f32", "f64"):
            # divisors computed exactly (no multiply-add a compiler could fuse: the
            # fallback's gcc contracts across statements)
            xs, ds = "(arange(-60, 60, dtype=%s) * 3.7)" % dt, "((arange(120, dtype=%s) - 60) * 0.125)" % dt
            xv, dv = x * npt(3.7), (np.arange(120).astype(npt) - npt(60)) * npt(0.125)
        else:
            xs, ds = "arange(-60, 60, dtype=%s)" % dt, "(arange(120, dtype=%s) %% 13 - 6)" % dt
            xv, dv = x, np.arange(120).astype(npt) % 13 - 6
        with np.errstate(divide="ignore", invalid="ignore"):
            for op, fn in (("//", np.floor_divide), ("%", np.remainder)):
                S.add("divmod kernel %s %s" % (dt, op), [], "%s %s %s" % (xs, op, ds),
                      expect_close(fn(xv, dv).astype(np.float64), rtol=1e-5, atol=1e-5))
    S.add("divmod weak ints stay integers", [], "[7 // 2, -7 // 2, 7 % -3, -7 % 3]", expect_exact([3, -4, -2, 2]))
    S.add("divmod precedence as *", [], "7 - 5 % 3 * 2 + 9 // 2 ^ 2", expect_exact(7 - 5 % 3 * 2 + 9 // 2 ** 2))
    S.add("divmod bool operands count", [], "cast(%s, bool) %% 2" % lit([1, 0]), expect_exact([1, 0]))
    S.add("divmod even mask", [], "arange(6, dtype=i64) % 2 == 0", expect_exact(np.arange(6) % 2 == 0))


def classes(S, rng):
    """isnan, isinf, isfinite against NumPy: folded literals and kernels, floats
    and integers (always finite)."""
    vals = "[0, 1 / 0, -1 / 0, 0 / 0, -2.5, 3e38 * 10]"
    ref = np.array([0, np.inf, -np.inf, np.nan, -2.5, np.inf], np.float32)
    for fn in ("isnan", "isinf", "isfinite"):
        f = getattr(np, fn)
        for dt in ("f32", "f64"):
            S.add("class %s %s" % (fn, dt), [], "%s(cast(%s, %s))" % (fn, vals, dt), expect_exact(f(ref)))
        # kernels: -2/0 .. 2/0 over an iota (not folded)
        x = np.arange(-2, 3, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            S.add("class %s kernel" % fn, [], "%s(arange(-2, 3, dtype=f64) / 0)" % fn, expect_exact(f(x / 0)))
        for dt in ("i32", "i64", "bool"):
            S.add("class %s %s" % (fn, dt), [], "%s(cast(arange(3), %s))" % (fn, dt),
                  expect_exact(f(np.arange(3))))
    S.add("class where isfinite", [], "where(isfinite(arange(-1, 2) / 0), 1, 7)", expect_exact([7, 7, 7]))


def tri_ops(S, rng):
    """tril and triu against NumPy: k below, on and above the diagonal, a batch
    of matrices, integer and bool dtypes, and on kernels (arange: not folded)."""
    r = np.random.default_rng(81)
    a = f32(r.standard_normal((3, 4)))
    b = f32(r.standard_normal((2, 3, 5)))
    for fn in ("tril", "triu"):
        f = getattr(np, fn)
        for k in (-1, 0, 1, 5):
            S.add("tri %s 3x4 k=%d" % (fn, k), [], "%s(%s, %d)" % (fn, lit(a), k), expect_exact(f(a, k)))
        S.add("tri %s batch k keyword" % fn, [], "%s(%s, k=-2)" % (fn, lit(b)), expect_exact(f(b, k=-2)))
        S.add("tri %s i32" % fn, [], "%s(cast(%s, i32))" % (fn, lit(np.arange(9).reshape(3, 3))),
              expect_exact(f(np.arange(9).reshape(3, 3))))
        S.add("tri %s bool" % fn, [], "%s(ones([3, 3], dtype=bool), 1)" % fn, expect_exact(f(np.ones((3, 3), bool), 1)))
        S.add("tri %s kernel" % fn, [], "%s(reshape(arange(70, dtype=f64), [2, 5, 7]), 2)" % fn,
              expect_exact(f(np.arange(70.0).reshape(2, 5, 7), 2)))


EINSUM = [
    # (spec, operand shapes)
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("ij->ji", [(3, 4)]), ("ji", [(3, 4)]),
    ("ij->", [(3, 4)]), ("ij->j", [(3, 4)]), ("ii", [(4, 4)]), ("ii->i", [(4, 4)]), ("iij->ji", [(3, 3, 2)]),
    ("i,i", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]), ("i,j", [(3,), (4,)]), ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ij,ij->", [(2, 3), (2, 3)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]), ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("ab,cd,ef->", [(2, 2), (3, 1), (1, 2)]),
    ("...ij,...jk->...ik", [(2, 2, 3, 4), (4, 5)]), ("...j,j", [(2, 3, 4), (4,)]), ("i...->...", [(3, 2, 4)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]), ("ji,jk->ik", [(4, 3), (4, 5)]), ("ij,ij,ij->i", [(2, 3), (2, 3), (2, 3)]),
    ("ij,j->ij", [(1, 3), (3,)]), ("ij,ij->ij", [(1, 3), (2, 3)]), ("ik,kj->ij", [(2, 1), (3, 4)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]), ("BaC,aC->Ba", [(2, 3, 4), (3, 4)]), ("ba,aB", [(2, 3), (3, 4)]), (",ij->ij", [(), (2, 3)]),
]


def einsum_ops(S, rng):
    """einsum against NumPy: matrix products in every layout, batches,
    diagonals, sums, outer products, ellipses, size-1 broadcasting, chains of
    three operands, f64 and integers."""
    r = np.random.default_rng(82)
    for spec, shapes in EINSUM:
        xs = [f32(r.standard_normal(sh)) for sh in shapes]
        want = np.einsum(spec, *xs)
        S.add("einsum %s %s" % (spec, " ".join("x".join(map(str, sh)) or "s" for sh in shapes)), [],
              "einsum(\"%s\", %s)" % (spec, ", ".join(lit(x) for x in xs)), expect_close(want, rtol=1e-5, atol=1e-5))
    a, b = f32(r.standard_normal((3, 4))), f32(r.standard_normal((2, 4, 5)))
    want = np.einsum("ij,bjk->bik", a, b)
    S.add("einsum f64", [], "einsum(\"ij,bjk->bik\", %s, %s) - %s" % (lit(a, "f64"), lit(b, "f64"), lit(f32(want), "f64")),
          expect_f64(f32(want), want))
    ai = r.integers(-5, 5, (3, 4))
    bi = r.integers(-5, 5, (4, 2))
    S.add("einsum i32", [], "einsum(\"ij,jk->ik\", %s, %s)" % (lit(ai, "i32"), lit(bi, "i32")), expect_exact(ai @ bi))
    S.add("einsum i64 transpose", [], "einsum(\"ij->ji\", %s)" % lit(ai, "i64"), expect_exact(ai.T))
    # kernels (arange is not folded), a larger product through BLAS
    x = np.arange(60.0).reshape(3, 4, 5) / 7
    y = np.arange(30.0).reshape(5, 6) / 11
    S.add("einsum kernel ijk,kl->jil", [], "einsum(\"ijk,kl->jil\", reshape(arange(60, dtype=f64), [3, 4, 5]) / 7, "
          "reshape(arange(30, dtype=f64), [5, 6]) / 11)", expect_close(np.einsum("ijk,kl->jil", x, y), rtol=1e-5))


def pad_ops(S, rng):
    """pad against NumPy's constant mode: every width form, fill values (inf
    too), integer and bool dtypes, rank 0 to 3, and on kernels."""
    r = np.random.default_rng(84)
    a = f32(r.standard_normal((2, 3)))
    b = f32(r.standard_normal((2, 1, 3)))
    for widths, npw in (("1", 1), ("[1, 0]", (1, 0)), ("[[0, 2], [3, 1]]", ((0, 2), (3, 1))), ("0", 0)):
        S.add("pad 2x3 %s" % widths, [], "pad(%s, %s)" % (lit(a), widths), expect_exact(np.pad(a, npw)))
        S.add("pad 2x3 %s value -1.5" % widths, [], "pad(%s, %s, value=-1.5)" % (lit(a), widths),
              expect_exact(np.pad(a, npw, constant_values=-1.5)))
    S.add("pad rank 3 per axis", [], "pad(%s, [[1, 0], [0, 2], [1, 1]], 2)" % lit(b),
          expect_exact(np.pad(b, ((1, 0), (0, 2), (1, 1)), constant_values=2)))
    S.add("pad with inf", [], "pad(%s, 1, value=-1 / 0)" % lit(a), expect_exact(np.pad(a, 1, constant_values=-np.inf)))
    S.add("pad i32", [], "pad(cast(%s, i32), [2, 1], 7)" % lit([1, -2, 3]), expect_exact(np.pad([1, -2, 3], (2, 1), constant_values=7)))
    S.add("pad bool", [], "pad(%s, 1, value=true)" % lit(np.array([True, False])), expect_exact(np.pad([True, False], 1, constant_values=True)))
    S.add("pad scalar", [], "pad(3, 2)", expect_exact(3.0))
    x = np.arange(24.0).reshape(2, 3, 4)
    S.add("pad kernel", [], "pad(reshape(arange(24, dtype=f64), [2, 3, 4]), [[0, 1], [2, 0], [1, 3]], value=0.5)",
          expect_exact(np.pad(x, ((0, 1), (2, 0), (1, 3)), constant_values=0.5)))


def numpy_names(S, rng):
    """any, all, squeeze, expand_dims, repeat and tile against NumPy's."""
    r = np.random.default_rng(86)
    x = f32(r.integers(-1, 2, (2, 1, 3)))
    xl = lit(x)
    for fn in ("any", "all"):
        f = getattr(np, fn)
        S.add("np %s" % fn, [], "%s(%s)" % (fn, xl), expect_exact(f(x)))
        S.add("np %s axis 2" % fn, [], "%s(%s, axis=2)" % (fn, xl), expect_exact(f(x, axis=2)))
        S.add("np %s axes keepdims" % fn, [], "%s(%s, axis=[0, -1], keepdims=true)" % (fn, xl), expect_exact(f(x, axis=(0, 2), keepdims=True)))
        S.add("np %s empty" % fn, [], "%s(zeros([0, 2]), axis=0)" % fn, expect_exact(f(np.zeros((0, 2)), axis=0)))
        S.add("np %s nan is true" % fn, [], "%s(%s / 0)" % (fn, lit([0.0, 1.0])), expect_exact(f(np.array([np.nan, np.inf]))))
        S.add("np %s i32" % fn, [], "%s(cast(%s, i32), axis=0)" % (fn, lit([[0, 2], [0, 0]])), expect_exact(f(np.array([[0, 2], [0, 0]]), axis=0)))
    y = f32(r.standard_normal((1, 3, 1, 2)))
    yl = lit(y)
    S.add("np squeeze", [], "squeeze(%s)" % yl, expect_exact(np.squeeze(y)))
    S.add("np squeeze axis", [], "squeeze(%s, axis=2)" % yl, expect_exact(np.squeeze(y, axis=2)))
    S.add("np squeeze axes", [], "squeeze(%s, [0, -2])" % yl, expect_exact(np.squeeze(y, axis=(0, 2))))
    for ax in (0, -1, [0, 2], [1, -1]):
        npax = tuple(ax) if isinstance(ax, list) else ax
        S.add("np expand_dims %s" % ax, [], "shape(expand_dims(%s, %s))" % (yl, ax), expect_exact(np.expand_dims(y, npax).shape))
    z = f32(r.standard_normal((2, 3)))
    zl = lit(z)
    for args, npf in (("2", lambda v: np.repeat(v, 2)), ("3, axis=0", lambda v: np.repeat(v, 3, axis=0)),
                      ("2, axis=-1", lambda v: np.repeat(v, 2, axis=-1)), ("0, axis=1", lambda v: np.repeat(v, 0, axis=1))):
        S.add("np repeat %s" % args, [], "repeat(%s, %s)" % (zl, args), expect_exact(npf(z)))
    for reps in ("2", "[2, 1]", "[1, 3]", "[2, 1, 2]", "[0, 2]"):
        S.add("np tile %s" % reps, [], "tile(%s, %s)" % (zl, reps), expect_exact(np.tile(z, eval(reps))))
    S.add("np repeat kernel", [], "repeat(reshape(arange(6, dtype=f64), [2, 3]), 2, axis=1) * 1.5",
          expect_exact(np.repeat(np.arange(6.0).reshape(2, 3), 2, axis=1) * 1.5))


def cumsum_ops(S, rng):
    """cumsum against NumPy's: every axis, dtypes (bool and i32 sum in i64, as
    NumPy's does on Linux), empty rows, and on kernels."""
    r = np.random.default_rng(87)
    x = f32(r.standard_normal((2, 3, 4)))
    for ax in (0, 1, 2, -1):
        S.add("cumsum axis %d" % ax, [], "cumsum(%s, axis=%d)" % (lit(x), ax), expect_close(np.cumsum(x, axis=ax), rtol=1e-5, atol=1e-5))
    v = f32(r.standard_normal(7))
    S.add("cumsum rank 1 default axis", [], "cumsum(%s)" % lit(v), expect_close(np.cumsum(v), rtol=1e-5, atol=1e-6))
    S.add("cumsum f64", [], "cumsum(%s, axis=1) - %s" % (lit(x, "f64"), lit(f32(np.cumsum(x, 1)), "f64")),
          expect_f64(f32(np.cumsum(x, 1)), np.cumsum(x, 1)))
    ai = r.integers(-9, 9, (3, 4))
    for dt in ("i32", "i64"):
        S.add("cumsum %s" % dt, [], "cumsum(%s, axis=0)" % lit(ai, dt), expect_exact(np.cumsum(ai, axis=0)))
    S.add("cumsum bool counts", [], "cumsum(%s)" % lit(np.array([True, False, True, True])), expect_exact([1, 1, 2, 3]))
    S.add("cumsum empty axis", [], "shape(cumsum(zeros([3, 0]), axis=1))", expect_exact([3, 0]))
    S.add("cumsum kernel", [], "cumsum(reshape(arange(60, dtype=f64), [3, 4, 5]) * 0.5, axis=1)",
          expect_exact(np.cumsum(np.arange(60.0).reshape(3, 4, 5) * 0.5, axis=1)))
    S.add("cumsum of infinities", [], "cumsum(%s / 0)" % lit([1.0, -1.0, 1.0]), expect_close([np.inf, np.nan, np.nan]))


def build(S, rng):
    unary(S, rng)
    binary(S, rng)
    compare(S, rng)
    where_ops(S, rng)
    clip_ops(S, rng)
    divmod_ops(S, rng)
    classes(S, rng)
    tri_ops(S, rng)
    einsum_ops(S, rng)
    pad_ops(S, rng)
    numpy_names(S, rng)
    cumsum_ops(S, rng)
    integers(S, rng)
    casts(S, rng)
    reductions(S, rng)
    rows(S, rng)
    matmuls(S, rng)
    movement(S, rng)
    slicing(S, rng)
    constructors(S, rng)
    randoms(S, rng)
    large(S, rng)


if __name__ == "__main__":
    main(build)
