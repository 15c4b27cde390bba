// wino_tile.h: wino.c's code per tile for one vector width and tile size,
// included by wino.c once for each (it is not a header of its own): VL
// channels of the vector type VT at a time (8 for AVX2, 16 for AVX-512), on
// WA x WA tiles (alpha 6 or 8), names suffixed by T().
// The transforms are a large share of the time (on the CNN's second layer
// with AVX-512 and 8 lanes, as long as half of the 36 products), and their
// operations per tile go with the channels a vector holds.

static inline VT T(load)(const float *p) {
    VT v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void T(store)(float *p, VT v) { memcpy(p, &v, sizeof v); }
#define WA2 (WA * WA)   // frequencies
static const VT T(zero) = VEC(0), T(two) = VEC(2), T(four) = VEC(4), T(five) = VEC(5), T(eight) = VEC(8),
                T(sixteen) = VEC(16);

#if WA == 6
// B^T d for the six values d[0], d[s], ..., d[5s] (the rows of B^T:
// x^4 - 5x^2 + 4 and the like, one per point), into o[0], o[s], ...
static inline __attribute__((always_inline)) void T(bt)(VT *o, const VT *d, int s) {
    VT d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
    VT four = T(four), five = T(five), two = T(two);
    VT p = d3 + d4, q = d1 + d2, e = d4 - d3, f = d1 - d2, h = d4 - d2, k = d3 - d1;
    o[0] = four * d0 - five * d2 + d4;
    o[s] = p - four * q;
    o[2 * s] = e + four * f;
    o[3 * s] = h + two * k;
    o[4 * s] = h - two * k;
    o[5 * s] = four * d1 - five * d3 + d5;
}


// A^T f for the six values f[0], f[s], ..., f[5s] (A^T's row i is p^i at
// each point p, and 1 at infinity for the last row): the m outputs, at
// out[0], out[os], ...
static inline __attribute__((always_inline)) void T(at)(VT *out, int os, const VT *f, int s, const int m) {
    VT sp = f[s] + f[2 * s], sm = f[s] - f[2 * s], tp = f[3 * s] + f[4 * s], tm = f[3 * s] - f[4 * s];
    out[0] = f[0] + sp + tp;
    if (m > 1) out[os] = sm + T(two) * tm;
    if (m > 2) out[2 * os] = sp + T(four) * tp;
    if (m > 3) out[3 * os] = sm + T(eight) * tm;
    if (m > 4) out[4 * os] = sp + T(sixteen) * tp;
    out[(m - 1) * os] += f[5 * s];
}

// A g for the m values g[0], g[s], ... (A's row for point p is p's powers, and
// the last of them at infinity): the six values at z[0], z[zs], ...
static inline __attribute__((always_inline)) void T(ag)(VT *z, int zs, const VT *g, int s, const int m) {
    VT g0 = g[0], g1 = m > 1 ? g[s] : T(zero), g2 = m > 2 ? g[2 * s] : T(zero), g3 = m > 3 ? g[3 * s] : T(zero),
       g4 = m > 4 ? g[4 * s] : T(zero);
    VT even = g0 + g2 + g4, odd = g1 + g3, even2 = g0 + T(four) * g2 + T(sixteen) * g4, odd2 = T(two) * g1 + T(eight) * g3;
    z[0] = g0;
    z[zs] = even + odd;
    z[2 * zs] = even - odd;
    z[3 * zs] = even2 + odd2;
    z[4 * zs] = even2 - odd2;
    z[5 * zs] = g[(m - 1) * s];
}

#else
static const VT T(half) = VEC(0.5f), T(quarter) = VEC(0.25f), T(eighth) = VEC(0.125f), T(sixteenth) = VEC(0.0625f),
                T(p32) = VEC(32), T(p64) = VEC(64), T(m32) = VEC(0.03125f), T(m64) = VEC(0.015625f),
                T(five_4) = VEC(1.25f), T(five_2) = VEC(2.5f), T(seventeen_4) = VEC(4.25f), T(twentyone_4) = VEC(5.25f);

// Alpha 8, the points 0, +-1, +-2, +-1/2 and infinity. Each pair +-p of rows
// is an even part plus or minus an odd one: B^T's row for -p has the
// coefficients of p's with the odd powers' signs turned, and A^T's column for
// -p is p's powers with the odd ones' signs turned. The three pairs' rows,
// o[s] .. o[6s], from their parts:
static inline __attribute__((always_inline)) void T(pairs)(VT *o, int s, const VT *even, const VT *odd) {
    for (int k = 0; k < 3; k++) {
        o[(2 * k + 1) * s] = even[k] + odd[k];
        o[(2 * k + 2) * s] = even[k] - odd[k];
    }
}

static inline __attribute__((always_inline)) void T(bt)(VT *o, const VT *d, int s) {
    VT d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s], d6 = d[6 * s],
       d7 = d[7 * s];
    VT even[3] = {d2 + d6 - T(seventeen_4) * d4,                  // +-1
                  T(quarter) * d2 + d6 - T(five_4) * d4,          // +-2
                  T(four) * d2 + d6 - T(five) * d4};              // +-1/2
    VT odd[3] = {d1 + d5 - T(seventeen_4) * d3, T(half) * d1 + T(two) * d5 - T(five_2) * d3,
                 T(two) * d1 + T(half) * d5 - T(five_2) * d3};
    o[0] = d6 - d0 + T(twentyone_4) * (d2 - d4);
    T(pairs)(o, s, even, odd);
    o[7 * s] = d7 - d1 + T(twentyone_4) * (d3 - d5);
}

