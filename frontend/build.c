// kiln build: a program compiled ahead of time into a standalone executable, or into a
// library with a small C API (--lib).
//
// The program runs as under `kiln run`, with its train, evaluate and save statements
// recording instead of running (build.h); its parameters get their initial values as
// usual. The graphs' C is what the JIT compiles, compiled the same way to object files
// (jit_compile_object: Clang in-process, or the system cc with -Djit=cc); a small C
// file describes the model to the runtime (runtime/model.h: each graph's arguments, the
// data and training settings, the parameters embedded as a safetensors image) and the
// system cc compiles it and links everything against the static runtime libkiln_rt.a.
#include "build.h"
#include "compiler/nvrtc.h"
#include "train_int.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef KILN_RT_BUILD_DIR
#define KILN_RT_BUILD_DIR ""
#endif
#ifndef KILN_RT_INSTALL_DIR
#define KILN_RT_INSTALL_DIR "/usr/local/lib"
#endif
#ifndef KILN_SOURCE_ROOT
#define KILN_SOURCE_ROOT ""
#endif
#ifndef KILN_INCLUDE_INSTALL_DIR
#define KILN_INCLUDE_INSTALL_DIR "/usr/local/include/kiln"
#endif
// What libkiln_rt.a needs at link time (meson works it out: BLIS, zlib, sanitizers).
#ifndef KILN_RT_LINK
#define KILN_RT_LINK "-lz -lm -lpthread"
#endif
#ifndef KILN_RT_LINK_SHARED
#define KILN_RT_LINK_SHARED KILN_RT_LINK
#endif

static const char usage[] =
  "usage: kiln build FILE.kiln -o OUT [OPTIONS]\n"
  "\n"
  "Compiles the program's graphs ahead of time into a standalone executable OUT:\n"
  "  OUT info                      inputs, outputs, shapes, parameter count, memory\n"
  "  OUT predict [--weights W.safetensors] INPUT.npy -o OUTPUT.npy\n"
  "  OUT train [--data DIR] [--epochs N] [--out CKPT.safetensors]\n"
  "(OUT --help lists the rest.) The graphs are the program's value OUTPUT (--output),\n"
  "its train statement's step (forward, gradient, optimizer update) and its evaluate\n"
  "statement's metrics; the parameters are embedded as the program initialized them.\n"
  "\n"
  "options:\n"
  "  -o OUT                the executable (with --lib: OUT.a, OUT.so and NAME.h beside\n"
  "                        them, NAME being OUT's name without lib: -o libmlp gives mlp.h)\n"
  "  --lib                 a library with a C API in place of an executable\n"
  "  --output NAME         the value predict computes (default: logits, else output)\n"
  "  --embed-weights FILE  embed these weights (safetensors); predict then needs no --weights\n"
  "  --target-cpu CPU      what the graphs are compiled for: native (this machine: what\n"
  "                        kiln run does, same results to the bit), or a portable level,\n"
  "                        x86-64, x86-64-v2 (default), x86-64-v3, x86-64-v4, or a CPU name\n"
  "  --seed N              the seed parameters are initialized with (as kiln run --seed)\n"
  "  --arch sm_80,sm_90    also carry each graph's CUDA kernels, compiled by NVRTC for these\n"
  "                        GPUs (no GPU needed here); OUT --device cuda then runs on the GPU,\n"
  "                        and OUT train --device cuda:0,1 or cuda+cpu on several devices\n"
  "  --keep DIR            keep the generated C and objects in DIR\n"
  "\n"
  "The result needs no LLVM, Clang or Kiln at run time: the runtime, BLIS and zlib are\n"
  "linked statically. It still needs the C library: libc, libm and libmvec (glibc), and\n"
  "libgomp when Debian's BLIS is its OpenMP build (check with ldd). Building needs a\n"
  "system C compiler (cc) for the link. More: docs/build.md.\n"
  "\n"
  "environment: CC (the compiler for the link), KILN_RT_DIR and KILN_INCLUDE_DIR (where\n"
  "libkiln_rt.a and the runtime headers are), KILN_BUILD_VERBOSE=1 (show the commands)\n";

typedef struct {
  const char *file, *out, *output, *weights, *cpu, *keep, *arch;
  int lib, seed_set;
  uint64_t seed;
  int archs[16], narchs;      // --arch
} BuildOpts;

// --arch: each graph's CUDA source, its CUBINs written beside the C (cuda_images).
enum { NGRAPHS = 5 };
typedef struct { CudaSource cs[NGRAPHS]; int have[NGRAPHS]; int ptx_arch[NGRAPHS]; } BuildCuda;   // ptx_arch: its PTX's compute_XX

// The graphs a build writes, in the order of the arrays below.
static const char *const graph_ids[NGRAPHS] = {"predict", "step", "eval", "grad", "update"};
static void graphs_of(const Build *b, const BuildGraph **gs) {
  gs[0] = &b->predict, gs[1] = &b->step, gs[2] = &b->eval, gs[3] = &b->grad, gs[4] = &b->update;
}

