// Parser: tokens to an AST by recursive descent (chibicc's parse.c). Each
// function parses one rule, written above it. A function that fails has
// reported the error and returns NULL; the statement loop then skips to the
// next line and carries on, so one run reports one error per bad statement.
//
// The grammar, as implemented (NEWLINE is a token except inside ( ) and [ ]):
//
//   program   = (stmt? (NEWLINE | ";"))*
//   stmt      = print | decl | fndef | shortfn | assign | import | data | train
//             | evaluate | save | load | exprstmt
//   print     = "print" expr ("," expr)* | "print" "(" expr ("," expr)* ")"
//   decl      = "input" IDENT ":" type | ("param" | "state") IDENT ":" type ("=" expr)?
//               ("state" is a keyword only in this position)
//   fndef     = "fn" IDENT params NEWLINE* block
//   shortfn   = IDENT params "=" expr                  (found by looking past ")")
//   assign    = IDENT "=" expr
//   import    = "import" STRING
//   data      = "data" IDENT "=" expr
//   train     = "train" expr "on" expr "with" expr ("," kwarg)*
//   evaluate  = "evaluate" expr ("," expr)* "on" expr ("," kwarg)*
//   save      = "save" expr          load = "load" expr
//   exprstmt  = "return"? expr                         (return: last in a body)
//   block     = "{" (stmt? (NEWLINE | ";"))* "}"       (ends with an exprstmt)
//   params    = "(" (param ("," param)* ","?)? ")"   param = IDENT ("=" expr)?
//               (parameters with defaults come last)
//   type      = IDENT ("[" (dim ("," dim)*)? "]")?
//   dim       = "-"? INT | IDENT | add              (an expression: parameters' sizes)
//   expr      = or
//   or        = and ("or" and)*
//   and       = not ("and" not)*
//   not       = ("not" | "!") not | cmp
//   cmp       = add (("<" | "<=" | ">" | ">=" | "==" | "!=") add)?
//   add       = mul (("+" | "-") mul)*
//   mul       = unary (("*" | "/" | "@") unary)*
//   unary     = ("-" | "+") unary | power
//   power     = postfix ("^" unary)?
//   postfix   = primary (call | subscript | "." IDENT)*
//   call      = "(" (arg ("," arg)* ","?)? ")"         arg = (IDENT "=")? expr
//   subscript = "[" index ("," index)* "]"
//   index     = expr | expr? ":" expr? (":" expr?)?
//   primary   = NUMBER | STRING | "true" | "false" | IDENT | "(" expr ")" | list
//   list      = "[" (expr ("," expr)* ","?)? "]"
//
// input, import, data, train, evaluate, save and load are top-level only.
#include "parse.h"
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum {
  MAX_ERRORS = 20,  // then stop: later errors are mostly echoes
  MAX_DEPTH = 256,  // nested ( [ { and chains of - or not: deeper is an error
};

typedef struct {
  Arena *a;
  const Source *src;
  Diag *d;
  Token *toks;
  int ntoks, pos;
  int depth;   // recursion depth, bounded so no input overflows the stack
  int in_fn;   // > 0 inside a function body
  int stmt_start;  // index of the innermost statement's first token
  int nerr;    // errors found (reported up to MAX_ERRORS)
  int oom;
} Parser;

// A growable node list; the arena holds every version of it.
typedef struct {
  AstNode **v;
  int n, cap;
} NodeVec;

static AstNode *expr(Parser *p);
static AstNode *unary(Parser *p);
static AstNode *block(Parser *p);
static AstNode *add(Parser *p);
static int stmt_list(Parser *p, AstNode *blk, int in_block);

// ---- tokens -------------------------------------------------------------------

static Token *peek(Parser *p) { return &p->toks[p->pos]; }

static Token *peek_at(Parser *p, int k) {
  int i = p->pos + k;
  return &p->toks[i < p->ntoks ? i : p->ntoks - 1];
}

static Token *prev(Parser *p) { return &p->toks[p->pos > 0 ? p->pos - 1 : 0]; }

static int at(Parser *p, TokKind k) { return peek(p)->kind == k; }

static Token *advance(Parser *p) {
  Token *t = peek(p);
  if (t->kind != TOK_EOF)
    p->pos++;
  return t;
}

static int consume(Parser *p, TokKind k) {
  if (!at(p, k))
    return 0;
  advance(p);
  return 1;
}

// From start to the end of the last token consumed.
static Span from(Parser *p, Span start) { return span_join(start, prev(p)->span); }

// Index of the token closing the bracket at i, or -1 if the statement ends
// first. Used to look past "f(a, b)" for the "=" of a one-line definition.
static int matching(Parser *p, int i) {
  int depth = 0;
  for (; i < p->ntoks; i++) {
    switch (p->toks[i].kind) {
    case TOK_LPAREN: case TOK_LBRACK: case TOK_LBRACE: depth++; break;
    case TOK_RPAREN: case TOK_RBRACK: case TOK_RBRACE:
      if (--depth == 0)
        return i;
      break;
    case TOK_NEWLINE: case TOK_SEMI: case TOK_EOF: return -1;
    default: break;
    }
  }
  return -1;
}

static int ends_stmt(TokKind k) {
  return k == TOK_NEWLINE || k == TOK_SEMI || k == TOK_EOF || k == TOK_RBRACE;
}

// ---- errors -------------------------------------------------------------------

