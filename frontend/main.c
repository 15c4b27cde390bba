// The kiln command: run, ir, emit-c, emit-cuda, ast, repl.
#include "build.h"
#include "eval.h"
#include "repl.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
  "usage: kiln [COMMAND] [OPTIONS]\n"
  "\n"
  "commands:\n"
  "  kiln                      start the REPL (also: kiln repl)\n"
  "  kiln run FILE.kiln        compile and run a program\n"
  "  kiln run -e 'CODE'        compile and run CODE\n"
  "  kiln run -                compile and run the program on standard input\n"
  "  kiln ir FILE [--after=STAGE]\n"
  "                            show each graph the program compiles, after STAGE\n"
  "                            (" PIPE_STAGES "; default dce)\n"
  "  kiln ir FILE --stats      for each graph: kernels by kind, workspace peak,\n"
  "                            argument bytes, matmul strategies\n"
  "  kiln emit-c FILE          show the C generated for each graph\n"
  "  kiln emit-c FILE --vectorize\n"
  "                            ... and, per kernel, which loops the compiler vectorized\n"
  "  kiln emit-cuda FILE [--arch sm_80,sm_90]\n"
  "                            show the CUDA C generated for each graph; with --arch,\n"
  "                            compile it with NVRTC for those GPUs (no GPU needed)\n"
  "  kiln ast FILE             show the syntax tree\n"
  "  kiln build FILE -o OUT    compile ahead of time into a standalone executable\n"
  "                            (--lib: a library with a C API; kiln build --help)\n"
  "  kiln --version | --help\n"
  "\n"
  "options:\n"
  "  --threads N               worker threads (default: all cores, or $KILN_THREADS)\n"
  "  --seed N                  base seed for parameters and random tensors (default 0)\n"
  "  --ffi                     kiln run: call compiled graphs through libffi (the REPL always does)\n"
  "  --tune                    time each conv2d layer's lowerings once and cache the fastest\n"
  "  --profile                 kiln run: time every kernel; print each graph's kernels by time\n"
  "  --device cpu|cuda|cuda:N  kiln run: where graphs run (default cpu); cuda:0,1 or cuda+cpu:\n"
  "                            train statements split each batch over several GPUs, or GPU and CPU\n"
  "  -e CODE                   program text instead of a file\n"
  "\n"
  "training (override the train statement's settings):\n"
  "  --epochs N  --batch N  --lr X\n"
  "  --seed N                  also the shuffling and dropout seed of train statements\n"
  "  --log FILE.csv            per-step loss and per-epoch metrics (epoch,step,name,value)\n"
  "  --plot FILE.png           loss and metric curves\n"
  "  --checkpoint FILE         save a checkpoint after every epoch and on Ctrl-C\n"
  "  --resume FILE             continue from a checkpoint (parameters, optimizer state, epoch)\n"
  "  --progress bar|lines      progress display on stderr (default: a bar on a terminal)\n"
  "  --max-steps N             quick check: end each train statement after N steps\n"
  "  --eval-examples N         quick check: evaluate on the first N examples only\n"
  "\n"
  "environment: KILN_CACHE_DIR (compile cache; empty disables), KILN_JIT=llvm|cc,\n"
  "KILN_THREADS, KILN_LIB_DIR (where import finds libraries), KILN_GEMM=kiln|blis|loops,\n"
  "KILN_DENORMALS=keep (IEEE subnormals instead of flushing them to zero),\n"
  "KILN_LIBCUDA, KILN_NVRTC (the CUDA driver or NVRTC library to load instead of the default)\n";

typedef struct {
  const char *cmd, *file, *code, *after, *device, *arch;
  int threads, ffi, seed_set, stats, tune, vectorize, profile;
  unsigned long long seed;
  TrainOpts train;
} Opts;

// A numeric option's value, or -1 after saying what is wrong.
static int number(const char *opt, const char *s, double lo, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= lo) || v > 1e15) {
    fprintf(stderr, "kiln: %s needs a number%s, not '%s'\n", opt, lo > 0 ? " above 0" : "", s);
    return -1;
  }
  *out = v;
  return 0;
}

// A count: a whole number from 1 to most.
static int count(const char *opt, const char *s, double most, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= 1) || v > most || v != floor(v)) {
    fprintf(stderr, "kiln: %s needs a whole number from 1 to %.15g, not '%s'\n", opt, most, s);
    return -1;
  }
  *out = v;
  return 0;
}

// --name VALUE or --name=VALUE; NULL if argv[*i] is not this option.
static const char *value_of(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n)) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] || *i + 1 >= argc) return NULL;
  return argv[++*i];
}

