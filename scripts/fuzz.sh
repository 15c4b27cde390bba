#!/usr/bin/env bash
# Fuzzes the front end, autodiff, the passes and the C emitter
# (tests/fuzz_frontend.c) with clang's libFuzzer for SECONDS (default 600), the
# tree built with AddressSanitizer and UBSan into build-fuzz. The corpus starts
# from the examples, the test programs and tests/fuzz/; inputs that crash or
# hang land in build-fuzz/crashes/ (replay one: build-fuzz/fuzz_frontend FILE).
# KILN_FUZZ_RUN=1 also runs what it compiles (slower; pass -timeout=300).
#   scripts/fuzz.sh [SECONDS] [libFuzzer flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}; shift || true
CC=clang-14 CXX=clang++-14 scripts/build.sh build-fuzz -Db_sanitize=address,undefined -Db_lundef=false \
  -Dc_args=-fsanitize=fuzzer-no-link -Dbuildtype=debugoptimized
libs=$(PKG_CONFIG_PATH=build-fuzz/meson-uninstalled pkg-config --static --libs kiln)
clang-14 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -I. -c tests/fuzz_frontend.c -o build-fuzz/fuzz_frontend.o
clang++-14 -fsanitize=fuzzer,address,undefined build-fuzz/fuzz_frontend.o -Lbuild-fuzz $libs -rdynamic \
  -o build-fuzz/fuzz_frontend   # clang++: the C++ JIT shim's UBSan runtime
mkdir -p build-fuzz/corpus build-fuzz/crashes build-fuzz/work
cp examples/*.kiln tests/lang/*.kiln tests/errors/*.kiln tests/fuzz/*.kiln build-fuzz/corpus/
# A dictionary of the language's words: every name in the examples, the
# library, the language tests and the reference.
grep -ohE '[A-Za-z_][A-Za-z_0-9]*' examples/*.kiln lib/*.kiln tests/lang/*.kiln docs/language.md |
  sort -u | sed 's/.*/"&"/' > build-fuzz/kiln.dict
# Saves and data paths resolve inside build-fuzz/work; the library from lib/.
cd build-fuzz/work
export KILN_LIB_DIR=$PWD/../../lib KILN_CACHE_DIR=$PWD/cache
export ASAN_OPTIONS=allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/../../tests/lsan.supp:print_suppressions=0
exec ../fuzz_frontend -max_total_time="$secs" -timeout=30 -rss_limit_mb=6144 -max_len=4096 \
  -dict=../kiln.dict -artifact_prefix=../crashes/ "$@" ../corpus
