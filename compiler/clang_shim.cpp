// clang_shim.cpp - Clang 14 as a library: C source in memory -> ELF object in memory.
//
// The clang driver turns driver-style args into a cc1 command line (system include
// paths, -march=native's cpu and features, -vectorize-loops at -O2+), exactly as the
// clang binary would; we then run that cc1 job in-process with the source remapped
// from memory and the object written to a string. No file is touched.
#include "clang_shim.h"

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/Basic/Version.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Driver/Compilation.h>
#include <clang/Driver/Driver.h>
#include <clang/Driver/Job.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Lex/PreprocessorOptions.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#ifndef KILN_LLVM_BINDIR
#define KILN_LLVM_BINDIR "/usr/lib/llvm-14/bin"
#endif

using namespace clang;

static char *dup(const std::string &s) {
  char *p = (char *)malloc(s.size() + 1);
  if (p) memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// Driver-style args -> the cc1 args of the single compile job; false on a bad command line.
static bool cc1_args(const char *const *args, int nargs, DiagnosticsEngine &diags,
                     std::vector<std::string> &out) {
  std::vector<const char *> argv = {"clang", "-c", "-x", "c"};
  argv.insert(argv.end(), args, args + nargs);
  argv.insert(argv.end(), {"kernel.c", "-o", "kernel.o"});
  // The executable's path only locates the default resource dir; the caller passes
  // -resource-dir when it knows better.
  driver::Driver drv(KILN_LLVM_BINDIR "/clang", llvm::sys::getProcessTriple(), diags);
  drv.setCheckInputsExist(false);  // kernel.c lives in memory
  std::unique_ptr<driver::Compilation> comp(drv.BuildCompilation(argv));
  if (!comp || diags.hasErrorOccurred()) return false;
  const driver::JobList &jobs = comp->getJobs();
  if (jobs.size() != 1 || !llvm::isa<driver::Command>(*jobs.begin())) {
    return false;  // cannot happen with -c and one input
  }
  for (const char *a : llvm::cast<driver::Command>(*jobs.begin()).getArguments())
    if (strcmp(a, "-cc1")) out.push_back(a);
  return true;
}

extern "C" int kiln_clang_compile(const char *const *args, int nargs, const char *src,
                                  char **obj, size_t *objlen, char **diag) {
  *obj = nullptr, *objlen = 0, *diag = nullptr;
  if (kiln_llvm_init()) {
    *diag = dup("error: LLVM has no target for this host\n");
    return -1;
  }

  std::string text;
  llvm::raw_string_ostream os(text);
  IntrusiveRefCntPtr<DiagnosticOptions> dopts(new DiagnosticOptions());
  dopts->ShowColors = false;
  DiagnosticsEngine diags(new DiagnosticIDs(), dopts, new TextDiagnosticPrinter(os, &*dopts));

  bool ok = false;
  llvm::SmallVector<char, 0> bytes;
  std::vector<std::string> cc1;
  if (cc1_args(args, nargs, diags, cc1)) {
    std::vector<const char *> argv;
    for (const std::string &s : cc1) argv.push_back(s.c_str());
    auto inv = std::make_shared<CompilerInvocation>();
    if (CompilerInvocation::CreateFromArgs(*inv, argv, diags)) {
      inv->getFrontendOpts().DisableFree = false;  // the driver says leak; we live on
      inv->getDiagnosticOpts().ShowColors = false;
      inv->getPreprocessorOpts().addRemappedFile(
          "kernel.c", llvm::MemoryBuffer::getMemBufferCopy(src, "kernel.c").release());
      CompilerInstance ci;
      ci.setInvocation(inv);
      ci.createDiagnostics(new TextDiagnosticPrinter(os, &ci.getDiagnosticOpts()), true);
      ci.setVerboseOutputStream(os);  // "1 error generated." goes with the rest
      // CodeGenAction writes to this stream instead of opening kernel.o.
      ci.setOutputStream(std::make_unique<llvm::raw_svector_ostream>(bytes));
      EmitObjAction act;
      ok = ci.ExecuteAction(act) && !ci.getDiagnostics().hasErrorOccurred();
    }
  }
  os.flush();
  if (!text.empty()) *diag = dup(text);
  if (!ok) return -1;
  if (!(*obj = (char *)malloc(bytes.size() ? bytes.size() : 1))) return -1;
  memcpy(*obj, bytes.data(), bytes.size());
  *objlen = bytes.size();
  return 0;
}

extern "C" int kiln_llvm_init(void) {
  // A function-local static: initialized once, thread-safe (C++11).
  static const bool ok = !llvm::InitializeNativeTarget() &&
                         !llvm::InitializeNativeTargetAsmPrinter() &&
                         !llvm::InitializeNativeTargetAsmParser();
  return ok ? 0 : -1;
}

extern "C" void kiln_clang_version(char *buf, size_t n) {
  snprintf(buf, n, "%s", getClangFullVersion().c_str());
}