static int parse(int argc, char **argv, BuildOpts *o) {
  o->cpu = "x86-64-v2";
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    const char **dst = !strcmp(a, "-o") ? &o->out : !strcmp(a, "--output") ? &o->output
                     : !strcmp(a, "--embed-weights") ? &o->weights : !strcmp(a, "--target-cpu") ? &o->cpu
                     : !strcmp(a, "--keep") ? &o->keep : !strcmp(a, "--arch") ? &o->arch : NULL;
    if (!strncmp(a, "--target-cpu=", 13)) { o->cpu = a + 13; continue; }
    if (!strcmp(a, "--lib")) { o->lib = 1; continue; }
    if (!strcmp(a, "--seed") && v) { o->seed = strtoull(v, NULL, 10); o->seed_set = 1; i++; continue; }
    if (dst) {
      if (!v) { fprintf(stderr, "kiln build: %s needs a value\n", a); return -1; }
      *dst = v;
      i++;
    } else if (a[0] == '-') {
      fprintf(stderr, "kiln build: unknown option '%s'\n\n%s", a, usage);
      return -1;
    } else if (!o->file) o->file = a;
    else { fprintf(stderr, "kiln build: unexpected argument '%s'\n", a); return -1; }
  }
  if (!o->file || !o->out) { fprintf(stderr, "kiln build: give FILE.kiln and -o OUT\n\n%s", usage); return -1; }
  if (o->arch && (o->narchs = pipe_cuda_archs(o->arch, o->archs, 16)) < 0) {
    fprintf(stderr, "kiln build: --arch takes architectures like sm_80,sm_90, not '%s'\n", o->arch);
    return -1;
  }
  // Paths go to the compiler and the assembler inside quotes.
  const char *paths[] = {o->out, o->keep, o->file, getenv("TMPDIR")};
  for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
    if (paths[i] && strpbrk(paths[i], "'\"\\\n")) {
      fprintf(stderr, "kiln build: a path with a quote, backslash or newline is not supported: %s\n", paths[i]);
      return -1;
    }
  // The output's directory must be there and writable: said now, not as the linker's error at the end.
  char werr[4200];
  if (rt_check_writable(o->out, werr, sizeof werr)) {
    fprintf(stderr, "kiln build: %s\n", werr);
    return -1;
  }
  for (const char *p = o->cpu; *p; p++)
    if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z'))) {
      fprintf(stderr, "kiln build: --target-cpu '%s' is not a CPU name\n", o->cpu);
      return -1;
    }
  return 0;
}

// ---- what the statements record (build.h) ----
int build_input_column(Ev *ev, Node *in) {
  for (int j = 0; j < ev->ninputs; j++) if (ev->inputs[j].node == in) return j;
  return -1;
}

void build_data_spec(Ev *ev, AstNode *e, int dflt, RtDataSpec *out) {
  Value v = ev_eval_expr(ev, ev->globals, e);
  if (v.kind != V_DATA) ev_fail(ev, e->span, "expected a data set here (a name from a data statement, like fmnist.train)");
  data_spec(v.data, v.data->split == SPLIT_NONE ? dflt : v.data->split, out);
}

// The predict graph: the value `name` in evaluation mode over the inputs it reads.
static int record_predict(Ev *ev, Build *b, const char *name, char *err, size_t n) {
  Value *v = ev_lookup(ev, name);
  if (!v || v->kind != V_TENSOR) {
    snprintf(err, n, "the program has no tensor named '%s' to predict (give --output NAME)", name);
    return -1;
  }
  jmp_buf jb, *outer = ev->on_error;
  ev->on_error = &jb;
  if (setjmp(jb)) {
    ev->on_error = outer;
    ev->binding_data = 0;
    snprintf(err, n, "%s", ev->diag->msg ? ev->diag->msg : "could not compile the prediction");
    return -1;
  }
  Node **ins;
  int nin;
  ev->binding_data = 1;
  Program *pr = ev_program(ev, &v->t, 1, &ins, &nin, (Span){0});
  ev->binding_data = 0;
  ev->on_error = outer;
  BuildGraph *g = &b->predict;
  g->pr = pr;
  g->role = arena_alloc(ev->arena, sizeof(int) * (nin + 1));
  g->col = arena_alloc(ev->arena, sizeof(int) * (nin + 1));
  g->out_names = arena_alloc(ev->arena, sizeof(char *));
  g->out_names[0] = name;
  // The caller's inputs are numbered in declaration order.
  for (int i = 0; i < nin; i++) {
    g->role[i] = ins[i]->a.i[0] == ROLE_INPUT ? RT_ARG_DATA : RT_ARG_TENSOR;
    g->col[i] = -1;
    if (g->role[i] != RT_ARG_DATA) continue;
    g->col[i] = 0;
    for (int j = 0; j < nin; j++)
      if (j != i && ins[j]->a.i[0] == ROLE_INPUT && build_input_column(ev, ins[j]) < build_input_column(ev, ins[i])) g->col[i]++;
  }
  return 0;
}

