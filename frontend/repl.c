// The REPL: definitions persist, errors are reported and the session goes on.
#include "repl.h"
#include "eval.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef KILN_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

static const char help[] =
  "Statements and expressions of the .kiln language; an expression's value is printed.\n"
  "  x = [[1, 2], [3, 4]]       sq(v) = v * v       fn f(a) { b = a * 2; sum(b) }\n"
  "  print grad(f)([1, 2])      input X : f32[B, 3]  param W : f32[3, 2] = glorot\n"
  "commands:\n"
  "  :ir EXPR     the optimized IR of EXPR's graph (:ir --after=STAGE EXPR for another stage)\n"
  "  :c EXPR      the C generated for EXPR\n"
  "  :time EXPR   compile time, and run time over repeated runs\n"
  "  :device [cpu|cuda|cuda:N]  where expressions run from now on (no argument: where they run now);\n"
  "          cuda:0,1 or cuda+cpu: train statements split each batch over several GPUs, or GPU and CPU\n"
  "  :help        this text; :help NAME: a builtin's arguments, a function's, a tensor's shape\n"
  "  :quit        leave (also Ctrl-D)\n";

typedef struct { Ev *ev; Diag *d; int tty; } Repl;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void flush_diag(Repl *r) {
  if (r->d->msg && r->d->msg[0]) {
    fflush(stdout);
    fputs(r->d->msg, stderr);
    fflush(stderr);
  }
  diag_clear(r->d);
}

// :ir / :c: compile EXPR with the pipeline stopping at a stage.
static void show(Repl *r, const char *expr, const char *stage, int emit_c) {
  Ev *ev = r->ev;
  Node *n;
  if (ev_eval_tensor(ev, "<repl>", expr, NULL, &n)) return;
  ev->pipe.dump_after = stage;
  ev->pipe.emit_c = emit_c;
  RtTensor t;
  Span nowhere = {0};
  jmp_buf jb, *outer = ev->on_error;
  ev->on_error = &jb;
  // A cached program would not show anything: compile a fresh graph object.
  int saved = ev->nprogs;
  ev->nprogs = 0;
  if (!setjmp(jb) && !ev_compute(ev, n, nowhere, &t)) rt_tensor_free(&t);
  ev->nprogs = saved;
  ev->on_error = outer;
  ev->pipe.dump_after = NULL;
  ev->pipe.emit_c = 0;
}

static void time_expr(Repl *r, const char *expr) {
  Ev *ev = r->ev;
  RtTensor t;
  Node *n;
  double t0 = now_ms();
  if (ev_eval_tensor(ev, "<repl>", expr, &t, &n)) return;
  double first = now_ms() - t0;
  rt_tensor_free(&t);
  int runs = 0;
  double t1 = now_ms(), el;
  do {
    if (ev_eval_tensor(ev, "<repl>", expr, &t, NULL)) return;
    rt_tensor_free(&t);
    runs++;
  } while ((el = now_ms() - t1) < 200 && runs < 10000);
  printf("first run (trace + compile + run): %.3f ms; then %.4f ms per run over %d runs\n", first, el / runs, runs);
}

// :device: where graphs compile and run from now on. A session's graphs use one
// GPU (its programs and arenas live in that device's context); train statements
// may split their batches over more (parallel.c).
static void device(Repl *r, const char *arg) {
  Pipe *p = &r->ev->pipe;
  char err[1024];
  if (*arg) {
    int cpu_only = !strcmp(arg, "cpu");
    if (cpu_only && pipe_cuda_release(p, err, sizeof err)) { fprintf(stderr, "%s\n", err); return; }
    if (pipe_set_devices(p, arg, err, sizeof err)) { fprintf(stderr, ":device: %s\n", err); return; }
  }
  pipe_describe(p, err, sizeof err);
  printf("%s\n", err);
}

// :help NAME: a builtin's usage, a function's parameters, or a value's kind and shape.
static void help_on(Repl *r, const char *arg) {
  char name[256];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, " \t"), arg);
  Value *v = ev_lookup(r->ev, name);
  const Builtin *b = builtin_find(name);
  if (v && v->kind == V_FUNC && v->fn->kind == FN_USER) {
    printf("%s(", name);
    AstNode *def = v->fn->def;
    for (int i = 0; i < def->nitems; i++) printf("%s%s%s", i ? ", " : "", def->items[i]->str, def->items[i]->kind == AST_KWARG ? "=..." : "");
    printf("): a function of this session\n");
  } else if (v && v->kind == V_TENSOR) {
    char s[128];
    printf("%s: %s%s\n", name, ir_dtype_name(v->t->dtype), ir_shape_str(r->ev->c, v->t->ndim, v->t->shape, s, sizeof s));
  } else if (v) printf("%s: %s\n", name, v->kind == V_DATA ? "a data source" : v->kind == V_STR ? "a string" : "a value");
  else if (b) printf("%s\n", b->usage);
  else fprintf(stderr, "no name '%s' here (:help alone lists the commands)\n", name);
}

