// Diagnostics for user errors, shared by every stage that reports against
// .kiln source (chibicc's error_tok, Lua's luaX_syntaxerror). A message looks
// like:
//
//   model.kiln:3:12: error: expected ')' here
//   print f(1, 2
//              ^
//
// Columns are 1-based byte offsets within the line. Messages accumulate in a
// growable buffer that the caller prints (fputs(d.msg, stderr)); nothing here
// writes to a stream or exits.
#ifndef KILN_DIAG_H
#define KILN_DIAG_H
#include <stddef.h>

// A file or a REPL line (name "<repl>" or "-e"); text is NUL-terminated and
// len bytes long (it may hold stray NULs; len wins).
typedef struct {
  const char *name;
  const char *text;
  size_t len;
} Source;

// A region of a Source: line/col of its first byte (1-based), byte offset and
// length. A Span with src == NULL is "no location"; with line <= 0 it names
// the file only.
typedef struct {
  const Source *src;
  int line, col;
  int off, len;
} Span;

typedef struct {
  char *msg;          // all messages so far, NUL-terminated; "" when none
  size_t len, cap;
  int has_error;      // an error (not a note or warning) was reported
  int nerrors;
  int nwarnings;
  int truncated;      // a message was dropped because memory ran out
} Diag;

Source source_from_string(const char *name, const char *text);

void diag_init(Diag *d);
void diag_free(Diag *d);
void diag_clear(Diag *d);   // forget all messages, keep the buffer

// "name:line:col: error: <msg>", the source line, then a caret under the
// span's first character and tildes under the rest, clipped to that line.
// Tabs in the line are repeated in the caret line so the caret aligns.
void diag_error(Diag *d, Span sp, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, Span sp, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, Span sp, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

// The smallest span covering both (either may be a no-location span).
Span span_join(Span a, Span b);

#endif
