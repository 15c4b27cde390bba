// The .kiln syntax tree: one node struct with a kind (chibicc's Node). Every
// node carries the Span it was parsed from, so later stages report errors
// against the source. Nodes and their strings live in the Arena the parser
// was given and go away with it.
//
// Which fields each kind uses (unlisted fields are zero/NULL):
//
//   kind           fields
//   AST_NUM        num (value), num_is_int, inum (when num_is_int), str (the
//                  literal as written, "1e-3", "2."; NULL for a negative dim)
//   AST_STR        str (escapes decoded)
//   AST_BOOL       inum 0 or 1 (num too)
//   AST_NAME       str
//   AST_LIST       items (elements; nested lists are tensor literals)
//   AST_UNARY      op (UnOp), op_span (the operator), lhs
//   AST_BINARY     op (BinOp), op_span (the operator), lhs, rhs
//   AST_CALL       lhs (callee, any expression), items (args: exprs, then
//                  AST_KWARG; the parser rejects a positional after a keyword)
//   AST_KWARG      str (name), name_span, lhs (value)
//   AST_INDEX      lhs (base), items (entries: exprs or AST_SLICE), nitems >= 1
//   AST_SLICE      start, stop, step (each NULL when omitted)
//   AST_PRINT      items (exprs, at least one)
//   AST_INPUT      str (name), name_span, type_name, type_span, dims/ndims
//   AST_PARAM      as AST_INPUT, plus rhs (initializer expr) or NULL; op is 1
//                  for a `state` declaration (kept and saved, not trained)
//                  dims are AST_NUM (int, maybe negative) or AST_NAME nodes;
//                  "f32" and "f32[]" both give ndims == 0
//   AST_ATTR       lhs (the value), str (the field), name_span
//   AST_FNDEF      str (name), name_span, items (params: AST_NAME, or AST_KWARG
//                  with the default in lhs), body
//                  (AST_BLOCK; "sq(v) = v * v" gets a one-statement block)
//   AST_ASSIGN     str (name), name_span, lhs (AST_NAME of the target), rhs
//   AST_IMPORT     str (the path, decoded)
//   AST_EXPR_STMT  lhs (the expr); op is 1 when written "return expr"
//   AST_DATA       str (name), name_span, rhs (the source expression)
//   AST_TRAIN      lhs (loss), rhs (data), start (optimizer), opts (AST_KWARG)
//   AST_EVALUATE   items (metrics), rhs (data), opts (AST_KWARG)
//   AST_SAVE       lhs (the path expression); AST_LOAD the same
//   AST_BLOCK      items (statements). As a function body its last statement
//                  is an AST_EXPR_STMT, the function's value (the parser
//                  checks this). parse_program's result is an AST_BLOCK too.
//
// height is 1 + the largest child height; the parser rejects trees taller
// than AST_MAX_HEIGHT, so recursive walks over an AST are safe.
#ifndef KILN_AST_H
#define KILN_AST_H
#include "diag.h"
#include <stdint.h>
#include <stdio.h>

#define AST_MAX_HEIGHT 1000

typedef enum {
  AST_NUM, AST_STR, AST_BOOL, AST_NAME, AST_LIST, AST_UNARY, AST_BINARY,
  AST_CALL, AST_INDEX, AST_SLICE, AST_KWARG,
  AST_ATTR,
  AST_PRINT, AST_INPUT, AST_PARAM, AST_FNDEF, AST_ASSIGN, AST_IMPORT,
  AST_EXPR_STMT, AST_DATA, AST_TRAIN, AST_EVALUATE, AST_SAVE, AST_LOAD, AST_BLOCK,
  AST_KIND_COUNT
} AstKind;

typedef enum {
  B_ADD, B_SUB, B_MUL, B_DIV, B_FLOORDIV, B_MOD, B_POW, B_MATMUL,
  B_LT, B_LE, B_GT, B_GE, B_EQ, B_NE, B_AND, B_OR,
  B_COUNT
} BinOp;

typedef enum { U_NEG, U_PLUS, U_NOT, U_COUNT } UnOp;

typedef struct AstNode AstNode;
struct AstNode {
  AstKind kind;
  Span span;
  int height;

  double num;
  int num_is_int;
  int64_t inum;

  char *str;
  Span name_span;
  int op;
  Span op_span;
  AstNode *lhs, *rhs;
  AstNode **items;
  int nitems;
  AstNode *start, *stop, *step;

  char *type_name;
  Span type_span;
  AstNode **dims;
  int ndims;

  AstNode *body;
  AstNode **opts;
  int nopts;
};

const char *ast_kind_name(AstKind k);  // "num", "binary", "fndef", ...
const char *binop_str(int op);         // "+", "@", "<=", "and", ...
const char *unop_str(int op);          // "-", "+", "not"

// An indented tree, one node per line (for `kiln ast`).
void ast_dump(FILE *f, const AstNode *n, int indent);
// One line, S-expression style: "(print (+ x (neg (^ y 2))))" (for tests).
void ast_sexpr(FILE *f, const AstNode *n);

#endif
