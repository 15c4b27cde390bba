#!/usr/bin/env python3
"""The neural-network builtins against NumPy references, and their gradients
against central finite differences (the gradcheck harness of
test_gradcheck.py, in f64).

Usage: python3 tests/test_nn.py build/kiln [NAME-SUBSTRING]

References are written here from the definitions (direct loops over windows),
independently of Kiln's im2col lowering: conv2d (NCHW, stride, padding
"same"/"valid"/int/[h, w], dilation), maxpool2d (padding with -inf),
avgpool2d (zeros counted), take, scatter_add, accuracy, batch_norm outside
training (running statistics), dropout outside training (the identity).
"""
import os
import sys

import math
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_testlib import lit, f32, main, expect_close, expect_exact, expect_f64  # noqa: E402
from test_gradcheck import GC  # noqa: E402


def same_pads(n, k, s, d):
    out = -(-n // s)
    total = max((out - 1) * s + d * (k - 1) + 1 - n, 0)
    return total // 2, total - total // 2


def pads_of(pad, H, W, kh, kw, s, d):
    if pad == "same":
        return same_pads(H, kh, s[0], d[0]) + same_pads(W, kw, s[1], d[1])
    if pad == "valid":
        return (0, 0, 0, 0)
    p = pad if isinstance(pad, (list, tuple)) else (pad, pad)
    return (p[0], p[0], p[1], p[1])


def windows(x, kh, kw, s, pads, d, fill):
    """[N, C, OH, OW, kh, kw] windows of x, padded with fill."""
    pt, pb, pl, pr = pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    N, C, H, W = xp.shape
    oh = (H - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (W - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.empty((N, C, oh, ow, kh, kw), x.dtype)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = xp[:, :, i * s[0]:i * s[0] + d[0] * (kh - 1) + 1:d[0],
                                 j * s[1]:j * s[1] + d[1] * (kw - 1) + 1:d[1]]
    return out


def pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def conv_ref(x, w, stride=1, pad=0, dilation=1):
    s, d = pair(stride), pair(dilation)
    kh, kw = w.shape[2:]
    win = windows(x, kh, kw, s, pads_of(pad, x.shape[2], x.shape[3], kh, kw, s, d), d, 0.0)
    return np.einsum("ncijkl,ockl->noij", win, w)


def conv_grad_ref(x, w, adj, stride=1, pad=0, dilation=1):
    """d sum(conv2d(x, w) * adj) / dx and / dw from the definition: each
    window position's share of adj, summed back into the pixel it read."""
    s, d = pair(stride), pair(dilation)
    kh, kw = w.shape[2:]
    N, C, H, W = x.shape
    pt, pb, pl, pr = pads_of(pad, H, W, kh, kw, s, d)
    win = windows(x, kh, kw, s, (pt, pb, pl, pr), d, 0.0)
    dw = np.einsum("ncijkl,noij->ockl", win, adj)
    dwin = np.einsum("noij,ockl->ncijkl", adj, w)
    oh, ow = adj.shape[2:]
    xp = np.zeros((N, C, H + pt + pb, W + pl + pr))
    for k in range(kh):
        for l in range(kw):
            xp[:, :, k * d[0]:k * d[0] + (oh - 1) * s[0] + 1:s[0], l * d[1]:l * d[1] + (ow - 1) * s[1] + 1:s[1]] += dwin[..., k, l]
    return xp[:, :, pt:pt + H, pl:pl + W], dw


def pool_ref(x, k, stride=None, pad=0, avg=False):
    k = pair(k)
    s = pair(stride) if stride is not None else k
    win = windows(x, k[0], k[1], s, pads_of(pad, x.shape[2], x.shape[3], k[0], k[1], s, (1, 1)), (1, 1),
                  0.0 if avg else -np.inf)
    return win.mean(axis=(4, 5)) if avg else win.max(axis=(4, 5))


def pool_grad_ref(x, adj, k, stride=None, pad=0, avg=False):
    """d sum(pool(x) * adj) / dx from the definition: a window's max shares
    its adj equally among the positions equal to it (padding positions count,
    their shares are dropped; a window holding NaN gives none); average
    pooling spreads adj / (kh * kw) over the window."""
    k = pair(k)
    s = pair(stride) if stride is not None else k
    H, W = x.shape[2:]
    pt, pb, pl, pr = pads_of(pad, H, W, k[0], k[1], s, (1, 1))
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=0.0 if avg else -np.inf)
    gp = np.zeros_like(xp)
    for i in range(adj.shape[2]):
        for j in range(adj.shape[3]):
            rows, cols = slice(i * s[0], i * s[0] + k[0]), slice(j * s[1], j * s[1] + k[1])
            win, a = xp[:, :, rows, cols], adj[:, :, i, j][:, :, None, None]
            if avg:
                gp[:, :, rows, cols] += a / (k[0] * k[1])
                continue
            with np.errstate(invalid="ignore"):
                m = win == win.max(axis=(2, 3), keepdims=True)
            gp[:, :, rows, cols] += np.where(m, a / np.maximum(m.sum(axis=(2, 3), keepdims=True), 1), 0)
    return gp[:, :, pt:pt + H, pl:pl + W]


def lit_special(x, dtype="f32"):
    """lit() for arrays that may hold NaN and -inf (which literals cannot)."""
    body = lit(np.where(np.isfinite(x), x, 0), dtype)
    if np.isnan(x).any():
        body = "where(%s, 0 / 0, %s)" % (lit(np.isnan(x)), body)
    if np.isneginf(x).any():
        body = "where(%s, -1 / 0, %s)" % (lit(np.isneginf(x)), body)
    return body


def pool_opts(k, stride, pad):
    o = "" if stride is None else ", stride=%s" % (list(stride) if isinstance(stride, tuple) else stride)
    if pad != 0:
        o += ", pad=%s" % (list(pad) if isinstance(pad, tuple) else pad)
    return "%s%s" % (list(k) if isinstance(k, tuple) else k, o)


POOL_CASES = [  # x shape, k, stride, pad
    ((2, 3, 7, 7), 2, None, 0),         # odd size: the last row and column are in no window
    ((1, 1, 6, 6), 2, None, 0),         # batch 1, one channel
    ((2, 3, 6, 6), 3, None, 0),
    ((2, 2, 6, 6), 2, None, 1),         # disjoint windows over padding
    ((2, 2, 7, 7), 2, 3, 0),            # stride > window: rows that no window reads
    ((2, 2, 8, 8), 3, 4, 1),
    ((2, 2, 7, 5), (2, 3), (2, 3), (1, 1)),
    ((1, 3, 5, 5), 2, 1, 0),            # overlapping windows
    ((2, 2, 7, 7), 3, 2, 1),            # overlapping, over padding
]


def tie_data(rng, shape):
    """Few distinct values, so windows hold ties, and a constant region."""
    x = f32(rng.integers(-2, 3, shape) * 0.5)
    x[:, :, :3, :3] = 0.5
    return x


def special_data(rng, shape):
    """tie_data with -inf (a whole corner: windows of nothing but -inf, with
    the padding) and NaN."""
    x = tie_data(rng, shape)
    x[0, 0, :3, :3] = -np.inf
    x[-1, -1, 1, 2] = np.nan
    x[0, -1, -1, -1] = -np.inf
    return x


def pool_checks(S, rng, tag, shape, k, st, pad, x, dtypes, threads):
    """Forward and gradient of max and average pooling of x, against the
    references, the gradient for a random upstream adj (F = sum(pool(x) * adj))."""
    opts = pool_opts(k, st, pad)
    for avg in (False, True):
        op = "avgpool2d" if avg else "maxpool2d"
        want = pool_ref(x, k, st, pad, avg)
        adj = f32(rng.standard_normal(want.shape))
        gwant = pool_grad_ref(x, adj, k, st, pad, avg)
        for dt in dtypes:
            name = "%s %s %s k=%s s=%s p=%s %s threads=%s" % (op, tag, "x".join(map(str, shape)), k, st, pad, dt, threads)
            xn, fn = S.fresh("X"), S.fresh("F")
            setup = ["%s = %s" % (xn, lit_special(x, dt)),
                     "%s(a) = sum(%s(a, %s) * %s)" % (fn, op, opts, lit(adj, dt))]
            S.add(name, setup, *in_pieces("%s(%s, %s)" % (op, xn, opts), want), threads=threads)
            S.add("grad " + name, setup, *in_pieces("grad(%s)(%s)" % (fn, xn), gwant), threads=threads)


def in_pieces(expr, want):
    """The expressions that print expr's value, one [H, W] image at a time
    (print summarizes over 1000 elements), and a verifier of all of them."""
    n, c = want.shape[:2]
    exprs = ["(%s)[%d, %d]" % (expr, i, j) for i in range(n) for j in range(c)] if want.size > 1000 else [expr]
    check = expect_close(want, rtol=1e-5, atol=1e-6)
    return exprs, lambda vals: check([np.reshape(vals, want.shape)])


def pooling(S, rng):
    """Pooling forward and backward against the definitions, exactly where
    finite differences cannot look: at ties, -inf and NaN."""
    for shape, k, st, pad in POOL_CASES:
        pool_checks(S, rng, "ties", shape, k, st, pad, tie_data(rng, shape), ("f32", "f64"), 1)
        pool_checks(S, rng, "inf/nan", shape, k, st, pad, special_data(rng, shape), ("f32",), 1)
    # big enough that kernels split their rows over two threads
    for shape, k, st, pad in (((3, 8, 28, 28), 2, None, 0), ((3, 8, 27, 27), 3, 2, 1)):
        x = special_data(rng, shape)
        for threads in (1, 2):
            pool_checks(S, rng, "inf/nan", shape, k, st, pad, x, ("f32",), threads)


def opt_str(stride, pad, dil, lowering=None):
    parts = ['lowering="%s"' % lowering] if lowering else []
    if stride != 1:
        parts.append("stride=%s" % (list(stride) if isinstance(stride, tuple) else stride))
    if pad != 0:
        parts.append("pad=%s" % ('"%s"' % pad if isinstance(pad, str) else list(pad) if isinstance(pad, tuple) else pad))
    if dil != 1:
        parts.append("dilation=%s" % (list(dil) if isinstance(dil, tuple) else dil))
    return "".join(", " + p for p in parts)


CONV_CASES = [  # x shape, w shape, stride, pad, dilation
    ((2, 3, 7, 7), (4, 3, 3, 3), 1, 0, 1),
    ((2, 3, 7, 7), (4, 3, 3, 3), 1, "same", 1),
    ((1, 2, 8, 6), (3, 2, 5, 5), 1, "same", 1),
    ((2, 1, 6, 6), (2, 1, 4, 4), 1, "same", 1),      # even kernel: the odd pixel at the end
    ((2, 3, 9, 8), (2, 3, 3, 3), 2, "same", 1),
    ((1, 2, 9, 9), (3, 2, 3, 3), 2, 1, 1),
    ((1, 2, 9, 9), (3, 2, 3, 2), (2, 1), (1, 0), 1),
    ((1, 2, 10, 10), (2, 2, 3, 3), 1, 2, 2),
    ((3, 4, 5, 5), (6, 4, 1, 1), 1, "valid", 1),
    ((1, 1, 4, 4), (1, 1, 4, 4), 1, "valid", 1),
    # odd shapes for the lowerings: batch 1, one channel, a 5x5 kernel with
    # stride 2; stride with dilation; a 1x1 kernel with stride 2 and one output
    # channel; explicit padding with a dilated, non-square window
    ((1, 1, 9, 9), (2, 1, 5, 5), 2, "same", 1),
    ((1, 3, 8, 7), (2, 3, 3, 3), 2, "valid", 2),
    ((2, 3, 6, 5), (1, 3, 1, 1), 2, 0, 1),
    ((1, 3, 7, 7), (4, 3, 5, 3), 1, (2, 1), (1, 2)),
    # padding wider than the window: kernel lowering sums slices even at stride 1
    ((1, 2, 5, 4), (3, 2, 1, 1), 1, 1, 1),
]


LOWERINGS = ("im2col", "kernel", "direct")
THREADS = (1, 2)   # each lowering's checks run in kiln processes with these --threads


def forward(S, rng):
    for i, (xs, ws, st, pad, dil) in enumerate(CONV_CASES):
        x, w = f32(rng.standard_normal(xs)), f32(rng.standard_normal(ws))
        want = conv_ref(x, w, st, pad, dil)
        expr = "conv2d(%s, %s%s)" % (lit(x), lit(w), opt_str(st, pad, dil))
        S.add("conv2d %d %s" % (i, "x".join(map(str, xs))), [], expr, expect_close(want, rtol=1e-4, atol=1e-4))
        S.add("conv2d f64 %d" % i, [], "conv2d(%s, %s%s)" % (lit(x, "f64"), lit(w, "f64"), opt_str(st, pad, dil)),
              expect_close(want, rtol=1e-5, atol=1e-6))
        for low in LOWERINGS:
            for S.threads in THREADS:
                S.add("conv2d %d lowering=%s threads=%d" % (i, low, S.threads), [],
                      "conv2d(%s, %s%s)" % (lit(x), lit(w), opt_str(st, pad, dil, low)),
                      expect_close(want, rtol=1e-4, atol=1e-4))
            S.threads = None
    x = f32(rng.standard_normal((2, 3, 7, 6)))
    for k, st, pad in ((2, None, 0), (3, None, 0), (3, 2, 1), (2, 1, 0), ((2, 3), (2, 1), (1, 1)), (3, 1, "same")):
        o = ""
        if st is not None:
            o += ", stride=%s" % (list(st) if isinstance(st, tuple) else st)
        if pad != 0:
            o += ", pad=%s" % ('"%s"' % pad if isinstance(pad, str) else list(pad) if isinstance(pad, tuple) else pad)
        ks = list(k) if isinstance(k, tuple) else k
        tag = "k=%s s=%s p=%s" % (k, st, pad)
        S.add("maxpool2d " + tag, [], "maxpool2d(%s, %s%s)" % (lit(x), ks, o), expect_close(pool_ref(x, k, st, pad)))
        S.add("avgpool2d " + tag, [], "avgpool2d(%s, %s%s)" % (lit(x), ks, o),
              expect_close(pool_ref(x, k, st, pad, avg=True), rtol=1e-5, atol=1e-6))
    neg = -np.abs(x) - 1
    S.add("maxpool2d pads with -inf", [], "maxpool2d(%s, 3, stride=2, pad=1)" % lit(neg),
          expect_close(pool_ref(neg, 3, 2, 1)))
    table = f32(rng.standard_normal((5, 3)))
    idx = np.array([[4, 0], [2, 2], [1, 3]])
    S.add("take 2-D indices", [], "take(%s, %s)" % (lit(table), lit(idx, "i32")), expect_close(table[idx]))
    S.add("take i64 indices", [], "take(%s, %s)" % (lit(table), lit(idx[0], "i64")), expect_close(table[idx[0]]))
    S.add("take out of range is nan", [], "take(%s, cast([1, 5, -1], i32))" % lit(table),
          expect_close(np.stack([table[1], np.full(3, np.nan), np.full(3, np.nan)])))
    S.add("take from a 1-D table", [], "take(%s, cast([3, 3, 0], i32))" % lit(table[:, 0]), expect_close(table[[3, 3, 0], 0]))
    vals = f32(rng.standard_normal((3, 2, 3)))
    want = np.zeros((5, 3))
    np.add.at(want, idx, vals)
    S.add("scatter_add repeats add", [], "scatter_add(%s, %s, 5)" % (lit(vals), lit(idx, "i32")),
          expect_close(want, rtol=1e-5, atol=1e-6))
    S.add("scatter_add ignores out of range", [], "scatter_add([[1, 2], [3, 4]], cast([7, 1], i32), 3)",
          expect_close([[0, 0], [3, 4], [0, 0]]))
    logits = f32(rng.standard_normal((6, 4)))
    lab = rng.integers(0, 4, 6)
    S.add("accuracy", [], "accuracy(%s, %s)" % (lit(logits), lit(lab, "i32")),
          expect_close(np.mean(np.argmax(logits, 1) == lab)))
    # top-k: the label among the k largest logits, ties to the earlier class (a
    # stable sort by descending logit); integer-valued logits make ties common
    r2 = np.random.default_rng(83)
    zt = f32(r2.integers(-2, 3, (2, 5, 6)))
    yt = r2.integers(0, 6, (2, 5))
    yt[0, 0] = 9   # outside [0, 6): never a hit

    def topk(z, y, k):
        flat, lab = z.reshape(-1, z.shape[-1]), y.reshape(-1)
        hits = [l in np.lexsort((np.arange(len(row)), -row))[:k] for row, l in zip(flat, lab)]
        return np.mean(hits)
    for k in (1, 2, 3, 6):
        S.add("accuracy top-%d with ties" % k, [], "accuracy(%s, %s, k=%d)" % (lit(zt), lit(yt, "i64"), k),
              expect_close(topk(zt, yt, k), rtol=1e-6))
    S.add("accuracy top-2 positional k", [], "accuracy(%s, %s, 2)" % (lit(logits), lit(lab, "i32")),
          expect_close(topk(logits, lab, 2), rtol=1e-6))
    S.add("dropout outside training is the identity", [], "dropout(%s, 0.5)" % lit(logits), expect_close(logits))
    g, b = f32(rng.uniform(0.5, 2, 3)), f32(rng.standard_normal(3))
    xb = f32(rng.standard_normal((4, 3, 2, 2)))
    setup = ["state m : f32[3] = [0.5, -1, 2]", "state v : f32[3] = [1, 4, 0.25]"]
    want = (xb - np.array([0.5, -1, 2]).reshape(1, 3, 1, 1)) / np.sqrt(np.array([1, 4, 0.25]).reshape(1, 3, 1, 1) + 1e-5)
    want = want * g.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1)
    S.add("batch_norm outside training uses running statistics", setup,
          "batch_norm(%s, m, v, %s, %s)" % (lit(xb), lit(g), lit(b)), expect_close(want, rtol=1e-5, atol=1e-5))
    S.add("training() is false outside a training step", [], "training()", expect_close(False))
    # layers: parameters named by call site, name= and nesting
    setup = ['import "nn"', "x = ones([2, 3])", "h1 = dense(x, 4)", "h2 = dense(h1, 5, name=\"head\")",
             "fn block(h) { dense(dense(h, 2), 3) }", "h3 = block(x)", "h4 = dense(x, 6)"]
    # one check (a program may declare head.W once): dense.1.W, head.W, block.1.dense.1.W,
    # block.1.dense.2.b, dense.2.W
    names = [("dense.1.W", (3, 4)), ("head.W", (4, 5)), ("block.1.dense.1.W", (3, 2)),
             ("block.1.dense.2.b", (3,)), ("dense.2.W", (3, 6))]

    def shapes_are(vals):
        got = [tuple(int(d) for d in np.atleast_1d(v)) for v in vals]
        want = [shape for _, shape in names]
        return None if got == want else "shapes %s, expected %s" % (got, want)
    S.add("layer parameters named by call site, name= and nesting", setup,
          ["shape(parameter(\"%s\"))" % pname for pname, _ in names], shapes_are)
    # (checks share one session, so this one names its layer: a name always means the latest)
    S.add("dense is x @ W + b", ['import "nn"', "x = ones([2, 3])", "h1 = dense(x, 4, name=\"t1\")"],
          "h1 - (x @ parameter(\"t1.W\") + parameter(\"t1.b\"))",
          expect_close(np.zeros((2, 4))))
    S.add("conv layer keeps the size with pad same", ['import "nn"', "x = ones([2, 3, 9, 7])"], "shape(conv(x, 4, 3))",
          expect_close([2, 4, 9, 7]))
    S.add("conv layer with stride and valid padding", ['import "nn"', "x = ones([2, 3, 9, 7])"],
          "shape(conv(x, 4, 3, stride=2, pad=\"valid\"))", expect_close([2, 4, 4, 3]))
    S.add("embedding layer", ['import "nn"', "e = embedding(cast([[1, 2], [3, 0]], i32), 5, 4)"],
          "shape(e)", expect_close([2, 2, 4]))
    S.add("batchnorm layer outside training: identity at init", ['import "nn"', "x = %s" % lit(xb)],
          "batchnorm(x)", expect_close(xb / np.sqrt(1 + 1e-5), rtol=1e-5, atol=1e-6))
    # layernorm: PyTorch's LayerNorm over the last axis (biased variance), and its
    # scale and shift's gradients against the analytic ones
    for shape in ((4, 6), (2, 3, 5)):
        xl = f32(rng.standard_normal(shape) * 3 + 1)
        m = xl.mean(-1, keepdims=True)
        xhat = (xl - m) / np.sqrt(((xl - m) ** 2).mean(-1, keepdims=True) + 1e-5)
        tag = "x".join(map(str, shape))
        S.add("layernorm layer %s" % tag, ['import "nn"', "x = %s" % lit(xl)], "layernorm(x)",
              expect_close(xhat, rtol=1e-4, atol=1e-5))
        adj = f32(rng.standard_normal(shape))
        ln = S.fresh("ln")
        setup = ['import "nn"', "x = %s" % lit(xl), "adj = %s" % lit(adj),
                 "y = sum(layernorm(x, eps=1e-3, name=\"%s\") * adj)" % ln]
        xh3 = (xl - m) / np.sqrt(((xl - m) ** 2).mean(-1, keepdims=True) + 1e-3)
        S.add("layernorm layer %s gamma and beta gradients" % tag, setup,
              ["grad(y, parameter(\"%s.gamma\"))" % ln, "grad(y, parameter(\"%s.beta\"))" % ln],
              lambda vals, g=(xh3 * adj).reshape(-1, shape[-1]).sum(0), b=adj.reshape(-1, shape[-1]).sum(0):
              expect_close(g, rtol=1e-4, atol=1e-4)(vals[:1]) or expect_close(b, rtol=1e-5, atol=1e-5)(vals[1:]))


def attention_ref(x, P, heads, causal):
    """PyTorch's MultiheadAttention (batch_first, query = key = value = x) in NumPy,
    with the projections' weights as Kiln's dense holds them ([in, out], x @ W + b)."""
    n, t, d = x.shape
    dh = d // heads
    proj = lambda nm: (x @ P[nm + ".W"] + P[nm + ".b"]).reshape(n, t, heads, dh).transpose(0, 2, 1, 3)
    q, k, v = proj("q"), proj("k"), proj("v")
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)
    if causal:
        s = np.where(np.tril(np.ones((t, t))) > 0, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(n, t, d)
    return o @ P["out.W"] + P["out.b"]


def attention_checks(S, rng):
    """lib/nn.kiln's attention against the NumPy reference, its weights read back
    from Kiln (the biases start at zero: nonzero ones are set by a training step
    first, so every parameter takes part)."""
    r = np.random.default_rng(85)
    names = ["q.W", "q.b", "k.W", "k.b", "v.W", "v.b", "out.W", "out.b"]
    for shape, heads, causal in (((2, 5, 8), 2, False), ((2, 5, 8), 2, True), ((1, 3, 6), 3, True), ((3, 4, 4), 1, False)):
        x = f32(r.standard_normal(shape))
        a = S.fresh("att")
        setup = ['import "nn"', "x = %s" % lit(x), "y = attention(x, %d, causal=%s, name=\"%s\")" % (heads, str(causal).lower(), a)]
        exprs = ["y"] + ["parameter(\"%s.%s\")" % (a, nm) for nm in names]

        def check(vals, x=x, heads=heads, causal=causal):
            P = {nm: np.asarray(v, np.float64) for nm, v in zip(names, vals[1:])}
            return expect_close(attention_ref(x, P, heads, causal), rtol=1e-4, atol=1e-5)(vals[:1])
        S.add("attention %s heads %d%s" % ("x".join(map(str, shape)), heads, " causal" if causal else ""), setup, exprs, check)


# Layers with enough channels that the im2col lowering's input gradient is the
# transposed convolution (passes/convgrad.c): in f32, both gradients against
# the reference, with and without threads (the f64 checks above go through
# the materialized windows; these through the packed ones).
WIDE_CONV_CASES = [
    ((2, 16, 8, 7), (4, 16, 3, 3), 1, "same", 1),
    ((1, 16, 9, 8), (3, 16, 3, 2), 1, (2, 1), (1, 2)),
    ((2, 20, 7, 7), (5, 20, 5, 5), 1, 0, 1),
    # with a stride, one transposed convolution per phase of the image's pixels
    ((1, 16, 9, 9), (3, 16, 3, 3), 2, 1, 1),
    ((2, 16, 8, 8), (4, 16, 3, 3), 2, "same", 1),        # the extra padding at the end
    ((1, 16, 9, 10), (3, 16, 5, 4), (2, 3), (2, 1), 1),  # unequal strides
    ((1, 16, 9, 9), (2, 16, 3, 3), 2, 2, 2),             # dilation 2: odd pixels get no tap
    ((2, 16, 7, 7), (5, 16, 1, 1), 2, 0, 1),             # 1x1: three of four phases empty
    ((1, 16, 14, 14), (3, 16, 7, 7), 2, 3, 1),           # a 7x7 stem
    ((1, 16, 8, 8), (2, 16, 2, 2), 3, 1, 1),             # padding larger than the window: dY cropped
    ((2, 16, 4, 4), (3, 16, 3, 3), 2, 3, 1),             # cropped at both ends
]


def wide_conv_gradients(S, rng):
    for i, (xs, ws, st, pad, dil) in enumerate(WIDE_CONV_CASES):
        x, w = f32(rng.standard_normal(xs)), f32(rng.standard_normal(ws))
        adj = f32(rng.standard_normal(conv_ref(x, w, st, pad, dil).shape))
        dx, dw = conv_grad_ref(x, w, adj, st, pad, dil)
        opts = opt_str(st, pad, dil, "im2col")
        xn, wn, fx, fw = S.fresh("X"), S.fresh("Wt"), S.fresh("F"), S.fresh("G")
        setup = ["%s = %s" % (xn, lit(x)), "%s = %s" % (wn, lit(w)),
                 "%s(a) = sum(conv2d(a, %s%s) * %s)" % (fx, wn, opts, lit(adj)),
                 "%s(b) = sum(conv2d(%s, b%s) * %s)" % (fw, xn, opts, lit(adj))]
        for S.threads in THREADS:
            for what, expr, want in (("dx", "grad(%s)(%s)" % (fx, xn), dx), ("dw", "grad(%s)(%s)" % (fw, wn), dw)):
                exprs, _ = in_pieces(expr, want)
                check = expect_close(want, rtol=1e-4, atol=1e-4)
                S.add("grad conv2d wide %d %s f32 threads=%d" % (i, what, S.threads), setup, exprs,
                      lambda vals, check=check, want=want: check([np.reshape(vals, want.shape)]))
        S.threads = None


# Layers whose forward product and input gradient run as Winograd's F(m, r)
# (runtime/wino.c: 2..5-tap kernels at stride 1, 16 or more channels in and
# out): the output and both gradients in f32 against NumPy, with and without
# threads, and the same layers with KILN_WINOGRAD=0 (the window product). Kernels
# 5x5 (F(4, 5), 8x8 tiles), 3x3 (F(4, 3), 6x6), 4x2 (F(3, 4) x F(5, 2)), 3x3
# (F(6, 3)), 4x4 (F(5, 4)); images whose tiles overhang the output; enough
# values that the folder leaves the layers alone.
# Winograd's error goes with the sums of the terms' magnitudes (a tile's
# rounding spreads over its outputs), so besides rtol 1e-4 each value may be
# off by 1e-5 of the largest such sum (test_runtime's bound; seen: 1.4e-6).
WINOGRAD_CASES = [   # the tiles: 8x8, 6x6, 6x6, 8x8, 8x8 (runtime/wino.c, wino_alpha)
    ((2, 16, 9, 9), (16, 16, 5, 5), "same"),
    ((2, 17, 10, 7), (18, 17, 3, 3), "same"),
    ((1, 24, 11, 9), (20, 24, 4, 2), 1),
    ((2, 16, 12, 12), (16, 16, 3, 3), 0),
    ((1, 17, 14, 14), (16, 17, 4, 4), 1),
]


def winograd_layers(S, rng):
    for i, (xs, ws, pad) in enumerate(WINOGRAD_CASES):
        x, w = f32(rng.standard_normal(xs)), f32(rng.standard_normal(ws))
        y = conv_ref(x, w, 1, pad, 1)
        adj = f32(rng.standard_normal(y.shape))
        dx, dw = conv_grad_ref(x, w, adj, 1, pad, 1)
        ax, aw, aadj = np.abs(x), np.abs(w), np.abs(adj)
        mx, mw = conv_grad_ref(ax, aw, aadj, 1, pad, 1)
        scale = {"y": conv_ref(ax, aw, 1, pad, 1).max(), "dx": mx.max(), "dw": mw.max()}
        opts = opt_str(1, pad, 1, "im2col")
        xn, wn, fy, fx, fw = S.fresh("X"), S.fresh("Wt"), S.fresh("Y"), S.fresh("F"), S.fresh("G")
        setup = ["%s = %s" % (xn, lit(x)), "%s = %s" % (wn, lit(w)), "%s(a) = conv2d(a, %s%s)" % (fy, wn, opts),
                 "%s(a) = sum(conv2d(a, %s%s) * %s)" % (fx, wn, opts, lit(adj)),
                 "%s(b) = sum(conv2d(%s, b%s) * %s)" % (fw, xn, opts, lit(adj))]
        for env in (None, "0"):
            S.env = {"KILN_WINOGRAD": env} if env else None
            for S.threads in THREADS:
                for what, expr, want in (("y", "%s(%s)" % (fy, xn), y), ("dx", "grad(%s)(%s)" % (fx, xn), dx),
                                         ("dw", "grad(%s)(%s)" % (fw, wn), dw)):
                    exprs, _ = in_pieces(expr, want)
                    check = expect_close(want, rtol=1e-4, atol=max(1e-4, 1e-5 * float(scale[what])))
                    S.add("conv2d winograd %d %s f32 threads=%d%s" % (i, what, S.threads, " KILN_WINOGRAD=0" if env else ""),
                          setup, exprs, lambda vals, check=check, want=want: check([np.reshape(vals, want.shape)]))
        S.threads = S.env = None


# A conv layer's kernel and bias gradients in one graph: the bias's is the last
# row of the kernel's product (passes/biasgrad.c), in f32 with the packed
# windows (1 channel; 16 and 7, channels last) and in f64 with the materialized
# ones, with and without threads. 28 taps: the row of ones begins a 14-row
# panel. Images whose windows have over 4096 values (the folder would make
# smaller ones constants), and the layer's gradient computed (sin), not a
# constant either.
BIAS_CONV_CASES = [
    ((4, 1, 12, 12), (6, 1, 5, 5), 1, "same", 1),
    ((2, 16, 6, 6), (3, 16, 3, 3), 1, 1, 1),
    ((4, 7, 12, 12), (3, 7, 2, 2), 1, 0, 1),
    ((4, 3, 20, 20), (4, 3, 3, 3), 2, 1, 1),
]


def conv_bias_gradients(S, rng):
    for i, (xs, ws, st, pad, dil) in enumerate(BIAS_CONV_CASES):
        x, w = f32(rng.standard_normal(xs)), f32(rng.standard_normal(ws))
        b = f32(rng.standard_normal((ws[0], 1, 1)))
        y = conv_ref(x, w, st, pad, dil) + b
        adj = f32(rng.standard_normal(y.shape))
        dy = np.cos(y) * adj
        _, dw = conv_grad_ref(x, w, dy, st, pad, dil)
        want = np.concatenate([dw.reshape(-1), dy.sum(axis=(0, 2, 3))])
        for dt in ("f32", "f64"):
            xn, wn, bn, fn = S.fresh("X"), S.fresh("Wt"), S.fresh("Bb"), S.fresh("F")
            setup = ["%s = %s" % (xn, lit(x, dt)), "%s = %s" % (wn, lit(w, dt)), "%s = %s" % (bn, lit(b, dt)),
                     "%s(k, c) = sum(sin(conv2d(%s, k%s) + c) * %s)" % (fn, xn, opt_str(st, pad, dil, "im2col"),
                                                                        lit(adj, dt))]
            expr = "concat([reshape(grad(%s, 0)(%s, %s), [-1]), reshape(grad(%s, 1)(%s, %s), [-1])])" % (
                fn, wn, bn, fn, wn, bn)
            for S.threads in THREADS:
                S.add("grad conv layer %d kernel and bias %s threads=%d" % (i, dt, S.threads), setup, [expr],
                      expect_close(want, rtol=1e-4, atol=1e-4))
            S.threads = None


def gradients(S, rng):
    T = GC(S, rng)
    # layernorm's input gradient in f64 (the layer's own parameters are f32 ones and zeros)
    for shape in ((3, 4), (2, 2, 5)):
        x = f32(rng.standard_normal(shape) * 2)
        w = f32(rng.standard_normal(shape))
        fn, wn = S.fresh("LN"), S.fresh("Wl")
        T.core("layernorm layer %s dx" % "x".join(map(str, shape)),
               ['import "nn"', "%s = %s" % (wn, lit(w, "f64")), "%s(a) = sum(layernorm(a) * %s)" % (fn, wn)],
               fn, [(x, "f64")])
    for i, (xs, ws, st, pad, dil) in enumerate(CONV_CASES[:8]):
        x, w = f32(rng.standard_normal(xs)), f32(rng.standard_normal(ws))
        out = conv_ref(x, w, st, pad, dil)
        expr = "conv2d(a, b%s)" % opt_str(st, pad, dil)
        for argnum in (0, 1):
            T.op("grad conv2d %d d%s" % (i, "xw"[argnum]), expr, lambda a, b, out=out: out,
                 [(x, "f64"), (w, "f64")], argnum=argnum)
    # the strided transposed convolutions (passes/convgrad.c) in f64
    for i, (xs, ws, st, pad, dil) in enumerate(WIDE_CONV_CASES):
        if st == 1:
            continue
        x, w = f32(rng.standard_normal(xs)), f32(rng.standard_normal(ws))
        out = conv_ref(x, w, st, pad, dil)
        T.op("grad conv2d wide %d dx" % i, "conv2d(a, b%s)" % opt_str(st, pad, dil, "im2col"),
             lambda a, b, out=out: out, [(x, "f64"), (w, "f64")], argnum=0)
    # each lowering's backward pass, on every case
    for i, (xs, ws, st, pad, dil) in enumerate(CONV_CASES):
        x, w = f32(rng.standard_normal(xs)), f32(rng.standard_normal(ws))
        out = conv_ref(x, w, st, pad, dil)
        for low in LOWERINGS:
            expr = "conv2d(a, b%s)" % opt_str(st, pad, dil, low)
            for argnum in (0, 1):
                for S.threads in THREADS:
                    T.op("grad conv2d %d lowering=%s d%s threads=%d" % (i, low, "xw"[argnum], S.threads), expr,
                         lambda a, b, out=out: out, [(x, "f64"), (w, "f64")], argnum=argnum)
                S.threads = None
    x = f32(rng.standard_normal((2, 2, 6, 5)))
    for k, st, pad in ((2, None, 0), (3, 2, 1), (2, 1, 0)):
        o = "" if st is None else ", stride=%d" % st
        o += "" if not pad else ", pad=%d" % pad
        T.op("grad maxpool2d k=%d s=%s p=%d" % (k, st, pad), "maxpool2d(a, %d%s)" % (k, o),
             lambda a, k=k, st=st, pad=pad: pool_ref(a, k, st, pad), [(x, "f64")])
        T.op("grad avgpool2d k=%d s=%s p=%d" % (k, st, pad), "avgpool2d(a, %d%s)" % (k, o),
             lambda a, k=k, st=st, pad=pad: pool_ref(a, k, st, pad, True), [(x, "f64")])
    table = f32(rng.standard_normal((5, 3)))
    idx = np.array([[4, 0], [2, 2]])
    T.op("grad take (repeated rows add up)", "take(a, %s)" % lit(idx, "i32"), lambda a: a[idx], [(table, "f64")])
    vals = f32(rng.standard_normal((2, 2, 3)))
    T.op("grad scatter_add", "scatter_add(a, %s, 5)" % lit(idx, "i32"), lambda a: np.zeros((5, 3)), [(vals, "f64")])
    # second order through the window ops: col2im's gradient is im2col
    x, w = f32(rng.standard_normal((1, 2, 5, 5))), f32(rng.standard_normal((2, 2, 3, 3)))
    fn, gn = S.fresh("F"), S.fresh("G")
    wl = lit(w, "f64")
    T.core("grad of grad through conv2d",
           ["%s(a) = sum(conv2d(a, %s, pad=1) ^ 2)" % (gn, wl),
            "%s(a) = sum(grad(%s)(a) * sin(a))" % (fn, gn)], fn, [(x, "f64")])
    # second order through pooling: avgpool's backward is col2im, whose is im2col
    for op, k, st, pad in (("avgpool2d", 2, None, 0), ("avgpool2d", 3, 2, 1), ("avgpool2d", 2, 1, 0),
                           ("maxpool2d", 2, None, 0), ("maxpool2d", 3, 2, 1)):
        x = f32(rng.standard_normal((2, 2, 6, 5)))
        fn, gn = S.fresh("F"), S.fresh("G")
        T.core("grad of grad through %s k=%d s=%s p=%d" % (op, k, st, pad),
               ["%s(a) = sum(%s(a * a, %s) ^ 2)" % (gn, op, pool_opts(k, st, pad)),
                "%s(a) = sum(grad(%s)(a) * sin(a))" % (fn, gn)], fn, [(x, "f64")])
    fn = S.fresh("F")
    T.core("grad through conv, pool and dense",
           ["%s(a) = sum(tanh(flatten(maxpool2d(relu(conv2d(a, %s, pad=\"same\")), 2)) @ %s))"
            % (fn, wl, lit(f32(rng.standard_normal((8, 3))), "f64"))], fn,
           [(f32(rng.uniform(0.2, 1.0, (2, 2, 4, 4))), "f64")])


def activations(S):
    """gelu (exact and tanh), silu, leaky_relu, elu against PyTorch's definitions, in f32 and f64."""
    r = np.random.default_rng(79)
    x = np.concatenate([r.uniform(-6, 6, 20), [0.0, -0.0, 40.0, -40.0, 1e-3]]).astype(np.float32)
    erf = np.vectorize(math.erf)
    xd = x.astype(np.float64)
    cases = {
        "gelu(%s)": 0.5 * xd * (1 + erf(xd / np.sqrt(2))),
        "gelu(%s, approximate=\"tanh\")": 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3))),
        "silu(%s)": xd / (1 + np.exp(-xd)),
        "leaky_relu(%s)": np.where(xd > 0, xd, 0.01 * xd),
        "leaky_relu(%s, slope=0.2)": np.where(xd > 0, xd, 0.2 * xd),
        "elu(%s)": np.where(xd > 0, xd, np.expm1(np.minimum(xd, 0))),
        "elu(%s, 2.5)": np.where(xd > 0, xd, 2.5 * np.expm1(np.minimum(xd, 0))),
    }
    for expr, want in cases.items():
        # (f32: the printed 6 digits, and 1 + erf(x) cancelling where gelu is ~1e-7, as in PyTorch)
        S.add("activation %s f32" % (expr % "x"), [], expr % lit(x), expect_close(want, rtol=1e-5, atol=2e-6))
        S.add("activation %s f64" % (expr % "x"), [], "%s - %s" % (expr % lit(x, "f64"), lit(f32(want), "f64")),
              expect_f64(f32(want), want, rtol=1e-12, atol=1e-15))


