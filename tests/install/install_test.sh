#!/usr/bin/env bash
# install_test.sh BUILD SOURCE CMAKE GENERATOR MAKE_PROGRAM CC CXX
#
# What a user of the C++ API does with ZeroEngine, checked end to end:
#   1. cmake --install BUILD --prefix TMP/prefix: the programs, the headers
#      under include/zeroengine, the archives, the CMake package, zeroengine.pc;
#      the installed headers name no project header that is not installed, and
#      the private ones (*_impl.h, *.cuh) are not there;
#   2. examples/ configured as a separate project with find_package(ZeroEngine)
#      against the prefix, built from the installed headers and archives, run;
#   3. the same against the build tree (-DZeroEngine_DIR=BUILD);
#   4. examples/train_gpt.cc compiled and linked with
#      `pkg-config --cflags --libs zeroengine`, run; every installed header
#      compiles with the .pc's flags;
#   5. with CUDA: tests/install/cuda_consumer (ZeroEngine::cuda: the CUDA
#      backend and the NCCL communicator) built against the prefix and run
#      (it creates the backend: the device, or the backend's error without one).
set -euo pipefail

build=$1 src=$2 cmake=$3 generator=$4 make_program=$5 cc=$6 cxx=$7
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ze-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; fail "install"; }

for f in bin/zero-train bin/zero-ckpt bin/zero-data bin/zero-estimate \
         lib/libze_engine.a lib/libze_core.a \
         lib/cmake/ZeroEngine/ZeroEngineConfig.cmake \
         lib/cmake/ZeroEngine/ZeroEngineConfigVersion.cmake \
         lib/cmake/ZeroEngine/ZeroEngineTargets.cmake \
         lib/pkgconfig/zeroengine.pc \
         include/zeroengine/runtime/engine/engine.h \
         include/zeroengine/graph/gpt.h \
         include/zeroengine/core/tensor.h; do
  [[ -e $prefix/$f ]] || fail "$prefix/$f was not installed"
done
for p in "$prefix"/bin/zero-*; do
  [[ -x $p ]] || fail "$p is not executable"
  if ldd "$p" | grep -q 'not found'; then
    ldd "$p" | grep 'not found' >&2
    fail "installed $p does not find its shared libraries"
  fi
done

step "installed headers: closed under #include, nothing private"
incroot=$prefix/include/zeroengine
mapfile -t headers < <(cd "$incroot" && find . -type f | sed 's|^\./||' | sort)
(( ${#headers[@]} > 0 )) || fail "no headers under $incroot"
echo "   ${#headers[@]} headers"
for h in "${headers[@]}"; do
  case $h in
    *_impl.h|*.cuh) fail "private header $h is installed" ;;
    *.h) ;;
    *) fail "$h under include/zeroengine is not a header" ;;
  esac
  while read -r inc; do
    if [[ -f $src/$inc && ! -f $incroot/$inc ]]; then
      fail "installed $h includes \"$inc\", a project header that is not installed"
    fi
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$incroot/$h")
done

# $1: build dir, rest: extra cmake arguments. Configures and builds examples/
# as its own project and runs train_gpt for 10 steps.
build_example() {
  local dir=$1; shift
  "$cmake" -S "$src/examples" -B "$dir" -G "$generator" -DCMAKE_MAKE_PROGRAM="$make_program" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "$@" > "$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; fail "configuring examples/ ($*)"; }
  "$cmake" --build "$dir" -j 2 > "$dir.build.log" 2>&1 \
    || { cat "$dir.build.log"; fail "building examples/ ($*)"; }
  run_example "$dir/train_gpt"
}

run_example() {
  local out
  # It prints step 1 and every 10th step.
  out=$("$1" /usr/share/common-licenses 10 2>&1) || { echo "$out"; fail "$1 exited non-zero"; }
  echo "$out" | sed 's/^/   /'
  grep -Eq '^step +10 +loss [0-9]+\.[0-9]+' <<< "$out" || fail "$1 did not report step 10's loss"
}

step "examples/ against the install prefix (find_package, CMAKE_PREFIX_PATH)"
ex=$tmp/example-installed
build_example "$ex" -DCMAKE_PREFIX_PATH="$prefix"
grep -q "^ZeroEngine_DIR:PATH=$prefix/lib/cmake/ZeroEngine$" "$ex/CMakeCache.txt" \
  || fail "examples/ did not find the package in $prefix: $(grep ^ZeroEngine_DIR "$ex/CMakeCache.txt")"