// ---- writing the model's C ----
static void c_string(FILE *f, const char *s) {
  if (!s) { fputs("NULL", f); return; }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 32 || (unsigned char)*s > 126) fprintf(f, "\\%03o", (unsigned char)*s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void arg_c(FILE *f, const Node *x, const char *name, int role, int col) {
  fputs("  {", f);
  c_string(f, name);
  fprintf(f, ", %d, %d, %d, %d, {", role, col, (int)x->dtype, x->ndim);
  for (int d = 0; d < x->ndim; d++) fprintf(f, "%s{%lld, %d}", d ? ", " : "", (long long)x->shape[d].k, x->shape[d].sym);
  fputs("}},\n", f);
}

// The assembler's .incbin puts a file's bytes in the object: no megabytes of C initializers.
static void incbin_c(FILE *f, const char *sym, const char *path) {
  fprintf(f, "__asm__(\".section .rodata\\n.balign 64\\n%s:\\n.incbin \\\"%s\\\"\\n%s_end:\\n.byte 0\\n.previous\\n\");\n", sym, path, sym);
  fprintf(f, "extern const unsigned char %s[] __asm__(\"%s\"), %s_end[] __asm__(\"%s_end\");\n", sym, sym, sym, sym);
}

// The CUDA side of graph id: its CUBINs and PTX (incbin), kernels, host function, constants' sizes.
static void graph_cuda_c(FILE *f, const BuildOpts *o, const CudaSource *cs, const Schedule *s, const char *id,
                         const char *dir, int ptx_arch) {
  char sym[64], path[4200];
  for (int a = 0; a < o->narchs; a++) {
    snprintf(sym, sizeof sym, "kiln_%s_sm%d", id, o->archs[a]);
    snprintf(path, sizeof path, "%s/g_%s_sm%d.cubin", dir, id, o->archs[a]);
    incbin_c(f, sym, path);
  }
  snprintf(sym, sizeof sym, "kiln_%s_ptx", id);
  snprintf(path, sizeof path, "%s/g_%s.ptx", dir, id);
  incbin_c(f, sym, path);   // text: incbin_c's closing NUL ends it
  fprintf(f, "static const RtCudaImage %s_images[] = {", id);
  for (int a = 0; a < o->narchs; a++) fprintf(f, "{%d, kiln_%s_sm%d, 0}, ", o->archs[a], id, o->archs[a]);
  fprintf(f, "{%d, kiln_%s_ptx, 1}", ptx_arch, id);
  fprintf(f, "};\nstatic const char *const %s_kernels[] = {", id);
  for (int i = 0; i < cs->nsteps; i++) fprintf(f, "\"%s\", ", cs->steps[i].name);
  fprintf(f, "NULL};\nstatic const int %s_blocks[] = {", id);
  for (int i = 0; i < cs->nsteps; i++) fprintf(f, "%d, ", cs->steps[i].block);
  fprintf(f, "0};\nstatic const size_t %s_const_bytes[] = {", id);
  for (int i = 0; i < s->nconst; i++) fprintf(f, "%zu, ", s->consts[i]->a.nbytes);
  fprintf(f, "0};\nint %s(void *, const int64_t *, const CUdeviceptr *, const CUdeviceptr *, const CUdeviceptr *);\n"
             "size_t %s(const int64_t *);\n", cs->host_entry, cs->host_workspace);
  fprintf(f, "static const RtGraphCuda %s_cuda = {%s_images, %d, %s_kernels, %s_blocks, %d, %s, %s, %s_const_bytes};\n",
          id, id, o->narchs + 1, id, id, cs->nsteps, cs->host_entry, cs->host_workspace, id);
}

static void graph_c(FILE *f, const BuildGraph *bg, const char *id, const char *cuda) {
  const Program *pr = bg->pr;
  const IrGraph *g = pr->g;
  const Schedule *s = pr->s;
  fprintf(f, "\n// ---- %s ----\nvoid %s(void **);\nsize_t %s(const int64_t *);\n", id, pr->cs.entry, pr->cs.workspace);
  fprintf(f, "static const RtArg %s_ins[] = {\n", id);
  for (int i = 0; i < g->nin; i++) arg_c(f, g->ins[i], g->ins[i]->a.name, bg->role[i], bg->col[i]);
  fprintf(f, "};\nstatic const RtArg %s_outs[] = {\n", id);
  for (int i = 0; i < g->nout; i++) arg_c(f, g->outs[i], bg->out_names[i], prog_out_shares(pr, i) >= 0 ? RT_ARG_IN_PLACE : 0, -1);
  fputs("};\n", f);
  for (int i = 0; i < s->nconst; i++) {
    const Node *c = s->consts[i];
    fprintf(f, "static const unsigned char %s_c%d[] __attribute__((aligned(64))) = {", id, i);
    const unsigned char *p = c->a.data;
    for (size_t k = 0; k < c->a.nbytes; k++) fprintf(f, "%s%u", k % 24 ? "," : "\n  ", p[k]);
    fprintf(f, "%s};\n", c->a.nbytes ? "" : "0");
  }
  fprintf(f, "static const void *const %s_consts[] = {", id);
  for (int i = 0; i < s->nconst; i++) fprintf(f, "%s_c%d, ", id, i);
  fputs("NULL};\n", f);
  if (bg->per_example) {
    fprintf(f, "static const int %s_per_example[] = {", id);
    for (int i = 0; i < g->nout; i++) fprintf(f, "%d, ", bg->per_example[i]);
    fputs("0};\n", f);
  }
  fprintf(f, "static const RtGraph %s = {%s, %s, %d, %d, %d, %s_ins, %s_outs, %s_consts, %s%s, %s%s};\n", id, pr->cs.entry,
          pr->cs.workspace, g->nin, s->nconst, g->nout, id, id, id, bg->per_example ? id : "NULL",
          bg->per_example ? "_per_example" : "", cuda ? "&" : "NULL", cuda ? cuda : "");
}

static void data_c(FILE *f, const RtDataSpec *d) {
  fputs("{", f);
  c_string(f, d->kind);
  fputs(", ", f);
  c_string(f, d->dir);
  fputs(", {", f);
  for (int i = 0; i < d->nfiles; i++) { c_string(f, d->files[i]); fputs(", ", f); }
  fprintf(f, "NULL}, %d, %d, %d, %d, %d}", d->nfiles, d->split, d->normalize, d->label, d->header);
}

static const char *base_name(const char *path, char *buf, size_t n) {
  const char *b = strrchr(path, '/');
  snprintf(buf, n, "%s", b ? b + 1 : path);
  char *dot = strstr(buf, ".kiln");
  if (dot && !dot[5]) *dot = 0;
  for (char *p = buf; *p; p++) if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '_';
  if (buf[0] >= '0' && buf[0] <= '9') memmove(buf + 1, buf, strlen(buf) + 1), buf[0] = 'm';
  return buf;
}

static int write_model_c(const char *path, Ev *ev, const Build *b, const BuildOpts *o, const char *name, const char *dir,
                         const BuildCuda *bc) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "// Generated by kiln build from %s: the description of the model for the runtime\n"
             "// (runtime/model.h). The graphs themselves are in g_*.c.\n#include \"runtime/model.h\"\n", o->file);
  const BuildGraph *gs[NGRAPHS];
  graphs_of(b, gs);
  for (int i = 0; i < NGRAPHS; i++) {
    if (!gs[i]->pr) continue;
    char cuda[32];
    snprintf(cuda, sizeof cuda, "%s_cuda", graph_ids[i]);
    if (bc->have[i]) graph_cuda_c(f, o, &bc->cs[i], gs[i]->pr->s, graph_ids[i], dir, bc->ptx_arch[i]);
    graph_c(f, gs[i], graph_ids[i], bc->have[i] ? cuda : NULL);
  }
  char p[4096];
  snprintf(p, sizeof p, "%s/init.safetensors", dir);
  incbin_c(f, "kiln_init", p);
  if (o->weights) {
    snprintf(p, sizeof p, "%s/weights.safetensors", dir);
    incbin_c(f, "kiln_weights", p);
  }
  fputs("static const char *const symnames[] = {", f);
  for (int i = 0; i < ev->c->nsyms; i++) { c_string(f, ev->c->symnames[i]); fputs(", ", f); }
  fputs("NULL};\n", f);
  fprintf(f, "const RtModel kiln_model_%s = {\n  ", name);
  c_string(f, name);
  fputs(", ", f);
  c_string(f, o->file);
  fputs(", ", f);
  c_string(f, o->cpu);
  fprintf(f, ", symnames, %d,\n  %s, %s, %s, ", ev->c->nsyms, b->predict.pr ? "&predict" : "NULL", b->step.pr ? "&step" : "NULL",
          b->eval.pr ? "&eval" : "NULL");
  c_string(f, b->predict.pr ? b->predict.out_names[0] : NULL);
  fputs(",\n  ", f);
  data_c(f, &b->train_data);
  fputs(", ", f);
  data_c(f, &b->eval_data);
  fputs(",\n  ", f);
  c_string(f, b->optimizer);
  fprintf(f, ", %.17g, %.17g, {%.17g, %.17g, %.17g, %lld, %lld, %d},\n", b->beta1, b->beta2, b->sched.lr, b->sched.gamma,
          b->sched.min_lr, (long long)b->sched.warmup, (long long)b->sched.step_size, b->sched.schedule);
  fprintf(f, "  %lld, %lld, %d, %d, %lluULL, ", (long long)b->batch, (long long)(b->eval_batch ? b->eval_batch : 1000), b->epochs,
          b->shuffle, (unsigned long long)b->seed);
  c_string(f, b->save_path);
  fprintf(f, ",\n  kiln_init, kiln_init_end, %s, %s,\n  %s, %s, %d};\n", o->weights ? "kiln_weights" : "NULL",
          o->weights ? "kiln_weights_end" : "NULL", b->grad.pr ? "&grad" : "NULL", b->update.pr ? "&update" : "NULL", b->ngrad);
  if (!o->lib)
    fprintf(f, "\nint main(int argc, char **argv) { return rt_model_main(&kiln_model_%s, argc, argv); }\n", name);
  return fclose(f);
}