def stats_and_losses(S):
    """var and std as NumPy's (ddof=0), one_hot as np.eye rows, sigmoid_cross_entropy as
    PyTorch's BCEWithLogitsLoss elementwise (stable at any logit)."""
    r = np.random.default_rng(80)
    x = f32(r.standard_normal((3, 4, 5)) * 2 + 1)
    for ax, keep in ((None, False), (0, False), (-1, True), ((0, 2), False), ((1, 2), True)):
        kw = "" if ax is None else ", axis=%s" % (list(ax) if isinstance(ax, tuple) else ax)
        kw += ", keepdims=true" if keep else ""
        for fn, ref in (("var", np.var), ("std", np.std)):
            want = ref(x.astype(np.float64), axis=ax, keepdims=keep)
            S.add("%s(x%s)" % (fn, kw), [], "%s(%s%s)" % (fn, lit(x), kw), expect_close(want, rtol=1e-5, atol=1e-6))
    S.add("var f64", [], "var(%s, axis=1) - %s" % (lit(x, "f64"), lit(f32(np.var(x.astype(np.float64), axis=1)), "f64")),
          expect_f64(f32(np.var(x.astype(np.float64), axis=1)), np.var(x.astype(np.float64), axis=1)))
    S.add("var of integers is f32", [], "var(cast([1, 2, 3, 4], i32))", expect_close(1.25))
    lab = r.integers(0, 5, (2, 3))
    S.add("one_hot", [], "one_hot(%s, 5)" % lit(lab, "i32"), expect_exact(np.eye(5)[lab]))
    S.add("one_hot i32 out of range is zeros", [], "one_hot(cast([0, -1, 3], i64), 3, dtype=i32)",
          expect_exact(np.array([[1, 0, 0], [0, 0, 0], [0, 0, 0]])))
    z = np.concatenate([r.standard_normal(10) * 4, [-1000.0, 1000.0, 0.0]]).astype(np.float32)
    t = np.concatenate([r.uniform(0, 1, 10), [0.0, 1.0, 1.0]]).astype(np.float32)
    zd, td = z.astype(np.float64), t.astype(np.float64)
    want = np.maximum(zd, 0) - zd * td + np.log1p(np.exp(-np.abs(zd)))
    S.add("sigmoid_cross_entropy", [], "sigmoid_cross_entropy(%s, %s)" % (lit(z), lit(t)),
          expect_close(want, rtol=1e-5, atol=1e-5))


