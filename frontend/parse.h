// The .kiln front end: lexer and recursive-descent parser.
//
//   Source src = source_from_string("model.kiln", text);
//   Diag d; diag_init(&d);
//   Arena *a = arena_new();
//   AstNode *prog = parse_program(a, &src, &d);   // AST_BLOCK of statements
//   if (!prog) fputs(d.msg, stderr);              // every error, located
//   else ast_dump(stdout, prog, 0);
//   arena_free(a); diag_free(&d);
#ifndef KILN_PARSE_H
#define KILN_PARSE_H
#include "arena.h"
#include "ast.h"
#include "diag.h"

// ---- lexer.c -----------------------------------------------------------------
// Every token kind with its spelling, in one table.
#define TOKEN_LIST(X)                                                          \
  X(TOK_EOF, "end of input") X(TOK_NEWLINE, "end of line")                     \
  X(TOK_ERROR, "invalid token") X(TOK_IDENT, "name") X(TOK_NUM, "number")      \
  X(TOK_STR, "string")                                                         \
  X(TOK_PLUS, "+") X(TOK_MINUS, "-") X(TOK_STAR, "*") X(TOK_SLASH, "/")        \
  X(TOK_SLASHSLASH, "//") X(TOK_PERCENT, "%")                                  \
  X(TOK_CARET, "^") X(TOK_AT, "@") X(TOK_LPAREN, "(") X(TOK_RPAREN, ")")       \
  X(TOK_LBRACK, "[") X(TOK_RBRACK, "]") X(TOK_LBRACE, "{") X(TOK_RBRACE, "}")  \
  X(TOK_COMMA, ",") X(TOK_COLON, ":") X(TOK_SEMI, ";") X(TOK_ASSIGN, "=")      \
  X(TOK_EQ, "==") X(TOK_NE, "!=") X(TOK_LT, "<") X(TOK_LE, "<=")               \
  X(TOK_GT, ">") X(TOK_GE, ">=") X(TOK_BANG, "!") X(TOK_DOT, ".")              \
  X(TOK_FN, "fn") X(TOK_INPUT, "input") X(TOK_PARAM, "param")                  \
  X(TOK_PRINT, "print") X(TOK_IMPORT, "import") X(TOK_TRAIN, "train")          \
  X(TOK_EVALUATE, "evaluate") X(TOK_SAVE, "save") X(TOK_LOAD, "load")          \
  X(TOK_ON, "on") X(TOK_WITH, "with") X(TOK_TRUE, "true")                      \
  X(TOK_FALSE, "false") X(TOK_AND, "and") X(TOK_OR, "or") X(TOK_NOT, "not")    \
  X(TOK_RETURN, "return") X(TOK_DATA, "data")

typedef enum {
#define X(kind, spelling) kind,
  TOKEN_LIST(X)
#undef X
  TOK_COUNT
} TokKind;

#define TOK_FIRST_KEYWORD TOK_FN   // keywords run from here to the end

typedef struct {
  TokKind kind;
  Span span;       // the token's text is span.src->text + span.off
  char *str;       // IDENT: name; STR: decoded value; NUM: the literal; ERROR: the message
  double num;      // NUM
  int num_is_int;  // NUM written as an integer ("123", not "1.0" or "1e3")
  int64_t inum;    // NUM when num_is_int
} Token;

typedef struct {
  Token *toks;     // ntoks tokens, the last one TOK_EOF
  int ntoks;
  int open;        // brackets still open at the end (for the REPL)
  int nerrors;     // TOK_ERROR tokens
} TokenList;

// Splits src into tokens. Newlines become TOK_NEWLINE except inside ( ) and
// [ ], where they are skipped; runs of them collapse into one. Lexical errors
// (unknown character, unterminated string, bad escape, malformed number)
// become TOK_ERROR tokens holding the message, which the parser reports when
// it meets one. Returns 0, or -1 when out of memory.
int lex(Arena *a, const Source *src, TokenList *out);
const char *tok_spelling(TokKind k);   // "+", "fn", "name", ...

// ---- parser.c ----------------------------------------------------------------
// Parses a whole program into an AST_BLOCK of statements. On any error returns
// NULL, having appended each statement's first error (up to 20) to d. The
// nodes live in a; their Spans point at src, which must outlive them.
AstNode *parse_program(Arena *a, const Source *src, Diag *d);

// 1 when text is an unfinished statement the REPL should read more lines for:
// an open bracket or brace, or "fn f(a)" still waiting for its body. A
// trailing operator is not: a newline ends a statement outside brackets, in a
// file and in the REPL alike. 0 otherwise, including for lexical errors.
int parse_is_incomplete(const char *text);

#endif
