// Front-end tests: the lexer, the parser's trees (as S-expressions), exact
// error messages, the REPL's continuation check, and a small fuzz loop.
// Prints one line per check and "N passed, N failed"; exits 1 on failure.
#include "frontend/parse.h"
#include "ir/ir.h"  // its arena prototypes must match frontend/arena.h's
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int npass, nfail;

// Names are often source text: show newlines and tabs as escapes.
static void print_name(const char *name) {
  int n = 0;
  for (const char *s = name; *s && n < 70; s++, n++)
    if (*s == '\n')
      fputs("\\n", stdout);
    else if (*s == '\t')
      fputs("\\t", stdout);
    else
      putchar(*s);
  puts(n == 70 ? "..." : "");
}

static void report(int ok, const char *name, const char *want, const char *got) {
  printf(ok ? "ok   " : "FAIL ");
  print_name(name);
  if (ok) {
    npass++;
    return;
  }
  nfail++;
  if (want)
    printf("  want: |%s|\n  got:  |%s|\n", want, got ? got : "(null)");
}

static void check(int ok, const char *name) { report(ok, name, NULL, NULL); }

// Parses text as "t.kiln"; returns the statements as S-expressions, one per
// line, or "ERROR\n" followed by the diagnostics. Caller frees.
static char *parse_to_string(const char *text) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  Source src = source_from_string("t.kiln", text);
  Diag d;
  diag_init(&d);
  Arena *a = arena_new();
  AstNode *prog = parse_program(a, &src, &d);
  if (!prog) {
    fprintf(f, "ERROR\n%s", d.msg);
  } else {
    for (int i = 0; i < prog->nitems; i++) {
      ast_sexpr(f, prog->items[i]);
      fputc('\n', f);
    }
  }
  fclose(f);
  arena_free(a);
  diag_free(&d);
  return out;
}

// The statements of src, joined by "\n", must print as want.
static void expect_ast(const char *src, const char *want) {
  char *got = parse_to_string(src);
  size_t n = strlen(got);
  if (n && got[n - 1] == '\n')
    got[n - 1] = '\0';
  report(!strcmp(got, want), src, want, got);
  free(got);
}

// src must fail with exactly these diagnostics.
static void expect_error(const char *name, const char *src, const char *want) {
  char *got = parse_to_string(src);
  const char *msg = strncmp(got, "ERROR\n", 6) ? got : got + 6;
  report(!strncmp(got, "ERROR\n", 6) && !strcmp(msg, want), name, want, msg);
  free(got);
}

// src must fail with a message containing want.
static void expect_error_has(const char *name, const char *src, const char *want) {
  char *got = parse_to_string(src);
  report(!strncmp(got, "ERROR\n", 6) && strstr(got, want), name, want, got);
  free(got);
}

static const char *sample =
  "x = [[1, 2, 3], [4, 5, 6]]          # tensor literal (f32), shape [2, 3]\n"
  "b = [10, 20, 30]\n"
  "print x + b\n"
  "print x @ transpose(x)\n"
  "print sum(x, axis=1)\n"
  "sq(v) = v * v\n"
  "fn norm2(a) {\n"
  "  s = sum(sq(a))\n"
  "  sqrt(s)\n"
  "}\n"
  "print norm2([3, 4])\n"
  "f(v) = sum(v * v)\n"
  "print grad(f)([1, 2, 3])\n"
  "g(t) = t ^ 3\n"
  "print grad(grad(g))(2.0)\n"
  "h(a, b) = a * b ^ 2\n"
  "print grad(h, 1)(2.0, 3.0)\n"
  "input X : f32[B, 784]\n"
  "param W : f32[784, 10] = glorot\n"
  "loss = mean(softmax_cross_entropy(X @ W, labels))\n"
  "dW = grad(loss, W)\n"
  "y = x[1:3, :]; z = x[:, -1]; w = x[0]\n"
  "print reshape(x, [2, -1]), cast(x, f64)\n"
  "c = where(x > 2, x, 0) ; d = x[::2]\n"
  "train loss on fmnist.train with adam(lr=1e-3), batch=128, epochs=2, seed=1\n";

