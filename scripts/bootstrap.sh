#!/usr/bin/env bash
# ZeroEngine set-up: installs the Debian packages it needs (only those that
# are missing), builds, then runs one of:
#   quickstart  the default training job (configs/quickstart.json)
#   test        the whole test suite (ctest)
#   build       nothing more
#   packages    print the Debian packages it installs and exit (what
#               scripts/check_build_packages.py checks the build against)
# Run as root on Debian 12 (or with sudo available). BUILD_DIR overrides ./build.
set -euo pipefail

mode=${1:-quickstart}
case "$mode" in quickstart|test|build|packages) ;; *) echo "usage: $0 quickstart|test|build|packages" >&2; exit 2;; esac

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}

packages=(build-essential cmake ninja-build pkg-config
          libdnnl-dev ocl-icd-opencl-dev  # Debian's oneDNN CMake config requires OpenCL; libdnnl-dev only recommends it
          libabsl-dev nlohmann-json3-dev libcli11-dev
          libopenmpi-dev openmpi-bin liburing-dev
          libpcre2-dev libicu-dev libsentencepiece-dev  # the tokenizers: split patterns, Unicode, tokenizer.model
          libgtest-dev libgmock-dev libbenchmark-dev
          python3 gnuplot-nox  # the benchmark scripts' tables and plot
          git)  # the revision --version and zero-report print (a source tarball builds without it: "unknown")
if [ "$mode" = packages ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "== installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

echo "== configuring and building in $build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build"
echo "== the programs are in $build/runtime; to call them by name: export PATH=\"$build/runtime:\$PATH\""

case "$mode" in
  quickstart)
    echo "== training configs/quickstart.json"
    cd "$root"
    exec "$build/runtime/zero-train" --config configs/quickstart.json
    ;;
  test)
    echo "== running the test suite"
    cd "$build"
    exec ctest --output-on-failure -j "$(nproc)"
    ;;
esac
