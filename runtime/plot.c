// plot.c: line charts as PNG with PLplot's pngcairo device (private.h), or a clear error
// when Kiln was built without PLplot (meson -Dplot=disabled, or no PLplot found).
#include "private.h"

#ifndef KILN_HAVE_PLPLOT

#include <stdio.h>

int rt_plot_png(const char *png_path, const char *title, const PlotPanel *panels, int npanels,
                char *err, size_t errlen) {
    if (err && errlen)
        snprintf(err, errlen, "kiln was built without PLplot; --plot is unavailable");
    return -1;
}

#else

#include <math.h>
#include <plplot.h>
#include <string.h>

#define WIDTH 1000
#define HEIGHT 700
#define TEXT 0.8   // the character height as a scale of PLplot's default
// cmap0 indices: 0 the background, then text, grid and frame, then one per series.
enum { C_BG, C_TEXT, C_GRID, C_FRAME, C_SERIES };

// Tableau 10, the matplotlib default cycle: distinct, and readable by most color-blind eyes.
static const unsigned char palette[][3] = {
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44},   {214, 39, 40},   {148, 103, 189},
    {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207},
};
#define NPALETTE (int)(sizeof palette / sizeof palette[0])

static void set_colors(void) {
    plscmap0n(C_SERIES + PLOT_MAXSERIES);
    plscol0(C_BG, 255, 255, 255);
    plscol0(C_TEXT, 34, 34, 34);
    plscol0(C_GRID, 226, 226, 226);
    plscol0(C_FRAME, 90, 90, 90);
}

// Gives series i of a panel its color: the palette in order, a faint series a pale version
// of the color of the series after it (its smoothed line).
static void series_colors(const PlotPanel *p, int *col) {
    for (int i = 0, k = 0; i < p->n && i < PLOT_MAXSERIES; i++) {
        const unsigned char *c = palette[k % NPALETTE];
        if (p->s[i].style == PLOT_FAINT)
            plscol0(C_SERIES + i, 255 - (255 - c[0]) / 2, 255 - (255 - c[1]) / 2,
                    255 - (255 - c[2]) / 2);
        else
            plscol0(C_SERIES + i, c[0], c[1], c[2]), k++;
        col[i] = C_SERIES + i;
    }
}