static const char *sample_ast =
  "(= x [[1 2 3] [4 5 6]])\n"
  "(= b [10 20 30])\n"
  "(print (+ x b))\n"
  "(print (@ x (call transpose x)))\n"
  "(print (call sum x axis=1))\n"
  "(fn sq (v) (block (* v v)))\n"
  "(fn norm2 (a) (block (= s (call sum (call sq a))) (call sqrt s)))\n"
  "(print (call norm2 [3 4]))\n"
  "(fn f (v) (block (call sum (* v v))))\n"
  "(print (call (call grad f) [1 2 3]))\n"
  "(fn g (t) (block (^ t 3)))\n"
  "(print (call (call grad (call grad g)) 2.0))\n"
  "(fn h (a b) (block (* a (^ b 2))))\n"
  "(print (call (call grad h 1) 2.0 3.0))\n"
  "(input X f32[B 784])\n"
  "(param W f32[784 10] glorot)\n"
  "(= loss (call mean (call softmax_cross_entropy (@ X W) labels)))\n"
  "(= dW (call grad loss W))\n"
  "(= y (index x 1:3 :))\n"
  "(= z (index x : (neg 1)))\n"
  "(= w (index x 0))\n"
  "(print (call reshape x [2 (neg 1)]) (call cast x f64))\n"
  "(= c (call where (> x 2) x 0))\n"
  "(= d (index x ::2))\n"
  "(train loss on (. fmnist train) with (call adam lr=1e-3) batch=128 epochs=2 seed=1)";

static void test_sample(void) {
  expect_ast(sample, sample_ast);

  // the tree dump and a few fields the later stages rely on
  Source src = source_from_string("sample.kiln", sample);
  Diag d;
  diag_init(&d);
  Arena *a = arena_new();
  AstNode *prog = parse_program(a, &src, &d);
  check(prog && prog->kind == AST_BLOCK && prog->nitems == 25, "sample: 25 statements");
  if (!prog) {
    arena_free(a);
    diag_free(&d);
    return;
  }
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  ast_dump(f, prog->items[6], 0);
  fclose(f);
  const char *want =
    "fndef norm2(a)\n"
    "  block\n"
    "    assign s\n"
    "      call\n"
    "        name sum\n"
    "        call\n"
    "          name sq\n"
    "          name a\n"
    "    expr\n"
    "      call\n"
    "        name sqrt\n"
    "        name s\n";
  report(!strcmp(out, want), "ast_dump of fn norm2", want, out);
  free(out);

  AstNode *in = prog->items[14];  // input X : f32[B, 784]
  check(in->kind == AST_INPUT && !strcmp(in->str, "X") && !strcmp(in->type_name, "f32") &&
        in->ndims == 2 && in->dims[0]->kind == AST_NAME && !strcmp(in->dims[0]->str, "B") &&
        in->dims[1]->kind == AST_NUM && in->dims[1]->inum == 784,
        "input X : f32[B, 784] fields");
  check(in->span.line == 18 && in->span.col == 1 && in->name_span.col == 7 &&
        in->type_span.col == 11 && in->type_span.len == 3,
        "input spans");
  AstNode *pr = prog->items[15];  // param W : f32[784, 10] = glorot
  check(pr->kind == AST_PARAM && pr->rhs && pr->rhs->kind == AST_NAME &&
        !strcmp(pr->rhs->str, "glorot"), "param initializer");
  AstNode *sq = prog->items[5];  // sq(v) = v * v
  check(sq->kind == AST_FNDEF && sq->nitems == 1 && sq->body->kind == AST_BLOCK &&
        sq->body->nitems == 1 && sq->body->items[0]->kind == AST_EXPR_STMT &&
        sq->name_span.line == 6 && sq->name_span.col == 1 && sq->name_span.len == 2,
        "one-line fn fields");
  AstNode *sum = prog->items[4]->items[0];  // sum(x, axis=1)
  check(sum->kind == AST_CALL && sum->nitems == 2 && sum->items[1]->kind == AST_KWARG &&
        !strcmp(sum->items[1]->str, "axis") && sum->items[1]->lhs->inum == 1 &&
        sum->span.col == 7 && sum->span.len == 14,
        "kwarg fields and call span");
  AstNode *mm = prog->items[3]->items[0];  // x @ transpose(x)
  check(mm->kind == AST_BINARY && mm->op == B_MATMUL && mm->op_span.col == 9 &&
        mm->span.col == 7 && mm->span.len == 16, "binary op_span and span");
  AstNode *tr = prog->items[24];
  check(tr->kind == AST_TRAIN && tr->lhs->kind == AST_NAME && tr->rhs->kind == AST_ATTR &&
        !strcmp(tr->rhs->str, "train") && tr->start->kind == AST_CALL && tr->nopts == 3 &&
        !strcmp(tr->opts[0]->str, "batch") && tr->span.line == 25 && tr->span.col == 1, "train statement");
  check(prog->items[0]->rhs->height == 3 && prog->height <= AST_MAX_HEIGHT + 1, "heights");
  arena_free(a);
  diag_free(&d);
}

