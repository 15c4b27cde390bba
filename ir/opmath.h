// The f32 exp, tanh, erf, log1p and expm1 that Kiln's ops compute, and // and %
// in every dtype, defined once for the two
// places that need them: passes/fold.c compiles these functions, and both
// emitters print the same text (KILN_OPMATH_TEXT) into generated code. libm's
// tanhf and erff are scalar calls (about 30 ns each; Clang 14 maps neither to
// libmvec), these are polynomials and selects that vectorize, fitted in f64
// for relative error: over all floats within 0.99 ulp of the exact value
// (exp), 1.3 (tanh), 2.8 (erf), 2.6 (log1p, expm1) with libm's logf under
// them (tests/test_passes.c).
//
// exp: libm's expf vectorizes only as a call into libmvec, one call per 8
// floats and a scalar call per element of a loop's tail (a softmax row of 28:
// 3 vector and 4 scalar calls), half of the transformer's softmax time. This
// one is Cephes's: x = n ln2 + r by Cody and Waite's two-part ln2, e^r by a
// degree-7 polynomial, times 2^n as two powers of two (exact, and right for
// results below the normal range, n down to -150). n comes from adding
// 1.5 * 2^23, whose low bits then hold it: no float-to-int conversion, which
// is undefined out of range. x is clamped first (to -104 and 89, beyond which
// the result is 0 or inf anyway); NaN stays NaN.
//
// tanh: |x| < 0.625: x + x^3 P(x^2); else 1 - 2 / (e^(2|x|) + 1), which is 1
// for large |x| (e^x overflows to inf) and NaN for NaN.
// erf: |x| < 1: x P(x^2); below 3.95: 1 - e^(-x^2) R(1/|x|) / |x| (erfc's
// asymptotic form); beyond, 1 in f32 (NaN stays NaN).
// FN is the functions' storage class; NOCONTRACT keeps each a * b + c two
// roundings (the text's KILN_NOCONTRACT), so the folder and the kernels agree.
#ifndef KILN_OPMATH_H
#define KILN_OPMATH_H