// ---- the weights ----
// The latest parameter of each name, as `kiln run` saves them.
static int save_init(Ev *ev, const char *path, char *err, size_t n) {
  RtNamedTensor *ts = calloc(ev->nparams + 1, sizeof *ts);
  if (!ts) abort();
  int k = 0;
  for (int i = 0; i < ev->nparams; i++) {
    int latest = 1;
    for (int j = i + 1; j < ev->nparams; j++) latest &= !!strcmp(ev->params[j].node->a.name, ev->params[i].node->a.name);
    if (latest) ts[k++] = (RtNamedTensor){ev->params[i].node->a.name, &ev->params[i].value};
  }
  const char *meta[] = {"format", "kiln-checkpoint-1"};
  int rc = rt_safetensors_save(path, ts, k, meta, 1, err, n);
  free(ts);
  return rc;
}

// --embed-weights: checked against the parameters now rather than when the binary starts.
static int check_weights(Ev *ev, const char *path, char *err, size_t n) {
  RtTensorFile f;
  if (rt_safetensors_load(path, &f, err, n)) return -1;
  int rc = 0;
  for (int i = 0; i < ev->nparams && !rc; i++) {
    const RtTensor *p = &ev->params[i].value, *t = rt_tensorfile_find(&f, ev->params[i].node->a.name);
    int same = t && t->dtype == p->dtype && t->ndim == p->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == p->shape[d];
    if (!same) {
      snprintf(err, n, "%s: %s tensor for the parameter '%s'", path, t ? "a differently shaped" : "no", ev->params[i].node->a.name);
      rc = -1;
    }
  }
  rt_tensorfile_free(&f);
  return rc;
}

static int copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  char buf[65536];
  size_t k;
  int rc = a && b ? 0 : -1;
  while (!rc && (k = fread(buf, 1, sizeof buf, a)) > 0) rc = fwrite(buf, 1, k, b) == k ? 0 : -1;
  if (a) fclose(a);
  if (b && fclose(b)) rc = -1;
  return rc;
}

// ---- the library's API: a header and its implementation over model.c's sessions ----
// The per-example sizes and element types of predict's first input and its output.
typedef struct { int64_t in_size, out_size; const char *in_dt, *out_dt; } ApiShape;

