// Printing ASTs: an indented tree for people, one-line S-expressions for tests.
#include "ast.h"
#include <inttypes.h>

static const char *kind_names[AST_KIND_COUNT] = {
  [AST_NUM] = "num", [AST_STR] = "str", [AST_BOOL] = "bool", [AST_NAME] = "name",
  [AST_LIST] = "list", [AST_UNARY] = "unary", [AST_BINARY] = "binary",
  [AST_CALL] = "call", [AST_INDEX] = "index", [AST_SLICE] = "slice",
  [AST_KWARG] = "kwarg", [AST_PRINT] = "print", [AST_INPUT] = "input",
  [AST_PARAM] = "param", [AST_FNDEF] = "fndef", [AST_ASSIGN] = "assign",
  [AST_IMPORT] = "import", [AST_EXPR_STMT] = "expr", [AST_ATTR] = "attr",
  [AST_DATA] = "data", [AST_TRAIN] = "train", [AST_EVALUATE] = "evaluate",
  [AST_SAVE] = "save", [AST_LOAD] = "load", [AST_BLOCK] = "block",
};

static const char *binop_strs[B_COUNT] = {
  [B_ADD] = "+", [B_SUB] = "-", [B_MUL] = "*", [B_DIV] = "/", [B_FLOORDIV] = "//", [B_MOD] = "%", [B_POW] = "^",
  [B_MATMUL] = "@", [B_LT] = "<", [B_LE] = "<=", [B_GT] = ">", [B_GE] = ">=",
  [B_EQ] = "==", [B_NE] = "!=", [B_AND] = "and", [B_OR] = "or",
};

static const char *unop_strs[U_COUNT] = {[U_NEG] = "-", [U_PLUS] = "+", [U_NOT] = "not"};

const char *ast_kind_name(AstKind k) {
  return k >= 0 && k < AST_KIND_COUNT && kind_names[k] ? kind_names[k] : "?";
}

const char *binop_str(int op) { return op >= 0 && op < B_COUNT ? binop_strs[op] : "?"; }
const char *unop_str(int op) { return op >= 0 && op < U_COUNT ? unop_strs[op] : "?"; }

static void print_num(FILE *f, const AstNode *n) {
  if (n->str)
    fputs(n->str, f);
  else if (n->num_is_int)
    fprintf(f, "%" PRId64, n->inum);
  else
    fprintf(f, "%.17g", n->num);
}