__attribute__((format(printf, 3, 4)))
static void error_at(Parser *p, Span sp, const char *fmt, ...) {
  if (p->nerr++ >= MAX_ERRORS)
    return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  diag_error(p->d, sp, "%s", buf);
}

// A note for the error just reported (dropped with it past MAX_ERRORS).
__attribute__((format(printf, 3, 4)))
static void note_at(Parser *p, Span sp, const char *fmt, ...) {
  if (p->nerr > MAX_ERRORS)
    return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  diag_note(p->d, sp, "%s", buf);
}

// Where a missing token belongs: just after the statement's last token when
// the current one ends the line or sits on a later line (newlines inside
// brackets are skipped, blank lines inside blocks are not), else at the
// current token.
static Span here(Parser *p) {
  Token *t = peek(p);
  int i = p->pos - 1;
  while (i >= p->stmt_start && p->toks[i].kind == TOK_NEWLINE)
    i--;
  if (i < p->stmt_start)
    return t->span;
  Span s = p->toks[i].span;
  if (t->kind != TOK_NEWLINE && t->kind != TOK_EOF && t->span.line == s.line)
    return t->span;
  s.off += s.len;
  s.col += s.len;
  s.len = 1;
  return s;
}

// What a Python habit that led to token t means in Kiln ("" when none fits).
static const char *python_hint(Parser *p, Token *t) {
  Token *b = p->pos > 0 ? prev(p) : NULL;
  int joined = b && b->span.off + b->span.len == t->span.off;   // no blank between: one operator to Python
  const char *word = b && b->kind == TOK_IDENT ? p->src->text + b->span.off : NULL;
  if (joined && b->kind == TOK_STAR && t->kind == TOK_STAR) return " (a power is written a ^ b)";
  if (joined && b->kind == TOK_LT && t->kind == TOK_GT) return " (not equal is !=)";
  if (joined && t->kind == TOK_ASSIGN &&
      (b->kind == TOK_PLUS || b->kind == TOK_MINUS || b->kind == TOK_STAR || b->kind == TOK_SLASH ||
       b->kind == TOK_SLASHSLASH || b->kind == TOK_PERCENT))
    return " (there is no compound assignment: write x = x + y)";
  if (word && b->span.len == 3 && !strncmp(word, "def", 3))
    return " (a function is fn NAME(ARGS) { ... } or NAME(ARGS) = EXPR)";
  if (word && ((b->span.len == 3 && !strncmp(word, "for", 3)) || (b->span.len == 5 && !strncmp(word, "while", 5))))
    return " (there are no loops: a graph is traced once; write each step, or call a function for each)";
  if (word && b->span.len == 6 && !strncmp(word, "lambda", 6))
    return " (a function is NAME(ARGS) = EXPR)";
  if (word && t->kind == TOK_COMMA && p->pos - 1 == p->stmt_start)
    return " (one name per assignment: a = 1, then b = 2)";
  if (t->kind == TOK_IDENT && t->span.len == 2 && !strncmp(p->src->text + t->span.off, "if", 2))
    return " (there is no if: where(cond, a, b) picks elementwise)";
  return "";
}

// "unexpected token 'x'", or the lexer's message for a bad token.
static void unexpected(Parser *p) {
  Token *t = peek(p);
  if (t->kind == TOK_ERROR) {
    error_at(p, t->span, "%s", t->str ? t->str : "invalid token");
  } else if (t->kind == TOK_NEWLINE) {
    error_at(p, here(p), "unexpected end of line");
  } else if (t->kind == TOK_EOF) {
    error_at(p, here(p), "unexpected end of input");
  } else {
    int n = t->span.len;
    const char *s = p->src->text + t->span.off;
    error_at(p, t->span, "unexpected token '%.*s%s'%s", n > 32 ? 32 : n, s, n > 32 ? "..." : "", python_hint(p, t));
  }
}

// Reports "expected <what> here" unless a bad token explains it better.
static void expected(Parser *p, const char *what) {
  if (at(p, TOK_ERROR))
    unexpected(p);
  else
    error_at(p, here(p), "expected %s here", what);
}

static Token *expect(Parser *p, TokKind k) {
  if (at(p, k))
    return advance(p);
  char what[32];
  snprintf(what, sizeof what, "'%s'", tok_spelling(k));
  expected(p, what);
  return NULL;
}

// The closer for the bracket `open`; on failure a note points at the opener.
static Token *expect_close(Parser *p, TokKind k, Token *open, const char *what) {
  if (at(p, k))
    return advance(p);
  int reported = !at(p, TOK_ERROR);
  expected(p, what);
  if (reported)
    note_at(p, open->span, "to match this '%s'", tok_spelling(open->kind));
  return NULL;
}

static Token *expect_name(Parser *p, const char *what) {
  if (at(p, TOK_IDENT))
    return advance(p);
  expected(p, what);
  return NULL;
}

// ---- nodes --------------------------------------------------------------------

static AstNode *new_node(Parser *p, AstKind kind, Span sp) {
  AstNode *n = arena_alloc(p->a, sizeof *n);
  if (!n) {
    p->oom = 1;
    return NULL;
  }
  n->kind = kind;
  n->span = sp;
  n->height = 1;
  return n;
}

