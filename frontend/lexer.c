// Lexer: source text to a token array (chibicc's tokenize).
#include "parse.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *spellings[TOK_COUNT] = {
#define X(kind, spelling) [kind] = spelling,
  TOKEN_LIST(X)
#undef X
};

const char *tok_spelling(TokKind k) {
  return k >= 0 && k < TOK_COUNT ? spellings[k] : "?";
}

// An open bracket: c is '(', '[', '{', or 'u' for a ( or [ that is never
// closed (see lex()).
typedef struct {
  char c;
  int off;
  int indent;               // of the line it is on
} Bracket;

typedef struct {
  Arena *a;
  const Source *src;
  const char *cur, *end;
  int line;
  const char *bol;          // start of the current line
  Token *toks;
  int ntoks, cap;
  Bracket *open;            // stack of unclosed ( [ {
  int nopen, capopen;
  const int *unclosed;      // offsets of the ( [ that the first pass never saw closed
  int nunclosed, next_unclosed;
  int nerrors;
  int oom;
} Lexer;

// Arena arrays grow by copying into a block twice the size; the old block
// stays in the arena until it is freed, which at most doubles the cost.
static void *grow(Lexer *L, void *old, int n, int *cap, size_t elem) {
  int newcap = *cap ? *cap * 2 : 64;
  void *p = arena_alloc(L->a, (size_t)newcap * elem);
  if (!p) {
    L->oom = 1;
    return NULL;
  }
  if (n)
    memcpy(p, old, (size_t)n * elem);
  *cap = newcap;
  return p;
}

