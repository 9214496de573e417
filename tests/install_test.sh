#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then
#  1. compiles tests/install_consumer/public_headers.cc against the installed include directory
#     alone (plus the system's), and checks that no flatbuffers or generated schema header and
#     no internal header is reachable from the public VM headers, nor installed;
#  2. builds and runs the consumer project against it with find_package(dynvm): it compiles an
#     ONNX model through dynvm::compiler and runs it through dynvm::vm, checking the outputs.
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
inc="$work/prefix/include"

for internal in vm/executable_impl.h vm/vm_impl.h vm/vm_testing.h vm/trace_testing.h; do
  if [[ -e "$inc/dynvm/$internal" ]]; then
    echo "install_test: internal header $internal is installed"; exit 1
  fi
done
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
cxx=${cxx:-c++}
consumer="$source_dir/tests/install_consumer/public_headers.cc"
"$cxx" -std=c++20 -fsyntax-only -I"$inc" -I"$inc/dynvm" "$consumer"
deps=$("$cxx" -std=c++20 -M -I"$inc" -I"$inc/dynvm" "$consumer")
if grep -E 'flatbuffers|_generated\.h|_impl\.h|_testing\.h' <<< "$deps"; then
  echo "install_test: the public VM headers reach the headers above"; exit 1
fi
if ! grep -q "$inc/dynvm/vm/virtual_machine.h" <<< "$deps"; then
  echo "install_test: public_headers.cc did not include the installed virtual_machine.h"; exit 1
fi

cmake -S "$source_dir/tests/install_consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" -j2 > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/consumer"
