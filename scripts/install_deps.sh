#!/usr/bin/env bash
# Installs what decodebench needs to build and test, from Debian/Ubuntu packages.
# Idempotent and quiet when everything is present; runs apt-get as root (or through sudo
# when not root). It never installs CUDA where nvcc already exists; where nvcc is missing
# it installs the distribution's CUDA toolkit only if DECODEBENCH_INSTALL_CUDA=1, and
# otherwise says that the build will be CPU-only.
set -euo pipefail

missing=()
need_file() { [ -e "$1" ] || missing+=("$2"); }
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_python_module() { /usr/bin/python3 -c "import $1" >/dev/null 2>&1 || missing+=("$2"); }

need_cmd cmake cmake
need_cmd g++ g++
need_cmd make make
need_cmd git git
need_cmd clang-format clang-format  # scripts/check_format.sh (the format_check test)
need_cmd python3 python3
need_file /usr/include/CLI/CLI.hpp libcli11-dev
need_file /usr/include/nlohmann/json.hpp nlohmann-json3-dev
need_file /usr/include/fmt/format.h libfmt-dev
need_file /usr/include/gtest/gtest.h libgtest-dev
need_file /usr/include/re2/re2.h libre2-dev  # target_modules patterns (src/io/adapter.cpp)
need_cmd pkg-config pkg-config                 # finds RE2
# The fuzz targets (scripts/fuzz.sh, part of scripts/test.sh): clang and its libFuzzer
# runtime, which Debian 12 ships in libclang-rt-dev (Ubuntu 22.04: libclang-common-14-dev).
need_cmd clang++ clang
fuzzer_runtime_found() {
  command -v clang++ >/dev/null 2>&1 &&
    [ -e "$(clang++ -print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-$(uname -m).a" ]
}
fuzzer_runtime_found || missing+=("libclang-rt-dev|libclang-common-14-dev")
need_python_module matplotlib python3-matplotlib  # scripts/plot.py

nvcc_found() { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }
if ! nvcc_found && [ "${DECODEBENCH_INSTALL_CUDA:-0}" = 1 ]; then
  missing+=(nvidia-cuda-toolkit)
fi

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then apt=(apt-get); else apt=(sudo apt-get); fi
  echo "install_deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${apt[@]}" update -qq >/dev/null
  # "a|b": the first of the names that this distribution has.
  packages=()
  for m in "${missing[@]}"; do
    IFS='|' read -r -a names <<<"$m"
    pick=${names[0]}
    for n in "${names[@]}"; do
      if apt-cache show "$n" >/dev/null 2>&1; then pick=$n; break; fi
    done
    packages+=("$pick")
  done
  "${apt[@]}" install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

if ! nvcc_found; then
  echo "install_deps: no CUDA compiler (nvcc) here: decodebench will build without its CUDA backend" \
       "and run with --backend cpu (set DECODEBENCH_INSTALL_CUDA=1 to install the distribution's toolkit)." >&2
fi