static int push(Parser *p, NodeVec *v, AstNode *n) {
  if (v->n == v->cap) {
    int cap = v->cap ? v->cap * 2 : 4;
    AstNode **nv = arena_alloc(p->a, (size_t)cap * sizeof *nv);
    if (!nv) {
      p->oom = 1;
      return 0;
    }
    if (v->n)
      memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
    v->v = nv;
    v->cap = cap;
  }
  v->v[v->n++] = n;
  return 1;
}

static int height(const AstNode *n) { return n ? n->height : 0; }

static int max_height(AstNode **v, int n, int m) {
  for (int i = 0; i < n; i++)
    if (height(v[i]) > m)
      m = height(v[i]);
  return m;
}

// Sets n's height from its children and refuses trees taller than
// AST_MAX_HEIGHT: "1+1+...+1" is built by a loop, not recursion, so this,
// not the depth limit, keeps later recursive walks off the stack's end.
static AstNode *seal(Parser *p, AstNode *n) {
  AstNode *kids[] = {n->lhs, n->rhs, n->start, n->stop, n->step, n->body};
  int m = max_height(kids, 6, 0);
  m = max_height(n->items, n->nitems, m);
  m = max_height(n->dims, n->ndims, m);
  m = max_height(n->opts, n->nopts, m);
  n->height = m + 1;
  if (n->height > AST_MAX_HEIGHT) {
    error_at(p, n->span, "expression is nested too deeply: more than %d levels of operators, calls or brackets "
                         "(a long chain such as 1+1+...+1 counts each operator); give parts of it names", AST_MAX_HEIGHT);
    return NULL;
  }
  return n;
}

static AstNode *new_binary(Parser *p, int op, Token *optok, AstNode *l, AstNode *r) {
  AstNode *n = new_node(p, AST_BINARY, span_join(l->span, r->span));
  if (!n)
    return NULL;
  n->op = op;
  n->op_span = optok->span;
  n->lhs = l;
  n->rhs = r;
  return seal(p, n);
}

static AstNode *new_unary(Parser *p, int op, Token *optok, AstNode *x) {
  AstNode *n = new_node(p, AST_UNARY, span_join(optok->span, x->span));
  if (!n)
    return NULL;
  n->op = op;
  n->op_span = optok->span;
  n->lhs = x;
  return seal(p, n);
}

static AstNode *new_name(Parser *p, Token *t) {
  AstNode *n = new_node(p, AST_NAME, t->span);
  if (n)
    n->str = t->str;
  return n;
}

// Recursion guard for the rules that nest: 0 (reported) when too deep.
static int enter(Parser *p) {
  if (p->depth >= MAX_DEPTH) {
    error_at(p, peek(p)->span, "expression is nested too deeply");
    return 0;
  }
  p->depth++;
  return 1;
}

// ---- expressions --------------------------------------------------------------

// list = "[" (expr ("," expr)* ","?)? "]"
static AstNode *list(Parser *p) {
  Token *open = advance(p);
  NodeVec v = {0};
  while (!at(p, TOK_RBRACK)) {
    AstNode *e = expr(p);
    if (!e || !push(p, &v, e))
      return NULL;
    if (!consume(p, TOK_COMMA))
      break;
  }
  if (!expect_close(p, TOK_RBRACK, open, "',' or ']'"))
    return NULL;
  AstNode *n = new_node(p, AST_LIST, from(p, open->span));
  if (!n)
    return NULL;
  n->items = v.v;
  n->nitems = v.n;
  return seal(p, n);
}

// primary = NUMBER | STRING | "true" | "false" | IDENT | "(" expr ")" | list
static AstNode *primary(Parser *p) {
  Token *t = peek(p);
  AstNode *n;
  switch (t->kind) {
  case TOK_NUM:
    advance(p);
    if (!(n = new_node(p, AST_NUM, t->span)))
      return NULL;
    n->num = t->num;
    n->num_is_int = t->num_is_int;
    n->inum = t->inum;
    n->str = t->str;
    return n;
  case TOK_STR:
    advance(p);
    if (!(n = new_node(p, AST_STR, t->span)))
      return NULL;
    n->str = t->str;
    return n;
  case TOK_TRUE:
  case TOK_FALSE:
    advance(p);
    if (!(n = new_node(p, AST_BOOL, t->span)))
      return NULL;
    n->inum = t->kind == TOK_TRUE;
    n->num = (double)n->inum;
    return n;
  case TOK_IDENT:
    advance(p);
    return new_name(p, t);
  case TOK_LPAREN:
    advance(p);
    if (!(n = expr(p)) || !expect_close(p, TOK_RPAREN, t, "')'"))
      return NULL;
    n->span = from(p, t->span);  // errors about "(a + b)" underline the parentheses too
    return n;
  case TOK_LBRACK:
    return list(p);
  case TOK_NEWLINE: case TOK_EOF: case TOK_RPAREN: case TOK_RBRACK:
  case TOK_RBRACE: case TOK_COMMA: case TOK_SEMI:
    error_at(p, here(p), "expected expression");
    return NULL;
  default:
    unexpected(p);
    return NULL;
  }
}

// kwarg = IDENT "=" expr
static AstNode *kwarg(Parser *p) {
  Token *name = advance(p);
  advance(p);  // "="
  AstNode *val = expr(p);
  if (!val)
    return NULL;
  AstNode *n = new_node(p, AST_KWARG, from(p, name->span));
  if (!n)
    return NULL;
  n->str = name->kind == TOK_IDENT ? name->str : (char *)tok_spelling(name->kind);   // train=, test=
  n->name_span = name->span;
  n->lhs = val;
  return seal(p, n);
}