static ApiShape api_shape(const Build *b) {
  ApiShape s = {1, 1, "", ""};
  const BuildGraph *p = &b->predict;
  const Node *x = NULL, *y = p->pr->g->outs[0];
  for (int i = 0; i < p->pr->g->nin && !x; i++) if (p->role[i] == RT_ARG_DATA && !p->col[i]) x = p->pr->g->ins[i];
  for (int d = 1; x && d < x->ndim; d++) s.in_size *= x->shape[d].k;
  for (int d = 1; d < y->ndim; d++) s.out_size *= y->shape[d].k;
  s.in_dt = x ? ir_dtype_name(x->dtype) : "";
  s.out_dt = ir_dtype_name(y->dtype);
  return s;
}

static int write_header(const char *path, const char *N, const char *file, ApiShape sh) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  char U[256];   // NAME in capitals, for macros
  size_t i = 0;
  for (; N[i] && i < sizeof U - 1; i++) U[i] = (char)(N[i] >= 'a' && N[i] <= 'z' ? N[i] - 32 : N[i]);
  U[i] = 0;
  fprintf(f, "// %s.h: the model %s as a library, made by `kiln build --lib` from %s.\n", N, N, file);
  fprintf(f,
    "//\n"
    "// Link with lib%s.a (the model, its compiled graphs and Kiln's runtime) and the system\n"
    "// libraries the runtime needs, or with lib%s.so:\n"
    "//     cc app.c lib%s.a -lblis -lz -lm -lmvec -lpthread -fopenmp\n"
    "//     cc app.c -L. -l%s -Wl,-rpath,'$ORIGIN'\n"
    "//\n", N, N, N, N);
  fprintf(f,
    "// A worked example: load trained weights and predict one example.\n"
    "//\n"
    "//     char err[512];\n"
    "//     %s_model *m = %s_create(1, err, sizeof err);     // 1 thread; 0: all cores\n"
    "//     if (!m || %s_load(m, \"%s.safetensors\", err, sizeof err)) {\n"
    "//       fprintf(stderr, \"%%s\\n\", err);\n"
    "//       exit(1);\n"
    "//     }\n", N, N, N, N);
  fprintf(f,
    "//     float x[%s_INPUT_SIZE] = {0};   // one example's input values (%s)\n"
    "//     float y[%s_OUTPUT_SIZE];        // its output (%s)\n"
    "//     if (%s_forward(m, x, 1, y, err, sizeof err)) fprintf(stderr, \"%%s\\n\", err);\n"
    "//     %s_free(m);\n"
    "//\n"
    "// examples/embed/ in Kiln's sources is a whole program built this way.\n"
    "// Functions return 0 (or a pointer) on success, -1 (or NULL) with a message in err.\n"
    "// Buffers are the caller's: dense, row-major, n examples one after another. A handle\n"
    "// serves one call at a time; the results are those of `kiln run` with the same weights.\n",
    U, sh.in_dt, U, sh.out_dt, N, N);
  fprintf(f,
    "#ifndef %s_MODEL_H\n#define %s_MODEL_H\n#include <stddef.h>\n#include <stdint.h>\n\n"
    "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
    "#define %s_INPUT_SIZE %lld    // values per example of the input (%s)\n"
    "#define %s_OUTPUT_SIZE %lld   // values per example of the output (%s)\n\n",
    U, U, U, (long long)sh.in_size, sh.in_dt, U, (long long)sh.out_size, sh.out_dt);
  fprintf(f,
    "typedef struct %s_model %s_model;\n\n"
    "// A model with the parameters as the program initialized them; threads <= 0: all cores.\n"
    "%s_model *%s_create(int threads, char *err, size_t errlen);\n"
    "void %s_free(%s_model *m);\n", N, N, N, N, N, N);
  fprintf(f,
    "// Weights (and optimizer state) from a safetensors checkpoint: kiln run's save, or the\n"
    "// built binary's train; every parameter must be there with its shape.\n"
    "int %s_load(%s_model *m, const char *path, char *err, size_t errlen);\n"
    "int %s_save(%s_model *m, const char *path, char *err, size_t errlen);\n", N, N, N, N);
  fprintf(f,
    "// The output of n examples: x holds n * %s_INPUT_SIZE values, y gets n * %s_OUTPUT_SIZE.\n"
    "int %s_forward(%s_model *m, const void *x, int64_t n, void *y, char *err, size_t errlen);\n", U, U, N, N);
  fprintf(f,
    "// One training step (forward, gradient, optimizer update) on n examples: x as above,\n"
    "// labels n values of the label input's type; *loss gets the batch's loss. lr < 0: the\n"
    "// program's learning rate. -1 when the program has no train statement.\n"
    "int %s_train_step(%s_model *m, const void *x, const void *labels, int64_t n, double lr,\n"
    "                  double *loss, char *err, size_t errlen);\n", N, N);
  fprintf(f,
    "// Where the calls run from now on: \"cpu\" (the default), \"cuda\" or \"cuda:N\". A GPU needs\n"
    "// the library built with kiln build --arch for its architecture, and a model moves to one\n"
    "// GPU once (create another for the CPU or another GPU). \"cuda:0,1\" or \"cuda+cpu\": training\n"
    "// steps split each batch over several GPUs or GPU and CPU; the rest runs on the first.\n"
    "int %s_device(%s_model *m, const char *device, char *err, size_t errlen);\n\n"
    "#ifdef __cplusplus\n}\n#endif\n#endif\n", N, N);
  return fclose(f);
}