// The finite extent of the panel's data, padded so that lines and markers clear the frame.
static void extent(const PlotPanel *p, double *x0, double *x1, double *y0, double *y1) {
    *x0 = *y0 = INFINITY, *x1 = *y1 = -INFINITY;
    for (int i = 0; i < p->n; i++)
        for (int j = 0; j < p->s[i].n; j++) {
            double x = p->s[i].x[j], y = p->s[i].y[j];
            if (!isfinite(x) || !isfinite(y))
                continue;
            *x0 = fmin(*x0, x), *x1 = fmax(*x1, x), *y0 = fmin(*y0, y), *y1 = fmax(*y1, y);
        }
    if (*x0 > *x1)
        *x0 = 0, *x1 = 1, *y0 = 0, *y1 = 1;
    double dx = *x1 - *x0, dy = *y1 - *y0;
    dx = dx > 0 ? dx * 0.03 : 0.5;
    dy = dy > 0 ? dy * 0.06 : fabs(*y0) > 0 ? fabs(*y0) * 0.1 : 0.5;
    *x0 -= dx, *x1 += dx, *y0 -= dy, *y1 += dy;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving at most 8 ticks, at least 1:
// an epoch axis should not read 1.5.
static double whole_tick(double range) {
    static const double steps[3] = {1, 2, 5};
    for (double p = 1;; p *= 10)
        for (int i = 0; i < 3; i++)
            if (range / (p * steps[i]) <= 8)
                return p * steps[i];
}

// Each run of finite points as one line.
static void draw_line(const PlotSeries *s) {
    int j = 0;
    while (j < s->n) {
        while (j < s->n && !(isfinite(s->x[j]) && isfinite(s->y[j])))
            j++;
        int k = j;
        while (k < s->n && isfinite(s->x[k]) && isfinite(s->y[k]))
            k++;
        if (k - j == 1)
            plstring(1, &s->x[j], &s->y[j], "•");
        else if (k > j)
            plline(k - j, &s->x[j], &s->y[j]);
        j = k;
    }
}

static void draw_series(const PlotSeries *s, int col) {
    plcol0(col);
    plwidth(s->style == PLOT_FAINT ? 1.0 : 2.2);
    draw_line(s);
    if (s->style == PLOT_MARKED) {
        plschr(0, 0.6 * TEXT);
        for (int j = 0; j < s->n; j++)
            if (isfinite(s->x[j]) && isfinite(s->y[j]))
                plstring(1, &s->x[j], &s->y[j], "●");
        plschr(0, TEXT);
    }
}

// PLplot reads '#' as the start of an escape ("#u" is a superscript); "##" is a '#'.
static const char *plain(char *buf, size_t n, const char *s) {
    size_t k = 0;
    for (; *s && k + 2 < n; s++) {
        if (*s == '#')
            buf[k++] = '#';
        buf[k++] = *s;
    }
    buf[k] = '\0';
    return buf;
}

static void draw_legend(const PlotPanel *p, const int *col) {
    enum { M = PLOT_MAXSERIES };
    int n = p->n < M ? p->n : M;
    PLINT opt[M], tcol[M], lcol[M], lstyle[M], nsym[M];
    PLFLT lwidth[M], sscale[M], w, h;
    const char *text[M], *sym[M];
    char names[M][128];
    for (int i = 0; i < n; i++) {
        opt[i] = PL_LEGEND_LINE | (p->s[i].style == PLOT_MARKED ? PL_LEGEND_SYMBOL : 0);
        tcol[i] = C_TEXT, lcol[i] = col[i], lstyle[i] = 1, nsym[i] = 1;
        lwidth[i] = p->s[i].style == PLOT_FAINT ? 1.5 : 2.2;
        sscale[i] = 0.6;
        text[i] = plain(names[i], sizeof names[i], p->s[i].name), sym[i] = "●";
    }
    plwidth(1.0);
    // Right of the plot, level with its top: x and y count from the viewport's top left.
    pllegend(&w, &h, PL_LEGEND_BACKGROUND, PL_POSITION_VIEWPORT | PL_POSITION_INSIDE |
             PL_POSITION_LEFT | PL_POSITION_TOP, 1.02, 0.0, 0.06, C_BG, C_GRID, 1, 0, 0, n, opt,
             0.8, 0.75, 2.0, 0.0, tcol, text, NULL, NULL, NULL, NULL, lcol, lstyle, lwidth, lcol,
             sscale, nsym, sym);
}

static void draw_panel(const PlotPanel *p, double top, double bottom, const char *title) {
    double x0, x1, y0, y1;
    int col[PLOT_MAXSERIES];
    series_colors(p, col);
    extent(p, &x0, &x1, &y0, &y1);
    plvpor(0.11, 0.77, bottom, top);
    plwind(x0, x1, y0, y1);
    double xt = p->xwhole ? whole_tick(x1 - x0) : 0;
    plwidth(1.0);
    plcol0(C_GRID);
    plbox("g", xt, 0, "g", 0, 0);
    for (int i = 0; i < p->n && i < PLOT_MAXSERIES; i++)
        draw_series(&p->s[i], col[i]);
    // A frame, outward ticks and numbers on the left and bottom only.
    plwidth(1.0);
    plcol0(C_FRAME);
    plbox("bc", 0, 0, "bc", 0, 0);
    plbox("bntif", xt, 0, "bntifv", 0, 0);   // f: 20000 and 0.88, not 2.0 (x10^4) and 8.8 (x10^-1)
    char buf[256];
    plcol0(C_TEXT);
    plmtex("b", 3.0, 0.5, 0.5, plain(buf, sizeof buf, p->xlabel));
    plmtex("l", 6.6, 0.5, 0.5, plain(buf, sizeof buf, p->ylabel));
    if (title) {
        plschr(0, 1.3 * TEXT);
        plmtex("t", 1.5, 0.5, 0.5, plain(buf, sizeof buf, title));
        plschr(0, TEXT);
    }
    draw_legend(p, col);
}

// PLplot's "\n*** PLPLOT ERROR, ABORTING OPERATION ***\nwhat, aborting operation\n",
// cut to "what".
static const char *plplot_message(char *msg) {
    char *m = strstr(msg, "***\n");
    m = m ? m + 4 : msg;
    char *end = strstr(m, ", aborting operation");
    if (end)
        *end = '\0';
    return m;
}

int rt_plot_png(const char *png_path, const char *title, const PlotPanel *panels, int npanels,
                char *err, size_t errlen) {
    if (npanels < 1 || npanels > 2)
        return rt_errf(err, errlen, png_path, "%d panels (1 or 2 are supported)", npanels);
    // PLplot exits the process when it cannot open its output, so the file is created
    // here first; PLplot then rewrites it by name.
    RtSaveFile f;
    if (rt_save_begin(&f, png_path, err, errlen))
        return -1;
    PLINT old, strm, code = 0;
    char msg[1024] = "";
    plgstrm(&old);
    plmkstrm(&strm);   // a stream of our own: the caller may be plotting too
    if (strm < 0) {
        rt_save_abort(&f);
        return rt_errf(err, errlen, png_path, "PLplot has no free stream");
    }
    plsError(&code, msg);   // errors into msg, not onto stderr
    plsdev("pngcairo");
    plsfnam(f.tmp);
    plspage(0, 0, WIDTH, HEIGHT, 0, 0);
    plspause(0);
    set_colors();
    plinit();
    plsfont(PL_FCI_SANS, PL_FCI_UPRIGHT, PL_FCI_MEDIUM);
    pladv(0);
    plschr(0, TEXT);
    if (npanels == 1) {
        draw_panel(&panels[0], 0.91, 0.12, title);
    } else {
        draw_panel(&panels[0], 0.91, 0.575, title);
        draw_panel(&panels[1], 0.445, 0.11, NULL);
    }
    plend1();   // writes and closes the PNG
    plsstrm(old);
    if (code) {
        rt_save_abort(&f);
        return rt_errf(err, errlen, png_path, "PLplot: %s", plplot_message(msg));
    }
    return rt_save_commit(&f, err, errlen);
}

#endif