static int train_opt(int argc, char **argv, int *i, TrainOpts *t) {
  const char *v;
  double x;
  if ((v = value_of(argc, argv, i, "--epochs"))) { if (count("--epochs", v, 2147483647, &x)) return -1; t->epochs = (int)x; return 1; }
  if ((v = value_of(argc, argv, i, "--batch"))) { if (count("--batch", v, 2147483647, &x)) return -1; t->batch = (int)x; return 1; }
  if ((v = value_of(argc, argv, i, "--lr"))) { if (number("--lr", v, 1e-300, &x)) return -1; t->lr = x; return 1; }
  if ((v = value_of(argc, argv, i, "--max-steps"))) { if (count("--max-steps", v, 1e15, &x)) return -1; t->max_steps = (int64_t)x; return 1; }
  if ((v = value_of(argc, argv, i, "--eval-examples"))) { if (count("--eval-examples", v, 1e15, &x)) return -1; t->eval_examples = (int64_t)x; return 1; }
  if ((v = value_of(argc, argv, i, "--log"))) { t->log = v; return 1; }
  if ((v = value_of(argc, argv, i, "--plot"))) { t->plot = v; return 1; }
  if ((v = value_of(argc, argv, i, "--checkpoint"))) { t->checkpoint = v; return 1; }
  if ((v = value_of(argc, argv, i, "--resume"))) { t->resume = v; return 1; }
  if ((v = value_of(argc, argv, i, "--progress"))) {
    if (strcmp(v, "bar") && strcmp(v, "lines")) { fprintf(stderr, "kiln: --progress is bar or lines\n"); return -1; }
    t->progress = !strcmp(v, "bar");
    return 1;
  }
  return 0;
}

static int parse_opts(int argc, char **argv, Opts *o) {
  o->train.progress = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int t = train_opt(argc, argv, &i, &o->train);
    if (t < 0) return -1;
    if (t) continue;
    if (!strcmp(a, "-e") && i + 1 < argc) o->code = argv[++i];
    else if (!strncmp(a, "--after=", 8)) o->after = a + 8;
    else if (!strcmp(a, "--after") && i + 1 < argc) o->after = argv[++i];
    else if ((v = value_of(argc, argv, &i, "--threads"))) {
      double x;
      if (count("--threads", v, 4096, &x)) return -1;
      o->threads = (int)x;
    } else if ((v = value_of(argc, argv, &i, "--seed"))) {
      char *end;
      errno = 0;
      o->seed = strtoull(v, &end, 10);
      if (end == v || *end || errno || *v == '-' || *v == '+' || *v == ' ') {
        fprintf(stderr, "kiln: --seed needs a whole number from 0 to 18446744073709551615, not '%s'\n", v);
        return -1;
      }
      o->seed_set = 1;
    }
    else if ((v = value_of(argc, argv, &i, "--device"))) o->device = v;
    else if ((v = value_of(argc, argv, &i, "--arch"))) o->arch = v;
    else if (!strcmp(a, "--ffi")) o->ffi = 1;
    else if (!strcmp(a, "--stats")) o->stats = 1;
    else if (!strcmp(a, "--vectorize")) o->vectorize = 1;
    else if (!strcmp(a, "--tune")) o->tune = 1;
    else if (!strcmp(a, "--profile")) o->profile = 1;
    else if (a[0] == '-' && a[1]) { fprintf(stderr, "kiln: unknown option '%s'\n\n%s", a, usage); return -1; }
    else if (!o->cmd) o->cmd = a;
    else if (!o->file) o->file = a;
    else { fprintf(stderr, "kiln: unexpected argument '%s'\n", a); return -1; }
  }
  return 0;
}

// The program's text and name, from -e or a file.
static char *program_text(const Opts *o, const char **name) {
  if (o->code) { *name = "-e"; return strdup(o->code); }
  if (!o->file) { fprintf(stderr, "kiln %s: give a FILE or -e 'CODE'\n", o->cmd); return NULL; }
  size_t len;
  char *text = ev_read_file(o->file, &len);
  if (!text) { fprintf(stderr, "kiln: cannot read %s: %s\n", o->file, strerror(errno)); return NULL; }
  if (strlen(text) != len) { fprintf(stderr, "kiln: %s is not a text file (it holds a NUL byte)\n", o->file); free(text); return NULL; }
  *name = strcmp(o->file, "-") ? o->file : "<stdin>";
  return text;
}

// --device goes with kiln run; pipe_set_devices reads it. 1 if it is misplaced (said).
static int device_misplaced(const Opts *o) {
  if (!o->device || !strcmp(o->device, "cpu") || !strcmp(o->cmd, "run")) return 0;
  fprintf(stderr, "kiln: --device goes with kiln run\n");
  return 1;
}

