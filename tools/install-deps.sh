#!/usr/bin/env bash
# Installs the Debian 12 (bookworm) packages dynvm needs, and only those that are missing.
#
#   tools/install-deps.sh [PROFILE]
#
#   build (default)  compilers, build tools (ninja, ccache) and the libraries CMakeLists.txt finds
#   test             build + what the tests import or run: ONNX's conformance test data
#                    (/usr/share/libonnx-testdata/data), pytest and python3-onnx (the Python
#                    package's tests), PyTorch and torchvision (the export tests), nodejs and
#                    npm (the tests against ONNX Runtime fetch onnxruntime-node with npm into
#                    ~/.cache/dynvm/ort); tools/ci/check_test_imports.py checks the Python side
#   train            build + python3/torch/onnx/numpy and the text corpora tools/ trains on
#   bench            test  + OpenBLAS (the TorchScript side of the comparisons)
#
# Idempotent: asks dpkg what is installed (one dpkg-query call), and runs apt-get update
# (once) and apt-get install only when something is missing. Needs root, or sudo.
set -euo pipefail

readonly build_pkgs=(
  # toolchain
  g++ make cmake clang
  ninja-build          # tools/test.sh's generator: schedules both cores across targets
  ccache               # tools/test.sh's compiler launcher, cache outside the clone (~/.cache/ccache)
  lld                  # LLVM's linker: links the ~110 executables of a build about 4x faster (cmake/DynvmHelpers.cmake)
  clang-format         # the format check (tools/test.sh's first stage after install)
  libclang-rt-14-dev   # sanitizer runtimes and libFuzzer for clang-14
  llvm-14              # llvm-symbolizer-14 (and /usr/lib/llvm-14/bin/llvm-symbolizer)
  llvm                 # /usr/bin/llvm-symbolizer, the name the sanitizer runtimes look up in PATH
  git ca-certificates
  # libraries (find_package in CMakeLists.txt)
  libabsl-dev
  libflatbuffers-dev flatbuffers-compiler
  libdnnl-dev ocl-icd-opencl-dev   # dnnl-config.cmake does find_package(OpenCL REQUIRED)
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libprotobuf-dev protobuf-compiler libonnx-dev
  zlib1g-dev libzstd-dev
  libkissfft-dev       # FFT for DFT/STFT (BSD-3-Clause; kissfft-float, found by pkg-config)
  # the Python package (python/, docs/python.md): built when pybind11 and the headers are found
  pybind11-dev python3-dev python3-numpy
  # dynvm-server (tools/server, docs/serving.md): built when these are found
  libgrpc++-dev protobuf-compiler-grpc libcpp-httplib-dev nlohmann-json3-dev prometheus-cpp-dev
)
# Every package a test imports or runs (ctest's tests, python/tests, the *.py tests ctest runs with
# /usr/bin/python3), beyond the build's: python3-onnx for python/tests/test_arrays.py (onnx's
# numpy_helper); PyTorch and torchvision for the export tests (which skip, exit 77, where they are
# missing: a skip, never a pass); nodejs and npm for the tests that compare with ONNX Runtime
# (they fetch onnxruntime-node once into a cache, and skip when it cannot be had); python3-grpcio
# for the server's tests (tools/server/server_test.py). With all of
# them a bare Debian 12 runs every test (tools/ci/bare-debian-check.sh).
readonly test_pkgs=(libonnx-testdata python3-pytest python3-onnx python3-torch python3-torchvision
  nodejs npm
  python3-grpcio python3-protobuf python3-yaml)  # tools/server's tests: an independent gRPC client (stubs made at test time)
readonly train_pkgs=(python3 python3-torch python3-onnx python3-numpy libopenblas0-pthread bible-kjv bible-kjv-text fortunes)
readonly bench_pkgs=(libopenblas0-pthread)

usage() { sed -n '2,13s/^# \{0,1\}//p' "$0"; }

profile="${1:-build}"
case "$profile" in
  build) wanted=("${build_pkgs[@]}") ;;
  test)  wanted=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  train) wanted=("${build_pkgs[@]}" "${train_pkgs[@]}") ;;
  bench) wanted=("${build_pkgs[@]}" "${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
  -h|--help) usage; exit 0 ;;
  *) echo "install-deps.sh: unknown profile '$profile' (build, test, train or bench)" >&2; exit 2 ;;
esac
if [[ $# -gt 1 ]]; then
  echo "install-deps.sh: one profile at most" >&2
  exit 2
fi

# Everything dpkg knows, in one call. A package counts as present when it is installed
# ("install ok installed") or when an installed package Provides it: NodeSource's nodejs,
# for one, provides and conflicts with npm, and installing Debian's npm would replace it.
declare -A present=()
while IFS=$'\t' read -r pkg status provides; do
  [[ "$status" == "install ok installed" ]] || continue
  present["$pkg"]=1
  if [[ -n "$provides" ]]; then
    IFS=',' read -ra provided <<<"$provides"
    for p in "${provided[@]}"; do
      p="${p#"${p%%[![:space:]]*}"}"   # trim leading blanks
      p="${p%% *}"                      # drop " (= version)"
      [[ -n "$p" ]] && present["$p"]=1
    done
  fi
done < <(dpkg-query -W -f='${Package}\t${Status}\t${Provides}\n' 2>/dev/null || true)

missing=()
declare -A seen=()
for pkg in "${wanted[@]}"; do
  [[ -n "${seen[$pkg]:-}" ]] && continue
  seen["$pkg"]=1
  [[ -n "${present[$pkg]:-}" ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps.sh ($profile): nothing missing (${#seen[@]} packages present)"
  exit 0
fi

echo "install-deps.sh ($profile): installing ${#missing[@]} missing package(s): ${missing[*]}"

sudo=()
if [[ $EUID -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps.sh: not root and no sudo; run as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
