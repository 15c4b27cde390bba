// philox.c: Philox4x32-10 and the uniform/normal streams built on it.
// The normals' arithmetic here is normative for generated C and CUDA (see rt.h): keep
// each operation as written, one IEEE rounding each, no FMA, no libm.
#include "rt.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF   // gcc's -std=c11 already keeps a*b+c as two roundings
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void rt_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static void block(uint64_t seed, uint64_t index, uint32_t stream, uint32_t o[4]) {
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), stream, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    rt_philox4x32(ctr, key, o);
}

static uint64_t top53(uint32_t hi, uint32_t lo) { return (((uint64_t)hi << 32) | lo) >> 11; }

float rt_rand_uniform_f32(uint64_t seed, uint64_t index) {
    uint32_t o[4];
    block(seed, index, 0, o);
    return (float)(o[0] >> 8) * 0x1p-24f;
}

double rt_rand_uniform_f64(uint64_t seed, uint64_t index) {
    uint32_t o[4];
    block(seed, index, 0, o);
    return (double)top53(o[0], o[1]) * 0x1p-53;
}

// log(x) for a positive normal float (Cephes logf): x = m * 2^e with m in (sqrt(1/2),
// sqrt(2)], log(m) by a polynomial in f = m - 1, e * ln2 added in two parts (Cody-Waite).
static float poly_logf(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    int e = (int)(b >> 23) - 127;
    b = (b & 0x007fffffu) | 0x3f800000u;
    float m;
    memcpy(&m, &b, 4);   // in [1, 2)
    if (m > 1.41421356f) {
        m = m * 0.5f;
        e = e + 1;
    }
    float f = m - 1.0f;   // exact
    float z = f * f;
    float p = 7.0376836292e-2f;
    p = p * f + -1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f + -1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f + -1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f + -2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    float fe = (float)e;
    float y = f * z;
    y = y * p;
    y = y + -2.12194440e-4f * fe;
    y = y + -0.5f * z;
    float r = f + y;
    return r + 0.693359375f * fe;
}

// cos(2*pi * m / 2^24) for m < 2^24. The quadrant comes from the integer exactly:
// a = m + 2^21 rounds to the nearest quarter turn q, and the rest r in [-2^21, 2^21)
// gives x = r * (2*pi / 2^24) in [-pi/4, pi/4]. Cephes sinf/cosf polynomials.
static float poly_cos2pi(uint32_t m) {
    uint32_t a = m + 0x200000u;
    uint32_t q = (a >> 22) & 3u;
    float x = (float)((int32_t)(a & 0x3fffffu) - 0x200000) * (6.28318548f * 0x1p-24f);
    float z = x * x;
    float c, s;
    if (q == 0 || q == 2) {
        c = 2.443315711809948e-5f;
        c = c * z + -1.388731625493765e-3f;
        c = c * z + 4.166664568298827e-2f;
        c = c * z;
        c = c * z;
        c = c + -0.5f * z;
        c = c + 1.0f;
        return q == 0 ? c : -c;
    }
    s = -1.9515295891e-4f;
    s = s * z + 8.3321608736e-3f;
    s = s * z + -1.6666654611e-1f;
    s = s * z;
    s = s * x;
    s = s + x;
    return q == 3 ? s : -s;   // cos(x + pi/2) = -sin(x), cos(x + 3pi/2) = sin(x)
}

float rt_rand_normal_f32(uint64_t seed, uint64_t index) {
    uint32_t o[4];
    block(seed, index, 1, o);
    float u1 = (float)((o[0] >> 8) + 1) * 0x1p-24f;
    return sqrtf(-2.0f * poly_logf(u1)) * poly_cos2pi(o[1] >> 8);
}

// log(x) for a positive normal double (fdlibm's e_log.c): x = m * 2^e with m in
// (sqrt(1/2), sqrt(2)], f = m - 1, s = f / (2 + f), log(1 + f) by fdlibm's
// polynomial in s^2 (its odd and even terms apart), e * ln2 in two parts.
static double poly_log(double x) {
    uint64_t b;
    memcpy(&b, &x, 8);
    int e = (int)(b >> 52) - 1023;
    b = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m;
    memcpy(&m, &b, 8);   // in [1, 2)
    if (m > 1.4142135623730951) {
        m = m * 0.5;
        e = e + 1;
    }
    double f = m - 1.0;   // exact
    double s = f / (2.0 + f);
    double z = s * s;
    double w = z * z;
    double t1 = 2.222219843214978396e-01 + w * 1.531383769920937332e-01;
    t1 = 3.999999999940941908e-01 + w * t1;
    t1 = w * t1;
    double t2 = 1.818357216161805012e-01 + w * 1.479819860511658591e-01;
    t2 = 2.857142874366239149e-01 + w * t2;
    t2 = 6.666666666666735130e-01 + w * t2;
    t2 = z * t2;
    double r = t2 + t1;
    double hfsq = 0.5 * f * f;
    double de = (double)e;
    return de * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + r) + de * 1.90821492927058770002e-10)) - f);
}

// cos(2*pi * k / 2^53) for k < 2^53, as poly_cos2pi does it in f32: a = k + 2^50
// rounds to the nearest quarter turn q, the rest gives x in [-pi/4, pi/4]; then
// FreeBSD's k_cos.c and k_sin.c polynomials (within 1 ulp there).
static double poly_cos2pi64(uint64_t k) {
    uint64_t a = k + 0x4000000000000ull;
    uint32_t q = (uint32_t)(a >> 51) & 3u;
    double x = (double)((int64_t)(a & 0x7ffffffffffffull) - 0x4000000000000ll) * (6.283185307179586 * 0x1p-53);
    double z = x * x;
    double w = z * z;
    if (q == 0 || q == 2) {
        double r = z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * 2.48015872894767294178e-05));
        r = r + w * w * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11));
        double hz = 0.5 * z;
        double v = 1.0 - hz;
        double c = v + (((1.0 - v) - hz) + z * r);
        return q == 0 ? c : -c;
    }
    double r = 8.33333333332248946124e-03 + z * (-1.98412698298579493134e-04 + z * 2.75573137070700676789e-06);
    r = r + z * w * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10);
    double v = z * x;
    double s = x + v * (-1.66666666666666324348e-01 + z * r);
    return q == 3 ? s : -s;   // cos(x + pi/2) = -sin(x), cos(x + 3pi/2) = sin(x)
}

double rt_rand_normal_f64(uint64_t seed, uint64_t index) {
    uint32_t o[4];
    block(seed, index, 1, o);
    double u1 = (double)(top53(o[0], o[1]) + 1) * 0x1p-53;
    return sqrt(-2.0 * poly_log(u1)) * poly_cos2pi64(top53(o[2], o[3]));
}