static void test_precedence(void) {
  expect_ast("-x^2", "(neg (^ x 2))");
  expect_ast("a*b^2", "(* a (^ b 2))");
  expect_ast("a@b+c", "(+ (@ a b) c)");
  expect_ast("a+b@c", "(+ a (@ b c))");
  expect_ast("2^-1", "(^ 2 (neg 1))");
  expect_ast("a^b^c", "(^ a (^ b c))");
  expect_ast("-a*b", "(* (neg a) b)");
  expect_ast("- -a", "(neg (neg a))");
  expect_ast("+a", "(pos a)");
  expect_ast("a-b-c", "(- (- a b) c)");
  expect_ast("a/b*c", "(* (/ a b) c)");
  expect_ast("(a+b)*c", "(* (+ a b) c)");
  expect_ast("a < b + 1", "(< a (+ b 1))");
  expect_ast("x >= 1 and x <= 2", "(and (>= x 1) (<= x 2))");
  expect_ast("a == b and c != d or not e", "(or (and (== a b) (!= c d)) (not e))");
  expect_ast("not a < b", "(not (< a b))");
  expect_ast("!a", "(not a)");
  expect_ast("a or b or c", "(or (or a b) c)");
  expect_ast("x > 2 == true", "ERROR\n"
             "t.kiln:1:7: error: comparisons cannot be chained; combine them with 'and'\n"
             "x > 2 == true\n"
             "      ^~");
}

static void test_postfix(void) {
  expect_ast("sum(x, axis=1, keepdims=true)", "(call sum x axis=1 keepdims=true)");
  expect_ast("grad(grad(g))(2.0)", "(call (call grad (call grad g)) 2.0)");
  expect_ast("grad(h, 1)(2.0, 3.0)", "(call (call grad h 1) 2.0 3.0)");
  expect_ast("f()", "(call f)");
  expect_ast("f(a, b,)", "(call f a b)");
  expect_ast("x[1:3, :]", "(index x 1:3 :)");
  expect_ast("x[::2]", "(index x ::2)");
  expect_ast("x[:, -1]", "(index x : (neg 1))");
  expect_ast("x[a:]", "(index x a:)");
  expect_ast("x[:b]", "(index x :b)");
  expect_ast("x[1:2:3]", "(index x 1:2:3)");
  expect_ast("x[::]", "(index x :)");
  expect_ast("x[n-1:, 0]", "(index x (- n 1): 0)");
  expect_ast("x[0][1]", "(index (index x 0) 1)");
  expect_ast("f(x)[0]", "(index (call f x) 0)");
  expect_ast("-x[0]^2", "(neg (^ (index x 0) 2))");
}