static int run_program(const Opts *o) {
  const char *name;
  char *text = program_text(o, &name);
  if (!text) return 1;
  Diag d;
  diag_init(&d);
  Ev *ev = ev_new(stdout, &d);
  ev->seed = (uint64_t)o->seed;
  ev->via_ffi = o->ffi;
  ev->tune = o->tune;
  ev->tune_threads = o->threads;
  ev->pipe.profile = o->profile;
  ev->topts = o->train;
  ev->topts.seed_set = o->seed_set;
  ev->topts.seed = (uint64_t)o->seed;
  char err[4096];
  int rc = 0;
  int cuda = !strcmp(o->cmd, "emit-cuda");
  if (!strcmp(o->cmd, "ir") || !strcmp(o->cmd, "emit-c") || cuda) {
    ev->pipe.dump_after = strcmp(o->cmd, "ir") ? NULL : o->stats ? PIPE_STATS : o->after ? o->after : "dce";
    ev->pipe.emit_c = !strcmp(o->cmd, "emit-c") || cuda;
    ev->pipe.emit_cuda = cuda;
    ev->pipe.cuda_archs = o->arch;
    ev->pipe.vector_report = o->vectorize;
  }
  if (o->vectorize && strcmp(o->cmd, "emit-c")) {
    fprintf(stderr, "kiln: --vectorize goes with kiln emit-c\n");
    rc = 1;
  } else if (o->arch && !cuda) {
    fprintf(stderr, "kiln: --arch goes with kiln emit-cuda\n");
    rc = 1;
  } else if (o->arch && pipe_cuda_archs(o->arch, (int[16]){0}, 16) < 0) {
    fprintf(stderr, "kiln: --arch takes architectures like sm_80,sm_90, not '%s'\n", o->arch);
    rc = 1;
  } else if (o->stats && (o->after || strcmp(o->cmd, "ir"))) {
    fprintf(stderr, "kiln: --stats goes with kiln ir, without --after\n");
    rc = 1;
  } else if (ev->pipe.dump_after && !o->stats && !pipe_stage_ok(ev->pipe.dump_after)) {
    fprintf(stderr, "kiln ir: unknown stage '%s' (stages: %s)\n", ev->pipe.dump_after, PIPE_STAGES);
    rc = 1;
  }
  if (!rc && ev_start(ev, o->threads, err, sizeof err)) { fprintf(stderr, "kiln: %s\n", err); rc = 1; }
  if (!rc && o->device && strcmp(o->device, "cpu")) {   // the device opens now, so its absence is said first
    if (pipe_set_devices(&ev->pipe, o->device, err, sizeof err)) { fprintf(stderr, "kiln: --device %s: %s\n", o->device, err); rc = 1; }
    else {
      char what[1024];
      pipe_describe(&ev->pipe, what, sizeof what);
      fprintf(stderr, "kiln: running on %s\n", what);
    }
  }
  if (o->file && !o->code) ev_running_file(ev, o->file);
  if (!rc && ev_run(ev, name, text)) rc = ev->interrupted ? 130 : 1;
  fflush(stdout);
  if (o->profile) ev_profile_print(ev, stderr);
  if (d.msg && d.msg[0]) fputs(d.msg, stderr);
  ev_free(ev);
  diag_free(&d);
  free(text);
  return rc;
}

static int show_ast(const Opts *o) {
  const char *name;
  char *text = program_text(o, &name);
  if (!text) return 1;
  Diag d;
  diag_init(&d);
  Arena *a = arena_new();
  Source src = source_from_string(name, text);
  AstNode *prog = parse_program(a, &src, &d);
  if (prog) ast_dump(stdout, prog, 0);
  if (d.msg && d.msg[0]) fputs(d.msg, stderr);
  int rc = d.has_error;
  arena_free(a);
  diag_free(&d);
  free(text);
  return rc;
}

int main(int argc, char **argv) {
  Opts o = {0};
  if (argc > 1 && !strcmp(argv[1], "build")) return build_main(argc, argv);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
      printf("kiln %s (jit: %s)\n", KILN_VERSION, jit_backend_name());
      return 0;
    }
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(usage, stdout); return 0; }
  }
  if (parse_opts(argc, argv, &o)) return 2;
  if (!o.cmd || !strcmp(o.cmd, "repl")) return repl_main(o.threads, (uint64_t)o.seed);
  // `kiln FILE.kiln` runs the file.
  if (strstr(o.cmd, ".kiln") && !o.file) { o.file = o.cmd; o.cmd = "run"; }
  if (device_misplaced(&o)) return 1;
  if (!strcmp(o.cmd, "run") || !strcmp(o.cmd, "ir") || !strcmp(o.cmd, "emit-c") || !strcmp(o.cmd, "emit-cuda"))
    return run_program(&o);
  if (!strcmp(o.cmd, "ast")) return show_ast(&o);
  fprintf(stderr, "kiln: unknown command '%s'\n\n%s", o.cmd, usage);
  return 2;
}