// A^T f (out_i = sum over the points of p^i f_p, plus f at infinity in the last).
static inline __attribute__((always_inline)) void T(at)(VT *out, int os, const VT *f, int s, const int m) {
    VT s1 = f[s] + f[2 * s], t1 = f[s] - f[2 * s], s2 = f[3 * s] + f[4 * s], t2 = f[3 * s] - f[4 * s],
       s3 = f[5 * s] + f[6 * s], t3 = f[5 * s] - f[6 * s];
    out[0] = f[0] + s1 + s2 + s3;
    if (m > 1) out[os] = t1 + T(two) * t2 + T(half) * t3;
    if (m > 2) out[2 * os] = s1 + T(four) * s2 + T(quarter) * s3;
    if (m > 3) out[3 * os] = t1 + T(eight) * t2 + T(eighth) * t3;
    if (m > 4) out[4 * os] = s1 + T(sixteen) * s2 + T(sixteenth) * s3;
    if (m > 5) out[5 * os] = t1 + T(p32) * t2 + T(m32) * t3;
    if (m > 6) out[6 * os] = s1 + T(p64) * s2 + T(m64) * s3;
    out[(m - 1) * os] += f[7 * s];
}

// A g (z_p = sum over i of p^i g_i; at infinity, the last g).
static inline __attribute__((always_inline)) void T(ag)(VT *z, int zs, const VT *g, int s, const int m) {
    VT g0 = g[0], g1 = m > 1 ? g[s] : T(zero), g2 = m > 2 ? g[2 * s] : T(zero), g3 = m > 3 ? g[3 * s] : T(zero),
       g4 = m > 4 ? g[4 * s] : T(zero), g5 = m > 5 ? g[5 * s] : T(zero), g6 = m > 6 ? g[6 * s] : T(zero);
    VT even[3] = {g0 + g2 + g4 + g6, g0 + T(four) * g2 + T(sixteen) * g4 + T(p64) * g6,
                  g0 + T(quarter) * g2 + T(sixteenth) * g4 + T(m64) * g6};
    VT odd[3] = {g1 + g3 + g5, T(two) * g1 + T(eight) * g3 + T(p32) * g5, T(half) * g1 + T(eighth) * g3 + T(m32) * g5};
    z[0] = g0;
    T(pairs)(z, zs, even, odd);
    z[7 * zs] = g[(m - 1) * s];
}
#endif

