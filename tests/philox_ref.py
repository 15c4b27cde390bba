"""Kiln's random numbers (runtime/rt.h's specification) computed by NumPy alone:
Philox4x32-10 on uint64 arrays, and the uniforms and Box-Muller normals with the
normative polynomial log and cos in f32 and f64, one IEEE operation at a time
(NumPy contracts nothing into a multiply-add). So a test can ask for Kiln's
values bit for bit from an independent implementation, on any device: the
CPU's JIT, the fallback compiler, and CUDA (where the values must be the
CPU's). idx: an array of element indices (the row-major linear index)."""
import numpy as np

M0, M1, W0, W1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57), 0x9E3779B9, 0xBB67AE85
MASK = np.uint64(0xFFFFFFFF)


def philox(index, stream, seed):
    """Philox4x32-10 of ctr = {index lo, index hi, stream, 0}, key = seed's halves, for an array of indices."""
    idx = np.asarray(index, np.uint64)
    c0, c1 = idx & MASK, idx >> np.uint64(32)
    c2 = np.full_like(idx, stream)
    c3 = np.zeros_like(idx)
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & MASK,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & MASK)
        k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def top53(hi, lo):
    return ((hi << np.uint64(32)) | lo) >> np.uint64(11)


def uniform_f32(seed, idx):
    o = philox(idx, 0, seed)
    return (o[0] >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24)


def uniform_f64(seed, idx):
    o = philox(idx, 0, seed)
    return top53(o[0], o[1]).astype(np.float64) * 2.0 ** -53


F = np.float32


def poly_logf(x):
    b = x.view(np.uint32)
    e = (b >> np.uint32(23)).astype(np.int64) - 127
    m = ((b & np.uint32(0x007fffff)) | np.uint32(0x3f800000)).view(np.float32)
    big = m > F(1.41421356)
    m = np.where(big, m * F(0.5), m)
    e = np.where(big, e + 1, e)
    f = m - F(1.0)
    z = f * f
    p = np.full_like(f, F(7.0376836292e-2))
    for c in (-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
              2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1):
        p = p * f + F(c)
    fe = e.astype(np.float32)
    y = f * z
    y = y * p
    y = y + F(-2.12194440e-4) * fe
    y = y + F(-0.5) * z
    r = f + y
    return r + F(0.693359375) * fe


def poly_cos2pi(m):
    a = (m + np.uint64(0x200000)) & MASK
    q = (a >> np.uint64(22)) & np.uint64(3)
    x = ((a & np.uint64(0x3fffff)).astype(np.int64) - 0x200000).astype(np.float32) * (F(6.28318548) * F(2.0 ** -24))
    z = x * x
    c = np.full_like(z, F(2.443315711809948e-5))
    c = c * z + F(-1.388731625493765e-3)
    c = c * z + F(4.166664568298827e-2)
    c = c * z
    c = c * z
    c = c + F(-0.5) * z
    c = c + F(1.0)
    s = np.full_like(z, F(-1.9515295891e-4))
    s = s * z + F(8.3321608736e-3)
    s = s * z + F(-1.6666654611e-1)
    s = s * z
    s = s * x
    s = s + x
    return np.where(q == 0, c, np.where(q == 2, -c, np.where(q == 3, s, -s)))


def normal_f32(seed, idx):
    o = philox(idx, 1, seed)
    u1 = ((o[0] >> np.uint64(8)) + np.uint64(1)).astype(np.float32) * F(2.0 ** -24)
    return np.sqrt(F(-2.0) * poly_logf(u1)) * poly_cos2pi(o[1] >> np.uint64(8))


def poly_log(x):
    b = x.view(np.uint64)
    e = (b >> np.uint64(52)).astype(np.int64) - 1023
    m = ((b & np.uint64(0x000fffffffffffff)) | np.uint64(0x3ff0000000000000)).view(np.float64)
    big = m > 1.4142135623730951
    m = np.where(big, m * 0.5, m)
    e = np.where(big, e + 1, e)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = 2.222219843214978396e-01 + w * 1.531383769920937332e-01
    t1 = 3.999999999940941908e-01 + w * t1
    t1 = w * t1
    t2 = 1.818357216161805012e-01 + w * 1.479819860511658591e-01
    t2 = 2.857142874366239149e-01 + w * t2
    t2 = 6.666666666666735130e-01 + w * t2
    t2 = z * t2
    r = t2 + t1
    hfsq = 0.5 * f * f
    de = e.astype(np.float64)
    return de * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + r) + de * 1.90821492927058770002e-10)) - f)


def poly_cos2pi64(k):
    a = k + np.uint64(0x4000000000000)
    q = (a >> np.uint64(51)) & np.uint64(3)
    x = ((a & np.uint64(0x7ffffffffffff)).astype(np.int64) - 0x4000000000000).astype(np.float64) * (6.283185307179586 * 2.0 ** -53)
    z = x * x
    w = z * z
    r = z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * 2.48015872894767294178e-05))
    r = r + w * w * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11))
    hz = 0.5 * z
    v = 1.0 - hz
    c = v + (((1.0 - v) - hz) + z * r)
    r2 = 8.33333333332248946124e-03 + z * (-1.98412698298579493134e-04 + z * 2.75573137070700676789e-06)
    r2 = r2 + z * w * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)
    v2 = z * x
    s = x + v2 * (-1.66666666666666324348e-01 + z * r2)
    return np.where(q == 0, c, np.where(q == 2, -c, np.where(q == 3, s, -s)))


def normal_f64(seed, idx):
    o = philox(idx, 1, seed)
    u1 = (top53(o[0], o[1]) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
    return np.sqrt(-2.0 * poly_log(u1)) * poly_cos2pi64(top53(o[2], o[3]))
