// Diagnostics: formatting located messages into a growable buffer.
#include "diag.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Source source_from_string(const char *name, const char *text) {
  return (Source){name, text, strlen(text)};
}

void diag_init(Diag *d) {
  memset(d, 0, sizeof *d);
  d->msg = (char *)"";  // a valid empty string until the first message; never written
}

void diag_free(Diag *d) {
  if (d->cap)
    free(d->msg);
  diag_init(d);
}

void diag_clear(Diag *d) {
  if (d->cap)
    d->msg[0] = '\0';
  d->len = 0;
  d->has_error = d->nerrors = d->nwarnings = d->truncated = 0;
}

// Makes room for n more bytes plus the NUL; 0 when memory ran out.
static int reserve(Diag *d, size_t n) {
  if (d->len + n + 1 <= d->cap)
    return 1;
  size_t cap = d->cap ? d->cap : 256;
  while (cap < d->len + n + 1)
    cap *= 2;
  char *m = d->cap ? realloc(d->msg, cap) : malloc(cap);
  if (!m) {
    d->truncated = 1;
    return 0;
  }
  d->msg = m;
  d->cap = cap;
  return 1;
}

static void put(Diag *d, const char *s, size_t n) {
  if (!reserve(d, n))
    return;
  memcpy(d->msg + d->len, s, n);
  d->len += n;
  d->msg[d->len] = '\0';
}

static void putc_(Diag *d, char c) { put(d, &c, 1); }

static void vputf(Diag *d, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || !reserve(d, (size_t)n))
    return;
  vsnprintf(d->msg + d->len, (size_t)n + 1, fmt, ap);
  d->len += (size_t)n;
}

static void putf(Diag *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vputf(d, fmt, ap);
  va_end(ap);
}

// UTF-8 continuation bytes take no column of their own on screen.
static int is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// The source line under sp, then the caret line.
static void show_line(Diag *d, Span sp) {
  const Source *s = sp.src;
  size_t off = sp.off < 0 ? 0 : (size_t)sp.off;
  if (off > s->len)
    off = s->len;
  size_t bol = off, eol = off;
  while (bol > 0 && s->text[bol - 1] != '\n')
    bol--;
  while (eol < s->len && s->text[eol] != '\n')
    eol++;
  size_t shown = eol;  // a CRLF file's '\r' is not part of the line
  if (shown > bol && s->text[shown - 1] == '\r')
    shown--;

  for (size_t i = bol; i < shown; i++) {
    unsigned char c = (unsigned char)s->text[i];
    // control bytes would garble the terminal (or end the message early)
    putc_(d, (c < 0x20 && c != '\t') || c == 0x7f ? '?' : (char)c);
  }
  putc_(d, '\n');

  for (size_t i = bol; i < off; i++) {
    unsigned char c = (unsigned char)s->text[i];
    if (c == '\t')
      putc_(d, '\t');
    else if (!is_cont(c))
      putc_(d, ' ');
  }
  putc_(d, '^');
  size_t end = off + (sp.len > 0 ? (size_t)sp.len : 0);
  if (end > shown)
    end = shown;
  for (size_t i = off + 1; i < end; i++)
    if (!is_cont((unsigned char)s->text[i]))
      putc_(d, '~');
  putc_(d, '\n');
}

static void report(Diag *d, Span sp, const char *kind, const char *fmt, va_list ap) {
  if (sp.src && sp.line > 0)
    putf(d, "%s:%d:%d: %s: ", sp.src->name ? sp.src->name : "<input>", sp.line, sp.col, kind);
  else if (sp.src)
    putf(d, "%s: %s: ", sp.src->name ? sp.src->name : "<input>", kind);
  else
    putf(d, "%s: ", kind);
  vputf(d, fmt, ap);
  putc_(d, '\n');
  if (sp.src && sp.line > 0 && sp.src->text)
    show_line(d, sp);
}

void diag_error(Diag *d, Span sp, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(d, sp, "error", fmt, ap);
  va_end(ap);
  d->has_error = 1;
  d->nerrors++;
}

void diag_warning(Diag *d, Span sp, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(d, sp, "warning", fmt, ap);
  va_end(ap);
  d->nwarnings++;
}

void diag_note(Diag *d, Span sp, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(d, sp, "note", fmt, ap);
  va_end(ap);
}

Span span_join(Span a, Span b) {
  if (!a.src)
    return b;
  if (!b.src)
    return a;
  Span first = a.off <= b.off ? a : b;
  int end_a = a.off + a.len, end_b = b.off + b.len;
  first.len = (end_a > end_b ? end_a : end_b) - first.off;
  return first;
}