// call = "(" (arg ("," arg)* ","?)? ")"      arg = kwarg | expr
static AstNode *call(Parser *p, AstNode *callee) {
  Token *open = advance(p);
  NodeVec v = {0};
  int seen_kw = 0;
  while (!at(p, TOK_RPAREN)) {
    AstNode *a;
    if ((at(p, TOK_IDENT) || peek(p)->kind >= TOK_FIRST_KEYWORD) && peek_at(p, 1)->kind == TOK_ASSIGN) {
      a = kwarg(p);
      seen_kw = 1;
    } else if ((a = expr(p)) && seen_kw) {
      error_at(p, a->span, "positional argument after a keyword argument");
      return NULL;
    }
    if (!a || !push(p, &v, a))
      return NULL;
    if (!consume(p, TOK_COMMA))
      break;
  }
  if (!expect_close(p, TOK_RPAREN, open, "',' or ')'"))
    return NULL;
  AstNode *n = new_node(p, AST_CALL, from(p, callee->span));
  if (!n)
    return NULL;
  n->lhs = callee;
  n->items = v.v;
  n->nitems = v.n;
  return seal(p, n);
}

static int ends_slice_part(Parser *p) {
  return at(p, TOK_COLON) || at(p, TOK_COMMA) || at(p, TOK_RBRACK);
}

// index = expr | expr? ":" expr? (":" expr?)?
static AstNode *index_entry(Parser *p) {
  Span start = peek(p)->span;
  AstNode *lo = NULL;
  if (!at(p, TOK_COLON)) {
    lo = expr(p);
    if (!lo || !at(p, TOK_COLON))
      return lo;
  }
  advance(p);  // ":"
  AstNode *n = new_node(p, AST_SLICE, start);
  if (!n)
    return NULL;
  n->start = lo;
  if (!ends_slice_part(p) && !(n->stop = expr(p)))
    return NULL;
  if (consume(p, TOK_COLON) && !at(p, TOK_COMMA) && !at(p, TOK_RBRACK) && !(n->step = expr(p)))
    return NULL;
  n->span = from(p, start);
  return seal(p, n);
}

// subscript = "[" index ("," index)* "]"
static AstNode *subscript(Parser *p, AstNode *base) {
  Token *open = advance(p);
  NodeVec v = {0};
  do {
    AstNode *e = index_entry(p);
    if (!e || !push(p, &v, e))
      return NULL;
  } while (consume(p, TOK_COMMA));
  if (!expect_close(p, TOK_RBRACK, open, "',' or ']'"))
    return NULL;
  AstNode *n = new_node(p, AST_INDEX, from(p, base->span));
  if (!n)
    return NULL;
  n->lhs = base;
  n->items = v.v;
  n->nitems = v.n;
  return seal(p, n);
}

// "." IDENT: a field of a value (a data set's split: fmnist.train)
static AstNode *attr(Parser *p, AstNode *base) {
  advance(p);  // "."
  // Keywords are field names here too: fmnist.train
  Token *name = peek(p)->kind >= TOK_FIRST_KEYWORD ? advance(p) : expect_name(p, "a field name after '.'");
  if (!name)
    return NULL;
  AstNode *n = new_node(p, AST_ATTR, from(p, base->span));
  if (!n)
    return NULL;
  n->lhs = base;
  n->str = name->kind == TOK_IDENT ? name->str : (char *)tok_spelling(name->kind);
  n->name_span = name->span;
  return seal(p, n);
}

// postfix = primary (call | subscript | "." IDENT)*
static AstNode *postfix(Parser *p) {
  AstNode *n = primary(p);
  while (n) {
    if (at(p, TOK_LPAREN))
      n = call(p, n);
    else if (at(p, TOK_LBRACK))
      n = subscript(p, n);
    else if (at(p, TOK_DOT))
      n = attr(p, n);
    else
      break;
  }
  return n;
}

// power = postfix ("^" unary)?
// Right-associative through unary: 2^-1 and a^b^c = a^(b^c).
static AstNode *power(Parser *p) {
  AstNode *base = postfix(p);
  if (!base || !at(p, TOK_CARET))
    return base;
  Token *op = advance(p);
  if (!enter(p))
    return NULL;
  AstNode *e = unary(p);
  p->depth--;
  return e ? new_binary(p, B_POW, op, base, e) : NULL;
}

// unary = ("-" | "+") unary | power
// so -x^2 = -(x^2): the operand of "-" is a whole power.
static AstNode *unary(Parser *p) {
  if (!at(p, TOK_MINUS) && !at(p, TOK_PLUS))
    return power(p);
  Token *op = advance(p);
  if (!enter(p))
    return NULL;
  AstNode *x = unary(p);
  p->depth--;
  return x ? new_unary(p, op->kind == TOK_MINUS ? U_NEG : U_PLUS, op, x) : NULL;
}

// mul = unary (("*" | "/" | "//" | "%" | "@") unary)*
static AstNode *mul(Parser *p) {
  AstNode *n = unary(p);
  while (n && (at(p, TOK_STAR) || at(p, TOK_SLASH) || at(p, TOK_SLASHSLASH) || at(p, TOK_PERCENT) || at(p, TOK_AT))) {
    Token *op = advance(p);
    int bop = op->kind == TOK_STAR ? B_MUL : op->kind == TOK_SLASH ? B_DIV : op->kind == TOK_SLASHSLASH ? B_FLOORDIV
            : op->kind == TOK_PERCENT ? B_MOD : B_MATMUL;
    AstNode *r = unary(p);
    n = r ? new_binary(p, bop, op, n, r) : NULL;
  }
  return n;
}