static void test_literals(void) {
  expect_ast("[1, 2,]", "[1 2]");
  expect_ast("[]", "[]");
  expect_ast("[[1.5], [2]]", "[[1.5] [2]]");
  expect_ast("\"a\\\"b\\\\c\\n\"", "\"a\\\"b\\\\c\\n\"");
  expect_ast("true or false", "(or true false)");
  expect_ast("1e-3 + .5 + 2. + 7", "(+ (+ (+ 1e-3 .5) 2.) 7)");

  Arena *a = arena_new();
  Source src = source_from_string("t", "123 1.5 1e-3 .5 2. 1E+2 9223372036854775807");
  TokenList tl;
  int ok = lex(a, &src, &tl) == 0 && tl.ntoks == 8 && tl.nerrors == 0;
  struct { double v; int is_int; } want[] = {
    {123, 1}, {1.5, 0}, {1e-3, 0}, {0.5, 0}, {2.0, 0}, {100, 0}, {9223372036854775807.0, 1},
  };
  for (int i = 0; ok && i < 7; i++)
    ok = tl.toks[i].kind == TOK_NUM && tl.toks[i].num == want[i].v &&
         tl.toks[i].num_is_int == want[i].is_int;
  ok = ok && tl.toks[0].inum == 123 && tl.toks[6].inum == INT64_MAX &&
       !strcmp(tl.toks[2].str, "1e-3") && tl.toks[7].kind == TOK_EOF;
  check(ok, "lexer: number values, int-ness and text");

  src = source_from_string("t", "f(a,\n  b)\n\n\n[1,\n2]\n{\n}\n");
  ok = lex(a, &src, &tl) == 0;
  TokKind kinds[] = {TOK_IDENT, TOK_LPAREN, TOK_IDENT, TOK_COMMA, TOK_IDENT, TOK_RPAREN,
                     TOK_NEWLINE, TOK_LBRACK, TOK_NUM, TOK_COMMA, TOK_NUM, TOK_RBRACK,
                     TOK_NEWLINE, TOK_LBRACE, TOK_NEWLINE, TOK_RBRACE, TOK_NEWLINE, TOK_EOF};
  ok = ok && tl.ntoks == (int)(sizeof kinds / sizeof kinds[0]);
  for (int i = 0; ok && i < tl.ntoks; i++)
    ok = tl.toks[i].kind == kinds[i];
  ok = ok && tl.toks[4].span.line == 2 && tl.toks[4].span.col == 3;
  check(ok, "lexer: newlines skipped in ( ) and [ ], kept in { }, collapsed");

  src = source_from_string("t", "fn input param print import train evaluate save load on with "
                                "true false and or not return data fnord");
  ok = lex(a, &src, &tl) == 0 && tl.ntoks == 20;
  for (int i = 0; ok && i < 18; i++)
    ok = (int)tl.toks[i].kind == TOK_FIRST_KEYWORD + i;
  check(ok && tl.toks[18].kind == TOK_IDENT, "lexer: keywords");

  src = source_from_string("t", "== != <= >= = < > ! . ^ @ ; :");
  TokKind puncts[] = {TOK_EQ, TOK_NE, TOK_LE, TOK_GE, TOK_ASSIGN, TOK_LT, TOK_GT,
                      TOK_BANG, TOK_DOT, TOK_CARET, TOK_AT, TOK_SEMI, TOK_COLON};
  ok = lex(a, &src, &tl) == 0 && tl.ntoks == 14;
  for (int i = 0; ok && i < 13; i++)
    ok = tl.toks[i].kind == puncts[i];
  check(ok, "lexer: punctuation, longest match");
  arena_free(a);
}

