#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then checks what a user of the package gets:
#  1. the CMake package exports dynvm::vm, dynvm::compiler, dynvm::onnx_importer (when built
#     with ONNX) and the dynvm::internal_* static libraries they are made of, nothing else: no
#     cli, bench, testing or tools target;
#  2. every installed header compiles on its own (a translation unit that includes only it),
#     against the installed include directories alone; none reaches a flatbuffers header, a
#     generated header (*_generated.h) or an internal one (*_impl.h, *_testing.h), and each
#     either says "Public API." at its top or is included by one that does;
#  3. the consumer project (tests/install_consumer) builds against it with find_package(dynvm)
#     and runs: it compiles an ONNX model through dynvm::compiler and runs it through dynvm::vm.
#
#   tests/install_test.sh BUILD_DIR     (ctest's install_test)
set -euo pipefail
if [[ $# -ne 1 || ! -f "$1/CMakeCache.txt" ]]; then
  echo "usage: tests/install_test.sh BUILD_DIR (a configured and built build tree)" >&2
  exit 2
fi
build_dir=$1
source_dir=$(cd "$(dirname "$0")/.." && pwd)
jobs=${DYNVM_JOBS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
prefix=$work/prefix
inc=$prefix/include

# 1. The exported targets.
targets_file=$(find "$prefix" -name dynvmTargets.cmake | head -1)
[[ -n "$targets_file" ]] || fail "no dynvmTargets.cmake installed"
exported=$(sed -n 's/^add_library(\(dynvm::[A-Za-z0-9_]*\) .*/\1/p' "$targets_file" | sort)
echo "install_test: exported targets: $(echo $exported)"
for t in $exported; do
  case "$t" in
    dynvm::vm | dynvm::compiler | dynvm::onnx_importer | dynvm::internal_*) ;;
    *) fail "the package exports $t: only dynvm::vm, dynvm::compiler, dynvm::onnx_importer and dynvm::internal_* may be" ;;
  esac
  case "$t" in
    *cli* | *bench* | *testing* | *npy* | *fixture*) fail "the package exports $t" ;;
  esac
done
for t in dynvm::vm dynvm::compiler; do
  grep -qx "$t" <<< "$exported" || fail "the package does not export $t"
done

# 2. Every installed header, on its own.
[[ -d "$inc/dynvm" ]] || fail "no headers installed under $inc/dynvm"
mapfile -t headers < <(cd "$inc" && find dynvm -type f | sort)
echo "install_test: ${#headers[@]} installed headers"
for h in "${headers[@]}"; do
  case "$h" in
    *.h) ;;
    *) fail "$h is installed under include/ and is not a header" ;;
  esac
  if [[ "$h" =~ (_impl|_testing|_generated)\.h$ ]]; then fail "internal or generated header $h is installed"; fi
done
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
cxx=${cxx:-c++}
export cxx inc work
# Compiles one header alone; the compiler's -H list of the files it opened goes to a log.
compile_one() {
  local h=$1 log
  log="$work/headers/$(tr / _ <<< "$h").log"
  if ! printf '#include "%s"\n' "$h" |
      "$cxx" -std=c++20 -fsyntax-only -H -I"$inc" -I"$inc/dynvm" -x c++ - 2> "$log"; then
    echo "install_test: $h does not compile on its own against the installed headers:" >&2
    grep -v '^\.' "$log" >&2
    return 1
  fi
}
export -f compile_one
mkdir -p "$work/headers"
printf '%s\n' "${headers[@]}" | xargs -P "$jobs" -I{} bash -c 'compile_one "$1"' _ {} ||
  fail "a header does not compile on its own (above)"
reached=$(cat "$work"/headers/*.log | sed -n 's/^\.\+ //p' | sort -u)
if grep -E 'flatbuffers|_generated\.h|_impl\.h|_testing\.h' <<< "$reached"; then
  fail "the installed headers reach the files above"
fi
if grep -F "$source_dir/" <<< "$reached" | grep -v "^$inc/"; then
  fail "the installed headers reach the source tree (above)"
fi
# Each installed header is public API, or is included by an installed header (which needs it).
for h in "${headers[@]}"; do
  head -12 "$inc/$h" | grep -q 'Public API\.' && continue
  rel=${h#dynvm/}
  grep -lqs "#include \"$rel\"" "${headers[@]/#/$inc/}" ||
    fail "$h is installed but neither says 'Public API.' nor is included by an installed header"
done

# 3. The consumer project.
cmake -S "$source_dir/tests/install_consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" -j"$jobs" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/consumer"