static int write_api_c(const char *path, const char *name, ApiShape sh) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
    "// Generated by kiln build --lib: the API of %s.h over runtime/model.h's sessions.\n"
    "#include \"runtime/model.h\"\n#include \"runtime/split.h\"\n#include \"%s.h\"\n#include <stdlib.h>\n\n"
    "extern const RtModel kiln_model_%s;\n\n",
    name, name, name);
  (void)sh;
  fprintf(f,
    "struct %s_model { RtSession *s; };\n\n"
    "%s_model *%s_create(int threads, char *err, size_t errlen) {\n"
    "  RtSession *s = rt_session_new(&kiln_model_%s, threads, err, errlen);\n"
    "  if (!s) return NULL;\n"
    "  %s_model *m = malloc(sizeof *m);\n"
    "  if (!m) { rt_session_free(s); snprintf(err, errlen, \"out of memory\"); return NULL; }\n"
    "  m->s = s;\n  return m;\n}\n\n"
    "int %s_load(%s_model *m, const char *path, char *err, size_t errlen) { return rt_session_load(m->s, path, err, errlen); }\n"
    "int %s_save(%s_model *m, const char *path, char *err, size_t errlen) { return rt_session_save(m->s, path, err, errlen); }\n"
    "void %s_free(%s_model *m) { if (m) rt_session_free(m->s); free(m); }\n\n",
    name, name, name, name, name, name, name, name, name, name, name);
  // A tensor of n examples of an argument's per-example shape.
  fprintf(f,
    "static RtTensor batch_of(const RtArg *a, const void *p, int64_t n) {\n"
    "  RtTensor t = {(RtDType)a->dtype, a->ndim, {n}, (void *)p, 0};\n"
    "  for (int d = 1; d < a->ndim; d++) t.shape[d] = a->shape[d].k;\n"
    "  return t;\n}\n\n"
    "static const RtArg *data_arg(const RtGraph *g, int col) {\n"
    "  for (int i = 0; g && i < g->nin; i++) if (g->ins[i].role == RT_ARG_DATA && g->ins[i].col == col) return &g->ins[i];\n"
    "  return NULL;\n}\n\n"
    "int %s_forward(%s_model *m, const void *x, int64_t n, void *y, char *err, size_t errlen) {\n"
    "  const RtGraph *g = kiln_model_%s.predict;\n"
    "  const RtArg *a = data_arg(g, 0);\n"
    "  if (!a) { snprintf(err, errlen, \"the model has no input to predict from\"); return -1; }\n"
    "  RtTensor in = batch_of(a, x, n), out = batch_of(&g->outs[0], y, n);\n"
    "  return rt_session_forward(m->s, &in, &out, err, errlen);\n}\n\n"
    "int %s_train_step(%s_model *m, const void *x, const void *labels, int64_t n, double lr, double *loss,\n"
    "                  char *err, size_t errlen) {\n"
    "  const RtGraph *g = kiln_model_%s.step;\n"
    "  if (!g) { snprintf(err, errlen, \"the program has no train statement\"); return -1; }\n"
    "  RtTensor cols[RT_DATA_MAXCOL] = {{0}};\n"
    "  const void *ptr[2] = {x, labels};\n"
    "  for (int c = 0; c < 2; c++) {\n"
    "    const RtArg *a = data_arg(g, c);\n"
    "    if (a) cols[c] = batch_of(a, ptr[c], n);\n"
    "  }\n"
    "  return rt_session_train_step(m->s, cols, lr, loss, err, errlen);\n}\n\n"
    "int %s_device(%s_model *m, const char *device, char *err, size_t errlen) {\n"
    "  int dev[RT_SPLIT_MAX], n = rt_cuda_parse_devices(device, dev, RT_SPLIT_MAX);\n"
    "  if (n < 0) {\n"
    "    snprintf(err, errlen, \"the device is cpu, cuda, cuda:N, cuda:0,1 or cuda+cpu, not '%%s'\", device);\n"
    "    return -1;\n"
    "  }\n"
    "  return rt_session_devices(m->s, dev, n, err, errlen);\n}\n",
    name, name, name, name, name, name, name, name);
  return fclose(f);
}

// ---- compiling and linking ----
static int run_cmd(const char *cmd) {
  if (getenv("KILN_BUILD_VERBOSE")) fprintf(stderr, "+ %s\n", cmd);
  int st = system(cmd);
  return st == 0 ? 0 : -1;
}

// Where libkiln_rt.a and the runtime headers are: the build tree kiln runs from, else
// the installed ones; $KILN_RT_DIR and $KILN_INCLUDE_DIR override.
static void runtime_paths(char *lib, size_t nl, char *inc, size_t ni) {
  const char *e = getenv("KILN_RT_DIR");
  snprintf(lib, nl, "%s/libkiln_rt.a", e && *e ? e : KILN_RT_BUILD_DIR);
  if (!(e && *e) && access(lib, R_OK)) snprintf(lib, nl, "%s/libkiln_rt.a", KILN_RT_INSTALL_DIR);
  e = getenv("KILN_INCLUDE_DIR");
  snprintf(inc, ni, "%s", e && *e ? e : KILN_SOURCE_ROOT);
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/runtime/model.h", inc);
  if (!(e && *e) && access(probe, R_OK)) snprintf(inc, ni, "%s", KILN_INCLUDE_INSTALL_DIR);
}

static int build_objects(Build *b, const BuildOpts *o, const BuildCuda *bc, const char *dir, char *objs, size_t n, char *err,
                         size_t errlen) {
  JitOptions jo = JIT_OPTIONS_DEFAULT;
  jo.target_cpu = o->cpu;
  const BuildGraph *gs[NGRAPHS];
  graphs_of(b, gs);
  const char *const *ids = graph_ids;
  size_t k = 0;
  objs[0] = 0;
  for (int i = 0; i < NGRAPHS; i++) {
    if (!gs[i]->pr) continue;
    char c[4200], obj[4200];
    snprintf(c, sizeof c, "%s/g_%s.c", dir, ids[i]);
    snprintf(obj, sizeof obj, "%s/g_%s.o", dir, ids[i]);
    FILE *f = fopen(c, "w");   // for --keep and for reading: the compiler takes it from memory
    if (f) { fputs(gs[i]->pr->cs.src, f); fclose(f); }
    if (jit_compile_object(&jo, gs[i]->pr->cs.src, obj, err, errlen)) return -1;
    k += snprintf(objs + k, k < n ? n - k : 0, " '%s'", obj);
    if (!bc->have[i]) continue;
    snprintf(c, sizeof c, "%s/g_%s_host.c", dir, ids[i]);
    snprintf(obj, sizeof obj, "%s/g_%s_host.o", dir, ids[i]);
    if ((f = fopen(c, "w"))) { fputs(bc->cs[i].host, f); fclose(f); }
    if (jit_compile_object(&jo, bc->cs[i].host, obj, err, errlen)) return -1;
    k += snprintf(objs + k, k < n ? n - k : 0, " '%s'", obj);
  }
  return 0;
}