static void test_statements(void) {
  expect_ast("print(a, b)", "(print a b)");
  expect_ast("print (a) * 2", "(print (* a 2))");
  expect_ast("print(x)[0], 1", "(print (index x 0) 1)");
  expect_ast("f(1,\n  2)", "(call f 1 2)");
  expect_ast("x = [1,\n 2]\ny = 3", "(= x [1 2])\n(= y 3)");
  expect_ast("a; b\n\n\n  c  # comment\n;;", "a\nb\nc");
  expect_ast("fn f(a)\n{\n  return a\n}", "(fn f (a) (block (return a)))");
  expect_ast("fn f(a, b) { a; b }", "(fn f (a b) (block a b))");
  expect_ast("fn f() {\n\n  1\n\n}\n", "(fn f () (block 1))");
  expect_ast("fn outer(a) {\n  fn inner(b) { b }\n  inner(a)\n}",
             "(fn outer (a) (block (fn inner (b) (block b)) (call inner a)))");
  expect_ast("f(x) = x\nf(1)", "(fn f (x) (block x))\n(call f 1)");
  expect_ast("param b : f32[10]", "(param b f32[10])");
  expect_ast("param W : f32[3, 3] = normal(0.01)", "(param W f32[3 3] (call normal 0.01))");
  expect_ast("input s : f32", "(input s f32)");
  expect_ast("input s : f32[]", "(input s f32)");
  expect_ast("input t : i32[-1, N]", "(input t i32[-1 N])");
  expect_ast("import \"lib.kiln\"", "(import \"lib.kiln\")");
  expect_ast("evaluate model on test_set", "(evaluate model on test_set)");
  expect_ast("save W; print W", "(save W)\n(print W)");
  expect_error_has("load needs a path", "load", "expected expression");
  expect_ast("data train_set = mnist(\"a\",\n   \"b\")", "(data train_set (call mnist \"a\" \"b\"))");
  expect_ast("evaluate accuracy(z, y), loss on d.test, batch=10", "(evaluate (call accuracy z y) loss on (. d test) batch=10)");
  expect_ast("save \"w.safetensors\"", "(save \"w.safetensors\")");
  expect_ast("load path", "(load path)");
  expect_ast("state mu : f32[3] = zeros", "(state mu f32[3] zeros)");
  expect_ast("fn conv(h, c, k=5, pad=\"same\") { h }", "(fn conv (h c k=5 pad=\"same\") (block h))");
  expect_ast("x = 1\r\ny = 2\r\n", "(= x 1)\n(= y 2)");
  expect_ast("", "");
  expect_ast("\n\n# only a comment", "");
}