// The tile's alpha x alpha window of channels [c0, c0 + cn), cn <= VL, zero
// outside the image (the padding) and in the lanes past cn.
static inline __attribute__((always_inline)) void T(load_tile)(const Wino *q, int64_t n, int64_t y0, int64_t x0,
                                                             int64_t c0, int cn, VT *d) {
    const float *base = q->x + n * q->sn + c0 * q->sc;
    int64_t sh = q->sh, sw = q->sw;
    if (q->sc == 1 && cn == VL && y0 >= 0 && y0 + WA <= q->h && x0 >= 0 && x0 + WA <= q->w) {
        for (int i = 0; i < WA; i++)   // inside the image, channels adjacent: plain loads
            for (int j = 0; j < WA; j++) d[i * WA + j] = T(load)(base + (y0 + i) * sh + (x0 + j) * sw);
        return;
    }
    for (int i = 0; i < WA; i++) {
        int64_t y = y0 + i;
        for (int j = 0; j < WA; j++) {
            int64_t x = x0 + j;
            if (y < 0 || y >= q->h || x < 0 || x >= q->w) {
                d[i * WA + j] = T(zero);
                continue;
            }
            const float *p = base + y * sh + x * sw;
            if (q->sc == 1 && cn == VL) {
                d[i * WA + j] = T(load)(p);
                continue;
            }
            float l[VL] = {0};
            for (int v = 0; v < cn; v++) l[v] = p[v * q->sc];
            d[i * WA + j] = T(load)(l);
        }
    }
}

// V = (B^T d_c B)[xi] for the block's nt tiles from t0, tile tl's frequency
// xi at v[tl*ts + xi*xs] (C channels there); rows nt up to the next multiple
// of mr are zeros (the last panel's products read them).
static inline __attribute__((always_inline)) void T(input_body)(const Wino *q, int64_t t0, int64_t nt, float *v,
                                                                 int64_t ts, int64_t xs) {
    int64_t C = q->c;
    for (int64_t tl = 0; tl < nt; tl++) {
        int64_t n, ty, tx;
        tile_at(q, t0 + tl, &n, &ty, &tx);
        int64_t y0 = ty * q->ah.m - q->pt, x0 = tx * q->aw.m - q->pl;
        for (int64_t c0 = 0; c0 < C; c0 += VL) {
            int cn = C - c0 < VL ? (int)(C - c0) : VL;
            VT d[WA2], t[WA2];
            T(load_tile)(q, n, y0, x0, c0, cn, d);
            for (int j = 0; j < WA; j++) T(bt)(t + j, d + j, WA);          // down the columns
            for (int a = 0; a < WA; a++) T(bt)(d + a * WA, t + a * WA, 1);  // along the rows
            for (int xi = 0; xi < WA2; xi++) {
                float *dst = v + tl * ts + xi * xs + c0;
                if (cn == VL) T(store)(dst, d[xi]);
                else memcpy(dst, &d[xi], sizeof(float) * (size_t)cn);
            }
        }
    }
    for (int64_t tl = nt; tl < round_up(nt, q->kn->mr); tl++)
        for (int xi = 0; xi < WA2; xi++) memset(v + tl * ts + xi * xs, 0, sizeof(float) * (size_t)C);
}

// One tile's mh x mw outputs of VL channels (res[a*mw + e]) from its WA2
// products, VL channels of each at f[xi*op]. Called with constant mh and mw
// (output_body), so its arrays stay in registers.
static inline __attribute__((always_inline)) void T(tile_outputs)(const float *f, int64_t op, VT *res, const int mh,
                                                                const int mw) {
    VT s[(WA - 1) * WA];
    for (int j = 0; j < WA; j++) {   // down the columns
        VT col[WA];
        for (int i = 0; i < WA; i++) col[i] = T(load)(f + (i * WA + j) * op);
        T(at)(s + j, WA, col, 1, mh);
    }
    for (int a = 0; a < mh; a++) T(at)(res + a * mw, 1, s + a * WA, 1, mw);   // along the rows
}