static void command(Repl *r, const char *line) {
  const char *arg = line + strcspn(line, " \t");
  arg += strspn(arg, " \t");
  size_t n = strcspn(line, " \t");
  if (!strncmp(line, ":help", n) && n == 5 && *arg) help_on(r, arg);
  else if (!strncmp(line, ":help", n) && n == 5) fputs(help, stdout);
  else if (!strncmp(line, ":ir", n) && n == 3) {
    const char *stage = "dce";
    char buf[64];
    if (!strncmp(arg, "--after=", 8)) {
      size_t k = strcspn(arg + 8, " \t");
      snprintf(buf, sizeof buf, "%.*s", (int)k, arg + 8);
      stage = buf;
      arg += 8 + k;
      arg += strspn(arg, " \t");
      if (!pipe_stage_ok(stage)) { fprintf(stderr, "unknown stage '%s' (stages: %s)\n", stage, PIPE_STAGES); return; }
    }
    show(r, arg, stage, 0);
  } else if (!strncmp(line, ":c", n) && n == 2) show(r, arg, NULL, 1);
  else if (!strncmp(line, ":time", n) && n == 5) time_expr(r, arg);
  else if (!strncmp(line, ":device", n) && n == 7) device(r, arg);
  else fprintf(stderr, "unknown command %.*s (try :help)\n", (int)n, line);
  flush_diag(r);
  fflush(stdout);
}

#ifdef KILN_HAVE_LIBEDIT
// Tab completion: keywords, builtins, the session's names, and commands after a
// ':'. readline's callbacks take no context, so the session being edited is here.
static Repl *completing;

static char *next_completion(const char *text, int state) {
  static const char *words[1024];
  static int n, i;
  if (!state) {
    static const char *const fixed[] = {
#define X(kind, spelling) spelling,
      TOKEN_LIST(X)
#undef X
      ":ir", ":c", ":time", ":device", ":help", ":quit", "bool", "i32", "i64", "f32", "f64"};
    n = i = 0;
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
      if (fixed[k][0] == ':' || (fixed[k][0] >= 'a' && fixed[k][0] <= 'z' && !strchr(fixed[k], ' '))) words[n++] = fixed[k];
    n += builtin_names(words + n, 512);
    Env *g = completing->ev->globals;
    for (int k = 0; k < g->n && n < 1024; k++) words[n++] = g->b[k].name;
  }
  size_t len = strlen(text);
  while (i < n) {
    const char *w = words[i++];
    int seen = 0;   // a name bound twice, or also a builtin, once
    for (int k = 0; k < i - 1 && !seen; k++) seen = !strcmp(words[k], w);
    if (!seen && !strncmp(w, text, len)) return strdup(w);
  }
  return NULL;
}

static char **complete(const char *text, int start, int end) {
  (void)start, (void)end;
  rl_attempted_completion_over = 1;   // names only, never file names
  return rl_completion_matches(text, next_completion);
}
#endif

static char *read_line(Repl *r, const char *prompt) {
#ifdef KILN_HAVE_LIBEDIT
  if (r->tty) return readline(prompt);
#endif
  if (r->tty) { fputs(prompt, stdout); fflush(stdout); }
  size_t cap = 0;
  char *line = NULL;
  ssize_t n = getline(&line, &cap, stdin);
  if (n < 0) { free(line); return NULL; }
  if (n && line[n - 1] == '\n') line[n - 1] = 0;
  return line;
}

static void history_path(char *buf, size_t len) {
  const char *home = getenv("HOME");
  snprintf(buf, len, "%s/.kiln_history", home ? home : ".");
}

int repl_main(int threads, uint64_t seed) {
  Diag d;
  diag_init(&d);
  Repl r = {ev_new(stdout, &d), &d, isatty(0) && isatty(1)};
  r.ev->echo = 1;
  r.ev->seed = seed;
  // The REPL calls each compiled graph through libffi: its signature is known
  // only at run time (kiln run uses the uniform entry point instead).
  r.ev->via_ffi = 1;
  char err[4096], hist[4096];
  if (ev_start(r.ev, threads, err, sizeof err)) { fprintf(stderr, "kiln: %s\n", err); ev_free(r.ev); diag_free(&d); return 1; }
  history_path(hist, sizeof hist);
#ifdef KILN_HAVE_LIBEDIT
  if (r.tty) {
    using_history();
    read_history(hist);
    completing = &r;
    rl_attempted_completion_function = complete;
    rl_basic_word_break_characters = " \t\n()[]{},;=+-*/^@<>!";   // ':' and '_' belong to words
  }
#endif
  if (r.tty) printf("kiln %s — :help for help, Ctrl-D to leave\n", KILN_VERSION);
  char *chunk = NULL;
  size_t clen = 0;
  int failed = 0;
  for (;;) {
    char *line = read_line(&r, chunk ? "... " : "kiln> ");
    if (!line) break;
#ifdef KILN_HAVE_LIBEDIT
    if (r.tty && line[0]) add_history(line);
#endif
    if (!chunk && line[strspn(line, " \t")] == ':') {
      const char *cmd = line + strspn(line, " \t");
      if (!strcmp(cmd, ":quit") || !strcmp(cmd, ":q")) { free(line); break; }
      command(&r, cmd);
      free(line);
      continue;
    }
    size_t n = strlen(line);
    chunk = realloc(chunk, clen + n + 2);
    if (!chunk) abort();
    memcpy(chunk + clen, line, n);
    clen += n;
    chunk[clen++] = '\n';
    chunk[clen] = 0;
    free(line);
    if (parse_is_incomplete(chunk)) continue;
    if (ev_run(r.ev, "<repl>", chunk)) failed = 1;
    flush_diag(&r);
    fflush(stdout);
    free(chunk);
    chunk = NULL;
    clen = 0;
  }
  if (chunk) {  // an unfinished statement at the end of input
    if (ev_run(r.ev, "<repl>", chunk)) failed = 1;
    flush_diag(&r);
    free(chunk);
  }
#ifdef KILN_HAVE_LIBEDIT
  if (r.tty) write_history(hist);
#endif
  if (r.tty) putchar('\n');
  ev_free(r.ev);
  diag_free(&d);
  // A scripted session reports whether any statement failed.
  return r.tty ? 0 : failed;
}