static void test_errors(void) {
  expect_error("error: unclosed paren, with note",
               "x = (1 + 2\n",
               "t.kiln:1:11: error: expected ')' here\n"
               "x = (1 + 2\n"
               "          ^\n"
               "t.kiln:1:5: note: to match this '('\n"
               "x = (1 + 2\n"
               "    ^\n");
  expect_error("error: unexpected token",
               "print x @@ y\n",
               "t.kiln:1:10: error: unexpected token '@'\n"
               "print x @@ y\n"
               "         ^\n");
  expect_error("error: unterminated string",
               "x = 1\ns = \"abc\n",
               "t.kiln:2:5: error: unterminated string\n"
               "s = \"abc\n"
               "    ^~~~\n");
  expect_error("error: tabs align the caret",
               "fn f(a) {\n\tz = a $ b\n\tz\n}\n",
               "t.kiln:2:8: error: unexpected character '$'\n"
               "\tz = a $ b\n"
               "\t      ^\n");
  expect_error("error: expected expression at end of line",
               "y = 3 *\nprint y\n",
               "t.kiln:1:8: error: expected expression\n"
               "y = 3 *\n"
               "       ^\n");
  expect_error("error: one error per statement, parsing goes on",
               "print f(1, 2\nz = 3\nw = * 2\nok = 1\n",
               "t.kiln:1:13: error: expected ',' or ')' here\n"
               "print f(1, 2\n"
               "            ^\n"
               "t.kiln:1:8: note: to match this '('\n"
               "print f(1, 2\n"
               "       ^\n"
               "t.kiln:3:5: error: unexpected token '*'\n"
               "w = * 2\n"
               "    ^\n");
  expect_error("error: unclosed list, indented continuation",
               "x = [1, 2,\n     3, 4\ny = *\n",
               "t.kiln:2:10: error: expected ',' or ']' here\n"
               "     3, 4\n"
               "         ^\n"
               "t.kiln:1:5: note: to match this '['\n"
               "x = [1, 2,\n"
               "    ^\n"
               "t.kiln:3:5: error: unexpected token '*'\n"
               "y = *\n"
               "    ^\n");
  expect_error("error: function body must end with an expression",
               "fn f(a) {\n  s = a\n}\n",
               "t.kiln:2:3: error: a function body must end with an expression, the result\n"
               "  s = a\n"
               "  ^~~~~\n");
  expect_error("error: assignment to non-name",
               "x[0] = 1\n",
               "t.kiln:1:1: error: cannot assign to this expression; only a name can be assigned\n"
               "x[0] = 1\n"
               "^~~~\n");
  expect_error("error: positional after keyword",
               "f(axis=1, 2)\n",
               "t.kiln:1:11: error: positional argument after a keyword argument\n"
               "f(axis=1, 2)\n"
               "          ^\n");
  expect_error("error: missing ':' in input",
               "input X f32\n",
               "t.kiln:1:9: error: expected ':' here\n"
               "input X f32\n"
               "        ^~~\n");
  expect_error("error: number suffix",
               "r = 2x\n",
               "t.kiln:1:6: error: invalid suffix 'x' on number\n"
               "r = 2x\n"
               "     ^\n");
  expect_error("error: bad escape",
               "s = \"a\\qb\"\n",
               "t.kiln:1:7: error: unknown escape sequence '\\q'\n"
               "s = \"a\\qb\"\n"
               "      ^~\n");
  expect_error("error: top-level-only statement in a function",
               "fn f(a) {\n  input X : f32\n  a\n}\n",
               "t.kiln:2:3: error: 'input' is only allowed at top level\n"
               "  input X : f32\n"
               "  ^~~~~\n");
  expect_error("error: return outside a function",
               "return 1\n",
               "t.kiln:1:1: error: 'return' outside a function\n"
               "return 1\n"
               "^~~~~~\n");
  expect_error("error: return not last",
               "fn f(a) {\n  return a\n  a\n}\n",
               "t.kiln:2:3: error: 'return' must be the last statement of a function body\n"
               "  return a\n"
               "  ^~~~~~~~\n");
  expect_error("error: unclosed brace",
               "fn f(a) {\n  a\n",
               "t.kiln:2:4: error: expected '}' here\n"
               "  a\n"
               "   ^\n"
               "t.kiln:1:9: note: to match this '{'\n"
               "fn f(a) {\n"
               "        ^\n");
  expect_error("error: stray closer",
               "x = 1 }\n",
               "t.kiln:1:7: error: unexpected token '}'\n"
               "x = 1 }\n"
               "      ^\n");
  expect_error("error: duplicate parameter",
               "f(a, a) = a\n",
               "t.kiln:1:6: error: duplicate parameter 'a'\n"
               "f(a, a) = a\n"
               "     ^\n");
  expect_error("error: non-name parameter",
               "f(x, 1) = x\n",
               "t.kiln:1:6: error: expected a parameter name here\n"
               "f(x, 1) = x\n"
               "     ^\n");
  expect_error("error: UTF-8 before the caret takes one column",
               "s = \"h\xc3\xa9llo\" \xe2\x82\xac\n",
               "t.kiln:1:14: error: unexpected character '\xe2\x82\xac'\n"
               "s = \"h\xc3\xa9llo\" \xe2\x82\xac\n"
               "            ^\n");
  expect_error("error: CRLF line shown without \\r",
               "x = (1\r\n",
               "t.kiln:1:7: error: expected ')' here\n"
               "x = (1\n"
               "      ^\n"
               "t.kiln:1:5: note: to match this '('\n"
               "x = (1\n"
               "    ^\n");
  expect_error("error: control byte",
               "x = \x01\n",
               "t.kiln:1:5: error: unexpected character '\\x01'\n"
               "x = ?\n"
               "    ^\n");
  expect_error("error: fn header without a body",
               "fn g(a)\n\nx = 1\n",
               "t.kiln:1:8: error: expected '{' here\n"
               "fn g(a)\n"
               "       ^\n");
  expect_error("error: errors inside a block recover to its end",
               "fn f(a) {\n  b = )\n  a\n}\nprint f(1)\nq = (\n",
               "t.kiln:2:7: error: expected expression\n"
               "  b = )\n"
               "      ^\n"
               "t.kiln:6:6: error: expected expression\n"
               "q = (\n"
               "     ^\n");

  // many errors: 20 reported, then a stop
  char buf[4096] = "";
  for (int i = 0; i < 30; i++)
    strcat(buf, "x = )\n");
  char *got = parse_to_string(buf);
  int n = 0;
  for (char *s = got; (s = strstr(s, ": error: expected expression")); s++)
    n++;
  report(n == 20 && strstr(got, "t.kiln: error: too many errors; stopping\n"),
         "error: at most 20 errors, then 'too many errors'", NULL, NULL);
  free(got);

  // deep nesting and long chains are errors, not stack overflows
  size_t big = 200000;
  char *deep = malloc(big + 16);
  strcpy(deep, "x = ");
  memset(deep + 4, '(', big / 2);
  deep[4 + big / 2] = '\0';
  expect_error_has("error: 100000 nested parens", deep, "expression is nested too deeply");
  memset(deep + 4, '[', big / 2);
  expect_error_has("error: 100000 nested brackets", deep, "expression is nested too deeply");
  memset(deep + 4, '-', big / 2);
  strcpy(deep + 4 + big / 2, "1");
  expect_error_has("error: 100000 unary minuses", deep, "expression is nested too deeply");
  strcpy(deep, "x = 1");
  for (size_t i = 5; i + 2 < big; i += 2)
    memcpy(deep + i, "+1", 3);
  expect_error_has("error: 100000-term sum", deep, "more than 1000 levels of operators, calls or brackets (a long chain");
  strcpy(deep, "x = f");
  for (size_t i = 5; i + 2 < big; i += 2)
    memcpy(deep + i, "()", 3);
  expect_error_has("error: 100000 chained calls", deep, "expression is nested too deeply");
  strcpy(deep, "");
  for (int i = 0; i < 2000; i++)
    strcat(deep, "fn f(a) {");
  expect_error_has("error: 2000 nested functions", deep, "nested too deeply");
  free(deep);
  expect_ast("x = 1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1",
             "(= x (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ (+ "
             "(+ (+ (+ (+ (+ (+ (+ 1 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) "
             "1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1) 1))");
}