// add = mul (("+" | "-") mul)*
static AstNode *add(Parser *p) {
  AstNode *n = mul(p);
  while (n && (at(p, TOK_PLUS) || at(p, TOK_MINUS))) {
    Token *op = advance(p);
    AstNode *r = mul(p);
    n = r ? new_binary(p, op->kind == TOK_PLUS ? B_ADD : B_SUB, op, n, r) : NULL;
  }
  return n;
}

static int cmp_op(TokKind k) {
  switch (k) {
  case TOK_LT: return B_LT;
  case TOK_LE: return B_LE;
  case TOK_GT: return B_GT;
  case TOK_GE: return B_GE;
  case TOK_EQ: return B_EQ;
  case TOK_NE: return B_NE;
  default: return -1;
  }
}

// cmp = add (("<" | "<=" | ">" | ">=" | "==" | "!=") add)?
// Non-associative: a < b < c is an error, not (a < b) < c.
static AstNode *cmp(Parser *p) {
  AstNode *n = add(p);
  if (!n || cmp_op(peek(p)->kind) < 0)
    return n;
  Token *op = advance(p);
  AstNode *r = add(p);
  if (!r || !(n = new_binary(p, cmp_op(op->kind), op, n, r)))
    return NULL;
  if (cmp_op(peek(p)->kind) >= 0) {
    error_at(p, peek(p)->span, "comparisons cannot be chained; combine them with 'and'");
    return NULL;
  }
  return n;
}

// not = ("not" | "!") not | cmp
static AstNode *not_expr(Parser *p) {
  if (!at(p, TOK_NOT) && !at(p, TOK_BANG))
    return cmp(p);
  Token *op = advance(p);
  if (!enter(p))
    return NULL;
  AstNode *x = not_expr(p);
  p->depth--;
  return x ? new_unary(p, U_NOT, op, x) : NULL;
}

// and = not ("and" not)*
static AstNode *and_expr(Parser *p) {
  AstNode *n = not_expr(p);
  while (n && at(p, TOK_AND)) {
    Token *op = advance(p);
    AstNode *r = not_expr(p);
    n = r ? new_binary(p, B_AND, op, n, r) : NULL;
  }
  return n;
}

// or = and ("or" and)*
static AstNode *or_expr(Parser *p) {
  AstNode *n = and_expr(p);
  while (n && at(p, TOK_OR)) {
    Token *op = advance(p);
    AstNode *r = and_expr(p);
    n = r ? new_binary(p, B_OR, op, n, r) : NULL;
  }
  return n;
}

// expr = or
static AstNode *expr(Parser *p) {
  if (!enter(p))
    return NULL;
  AstNode *n = or_expr(p);
  p->depth--;
  return n;
}

// ---- statements ---------------------------------------------------------------

// params = "(" (param ("," param)* ","?)? ")"     param = IDENT ("=" expr)?
// A parameter with a default is an AST_KWARG (str, lhs = the default).
static int params(Parser *p, AstNode *fn) {
  Token *open = expect(p, TOK_LPAREN);
  if (!open)
    return 0;
  NodeVec v = {0};
  int defaults = 0;
  while (!at(p, TOK_RPAREN)) {
    Token *t = expect_name(p, "a parameter name");
    if (!t)
      return 0;
    for (int i = 0; i < v.n; i++)
      if (!strcmp(v.v[i]->str, t->str)) {
        error_at(p, t->span, "duplicate parameter '%s'", t->str);
        return 0;
      }
    AstNode *n;
    if (at(p, TOK_ASSIGN)) {
      p->pos--;
      n = kwarg(p);
      defaults = 1;
    } else if (defaults) {
      error_at(p, t->span, "parameter '%s' needs a default value: it follows a parameter that has one", t->str);
      return 0;
    } else {
      n = new_name(p, t);
    }
    if (!n || !push(p, &v, n))
      return 0;
    if (!consume(p, TOK_COMMA))
      break;
  }
  if (!expect_close(p, TOK_RPAREN, open, "',' or ')'"))
    return 0;
  fn->items = v.v;
  fn->nitems = v.n;
  return 1;
}

static int is_return(const AstNode *s) { return s->kind == AST_EXPR_STMT && s->op; }

// block = "{" (stmt (NEWLINE | ";")*)* "}"
// A function body: its last statement is an expression, the value.
static AstNode *block(Parser *p) {
  Token *open = expect(p, TOK_LBRACE);
  if (!open || !enter(p))
    return NULL;
  AstNode *b = new_node(p, AST_BLOCK, open->span);
  int errs = p->nerr;
  p->in_fn++;
  int ok = b && stmt_list(p, b, 1);
  p->in_fn--;
  p->depth--;
  if (!ok || !expect_close(p, TOK_RBRACE, open, "'}'"))
    return NULL;
  b->span = from(p, open->span);
  if (p->nerr != errs)
    return b;  // a statement was dropped: the checks below would mislead
  if (b->nitems == 0) {
    error_at(p, b->span, "empty function body; it must end with an expression, the result");
    return NULL;
  }
  AstNode *last = b->items[b->nitems - 1];
  if (last->kind != AST_EXPR_STMT) {
    error_at(p, last->span, "a function body must end with an expression, the result");
    return NULL;
  }
  return seal(p, b);
}