def losses(S, rng):
    """lib/nn.kiln's huber and smoothed_cross_entropy against PyTorch's
    definitions in NumPy, and their gradients in f64 against finite differences."""
    r = np.random.default_rng(88)
    p, t = f32(r.standard_normal((3, 4)) * 2), f32(r.standard_normal((3, 4)))
    for delta in (1.0, 0.5, 2.5):
        d = np.abs(p - t)
        want = np.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
        S.add("loss huber delta %g" % delta, ['import "nn"'], "huber(%s, %s, delta=%g)" % (lit(p), lit(t), delta),
              expect_close(want, rtol=1e-5, atol=1e-6))
    z = f32(r.standard_normal((5, 7)) * 3)
    y = r.integers(0, 7, 5)
    ls = z - z.max(-1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(-1, keepdims=True))
    for eps in (0.0, 0.1, 1.0):
        want = (1 - eps) * -ls[np.arange(5), y] + eps * -ls.mean(-1)
        S.add("loss smoothed_cross_entropy eps %g" % eps, ['import "nn"'],
              "smoothed_cross_entropy(%s, %s, %g)" % (lit(z), lit(y, "i32"), eps), expect_close(want, rtol=1e-5, atol=1e-6))
    S.add("loss smoothed_cross_entropy batch of sequences", ['import "nn"'],
          "smoothed_cross_entropy(%s, %s, 0.2)" % (lit(z.reshape(1, 5, 7)), lit(y.reshape(1, 5), "i64")),
          expect_close(((0.8 * -ls[np.arange(5), y]) + 0.2 * -ls.mean(-1)).reshape(1, 5), rtol=1e-5, atol=1e-6))
    T = GC(S, r)
    w = f32(r.standard_normal((3, 4)))
    fn, wn = S.fresh("HU"), S.fresh("Wh")
    x = f32(t + np.where(r.random((3, 4)) < 0.5, -1, 1) * r.uniform(0.1, 0.8, (3, 4)) * np.where(r.random((3, 4)) < 0.5, 1, 3))
    T.core("loss huber gradient", ['import "nn"', "%s = %s" % (wn, lit(t, "f64")), "%s(a) = sum(huber(a, %s, delta=1))" % (fn, wn)],
           fn, [(x, "f64")])
    fn = S.fresh("SC")
    T.core("loss smoothed_cross_entropy gradient", ['import "nn"', "%s(a) = sum(smoothed_cross_entropy(a, %s, 0.3) * %s)"
                                                    % (fn, lit(y, "i32"), lit(f32(r.standard_normal(5)), "f64"))],
           fn, [(z, "f64")])


def build(S, rng):
    stats_and_losses(S)
    activations(S)
    forward(S, rng)
    gradients(S, rng)
    wide_conv_gradients(S, rng)
    winograd_layers(S, rng)
    conv_bias_gradients(S, rng)
    pooling(S, rng)
    attention_checks(S, rng)
    losses(S, rng)


if __name__ == "__main__":
    main(build)