// The host's compiles of the functions (passes/fold.c, the tests) define
// KILN_OPMATH_HOST first: bit casts as the generated code's prelude has them.
#ifdef KILN_OPMATH_HOST
#include <stdint.h>
#include <string.h>
static inline uint32_t kiln_host_as_uint(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static inline float kiln_host_as_float(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }
#define KILN_AS_UINT(x) kiln_host_as_uint(x)
#define KILN_AS_FLOAT(b) kiln_host_as_float(b)
#endif

#define KILN_OPMATH(FN, NOCONTRACT)                                                              \
  FN float kiln_expf(float x) {                                                                  \
    NOCONTRACT                                                                                   \
    float c = x < -104.0f ? -104.0f : x > 89.0f ? 89.0f : x;                                     \
    float t = c * 1.44269504f + 12582912.0f, n = t - 12582912.0f;                                \
    int32_t k = (int32_t)(KILN_AS_UINT(t) - 0x4B400000u), k1 = k / 2, k2 = k - k1;              \
    float r = c - n * 0.693359375f;                                                              \
    r = r - n * -2.12194440e-4f;                                                                 \
    float p = 1.9875691500e-4f;                                                                  \
    p = p * r + 1.3981999507e-3f; p = p * r + 8.3334519073e-3f; p = p * r + 4.1665795894e-2f;   \
    p = p * r + 1.6666665459e-1f; p = p * r + 5.0000001201e-1f;                                  \
    float y = p * (r * r) + r + 1.0f;                                                            \
    y = y * KILN_AS_FLOAT((uint32_t)(k1 + 127) << 23) * KILN_AS_FLOAT((uint32_t)(k2 + 127) << 23); \
    return x == x ? y : x;                                                                       \
  }                                                                                              \
  FN float kiln_tanhf(float x) {                                                                 \
    NOCONTRACT                                                                                   \
    float a = fabsf(x), t = a * a, p = 2.289736876e-03f;                                         \
    p = p * t + -8.340986446e-03f; p = p * t + 2.176789753e-02f; p = p * t + -5.395911634e-02f;  \
    p = p * t + 1.333330274e-01f; p = p * t + -3.333333433e-01f;                                 \
    float small = a + (a * t) * p, big = 1.0f - 2.0f / (kiln_expf(2.0f * a) + 1.0f);             \
    return copysignf(a < 0.625f ? small : big, x);                                               \
  }                                                                                              \
  FN float kiln_erff(float x) {                                                                  \
    NOCONTRACT                                                                                   \
    float a = fabsf(x), t = a * a, p = 1.055710413e-06f;                                         \
    p = p * t + -1.389633053e-05f; p = p * t + 1.195442965e-04f; p = p * t + -8.542455616e-04f;  \
    p = p * t + 5.223774817e-03f; p = p * t + -2.686613053e-02f; p = p * t + 1.128379107e-01f;   \
    p = p * t + -3.761263788e-01f; p = p * t + 1.128379226e+00f;                                 \
    float u = 1.0f / (a > 1.0f ? a : 1.0f), r = -3.680403903e-02f;                               \
    r = r * u + 1.640424132e-01f; r = r * u + -2.626735270e-01f; r = r * u + 9.502913803e-02f;   \
    r = r * u + 2.561396062e-01f; r = r * u + -3.647153378e-01f; r = r * u + 1.323715877e-02f;   \
    r = r * u + 5.633278489e-01f;                                                                \
    float small = a * p, big = 1.0f - kiln_expf(-t) * (r * u);                                   \
    return copysignf(a < 1.0f ? small : a < 3.95f ? big : a == a ? 1.0f : a, x);                 \
  }

// log1p and expm1 by Goldberg's and Kahan's forms on logf (vectorized by
// libmvec) and kiln_expf: log1p(x) = log(u) x / (u - 1) with u = 1 + x, x itself where
// u == 1; expm1(x) = (u - 1) x / log(u) with u = e^x, x where u == 1 and -1
// where u - 1 is (libm's are within 1 ulp; these are SLEEF's faster class).
#define KILN_OPMATH_LOG(FN, NOCONTRACT)                                                          \
  FN float kiln_log1pf(float x) {                                                                \
    NOCONTRACT                                                                                   \
    float u = 1.0f + x, r = logf(u) * (x / (u - 1.0f));                                          \
    return u == 1.0f ? x : u == INFINITY ? u : r;                                                \
  }                                                                                              \
  FN float kiln_expm1f(float x) {                                                                \
    NOCONTRACT                                                                                   \
    float u = kiln_expf(x), um1 = u - 1.0f, r = um1 * (x / logf(u));                             \
    return u == 1.0f ? x : um1 == -1.0f ? -1.0f : u == INFINITY ? u : r;                         \
  }

// Floor division and the remainder with the divisor's sign (NumPy's
// floor_divide and remainder, Python's // and %), by dtype (the op table's $t).
// The float forms follow NumPy's npy_divmod: the quotient comes from fmod's
// exact remainder, so a // b and a % b agree (a == b * (a // b) + a % b up to
// rounding) where floor(a / b) would not (1 // 0.1 is 9, as 1 % 0.1 is nearly
// 0.1). Division by zero gives a / b (inf or NaN) for floats and 0 for
// integers, as NumPy does; the integer forms never divide by 0 or -1, whose
// quotient of the most negative value overflows (it wraps instead).
#define KILN_OPMATH_DIVMOD_FLOAT(FN, T, S, FMOD, FLOOR, COPYSIGN)                                \
  FN T kiln_mod_##S(T a, T b) {                                                                  \
    T m = FMOD(a, b);                                                                            \
    if (b == 0) return m;                                                                        \
    return m != 0 ? ((b < 0) != (m < 0) ? m + b : m) : COPYSIGN((T)0, b);                       \
  }                                                                                              \
  FN T kiln_floordiv_##S(T a, T b) {                                                             \
    if (b == 0) return a / b;                                                                    \
    T m = FMOD(a, b), d = (a - m) / b;                                                           \
    if (m != 0 && (b < 0) != (m < 0)) d -= 1;                                                    \
    if (d == 0) return COPYSIGN((T)0, a / b);                                                    \
    T f = FLOOR(d);                                                                              \
    return d - f > (T)0.5 ? f + 1 : f;                                                           \
  }
#define KILN_OPMATH_DIVMOD(FN)                                                                   \
  KILN_OPMATH_DIVMOD_FLOAT(FN, float, f32, fmodf, floorf, copysignf)                             \
  KILN_OPMATH_DIVMOD_FLOAT(FN, double, f64, fmod, floor, copysign)                               \
  FN int64_t kiln_floordiv_i64(int64_t a, int64_t b) {                                           \
    if (b == 0) return 0;                                                                        \
    if (b == -1) return (int64_t)(0 - (uint64_t)a);                                              \
    return a / b - (a % b != 0 && (a < 0) != (b < 0));                                           \
  }                                                                                              \
  FN int64_t kiln_mod_i64(int64_t a, int64_t b) {                                                \
    if (b == 0 || b == -1) return 0;                                                             \
    int64_t r = a % b;                                                                           \
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;                                             \
  }                                                                                              \
  FN int32_t kiln_floordiv_i32(int32_t a, int32_t b) { return (int32_t)kiln_floordiv_i64(a, b); } \
  FN int32_t kiln_mod_i32(int32_t a, int32_t b) { return (int32_t)kiln_mod_i64(a, b); }

#define KILN_OPMATH_STR_(...) #__VA_ARGS__
#define KILN_OPMATH_STR(...) KILN_OPMATH_STR_(__VA_ARGS__)
// The definitions as one line of C for generated code, whose prelude defines
// KILN_FN and KILN_NOCONTRACT.
#define KILN_OPMATH_TEXT \
  KILN_OPMATH_STR(KILN_OPMATH(KILN_FN, KILN_NOCONTRACT) KILN_OPMATH_LOG(KILN_FN, KILN_NOCONTRACT) KILN_OPMATH_DIVMOD(KILN_FN)) "\n"

#endif