static void print_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", f);
    else if (c == '\t')
      fputs("\\t", f);
    else if (c < 0x20 || c == 0x7f)
      fprintf(f, "\\x%02x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

// "f32[B, 784]", or "f32" for a scalar.
static void print_type(FILE *f, const AstNode *n, const char *sep) {
  fputs(n->type_name ? n->type_name : "?", f);
  if (!n->ndims)
    return;
  fputc('[', f);
  for (int i = 0; i < n->ndims; i++) {
    if (i)
      fputs(sep, f);
    if (n->dims[i]->kind == AST_NAME)
      fputs(n->dims[i]->str, f);
    else if (n->dims[i]->kind == AST_NUM)
      fprintf(f, "%" PRId64, n->dims[i]->inum);
    else
      ast_sexpr(f, n->dims[i]);
  }
  fputc(']', f);
}

// ---- one line -------------------------------------------------------------------

static void sexpr_items(FILE *f, AstNode **items, int n) {
  for (int i = 0; i < n; i++) {
    fputc(' ', f);
    ast_sexpr(f, items[i]);
  }
}

void ast_sexpr(FILE *f, const AstNode *n) {
  if (!n) {
    fputs("_", f);
    return;
  }
  switch (n->kind) {
  case AST_NUM: print_num(f, n); break;
  case AST_STR: print_quoted(f, n->str); break;
  case AST_BOOL: fputs(n->inum ? "true" : "false", f); break;
  case AST_NAME: fputs(n->str, f); break;
  case AST_LIST:
    fputc('[', f);
    for (int i = 0; i < n->nitems; i++) {
      if (i)
        fputc(' ', f);
      ast_sexpr(f, n->items[i]);
    }
    fputc(']', f);
    break;
  case AST_UNARY:
    fprintf(f, "(%s ", n->op == U_NEG ? "neg" : n->op == U_PLUS ? "pos" : "not");
    ast_sexpr(f, n->lhs);
    fputc(')', f);
    break;
  case AST_BINARY:
    fprintf(f, "(%s ", binop_str(n->op));
    ast_sexpr(f, n->lhs);
    fputc(' ', f);
    ast_sexpr(f, n->rhs);
    fputc(')', f);
    break;
  case AST_CALL:
    fputs("(call ", f);
    ast_sexpr(f, n->lhs);
    sexpr_items(f, n->items, n->nitems);
    fputc(')', f);
    break;
  case AST_KWARG:
    fprintf(f, "%s=", n->str);
    ast_sexpr(f, n->lhs);
    break;
  case AST_INDEX:
    fputs("(index ", f);
    ast_sexpr(f, n->lhs);
    sexpr_items(f, n->items, n->nitems);
    fputc(')', f);
    break;
  case AST_SLICE:  // 1:3, :, ::2, as written
    if (n->start)
      ast_sexpr(f, n->start);
    fputc(':', f);
    if (n->stop)
      ast_sexpr(f, n->stop);
    if (n->step) {
      fputc(':', f);
      ast_sexpr(f, n->step);
    }
    break;
  case AST_PRINT:
    fputs("(print", f);
    sexpr_items(f, n->items, n->nitems);
    fputc(')', f);
    break;
  case AST_INPUT:
  case AST_PARAM:
    fprintf(f, "(%s %s ", n->kind == AST_INPUT ? "input" : n->op ? "state" : "param", n->str);
    print_type(f, n, " ");
    if (n->rhs) {
      fputc(' ', f);
      ast_sexpr(f, n->rhs);
    }
    fputc(')', f);
    break;
  case AST_FNDEF:
    fprintf(f, "(fn %s (", n->str);
    for (int i = 0; i < n->nitems; i++) {
      fputs(i ? " " : "", f);
      if (n->items[i]->kind == AST_KWARG)
        ast_sexpr(f, n->items[i]);
      else
        fputs(n->items[i]->str, f);
    }
    fputs(") ", f);
    ast_sexpr(f, n->body);
    fputc(')', f);
    break;
  case AST_ASSIGN:
    fprintf(f, "(= %s ", n->str);
    ast_sexpr(f, n->rhs);
    fputc(')', f);
    break;
  case AST_IMPORT:
    fputs("(import ", f);
    print_quoted(f, n->str);
    fputc(')', f);
    break;
  case AST_EXPR_STMT:
    if (n->op)
      fputs("(return ", f);
    ast_sexpr(f, n->lhs);
    if (n->op)
      fputc(')', f);
    break;
  case AST_ATTR:
    fputs("(. ", f);
    ast_sexpr(f, n->lhs);
    fprintf(f, " %s)", n->str);
    break;
  case AST_DATA:
    fprintf(f, "(data %s ", n->str);
    ast_sexpr(f, n->rhs);
    fputc(')', f);
    break;
  case AST_TRAIN:
  case AST_EVALUATE:
    fputs(n->kind == AST_TRAIN ? "(train " : "(evaluate", f);
    if (n->kind == AST_TRAIN)
      ast_sexpr(f, n->lhs);
    else
      sexpr_items(f, n->items, n->nitems);
    fputs(" on ", f);
    ast_sexpr(f, n->rhs);
    if (n->kind == AST_TRAIN) {
      fputs(" with ", f);
      ast_sexpr(f, n->start);
    }
    sexpr_items(f, n->opts, n->nopts);
    fputc(')', f);
    break;
  case AST_SAVE:
  case AST_LOAD:
    fputs(n->kind == AST_SAVE ? "(save " : "(load ", f);
    ast_sexpr(f, n->lhs);
    fputc(')', f);
    break;
  case AST_BLOCK:
    fputs("(block", f);
    sexpr_items(f, n->items, n->nitems);
    fputc(')', f);
    break;
  default:
    fputs("?", f);
  }
}

// ---- tree -----------------------------------------------------------------------

static void dump(FILE *f, const AstNode *n, int indent, const char *label);

static void dump_items(FILE *f, AstNode **items, int n, int indent) {
  for (int i = 0; i < n; i++)
    dump(f, items[i], indent, NULL);
}

static void dump(FILE *f, const AstNode *n, int indent, const char *label) {
  fprintf(f, "%*s%s", indent, "", label ? label : "");
  if (!n) {
    fputs("(none)\n", f);
    return;
  }
  fputs(ast_kind_name(n->kind), f);
  int in = indent + 2;
  switch (n->kind) {
  case AST_NUM:
    fputc(' ', f);
    print_num(f, n);
    fputs(n->num_is_int ? " (int)\n" : "\n", f);
    return;
  case AST_STR:
    fputc(' ', f);
    print_quoted(f, n->str);
    fputc('\n', f);
    return;
  case AST_BOOL:
    fputs(n->inum ? " true\n" : " false\n", f);
    return;
  case AST_NAME:
    fprintf(f, " %s\n", n->str);
    return;
  case AST_UNARY:
    fprintf(f, " %s\n", unop_str(n->op));
    dump(f, n->lhs, in, NULL);
    return;
  case AST_BINARY:
    fprintf(f, " %s\n", binop_str(n->op));
    dump(f, n->lhs, in, NULL);
    dump(f, n->rhs, in, NULL);
    return;
  case AST_CALL:
  case AST_INDEX:
    fputc('\n', f);
    dump(f, n->lhs, in, NULL);
    dump_items(f, n->items, n->nitems, in);
    return;
  case AST_KWARG:
    fprintf(f, " %s\n", n->str);
    dump(f, n->lhs, in, NULL);
    return;
  case AST_SLICE:
    fputc('\n', f);
    if (n->start)
      dump(f, n->start, in, "start: ");
    if (n->stop)
      dump(f, n->stop, in, "stop: ");
    if (n->step)
      dump(f, n->step, in, "step: ");
    return;
  case AST_INPUT:
  case AST_PARAM:
    fprintf(f, " %s : ", n->str);
    print_type(f, n, ", ");
    fputc('\n', f);
    if (n->rhs)
      dump(f, n->rhs, in, "init: ");
    return;
  case AST_FNDEF:
    fprintf(f, " %s(", n->str);
    for (int i = 0; i < n->nitems; i++)
      fprintf(f, "%s%s%s", i ? ", " : "", n->items[i]->str, n->items[i]->kind == AST_KWARG ? "=..." : "");
    fputs(")\n", f);
    dump(f, n->body, in, NULL);
    return;
  case AST_ASSIGN:
    fprintf(f, " %s\n", n->str);
    dump(f, n->rhs, in, NULL);
    return;
  case AST_IMPORT:
    fputc(' ', f);
    print_quoted(f, n->str);
    fputc('\n', f);
    return;
  case AST_EXPR_STMT:
    fputs(n->op ? " (return)\n" : "\n", f);
    dump(f, n->lhs, in, NULL);
    return;
  case AST_ATTR:
    fprintf(f, " .%s\n", n->str);
    dump(f, n->lhs, in, NULL);
    return;
  case AST_DATA:
    fprintf(f, " %s\n", n->str);
    dump(f, n->rhs, in, NULL);
    return;
  case AST_TRAIN:
  case AST_EVALUATE:
    fputc('\n', f);
    if (n->kind == AST_TRAIN)
      dump(f, n->lhs, in, "loss: ");
    for (int i = 0; i < n->nitems; i++)
      dump(f, n->items[i], in, "metric: ");
    dump(f, n->rhs, in, "on: ");
    if (n->kind == AST_TRAIN)
      dump(f, n->start, in, "with: ");
    dump_items(f, n->opts, n->nopts, in);
    return;
  case AST_SAVE:
  case AST_LOAD:
    fputc('\n', f);
    dump(f, n->lhs, in, NULL);
    return;
  default:  // list, print, block
    fputc('\n', f);
    dump_items(f, n->items, n->nitems, in);
    return;
  }
}

void ast_dump(FILE *f, const AstNode *n, int indent) { dump(f, n, indent, NULL); }
