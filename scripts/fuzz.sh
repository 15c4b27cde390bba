#!/usr/bin/env bash
# Fuzzes with clang's libFuzzer for SECONDS (default 600), the tree built with
# AddressSanitizer and UBSan into build-fuzz. Two targets:
#   frontend (default): the front end, autodiff, the passes and the C emitter
#     (tests/fuzz_frontend.c). The corpus starts from the examples, the test
#     programs and tests/fuzz/. KILN_FUZZ_RUN=1 also runs what it compiles
#     (slower; pass -timeout=300).
#   files: the runtime's file readers, .npy, .npz, CSV, IDX and safetensors
#     (tests/fuzz_files.c), from small files of each kind.
# Inputs that crash or hang land in build-fuzz/crashes/ (replay one:
# build-fuzz/fuzz_TARGET FILE).
#   scripts/fuzz.sh [files|frontend] [SECONDS] [libFuzzer flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
target=frontend
case "${1:-}" in files|frontend) target=$1; shift ;; esac
secs=${1:-600}; shift || true
CC=clang-14 CXX=clang++-14 scripts/build.sh build-fuzz -Db_sanitize=address,undefined -Db_lundef=false \
  -Dc_args=-fsanitize=fuzzer-no-link -Dbuildtype=debugoptimized
libs=$(PKG_CONFIG_PATH=build-fuzz/meson-uninstalled pkg-config --static --libs kiln)
clang-14 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -I. -c tests/fuzz_$target.c -o build-fuzz/fuzz_$target.o
clang++-14 -fsanitize=fuzzer,address,undefined build-fuzz/fuzz_$target.o -Lbuild-fuzz $libs -rdynamic \
  -o build-fuzz/fuzz_$target   # clang++: the C++ JIT shim's UBSan runtime
export ASAN_OPTIONS=allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
mkdir -p build-fuzz/crashes build-fuzz/work
if [ "$target" = files ]; then
  # Seeds: a byte naming the reader (0 npy, 1 npz, 2 csv, 3 idx, 4 safetensors), then a file.
  mkdir -p build-fuzz/corpus-files
  .venv/bin/python - build-fuzz/corpus-files <<'PY'
import io, os, struct, sys, numpy as np
out = sys.argv[1]
def put(name, kind, data):
    open(os.path.join(out, name), "wb").write(bytes([kind]) + data)
for i, a in enumerate([np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False]),
                       np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)), np.zeros((0, 2), ">f8")]):
    b = io.BytesIO(); np.save(b, a); put("npy%d" % i, 0, b.getvalue())
for i, f in enumerate([np.savez, np.savez_compressed]):
    b = io.BytesIO(); f(b, x=np.arange(4, dtype=np.float32), y=np.array([1, 2], np.uint8)); put("npz%d" % i, 1, b.getvalue())
put("csv0", 2, b'"a","b, c",y\n1.5, 2,0\r\n\n"3",4e1,1\n')
put("idx0", 3, struct.pack(">BBBBIII", 0, 0, 8, 3, 2, 2, 2) + bytes(range(8)))
hdr = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}}'
put("st0", 4, struct.pack("<Q", len(hdr)) + hdr + bytes(8))
PY
  cd build-fuzz/work
  exec ../fuzz_files -max_total_time="$secs" -timeout=30 -rss_limit_mb=6144 -max_len=65536 \
    -artifact_prefix=../crashes/ "$@" ../corpus-files
fi
mkdir -p build-fuzz/corpus
cp examples/*.kiln tests/lang/*.kiln tests/errors/*.kiln tests/fuzz/*.kiln build-fuzz/corpus/
# A dictionary of the language's words: every name in the examples, the
# library, the language tests and the reference.
grep -ohE '[A-Za-z_][A-Za-z_0-9]*' examples/*.kiln lib/*.kiln tests/lang/*.kiln docs/language.md |
  sort -u | sed 's/.*/"&"/' > build-fuzz/kiln.dict
# Saves and data paths resolve inside build-fuzz/work; the library from lib/.
cd build-fuzz/work
export KILN_LIB_DIR=$PWD/../../lib KILN_CACHE_DIR=$PWD/cache
exec ../fuzz_frontend -max_total_time="$secs" -timeout=30 -rss_limit_mb=6144 -max_len=4096 \
  -dict=../kiln.dict -artifact_prefix=../crashes/ "$@" ../corpus