grep -q -- "$prefix/include/zeroengine" "$ex/build.ninja" "$ex/Makefile" "$ex"/CMakeFiles/train_gpt.dir/flags.make 2>/dev/null \
  || fail "examples/ was not compiled against $prefix/include/zeroengine"
if grep -Eq -- "-(I|isystem) ?$src( |/? )" "$ex/build.ninja" 2>/dev/null; then
  fail "examples/ built against the install still has the source tree $src on its include path"
fi
grep -q -- "$prefix/lib/libze_engine.a" "$ex/build.ninja" "$ex"/CMakeFiles/train_gpt.dir/link.txt 2>/dev/null \
  || fail "examples/ did not link $prefix/lib/libze_engine.a"

step "examples/ against the build tree (ZeroEngine_DIR=$build)"
build_example "$tmp/example-build-tree" -DZeroEngine_DIR="$build"

step "examples/train_gpt.cc through pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
pkg-config --exists --print-errors zeroengine || fail "pkg-config cannot resolve zeroengine.pc"
read -r -a pc_cflags <<< "$(pkg-config --cflags zeroengine)"
read -r -a pc_libs <<< "$(pkg-config --libs zeroengine)"
"$cxx" -std=c++20 -O1 "${pc_cflags[@]}" "$src/examples/train_gpt.cc" -o "$tmp/train_gpt_pc" "${pc_libs[@]}" \
  || fail "train_gpt.cc does not build with pkg-config --cflags --libs zeroengine"
run_example "$tmp/train_gpt_pc"

step "every installed header compiles with the .pc's flags"
module=zeroengine
if [[ -f $prefix/lib/pkgconfig/zeroengine-cuda.pc ]]; then
  module=zeroengine-cuda
fi
read -r -a hdr_cflags <<< "$(pkg-config --cflags $module)"
for h in "${headers[@]}"; do echo "#include \"$h\""; done > "$tmp/all_headers.cc"
"$cxx" -std=c++20 -fsyntax-only "${hdr_cflags[@]}" "$tmp/all_headers.cc" \
  || fail "the installed headers do not compile with pkg-config --cflags $module"

if grep -q "set(ZeroEngine_HAS_CUDA ON)" "$prefix/lib/cmake/ZeroEngine/ZeroEngineConfig.cmake"; then
  step "ZeroEngine::cuda from the install prefix: a program linking the CUDA backend and NCCL"
  grep -q "libnccl" "$prefix"/lib/cmake/ZeroEngine/ZeroEngineTargets*.cmake \
    && fail "the installed targets name this machine's NCCL library instead of finding it"
  cu=$tmp/cuda-consumer
  "$cmake" -S "$src/tests/install/cuda_consumer" -B "$cu" -G "$generator" -DCMAKE_MAKE_PROGRAM="$make_program" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_PREFIX_PATH="$prefix" > "$cu.configure.log" 2>&1 \
    || { cat "$cu.configure.log"; fail "configuring the CUDA consumer"; }
  "$cmake" --build "$cu" -j 2 > "$cu.build.log" 2>&1 || { cat "$cu.build.log"; fail "building the CUDA consumer"; }
  out=$("$cu/cuda_consumer" 2>&1) || { echo "$out"; fail "the CUDA consumer exited non-zero"; }
  echo "   $out"
  grep -Eq "^(cuda backend|no cuda backend): " <<< "$out" || fail "the CUDA consumer printed: $out"
  step "the same program through pkg-config zeroengine-cuda"
  read -r -a cu_cflags <<< "$(pkg-config --cflags zeroengine-cuda)"
  read -r -a cu_libs <<< "$(pkg-config --libs zeroengine-cuda)"
  nccl_def=()
  grep -q "set(ZeroEngine_HAS_NCCL ON)" "$prefix/lib/cmake/ZeroEngine/ZeroEngineConfig.cmake" && nccl_def=(-DCONSUMER_HAS_NCCL=1)
  "$cxx" -std=c++20 -O1 "${nccl_def[@]}" "${cu_cflags[@]}" "$src/tests/install/cuda_consumer/main.cc" \
      -o "$tmp/cuda_consumer_pc" "${cu_libs[@]}" || fail "the CUDA consumer does not link with pkg-config zeroengine-cuda"
  out=$("$tmp/cuda_consumer_pc" 2>&1) || { echo "$out"; fail "the pkg-config CUDA consumer exited non-zero"; }
  grep -Eq "^(cuda backend|no cuda backend): " <<< "$out" || fail "the pkg-config CUDA consumer printed: $out"
fi

echo "PASS: install, find_package (prefix and build tree), pkg-config, ZeroEngine::cuda"