static char *copy(Lexer *L, const char *s, size_t n) {
  char *p = arena_alloc(L->a, n + 1);
  if (!p) {
    L->oom = 1;
    return NULL;
  }
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

static Span span_at(Lexer *L, const char *start, const char *end) {
  return (Span){L->src, L->line, (int)(start - L->bol) + 1,
                (int)(start - L->src->text), (int)(end - start)};
}

static Token *add(Lexer *L, TokKind kind, const char *start, const char *end) {
  if (L->ntoks == L->cap) {
    Token *t = grow(L, L->toks, L->ntoks, &L->cap, sizeof(Token));
    if (!t)
      return NULL;
    L->toks = t;
  }
  Token *t = &L->toks[L->ntoks++];
  memset(t, 0, sizeof *t);
  t->kind = kind;
  t->span = span_at(L, start, end);
  return t;
}

// A TOK_ERROR over [start, end) carrying the message.
__attribute__((format(printf, 4, 5)))
static void error_tok(Lexer *L, const char *start, const char *end, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  Token *t = add(L, TOK_ERROR, start, end);
  if (t)
    t->str = copy(L, buf, strlen(buf));
  L->nerrors++;
}

static int indent_of(const char *bol, const char *end) {
  int n = 0;
  while (bol + n < end && (bol[n] == ' ' || bol[n] == '\t'))
    n++;
  return n;
}

static void push_open(Lexer *L, char c) {
  if (L->nopen == L->capopen) {
    Bracket *o = grow(L, L->open, L->nopen, &L->capopen, sizeof(Bracket));
    if (!o)
      return;
    L->open = o;
  }
  int off = (int)(L->cur - L->src->text);
  if (L->next_unclosed < L->nunclosed && L->unclosed[L->next_unclosed] == off) {
    L->next_unclosed++;
    c = 'u';
  }
  L->open[L->nopen++] = (Bracket){c, off, indent_of(L->bol, L->end)};
}

// A closer pops back to its opener, so that "f(a }" closes the "(" too and
// newlines count again; a closer with no opener is left for the parser.
static void pop_open(Lexer *L, char opener) {
  for (int i = L->nopen - 1; i >= 0; i--)
    if (L->open[i].c == opener) {
      L->nopen = i;
      return;
    }
}

static int is_ident1(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_ident2(int c) { return is_ident1(c) || is_digit(c); }

// Bytes in the UTF-8 sequence starting at p (1 for anything malformed).
static int utf8_len(const char *p, const char *end) {
  unsigned char c = (unsigned char)*p;
  int n = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (c >= 0xF8 || end - p < n)
    return 1;
  for (int i = 1; i < n; i++)
    if (((unsigned char)p[i] & 0xC0) != 0x80)
      return 1;
  return n;
}

// number = digits ("." digits?)? exp? | "." digits exp?    exp = [eE] [+-]? digits
static void lex_number(Lexer *L) {
  const char *start = L->cur, *p = L->cur;
  int is_int = 1;
  while (p < L->end && is_digit(*p))
    p++;
  if (p < L->end && *p == '.') {
    is_int = 0;
    p++;
    while (p < L->end && is_digit(*p))
      p++;
  }
  if (p < L->end && (*p == 'e' || *p == 'E')) {
    const char *q = p + 1;
    if (q < L->end && (*q == '+' || *q == '-'))
      q++;
    if (q < L->end && is_digit(*q)) {
      is_int = 0;
      p = q;
      while (p < L->end && is_digit(*p))
        p++;
    }
  }
  // "2x" or "1e": a typo, not a number followed by a name
  if (p < L->end && is_ident1(*p)) {
    const char *q = p;
    while (q < L->end && is_ident2(*q))
      q++;
    error_tok(L, p, q, "invalid suffix '%.*s' on number", (int)(q - p), p);
    L->cur = q;
    return;
  }
  L->cur = p;

  char *text = copy(L, start, (size_t)(p - start));
  if (!text)
    return;
  double val;
  int64_t ival = 0;
  if (is_int) {
    for (const char *q = start; q < p; q++) {
      if (ival > (INT64_MAX - (*q - '0')) / 10) {
        error_tok(L, start, p, "integer literal is too large");
        return;
      }
      ival = ival * 10 + (*q - '0');
    }
    val = (double)ival;
  } else {
    // strtod follows LC_NUMERIC; Kiln never calls setlocale, so "." it is
    val = strtod(text, NULL);
    if (isinf(val)) {
      error_tok(L, start, p, "number is too large");
      return;
    }
  }
  Token *t = add(L, TOK_NUM, start, p);
  if (!t)
    return;
  t->str = text;
  t->num = val;
  t->inum = ival;
  t->num_is_int = is_int;
}

// string = '"' (char | '\' ["\\ntr])* '"', on one line
static void lex_string(Lexer *L) {
  const char *start = L->cur, *p = L->cur + 1;
  const char *bad = NULL;
  size_t n = 0;
  char *buf = arena_alloc(L->a, (size_t)(L->end - p) + 1);  // the value is never longer
  if (!buf) {
    L->oom = 1;
    L->cur = L->end;
    return;
  }
  for (; p < L->end && *p != '"' && *p != '\n'; p++) {
    if (*p != '\\') {
      buf[n++] = *p;
      continue;
    }
    if (p + 1 >= L->end || p[1] == '\n')
      break;
    p++;
    switch (*p) {
    case '"': buf[n++] = '"'; break;
    case '\\': buf[n++] = '\\'; break;
    case 'n': buf[n++] = '\n'; break;
    case 't': buf[n++] = '\t'; break;
    case 'r': buf[n++] = '\r'; break;
    default:
      if (!bad)
        bad = p - 1;
    }
  }
  if (p >= L->end || *p != '"') {
    const char *eol = p;
    if (eol > start && eol[-1] == '\r')
      eol--;
    error_tok(L, start, eol, "unterminated string");
    L->cur = p;
    return;
  }
  L->cur = p + 1;
  if (bad) {
    int k = utf8_len(bad + 1, L->end);
    error_tok(L, bad, bad + 1 + k, "unknown escape sequence '\\%.*s'", k, bad + 1);
    return;
  }
  buf[n] = '\0';
  Token *t = add(L, TOK_STR, start, L->cur);
  if (t)
    t->str = buf;
}

static void lex_ident(Lexer *L) {
  const char *start = L->cur, *p = L->cur;
  while (p < L->end && is_ident2(*p))
    p++;
  L->cur = p;
  size_t n = (size_t)(p - start);
  TokKind kind = TOK_IDENT;
  for (int k = TOK_FIRST_KEYWORD; k < TOK_COUNT; k++)
    if (strlen(spellings[k]) == n && !memcmp(spellings[k], start, n)) {
      kind = (TokKind)k;
      break;
    }
  Token *t = add(L, kind, start, p);
  if (t)
    t->str = copy(L, start, n);
}

// Punctuation, longest match first; TOK_EOF when c starts none.
static TokKind punct(const char *p, const char *end, int *len) {
  char next = p + 1 < end ? p[1] : '\0';
  *len = 2;
  if (p[0] == '=' && next == '=') return TOK_EQ;
  if (p[0] == '!' && next == '=') return TOK_NE;
  if (p[0] == '<' && next == '=') return TOK_LE;
  if (p[0] == '>' && next == '=') return TOK_GE;
  if (p[0] == '/' && next == '/') return TOK_SLASHSLASH;
  *len = 1;
  switch (p[0]) {
  case '+': return TOK_PLUS;
  case '-': return TOK_MINUS;
  case '*': return TOK_STAR;
  case '/': return TOK_SLASH;
  case '%': return TOK_PERCENT;
  case '^': return TOK_CARET;
  case '@': return TOK_AT;
  case '(': return TOK_LPAREN;
  case ')': return TOK_RPAREN;
  case '[': return TOK_LBRACK;
  case ']': return TOK_RBRACK;
  case '{': return TOK_LBRACE;
  case '}': return TOK_RBRACE;
  case ',': return TOK_COMMA;
  case ':': return TOK_COLON;
  case ';': return TOK_SEMI;
  case '=': return TOK_ASSIGN;
  case '<': return TOK_LT;
  case '>': return TOK_GT;
  case '!': return TOK_BANG;
  case '.': return TOK_DOT;
  }
  return TOK_EOF;
}

// Inside a never-closed bracket a newline still ends the statement when the
// next line is not indented past the bracket's line: "print f(1, 2" then
// "y = 3" gives one error on the first line, and the second line parses.
static int newline_counts(Lexer *L, const Bracket *top) {
  const char *next = L->cur + 1;
  int ind = indent_of(next, L->end);
  const char *c = next + ind;
  if (c >= L->end || *c == '\n' || *c == '\r' || *c == '#')
    return 0;  // blank or comment line: decide at the next newline
  return ind <= top->indent;
}

static void lex_newline(Lexer *L) {
  const Bracket *top = L->nopen ? &L->open[L->nopen - 1] : NULL;
  int skip = (top && (top->c == '(' || top->c == '[')) ||
             (top && top->c == 'u' && !newline_counts(L, top)) ||
             (L->ntoks && L->toks[L->ntoks - 1].kind == TOK_NEWLINE);
  if (!skip)
    add(L, TOK_NEWLINE, L->cur, L->cur + 1);
  L->cur++;
  L->line++;
  L->bol = L->cur;
}

static void lex_punct(Lexer *L) {
  int len;
  TokKind k = punct(L->cur, L->end, &len);
  if (k == TOK_EOF) {
    unsigned char c = (unsigned char)*L->cur;
    int n = utf8_len(L->cur, L->end);
    if (c < 0x20 || c == 0x7f || (c >= 0x80 && n == 1))
      error_tok(L, L->cur, L->cur + 1, "unexpected character '\\x%02x'", c);
    else
      error_tok(L, L->cur, L->cur + n, "unexpected character '%.*s'%s", n, L->cur,
                c == '&' ? " (logical and is `and`)"
                : c == '|' ? " (logical or is `or`)" : "");
    L->cur += n;
    return;
  }
  switch (k) {
  case TOK_LPAREN: push_open(L, '('); break;
  case TOK_LBRACK: push_open(L, '['); break;
  case TOK_LBRACE: push_open(L, '{'); break;
  case TOK_RPAREN: pop_open(L, '('); break;
  case TOK_RBRACK: pop_open(L, '['); break;
  case TOK_RBRACE: pop_open(L, '{'); break;
  default: break;
  }
  add(L, k, L->cur, L->cur + len);
  L->cur += len;
}

static void lex_pass(Lexer *L) {
  while (L->cur < L->end && !L->oom) {
    char c = *L->cur;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      L->cur++;
    } else if (c == '#') {
      while (L->cur < L->end && *L->cur != '\n')
        L->cur++;
    } else if (c == '\n') {
      lex_newline(L);
    } else if (is_digit(c) || (c == '.' && L->cur + 1 < L->end && is_digit(L->cur[1]))) {
      lex_number(L);
    } else if (is_ident1(c)) {
      lex_ident(L);
    } else if (c == '"') {
      lex_string(L);
    } else {
      lex_punct(L);
    }
  }
  add(L, TOK_EOF, L->end, L->end);
}

// Newlines inside ( ) and [ ] are skipped, so one unclosed "(" would swallow
// the rest of the file into a single statement (and a single error). When
// the first pass ends with such brackets open, a second pass marks them so
// that lex_newline can end statements there again; nothing else changes,
// because no later closer ever matched them.
int lex(Arena *a, const Source *src, TokenList *out) {
  Lexer L = {.a = a, .src = src, .cur = src->text, .end = src->text + src->len,
             .line = 1, .bol = src->text};
  memset(out, 0, sizeof *out);
  lex_pass(&L);
  int nunclosed = 0;
  for (int i = 0; i < L.nopen; i++)
    nunclosed += L.open[i].c != '{';
  if (nunclosed && !L.oom) {
    int *offs = arena_alloc(a, (size_t)nunclosed * sizeof *offs);
    if (!offs)
      return -1;
    for (int i = 0, k = 0; i < L.nopen; i++)
      if (L.open[i].c != '{')
        offs[k++] = L.open[i].off;
    L = (Lexer){.a = a, .src = src, .cur = src->text, .end = src->text + src->len,
                .line = 1, .bol = src->text, .unclosed = offs, .nunclosed = nunclosed};
    lex_pass(&L);
  }
  if (L.oom)
    return -1;
  out->toks = L.toks;
  out->ntoks = L.ntoks;
  out->open = L.nopen;
  out->nerrors = L.nerrors;
  return 0;
}