static int write_image(const char *path, const NvrtcImage *im, char *err, size_t errlen) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(im->image, 1, im->len, f) == im->len;
  if (f && fclose(f)) ok = 0;
  if (!ok) snprintf(err, errlen, "cannot write %s", path);
  return ok ? 0 : -1;
}

// --arch: each graph's kernels compiled by NVRTC for each architecture, as a
// CUBIN, and as PTX for the newest, which the driver compiles for a later GPU.
static int build_cuda(const Build *b, const BuildOpts *o, const char *dir, BuildCuda *bc, char *err, size_t errlen) {
  const BuildGraph *gs[NGRAPHS];
  graphs_of(b, gs);
  const char *const *ids = graph_ids;
  RtCuda cu = {0};
  int rc = 0, newest = 0;
  for (int a = 0; a < o->narchs; a++) if (o->archs[a] > newest) newest = o->archs[a];
  for (int i = 0; i < NGRAPHS && !rc && o->narchs; i++) {
    if (!gs[i]->pr) continue;
    if ((rc = cg_emit_cuda(gs[i]->pr->s, &bc->cs[i], err, errlen))) break;
    bc->have[i] = 1;
    char path[4200];
    NvrtcImage im;
    for (int a = 0; a < o->narchs && !rc; a++) {
      if ((rc = nvrtc_compile(&cu, bc->cs[i].src, o->archs[a], NULL, &im, err, errlen))) break;
      snprintf(path, sizeof path, "%s/g_%s_sm%d.cubin", dir, ids[i], o->archs[a]);
      if (!im.cubin) {
        snprintf(err, errlen, "--arch sm_%d: this NVRTC knows only up to sm_%d (it would give PTX)", o->archs[a], im.arch);
        rc = -1;
      } else {
        rc = write_image(path, &im, err, errlen);
      }
      nvrtc_image_free(&im);
    }
    if (rc || (rc = nvrtc_compile_ptx(&cu, bc->cs[i].src, newest, NULL, &im, err, errlen))) break;
    snprintf(path, sizeof path, "%s/g_%s.ptx", dir, ids[i]);
    bc->ptx_arch[i] = im.arch;
    rc = write_image(path, &im, err, errlen);
    nvrtc_image_free(&im);
  }
  rt_cuda_close(&cu);
  return rc;
}

static int link_exe(const BuildOpts *o, const char *dir, const char *objs, char *err, size_t n) {
  char lib[4096], inc[4096], cmd[16384];
  runtime_paths(lib, sizeof lib, inc, sizeof inc);
  if (access(lib, R_OK)) { snprintf(err, n, "cannot find the runtime library %s (set KILN_RT_DIR)", lib); return -1; }
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  snprintf(cmd, sizeof cmd, "%s -std=gnu11 -O2 -I'%s' -o '%s' '%s/model.c'%s '%s' %s", cc, inc, o->out, dir, objs, lib, KILN_RT_LINK);
  if (run_cmd(cmd)) { snprintf(err, n, "linking failed: %s", cmd); return -1; }
  return 0;
}

// --lib: OUT.a (the model, its graphs and the runtime's objects), OUT.so, OUT.h.
static int link_lib(const BuildOpts *o, const char *name, const char *dir, const char *objs, ApiShape sh, char *err, size_t n) {
  char lib[4096], inc[4096], cmd[16384], path[4200];
  runtime_paths(lib, sizeof lib, inc, sizeof inc);
  if (access(lib, R_OK)) { snprintf(err, n, "cannot find the runtime library %s (set KILN_RT_DIR)", lib); return -1; }
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  snprintf(cmd, sizeof cmd, "%s -std=gnu11 -O2 -fPIC -I'%s' -c -o '%s/model.o' '%s/model.c' && "
           "%s -std=gnu11 -O2 -fPIC -I'%s' -I'%s' -c -o '%s/api.o' '%s/api.c'",
           cc, inc, dir, dir, cc, inc, dir, dir, dir);
  if (run_cmd(cmd)) { snprintf(err, n, "compiling the model's C failed: %s", cmd); return -1; }
  snprintf(path, sizeof path, "%s.a", o->out);
  unlink(path);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/rt' && cd '%s/rt' && ar x '%s' && ar rcs %s'%s.a' '%s/model.o' '%s/api.o'%s '%s'/rt/*.o",
           dir, dir, lib, o->out[0] == '/' ? "" : "\"$OLDPWD\"/", o->out, dir, dir, objs, dir);
  if (run_cmd(cmd)) { snprintf(err, n, "making %s.a failed: %s", o->out, cmd); return -1; }
  snprintf(cmd, sizeof cmd, "%s -shared -Wl,--exclude-libs,ALL -o '%s.so' '%s/model.o' '%s/api.o'%s '%s' %s", cc, o->out, dir, dir, objs, lib, KILN_RT_LINK_SHARED);
  if (run_cmd(cmd)) { snprintf(err, n, "linking %s.so failed: %s", o->out, cmd); return -1; }
  // The header is NAME.h beside the libraries: -o dir/libmlp gives dir/libmlp.a and dir/mlp.h.
  const char *slash = strrchr(o->out, '/');
  snprintf(path, sizeof path, "%.*s%s.h", slash ? (int)(slash - o->out + 1) : 0, o->out, name);
  if (write_header(path, name, o->file, sh)) { snprintf(err, n, "cannot write %s", path); return -1; }
  return 0;
}