static AstNode *new_fn(Parser *p, Token *start, Token *name) {
  AstNode *fn = new_node(p, AST_FNDEF, start->span);
  if (fn) {
    fn->str = name->str;
    fn->name_span = name->span;
  }
  return fn;
}

// fndef = "fn" IDENT params NEWLINE* block
static AstNode *fn_stmt(Parser *p) {
  Token *kw = advance(p);
  Token *name = expect_name(p, "a function name");
  AstNode *fn = name ? new_fn(p, kw, name) : NULL;
  if (!fn || !params(p, fn))
    return NULL;
  while (consume(p, TOK_NEWLINE))
    ;
  if (!(fn->body = block(p)))
    return NULL;
  fn->span = from(p, kw->span);
  return seal(p, fn);
}

// shortfn = IDENT params "=" expr      "sq(v) = v * v"
static AstNode *short_fn_stmt(Parser *p) {
  Token *name = advance(p);
  AstNode *fn = new_fn(p, name, name);
  if (!fn || !params(p, fn) || !expect(p, TOK_ASSIGN))
    return NULL;
  AstNode *e = expr(p);
  if (!e)
    return NULL;
  AstNode *s = new_node(p, AST_EXPR_STMT, e->span);
  AstNode *b = new_node(p, AST_BLOCK, e->span);
  NodeVec v = {0};
  if (!s || !b || !push(p, &v, s))
    return NULL;
  s->lhs = e;
  b->items = v.v;
  b->nitems = v.n;
  if (!seal(p, s) || !seal(p, b))
    return NULL;
  fn->body = b;
  fn->span = from(p, name->span);
  return seal(p, fn);
}

// dim = "-"? INT | IDENT
static AstNode *dim(Parser *p) {
  Token *t = peek(p);
  TokKind next = peek_at(p, 1)->kind;
  int alone = next == TOK_COMMA || next == TOK_RBRACK;
  if (t->kind == TOK_IDENT && alone)
    return new_name(p, advance(p));
  // Anything else but a bare integer is an expression: dim(h, -1), 2 * n
  if (!(t->kind == TOK_NUM && alone) && !(t->kind == TOK_MINUS && peek_at(p, 1)->kind == TOK_NUM))
    return add(p);
  int neg = consume(p, TOK_MINUS);
  if (!at(p, TOK_NUM) || !peek(p)->num_is_int) {
    expected(p, "a dimension (an integer or a name)");
    return NULL;
  }
  Token *num = advance(p);
  AstNode *n = new_node(p, AST_NUM, from(p, t->span));
  if (!n)
    return NULL;
  n->num_is_int = 1;
  n->inum = neg ? -num->inum : num->inum;
  n->num = (double)n->inum;
  n->str = neg ? NULL : num->str;
  return n;
}

// type = IDENT ("[" (dim ("," dim)*)? "]")?
static int type(Parser *p, AstNode *decl) {
  Token *t = expect_name(p, "a dtype (f32, f64, ...)");
  if (!t)
    return 0;
  decl->type_name = t->str;
  decl->type_span = t->span;
  if (!at(p, TOK_LBRACK))
    return 1;
  Token *open = advance(p);
  NodeVec v = {0};
  while (!at(p, TOK_RBRACK)) {
    AstNode *d = dim(p);
    if (!d || !push(p, &v, d))
      return 0;
    if (!consume(p, TOK_COMMA))
      break;
  }
  if (!expect_close(p, TOK_RBRACK, open, "',' or ']'"))
    return 0;
  decl->dims = v.v;
  decl->ndims = v.n;
  return 1;
}

// decl = "input" IDENT ":" type | ("param" | "state") IDENT ":" type ("=" expr)?
static AstNode *decl_stmt(Parser *p) {
  Token *kw = advance(p);
  AstNode *n = new_node(p, kw->kind == TOK_INPUT ? AST_INPUT : AST_PARAM, kw->span);
  if (n && kw->kind == TOK_IDENT)
    n->op = 1;   // state: kept and saved, not trained
  Token *name = n ? expect_name(p, "a name") : NULL;
  if (!name)
    return NULL;
  n->str = name->str;
  n->name_span = name->span;
  if (!expect(p, TOK_COLON) || !type(p, n))
    return NULL;
  if (n->kind == AST_PARAM && consume(p, TOK_ASSIGN) && !(n->rhs = expr(p)))
    return NULL;
  n->span = from(p, kw->span);
  return seal(p, n);
}

// print = "print" expr ("," expr)* | "print" "(" expr ("," expr)* ")"
// The second form, print(a, b), applies when the parenthesis ends the statement.
static AstNode *print_stmt(Parser *p) {
  Token *kw = advance(p);
  Token *open = NULL;
  if (at(p, TOK_LPAREN)) {
    int close = matching(p, p->pos);
    if (close >= 0 && ends_stmt(p->toks[close + 1].kind))
      open = advance(p);
  }
  NodeVec v = {0};
  do {
    AstNode *e = expr(p);
    if (!e || !push(p, &v, e))
      return NULL;
  } while (consume(p, TOK_COMMA));
  if (open && !expect_close(p, TOK_RPAREN, open, "',' or ')'"))
    return NULL;
  AstNode *n = new_node(p, AST_PRINT, from(p, kw->span));
  if (!n)
    return NULL;
  n->items = v.v;
  n->nitems = v.n;
  return seal(p, n);
}