// The block's outputs from its products (M[tl][xi][o]), VL channels at a time,
// written to C (plus beta times what it held) where they fall inside the image.
static inline __attribute__((always_inline)) void T(output_body)(const Wino *q, int64_t t0, int64_t nt, const float *m) {
    int mh = q->ah.m, mw = q->aw.m;
    int64_t op = q->op, O = q->o, OH = q->oh, OW = q->ow, rs = q->y_rs;
    float beta = q->beta, *y = q->y;
    for (int64_t tl = 0; tl < nt; tl++) {
        int64_t n, ty, tx;
        tile_at(q, t0 + tl, &n, &ty, &tx);
        int rows = OH - ty * mh < mh ? (int)(OH - ty * mh) : mh, cols = OW - tx * mw < mw ? (int)(OW - tx * mw) : mw;
        float *y0 = y + ((n * OH + ty * mh) * OW + tx * mw) * rs;
        for (int64_t o0 = 0; o0 < O; o0 += VL) {
            int on = O - o0 < VL ? (int)(O - o0) : VL;
            const float *f = m + tl * WA2 * op + o0;
            VT res[(WA - 1) * (WA - 1)];
            switch (mh * 8 + mw) {   // square kernels' tiles (alpha 6: 5x5 to 2x2; 8: 5x5 to 3x3)
#if WA == 6
            case 2 * 8 + 2: T(tile_outputs)(f, op, res, 2, 2); break;
            case 4 * 8 + 4: T(tile_outputs)(f, op, res, 4, 4); break;
            case 3 * 8 + 3: T(tile_outputs)(f, op, res, 3, 3); break;
            case 5 * 8 + 5: T(tile_outputs)(f, op, res, 5, 5); break;
#else
            case 4 * 8 + 4: T(tile_outputs)(f, op, res, 4, 4); break;
            case 5 * 8 + 5: T(tile_outputs)(f, op, res, 5, 5); break;
            case 6 * 8 + 6: T(tile_outputs)(f, op, res, 6, 6); break;
#endif
            default: T(tile_outputs)(f, op, res, mh, mw);
            }
            for (int a = 0; a < rows; a++)
                for (int e = 0; e < cols; e++) {
                    float *dst = y0 + (a * OW + e) * rs + o0;
                    VT v = res[a * mw + e];
                    if (beta != 0) {
                        float l[VL] = {0};
                        memcpy(l, dst, sizeof(float) * (size_t)on);
                        v += beta * T(load)(l);
                    }
                    if (on == VL) T(store)(dst, v);
                    else memcpy(dst, &v, sizeof(float) * (size_t)on);
                }
        }
    }
}

static inline __attribute__((always_inline)) void T(block_body)(Wino *q, int64_t t0, float *v, float *m) {
    const GemmKern *kn = q->kn;
    int64_t nt = q->tiles - t0 < q->bt ? q->tiles - t0 : q->bt, C = q->c, nr = kn->nr, mr = kn->mr;
    T(input_body)(q, t0, nt, v, WA2 * C, C);
    for (int xi = 0; xi < WA2; xi++)
        for (int64_t jp = 0; jp < q->npan; jp++) {
            const float *u = q->u + ((xi * q->npan + jp) * C) * nr;
            for (int64_t r = 0; r < nt; r += mr)
                kn->rows(C, v + (r * WA2 + xi) * C, WA2 * C, u, nr, m + (r * WA2 + xi) * q->op + jp * nr, WA2 * q->op, 0);
        }
    T(output_body)(q, t0, nt, m);
    if (q->epi) block_epilogue(q, t0, nt);
}


// ---- the weights' gradient: dU[xi][c][o] = sum over tiles of V .* (A dY A^T) ----