// ---- kiln build ----
static int run_program(Ev *ev, const BuildOpts *o, Diag *d) {
  size_t len;
  char *text = ev_read_file(o->file, &len);
  if (!text) { fprintf(stderr, "kiln build: cannot read %s: %s\n", o->file, strerror(errno)); return -1; }
  ev_running_file(ev, o->file);
  int rc = ev_run(ev, o->file, text);
  free(text);
  if (rc && d->msg) fputs(d->msg, stderr);
  return rc;
}

// The train statement's programs, handed over (the others are the session's).
static void free_handed(Build *b) {
  prog_free(b->step.pr);
  prog_free(b->grad.pr);
  prog_free(b->update.pr);
}

static int build_into(const BuildOpts *o, Ev *ev, Diag *d, const char *dir, Build *b) {
  char err[8192], name[256], path[4200];
  base_name(o->lib ? o->out : o->file, name, sizeof name);
  if (o->lib && !strncmp(name, "lib", 3) && name[3]) memmove(name, name + 3, strlen(name + 3) + 1);
  if (run_program(ev, o, d)) return -1;
  const char *out = o->output;
  if (!out) out = ev_lookup(ev, "logits") ? "logits" : "output";
  if (record_predict(ev, b, out, err, sizeof err)) {
    if (o->output || b->step.pr || b->eval.pr) { fprintf(stderr, "kiln build: %s\n", err); return -1; }
    fprintf(stderr, "kiln build: %s, and no train or evaluate statement: nothing to build\n", err);
    return -1;
  }
  snprintf(path, sizeof path, "%s/init.safetensors", dir);
  if (save_init(ev, path, err, sizeof err)) { fprintf(stderr, "kiln build: %s\n", err); return -1; }
  if (o->weights) {
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    if (check_weights(ev, o->weights, err, sizeof err) || copy_file(o->weights, path)) {
      fprintf(stderr, "kiln build: --embed-weights %s\n", err[0] ? err : o->weights);
      return -1;
    }
  }
  BuildCuda bc = {0};
  if (build_cuda(b, o, dir, &bc, err, sizeof err)) {
    fprintf(stderr, "kiln build: %s\n", err);
    for (int i = 0; i < NGRAPHS; i++) if (bc.have[i]) cg_cuda_free(&bc.cs[i]);
    return -1;
  }
  snprintf(path, sizeof path, "%s/model.c", dir);
  if (write_model_c(path, ev, b, o, name, dir, &bc)) { fprintf(stderr, "kiln build: cannot write %s\n", path); return -1; }
  if (o->lib) {
    snprintf(path, sizeof path, "%s/api.c", dir);
    char hdr[4200];
    snprintf(hdr, sizeof hdr, "%s/%s.h", dir, name);
    if (write_api_c(path, name, api_shape(b)) || write_header(hdr, name, o->file, api_shape(b))) { fprintf(stderr, "kiln build: cannot write %s\n", path); return -1; }
  }
  char objs[16384];
  int rc = build_objects(b, o, &bc, dir, objs, sizeof objs, err, sizeof err);
  for (int i = 0; i < NGRAPHS; i++) if (bc.have[i]) cg_cuda_free(&bc.cs[i]);
  if (!rc) rc = o->lib ? link_lib(o, name, dir, objs, api_shape(b), err, sizeof err) : link_exe(o, dir, objs, err, sizeof err);
  if (rc) fprintf(stderr, "kiln build: %s\n", err);
  return rc;
}

static int build(const BuildOpts *o, Ev *ev, Diag *d, const char *dir) {
  Build b = {0};
  b.split = o->narchs > 0;
  ev->build = &b;
  int rc = build_into(o, ev, d, dir, &b);
  free_handed(&b);
  return rc;
}

int build_main(int argc, char **argv) {
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(usage, stdout); return 0; }
  BuildOpts o = {0};
  if (parse(argc, argv, &o)) return 2;
  char dir[4096];
  if (o.keep) {
    if (mkdir(o.keep, 0777) && errno != EEXIST) { fprintf(stderr, "kiln build: cannot make %s: %s\n", o.keep, strerror(errno)); return 1; }
    if (!realpath(o.keep, dir)) { fprintf(stderr, "kiln build: %s: %s\n", o.keep, strerror(errno)); return 1; }
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/kiln-build-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { fprintf(stderr, "kiln build: cannot make a temporary directory: %s\n", strerror(errno)); return 1; }
  }
  Diag d;
  diag_init(&d);
  FILE *null = fopen("/dev/null", "w");
  Ev *ev = ev_new(null ? null : stdout, &d);   // print statements are not the build's output
  ev->seed = o.seed;
  ev->topts.seed_set = o.seed_set;
  ev->topts.seed = o.seed;
  char err[4096];
  int rc = ev_start(ev, 0, err, sizeof err);
  if (rc) fprintf(stderr, "kiln build: %s\n", err);
  if (!rc) rc = build(&o, ev, &d, dir);
  ev_free(ev);
  diag_free(&d);
  if (null) fclose(null);
  if (!o.keep) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "kiln build: could not remove %s\n", dir);
  }
  if (!rc) fprintf(stderr, "kiln build: wrote %s%s\n", o.out, o.lib ? ".a, .so and a header" : "");
  return rc ? 1 : 0;
}