// import = "import" STRING
static AstNode *import_stmt(Parser *p) {
  Token *kw = advance(p);
  Token *path = at(p, TOK_STR) ? advance(p) : NULL;
  if (!path) {
    expected(p, "a file name in quotes");
    return NULL;
  }
  AstNode *n = new_node(p, AST_IMPORT, from(p, kw->span));
  if (n)
    n->str = path->str;
  return n;
}

// ("," kwarg)*: options after a train or evaluate statement (save= is one of
// evaluate's, though `save` is a keyword).
static int options(Parser *p, AstNode *n) {
  NodeVec v = {0};
  while (consume(p, TOK_COMMA)) {
    if (!((at(p, TOK_IDENT) || at(p, TOK_SAVE)) && peek_at(p, 1)->kind == TOK_ASSIGN)) {
      expected(p, "an option (name = value)");
      return 0;
    }
    AstNode *o = kwarg(p);
    if (!o || !push(p, &v, o))
      return 0;
  }
  n->opts = v.v;
  n->nopts = v.n;
  return 1;
}

// data = "data" IDENT "=" expr
static AstNode *data_stmt(Parser *p) {
  Token *kw = advance(p);
  Token *name = expect_name(p, "the data set's name");
  if (!name || !expect(p, TOK_ASSIGN))
    return NULL;
  AstNode *n = new_node(p, AST_DATA, kw->span);
  if (!n || !(n->rhs = expr(p)))
    return NULL;
  n->str = name->str;
  n->name_span = name->span;
  n->span = from(p, kw->span);
  return seal(p, n);
}

// train = "train" expr "on" expr "with" expr ("," kwarg)*
static AstNode *train_stmt(Parser *p) {
  Token *kw = advance(p);
  AstNode *n = new_node(p, AST_TRAIN, kw->span);
  if (!n || !(n->lhs = expr(p)) || !expect(p, TOK_ON) || !(n->rhs = expr(p)) || !expect(p, TOK_WITH) ||
      !(n->start = expr(p)) || !options(p, n))
    return NULL;
  n->span = from(p, kw->span);
  return seal(p, n);
}

// evaluate = "evaluate" expr ("," expr)* "on" expr ("," kwarg)*
static AstNode *evaluate_stmt(Parser *p) {
  Token *kw = advance(p);
  AstNode *n = new_node(p, AST_EVALUATE, kw->span);
  NodeVec v = {0};
  if (!n)
    return NULL;
  do {
    AstNode *e = expr(p);
    if (!e || !push(p, &v, e))
      return NULL;
  } while (consume(p, TOK_COMMA));
  n->items = v.v;
  n->nitems = v.n;
  if (!expect(p, TOK_ON) || !(n->rhs = expr(p)) || !options(p, n))
    return NULL;
  n->span = from(p, kw->span);
  return seal(p, n);
}

// save = "save" expr      load = "load" expr
static AstNode *save_load_stmt(Parser *p) {
  Token *kw = advance(p);
  AstNode *n = new_node(p, kw->kind == TOK_SAVE ? AST_SAVE : AST_LOAD, kw->span);
  if (!n || !(n->lhs = expr(p)))
    return NULL;
  n->span = from(p, kw->span);
  return seal(p, n);
}

// assign = IDENT "=" expr
static AstNode *assign_stmt(Parser *p) {
  Token *name = advance(p);
  advance(p);  // "="
  AstNode *target = new_name(p, name);
  AstNode *val = target ? expr(p) : NULL;
  if (!val)
    return NULL;
  AstNode *n = new_node(p, AST_ASSIGN, from(p, name->span));
  if (!n)
    return NULL;
  n->str = name->str;
  n->name_span = name->span;
  n->lhs = target;
  n->rhs = val;
  return seal(p, n);
}

// exprstmt = ("return")? expr
static AstNode *expr_stmt(Parser *p) {
  Token *ret = at(p, TOK_RETURN) ? advance(p) : NULL;
  if (ret && !p->in_fn) {
    error_at(p, ret->span, "'return' outside a function");
    return NULL;
  }
  Span start = peek(p)->span;
  AstNode *e = expr(p);
  if (!e)
    return NULL;
  if (at(p, TOK_ASSIGN)) {
    error_at(p, e->span, "cannot assign to this expression; only a name can be assigned");
    return NULL;
  }
  AstNode *n = new_node(p, AST_EXPR_STMT, from(p, ret ? ret->span : start));
  if (!n)
    return NULL;
  n->lhs = e;
  n->op = ret != NULL;
  return seal(p, n);
}

// Statements that only make sense once per program, outside functions.
static int top_level_only(Parser *p) {
  if (!p->in_fn)
    return 1;
  Token *t = peek(p);
  error_at(p, t->span, "'%s' is only allowed at top level", tok_spelling(t->kind));
  return 0;
}