// dM[xi][tl][o] = (A_h dY_tile A_w^T)[xi] for the block's tiles, dY the
// product's B (pixel p, channel o at b[p*b_rs + o*b_cs]; zero past the
// outputs' edge); bsum[o] += dY summed over the tiles' outputs (the bias's
// gradient, with a row of ones).
static inline __attribute__((always_inline)) void T(grad_body)(const Wino *q, int64_t t0, int64_t nt, float *g,
                                                                float *bsum) {
    int mh = q->ah.m, mw = q->aw.m;
    int64_t op = q->op, O = q->o, OH = q->oh, OW = q->ow;
    for (int64_t tl = 0; tl < nt; tl++) {
        int64_t n, ty, tx;
        tile_at(q, t0 + tl, &n, &ty, &tx);
        int rows = OH - ty * mh < mh ? (int)(OH - ty * mh) : mh, cols = OW - tx * mw < mw ? (int)(OW - tx * mw) : mw;
        int64_t p0 = (n * OH + ty * mh) * OW + tx * mw;
        for (int64_t o0 = 0; o0 < op; o0 += VL) {
            int on = O - o0 < VL ? (O - o0 > 0 ? (int)(O - o0) : 0) : VL;
            VT d[(WA - 1) * (WA - 1)], r[(WA - 1) * WA], z[WA2], sum = T(zero);
            for (int a = 0; a < mh; a++)
                for (int e = 0; e < mw; e++) {
                    VT v = T(zero);
                    if (a < rows && e < cols) {
                        const float *p = q->b + (p0 + a * OW + e) * q->b_rs + o0 * q->b_cs;
                        if (q->b_cs == 1 && on == VL) v = T(load)(p);
                        else {
                            float l[VL] = {0};
                            for (int k = 0; k < on; k++) l[k] = p[k * q->b_cs];
                            v = T(load)(l);
                        }
                    }
                    d[a * mw + e] = v;
                    sum += v;
                }
            for (int a = 0; a < mh; a++) T(ag)(r + a * WA, 1, d + a * mw, 1, mw);   // along the rows
            for (int j = 0; j < WA; j++) T(ag)(z + j, WA, r + j, WA, mh);           // down the columns
            for (int xi = 0; xi < WA2; xi++) T(store)(g + (xi * q->bt + tl) * op + o0, z[xi]);
            if (bsum) T(store)(bsum + o0, T(load)(bsum + o0) + sum);
        }
    }
}

// One block's share of dU (+= over its tiles): for each frequency, the
// transformed image's channels (rows of V^T, read in place down the tiles)
// times the transformed gradients. Both frequency-major, V[xi][tl][c] and
// dM[xi][tl][o]: one frequency's, about 30 KB, stay in L1 while every panel
// of channels and outputs runs down them (tile-major, each step down the
// tiles was a new line of L2 for A and B: 1.3x the window product's speed
// against 1.5x with AVX-512).
static inline __attribute__((always_inline)) void T(taps_block_body)(Wino *q, int64_t t0, float *v, float *g, float *du,
                                                                      float *bsum) {
    const GemmKern *kn = q->kn;
    int64_t nt = q->tiles - t0 < q->bt ? q->tiles - t0 : q->bt, C = q->c, nr = kn->nr, mr = kn->mr, op = q->op;
    T(input_body)(q, t0, nt, v, C, q->bt * C);
    T(grad_body)(q, t0, nt, g, bsum);
    float tmp[MAX_WIN_MR * 64];
    for (int xi = 0; xi < WA2; xi++)
        for (int64_t c0 = 0; c0 < C; c0 += mr) {
            int64_t rr = C - c0 < mr ? C - c0 : mr;
            for (int64_t jp = 0; jp < q->npan; jp++) {
                const float *a = v + xi * q->bt * C + c0, *b = g + xi * q->bt * op + jp * nr;
                float *d = du + (xi * C + c0) * op + jp * nr;
                if (rr == mr) kn->fn(nt, a, C, b, op, d, op, 1);
                else if (kn->tail) kn->tail[rr](nt, a, C, b, op, d, op, 1);
                else {   // no tail kernels: the full panel into tmp (its rows past C read the next values of V)
                    kn->fn(nt, a, C, b, op, tmp, nr, 0);
                    for (int64_t i = 0; i < rr; i++)
                        for (int64_t j = 0; j < nr; j++) d[i * op + j] += tmp[i * nr + j];
                }
            }
        }
}

#undef WA2
