#!/usr/bin/env bash
# Packs what bench/gpu/check.sh --prebuilt runs, for a GPU machine that has
# the CUDA toolkit and driver but not this project's Debian packages (oneDNN,
# Abseil, Open MPI, ICU, ...): the programs, the CUDA tests with their ctest
# files, and every shared library they load that is neither the C runtime nor
# CUDA's own (libcudart, cuBLAS, NCCL come from the GPU machine's toolkit).
#
# Usage: bench/gpu/pack.sh BUILD_DIR OUT.tar.xz
#   BUILD_DIR  a build configured with -DZE_ENABLE_CUDA=ON
#              -DCMAKE_CUDA_ARCHITECTURES=90 and built with the targets
#              check.sh names (zero-train zero-data gpu_gemm_bench
#              tests/kernels/cuda/all)
# On the GPU machine, from the repository root (the ctest files name the
# absolute paths of the machine that built them: make the repository reachable
# there too), unpack and run:
#   tar xJf OUT.tar.xz        # BUILD_DIR's runnable parts and BUILD_DIR/packed-lib
#   LD_LIBRARY_PATH=BUILD_DIR/packed-lib:<the toolkit's lib dirs> bench/gpu/check.sh --prebuilt
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR OUT.tar.xz" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 1
out=$2
[ -x "$build/runtime/zero-train" ] || { echo "pack.sh: $build/runtime/zero-train is not built" >&2; exit 1; }

programs=("$build/runtime/zero-train" "$build/runtime/zero-data" "$build/bench/gpu/gpu_gemm_bench")
mapfile -t tests < <(find "$build/tests/kernels/cuda" -maxdepth 1 -type f -executable -name 'cuda_*_test')
[ ${#tests[@]} -gt 0 ] || { echo "pack.sh: no CUDA tests in $build/tests/kernels/cuda" >&2; exit 1; }

libdir=$build/packed-lib
rm -rf "$libdir"
mkdir -p "$libdir"
# The loader's resolution of every program, less the C runtime (the GPU
# machine's own is newer) and CUDA's libraries (the toolkit's there).
ldd "${programs[@]}" "${tests[@]}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/(libcudart|libcublas|libcublasLt|libnccl|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$libdir/"; done

# The ctest files of the CUDA tests (the test lists gtest_discover_tests wrote).
mapfile -t ctest_files < <(cd "$build" && find tests/kernels/cuda -maxdepth 1 \
  \( -name 'CTestTestfile.cmake' -o -name '*_include.cmake' -o -name '*_tests.cmake' \))
# The top-level CTestTestfile.cmake lists every subdirectory; the packed one
# only tests/kernels/cuda, so ctest -L cuda there runs what was packed.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
name=$(basename "$build")
mkdir -p "$stage/$name"
(cd "$build" && cp --parents runtime/zero-train runtime/zero-data bench/gpu/gpu_gemm_bench "$stage/$name/")
for t in "${tests[@]}"; do (cd "$build" && cp --parents "${t#"$build"/}" "$stage/$name/"); done
for f in "${ctest_files[@]}"; do (cd "$build" && cp --parents "$f" "$stage/$name/"); done
grep -v '^subdirs(' "$build/CTestTestfile.cmake" > "$stage/$name/CTestTestfile.cmake"
echo "subdirs(\"tests/kernels/cuda\")" >> "$stage/$name/CTestTestfile.cmake"
cp -r "$libdir" "$stage/$name/"
tar -C "$stage" -cJf "$out" "$name"
echo "pack.sh: $out ($(du -h "$out" | cut -f1)): ${#programs[@]} programs, ${#tests[@]} CUDA tests, $(ls "$libdir" | wc -l) libraries"