// stmt = print | decl | fndef | shortfn | assign | import | reserved | exprstmt
static AstNode *stmt(Parser *p) {
  switch (peek(p)->kind) {
  case TOK_PRINT:
    return print_stmt(p);
  case TOK_INPUT:
    return top_level_only(p) ? decl_stmt(p) : NULL;
  case TOK_PARAM:
    return decl_stmt(p);
  case TOK_FN:
    return fn_stmt(p);
  case TOK_IMPORT:
    return top_level_only(p) ? import_stmt(p) : NULL;
  case TOK_DATA:
    return top_level_only(p) ? data_stmt(p) : NULL;
  case TOK_TRAIN:
    return top_level_only(p) ? train_stmt(p) : NULL;
  case TOK_EVALUATE:
    return top_level_only(p) ? evaluate_stmt(p) : NULL;
  case TOK_SAVE: case TOK_LOAD:
    return top_level_only(p) ? save_load_stmt(p) : NULL;
  case TOK_IDENT:
    if (!strcmp(peek(p)->str, "state") && peek_at(p, 1)->kind == TOK_IDENT && peek_at(p, 2)->kind == TOK_COLON)
      return decl_stmt(p);
    if (peek_at(p, 1)->kind == TOK_ASSIGN)
      return assign_stmt(p);
    if (peek_at(p, 1)->kind == TOK_LPAREN) {
      int close = matching(p, p->pos + 1);
      if (close >= 0 && p->toks[close + 1].kind == TOK_ASSIGN)
        return short_fn_stmt(p);
    }
    return expr_stmt(p);
  default:
    return expr_stmt(p);
  }
}

// After an error: skip to the end of the line, past any { } opened on it,
// stopping early at the "}" that closes the enclosing block.
static void sync(Parser *p, int in_block) {
  int depth = 0;
  for (;;) {
    TokKind k = peek(p)->kind;
    if (k == TOK_EOF || (k == TOK_NEWLINE && depth == 0))
      return;
    if (k == TOK_LBRACE)
      depth++;
    if (k == TOK_RBRACE) {
      if (depth == 0 && in_block)
        return;
      if (depth > 0)
        depth--;
    }
    advance(p);
  }
}

// program = (stmt? (NEWLINE | ";"))*, up to EOF (or "}" in a block).
// Returns 0 when parsing must stop (out of memory, too many errors).
static int stmt_list(Parser *p, AstNode *blk, int in_block) {
  NodeVec v = {0};
  for (;;) {
    while (at(p, TOK_NEWLINE) || at(p, TOK_SEMI))
      advance(p);
    if (at(p, TOK_EOF) || (in_block && at(p, TOK_RBRACE)))
      break;
    if (p->oom || p->nerr >= MAX_ERRORS)
      return 0;
    int errs = p->nerr, outer = p->stmt_start;
    p->stmt_start = p->pos;
    AstNode *s = stmt(p);
    if (s && !(ends_stmt(peek(p)->kind) && (in_block || !at(p, TOK_RBRACE)))) {
      unexpected(p);
      s = NULL;
    }
    p->stmt_start = outer;
    if (s) {
      if (v.n && is_return(v.v[v.n - 1]))
        error_at(p, v.v[v.n - 1]->span, "'return' must be the last statement of a function body");
      if (!push(p, &v, s))
        return 0;
      continue;
    }
    if (p->oom)
      return 0;
    if (p->nerr == errs)
      unexpected(p);  // every failure gets a message
    sync(p, in_block);
  }
  blk->items = v.v;
  blk->nitems = v.n;
  return 1;
}

AstNode *parse_program(Arena *a, const Source *src, Diag *d) {
  if (src->len > INT_MAX / 2) {  // spans hold int offsets
    diag_error(d, (Span){src, 0, 0, 0, 0}, "source is too large");
    return NULL;
  }
  TokenList tl;
  if (lex(a, src, &tl) < 0) {
    diag_error(d, (Span){src, 0, 0, 0, 0}, "out of memory");
    return NULL;
  }
  Parser p = {.a = a, .src = src, .d = d, .toks = tl.toks, .ntoks = tl.ntoks};
  AstNode *prog = new_node(&p, AST_BLOCK, (Span){src, 1, 1, 0, (int)src->len});
  int ok = prog && stmt_list(&p, prog, 0);
  if (p.oom) {
    diag_error(d, (Span){src, 0, 0, 0, 0}, "out of memory");
    return NULL;
  }
  if (!ok)
    diag_error(d, (Span){src, 0, 0, 0, 0}, "too many errors; stopping");
  return p.nerr ? NULL : prog;
}

// Tokens after which a statement cannot end.
int parse_is_incomplete(const char *text) {
  Arena *a = arena_new();
  if (!a)
    return 0;
  Source src = source_from_string("<repl>", text);
  TokenList tl;
  int r = 0;
  if (lex(a, &src, &tl) == 0 && tl.nerrors == 0) {
    int i = tl.ntoks - 1;
    while (i >= 0 && (tl.toks[i].kind == TOK_EOF || tl.toks[i].kind == TOK_NEWLINE))
      i--;
    if (tl.open > 0) {
      r = 1;
    } else if (i >= 0 && tl.toks[i].kind == TOK_RPAREN) {
      // "fn f(a)" with its body on the next line
      int depth = 0, j = i;
      for (; j >= 0; j--) {
        TokKind k = tl.toks[j].kind;
        depth += k == TOK_RPAREN ? 1 : k == TOK_LPAREN ? -1 : 0;
        if (depth == 0)
          break;
      }
      r = j >= 2 && tl.toks[j - 1].kind == TOK_IDENT && tl.toks[j - 2].kind == TOK_FN;
    }
  }
  arena_free(a);
  return r;
}