static void test_incomplete(void) {
  struct { const char *text; int want; } cases[] = {
    {"print (1 +", 1}, {"x = 1 +", 0}, {"x = [1,", 1}, {"fn f(a) {", 1},
    {"fn f(a) {\n  s = a", 1}, {"fn f(a)", 1}, {"x = a and", 0}, {"input X :", 0},
    {"print a,", 0}, {"y = f(1,\n 2", 1}, {"x = 1 + # more", 0},
    {"x = 1", 0}, {"y = f(1)", 0}, {"print \"abc", 0}, {"x = 1 # +", 0}, {"", 0},
    {"fn f(a) { a }", 0}, {"f(a)", 0}, {"x = (1 $", 0}, {"x = 1 )", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[128];
    snprintf(name, sizeof name, "incomplete(\"%s\") == %d", cases[i].text, cases[i].want);
    check(parse_is_incomplete(cases[i].text) == cases[i].want, name);
  }
}

static void test_diag(void) {
  Source src = source_from_string("<repl>", "a = b +\tcc\nnext line");
  Diag d;
  diag_init(&d);
  check(d.msg && !strcmp(d.msg, "") && !d.has_error, "diag: starts empty");
  diag_error(&d, (Span){&src, 1, 9, 8, 20}, "bad %s", "cc");  // clipped to the line
  diag_note(&d, (Span){&src, 2, 1, 11, 4}, "see %d", 2);
  diag_warning(&d, (Span){&src, 0, 0, 0, 0}, "file-level");
  diag_error(&d, (Span){0}, "no location");
  const char *want =
    "<repl>:1:9: error: bad cc\n"
    "a = b +\tcc\n"
    "       \t^~\n"
    "<repl>:2:1: note: see 2\n"
    "next line\n"
    "^~~~\n"
    "<repl>: warning: file-level\n"
    "error: no location\n";
  report(!strcmp(d.msg, want), "diag: layout, clipping, note, warning, no location", want, d.msg);
  check(d.has_error && d.nerrors == 2 && d.nwarnings == 1, "diag: counts");
  diag_clear(&d);
  check(!strcmp(d.msg, "") && !d.has_error && d.nerrors == 0, "diag: clear");
  diag_error(&d, (Span){&src, 2, 10, 20, 1}, "at end");  // caret just past the text
  report(!strcmp(d.msg, "<repl>:2:10: error: at end\nnext line\n         ^\n"),
         "diag: span at end of text", NULL, NULL);
  diag_free(&d);

  Span a = {&src, 1, 1, 0, 1}, b = {&src, 1, 5, 4, 3};
  Span j = span_join(a, b), k = span_join(b, a), n = span_join((Span){0}, b);
  check(j.off == 0 && j.len == 7 && j.col == 1 && k.off == 0 && k.len == 7 &&
        n.off == 4 && n.len == 3, "span_join");
}

// ---- fuzz: never crash, and fail exactly when an error was reported ----------

static uint64_t rng = 0x9E3779B97F4A7C15u;

static uint64_t next_rand(void) {  // xorshift64
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static int fuzz_one(const char *text, size_t len) {
  Source src = {"fuzz", text, len};
  Diag d;
  diag_init(&d);
  Arena *a = arena_new();
  AstNode *prog = parse_program(a, &src, &d);
  int ok = (prog != NULL) == !d.has_error;
  if (prog) {
    FILE *f = fopen("/dev/null", "w");
    if (f) {
      ast_sexpr(f, prog);
      ast_dump(f, prog, 0);
      fclose(f);
    }
  }
  char *copy = malloc(len + 1);
  memcpy(copy, text, len);
  copy[len] = '\0';
  parse_is_incomplete(copy);
  free(copy);
  arena_free(a);
  diag_free(&d);
  return ok;
}

static void test_fuzz(void) {
  static const char *pieces[] = {
    "x", "f", "(", ")", "[", "]", "{", "}", ",", ":", ";", "=", "==", "+", "-", "*",
    "^", "@", "<", "!", ".", "\n", " ", "\t", "1", "2.5", ".5", "1e", "\"s\"", "\"",
    "\\", "#", "fn", "print", "input", "param", "train", "return", "not", "and",
    "axis=", "grad(", "x[1:2, :]", "\xc3\xa9", "\x01", "\r\n", "$",
  };
  int npieces = (int)(sizeof pieces / sizeof pieces[0]);
  size_t slen = strlen(sample);
  char *buf = malloc(4 * slen + 512);
  int bad = 0, iters = 4000;
  for (int it = 0; it < iters; it++) {
    size_t n = 0;
    if (it % 2) {  // random token soup
      int k = (int)(next_rand() % 60);
      for (int i = 0; i < k; i++) {
        const char *s = pieces[next_rand() % npieces];
        memcpy(buf + n, s, strlen(s));
        n += strlen(s);
      }
    } else {  // a mutated sample: a few deletions, insertions, duplications
      memcpy(buf, sample, slen);
      n = slen;
      int k = 1 + (int)(next_rand() % 4);
      for (int i = 0; i < k && n > 0; i++) {
        size_t at = next_rand() % n, len = 1 + next_rand() % 8;
        if (at + len > n)
          len = n - at;
        switch (next_rand() % 3) {
        case 0:
          memmove(buf + at, buf + at + len, n - at - len);
          n -= len;
          break;
        case 1: {
          const char *s = pieces[next_rand() % npieces];
          size_t m = strlen(s);
          if (n + m > 4 * slen)
            break;
          memmove(buf + at + m, buf + at, n - at);
          memcpy(buf + at, s, m);
          n += m;
          break;
        }
        default:
          if (n + len > 4 * slen)
            break;
          memmove(buf + at + len, buf + at, n - at);
          n += len;
        }
      }
    }
    buf[n] = '\0';
    bad += !fuzz_one(buf, n);
  }
  // embedded NULs: len wins over the terminator
  bad += !fuzz_one("x = 1\0 $ (", 10);
  free(buf);
  char name[64];
  snprintf(name, sizeof name, "fuzz: %d inputs, result matches diagnostics", iters + 1);
  check(bad == 0, name);
}

int main(void) {
  test_sample();
  test_precedence();
  test_postfix();
  test_literals();
  test_statements();
  test_errors();
  test_incomplete();
  test_diag();
  test_fuzz();
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail != 0;
}
