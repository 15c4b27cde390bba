// csv.c: data sets from text files of numbers separated by commas (fields may be quoted).
// The whole file is read into memory and parsed in place: fields are cut with '\0' and
// read by strtod. Two passes: one counts the rows, so the tensors are allocated once.
#include "data.h"
#include "private.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *path;
    char *err;
    size_t errlen;
    char *text, *end;   // the file, '\0'-terminated
    int nfields;        // per row, from the first line
    int label;          // the label's field, or -1
} Csv;



static int read_all(Csv *c) {
    FILE *f = fopen(c->path, "rb");
    if (!f)
        return rt_data_fail(c->err, c->errlen, "%s: %s", c->path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *p = realloc(buf, cap * 2);
        if (!p)
            free(buf);
        buf = p, cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return rt_data_fail(c->err, c->errlen, "%s: out of memory", c->path);
    if (bad) {
        free(buf);
        return rt_data_fail(c->err, c->errlen, "%s: read error (is it a directory?)", c->path);
    }
    buf[n] = '\0';
    c->text = buf, c->end = buf + n;
    return 0;
}

// The line starting at p: returns its end (the '\n' or the end of the text) and sets *next.
static char *line_end(const Csv *c, char *p, char **next) {
    char *nl = memchr(p, '\n', (size_t)(c->end - p));
    char *e = nl ? nl : c->end;
    *next = nl ? nl + 1 : c->end;
    if (e > p && e[-1] == '\r')
        e--;
    return e;
}

static int is_blank(const char *p, const char *e) {
    for (; p < e; p++)
        if (*p != ' ' && *p != '\t')
            return 0;
    return 1;
}

static char *skip_blanks(char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static char *trim_end(char *s, char *e) {
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    return e;
}

// The field starting at p in the line [p, e): sets [*s, *se) to its text without
// the blanks around it, and for a quoted field (RFC 4180: "1.5", "a, b", "say ""hi""")
// without the quotes. Returns where the next field starts (past its comma), e + 1
// after the last field, or NULL if a quote is not closed on this line. Text after
// a closing quote stays in the field ('"1"x'), so it is not a number.
static char *field(char *p, char *e, char **s, char **se) {
    p = skip_blanks(p, e);
    char *q = NULL;
    if (p < e && *p == '"')
        for (q = p + 1;; q += 2) {
            q = memchr(q, '"', (size_t)(e - q));
            if (!q)
                return NULL;
            if (q + 1 >= e || q[1] != '"')
                break;
        }
    char *after = q ? skip_blanks(q + 1, e) : p;
    if (q && (after == e || *after == ',')) {
        *s = skip_blanks(p + 1, q), *se = trim_end(*s, q);
        p = after;
    } else {
        char *comma = memchr(after, ',', (size_t)(e - after));
        char *fe = comma ? comma : e;
        *s = p, *se = trim_end(p, fe);
        p = fe;
    }
    return p < e ? p + 1 : e + 1;
}

// Fields in the line [p, e), or -1 if a quote is not closed.
static int count_fields(char *p, char *e) {
    int n = 0;
    for (char *s, *se; p <= e; n++)
        if (!(p = field(p, e, &s, &se)))
            return -1;
    return n;
}

// The field [s, e) as a number: 0, or -1.
static int number(char *s, char *e, double *v) {
    char save = *e, *q;
    *e = '\0';
    *v = strtod(s, &q);
    *e = save;
    return s < e && q == e ? 0 : -1;
}

// header = any field that is not a number
static int has_text(char *p, char *e) {
    for (char *s, *se; p <= e;) {
        double v;
        p = field(p, e, &s, &se);
        if (number(s, se, &v))
            return 1;
    }
    return 0;
}

static int unclosed_quote(const Csv *c, int line) {
    return rt_data_fail(c->err, c->errlen, "%s:%d: a quote is not closed on this line (a field cannot span lines)",
                        c->path, line);
}

static int field_error(const Csv *c, int line, const char *lstart, const char *s, const char *e,
                       int k, const char *what) {
    int len = (int)(e - s) > 40 ? 40 : (int)(e - s);
    if (len == 0)
        return rt_data_fail(c->err, c->errlen, "%s:%d:%d: field %d is empty", c->path, line,
                    (int)(s - lstart) + 1, k + 1);
    const char *hint = memchr(s, ';', (size_t)(e - s)) || memchr(s, '\t', (size_t)(e - s))
                           ? " (fields are separated by commas)" : "";
    return rt_data_fail(c->err, c->errlen, "%s:%d:%d: field %d '%.*s%s' %s%s", c->path, line,
                (int)(s - lstart) + 1, k + 1, len, s, (int)(e - s) > 40 ? "..." : "", what, hint);
}

// Parses one row of c->nfields numbers into feat (and *lab).
static int parse_row(const Csv *c, int line, char *p, char *e, float *feat, int32_t *lab) {
    int k = count_fields(p, e);
    if (k < 0)
        return unclosed_quote(c, line);
    if (k != c->nfields)
        return rt_data_fail(c->err, c->errlen, "%s:%d: row has %d fields, expected %d", c->path, line,
                    k, c->nfields);
    char *lstart = p;
    for (int i = 0; i < c->nfields; i++) {
        char *s, *se;
        double v;
        p = field(p, e, &s, &se);
        if (number(s, se, &v))
            return field_error(c, line, lstart, s, se, i, "is not a number");
        if (i == c->label) {
            if (!(v == floor(v) && v >= INT32_MIN && v <= INT32_MAX))
                return field_error(c, line, lstart, s, se, i,
                                   "is a label but not an integer in i32's range");
            *lab = (int32_t)v;
        } else {
            *feat++ = (float)v;
        }
    }
    return 0;
}

// Reads the first line: the field count, the label column and whether it is a header.
// Returns 1 for a header, 0 for data, -1 on error.
static int first_line(Csv *c, char *p, char *e, int line, int label_col, int header) {
    c->nfields = count_fields(p, e);
    if (c->nfields < 0)
        return unclosed_quote(c, line);
    if (label_col == RT_DATA_NOLABEL)
        c->label = -1;
    else if (label_col >= c->nfields || label_col < -c->nfields)
        return rt_data_fail(c->err, c->errlen, "%s:%d: label column %d is out of range for %d fields",
                    c->path, line, label_col, c->nfields);
    else
        c->label = label_col < 0 ? c->nfields + label_col : label_col;
    return header < 0 ? has_text(p, e) : header > 0;
}

static int parse(Csv *c, int label_col, int header, RtDataset *ds) {
    // Pass 1: the first line, and how many rows follow it.
    int line = 0, first = 0, hdr = 0;
    int64_t rows = 0;
    for (char *p = c->text, *next; p < c->end; p = next) {
        char *e = line_end(c, p, &next);
        line++;
        if (is_blank(p, e))
            continue;
        if (!first && (hdr = first_line(c, p, e, first = line, label_col, header)) < 0)
            return -1;
        rows++;
    }
    rows -= hdr;
    if (!first)
        return rt_data_fail(c->err, c->errlen, "%s:1: empty file (no rows)", c->path);
    if (rows == 0)
        return rt_data_fail(c->err, c->errlen, "%s:%d: no data rows after the header", c->path, first);
    int64_t fshape[2] = {rows, c->nfields - (c->label >= 0)};
    rt_data_add_col(ds, "features", rt_tensor_new(RT_F32, 2, fshape));
    if (c->label >= 0)
        rt_data_add_col(ds, "labels", rt_tensor_new(RT_I32, 1, &rows));
    for (int i = 0; i < ds->ncol; i++)
        if (!ds->col[i].t.data)
            return rt_data_fail(c->err, c->errlen, "%s: out of memory for %lld rows", c->path,
                        (long long)rows);
    // Pass 2: the numbers.
    float *feat = ds->col[0].t.data;
    int32_t *lab = c->label >= 0 ? ds->col[1].t.data : NULL;
    int64_t r = 0;
    line = 0;
    for (char *p = c->text, *next; p < c->end; p = next) {
        char *e = line_end(c, p, &next);
        line++;
        if (is_blank(p, e) || (hdr && line == first))
            continue;
        if (parse_row(c, line, p, e, feat + r * fshape[1], lab ? lab + r : NULL))
            return -1;
        r++;
    }
    ds->n = rows;
    return 0;
}

int rt_data_csv(const char *path, int label_col, int header, RtDataset *out, char *err,
                size_t errlen) {
    *out = (RtDataset){0};
    if (!path)
        return rt_data_fail(err, errlen, "rt_data_csv: no path given");
    Csv c = {.path = path, .err = err, .errlen = errlen};
    if (read_all(&c))
        return -1;
    RtDataset ds = {0};
    int rc = parse(&c, label_col, header, &ds);
    free(c.text);
    if (rc) {
        rt_dataset_free(&ds);
        return -1;
    }
    snprintf(ds.source, sizeof ds.source, "%s", path);
    *out = ds;
    return 0;
}
