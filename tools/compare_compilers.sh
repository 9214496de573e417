#!/usr/bin/env bash
# Compiles every model in tools/models and tools/lm (plain, --no-optimize, --strip-debug,
# --weights-out, --compress, bounded) and every model of ONNX's test data with two vm-compile
# binaries, and compares the files byte for byte. For refactors that must not change output.
#
#   bash tools/compare_compilers.sh OLD/vm-compile NEW/vm-compile
set -u
OLD=$1 NEW=$2
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
compile_all() {  # compile_all VM_COMPILE OUT
  local c=$1 o=$2
  mkdir -p "$o"
  for m in tools/lm/charlm.onnx tools/models/*/*.onnx; do
    local n
    n=$(echo "$m" | tr '/' '_')
    "$c" "$m" -o "$o/$n.dvm" >/dev/null 2>&1
    "$c" "$m" -o "$o/$n.noopt.dvm" --no-optimize >/dev/null 2>&1
    "$c" "$m" -o "$o/$n.strip.dvm" --strip-debug >/dev/null 2>&1
    "$c" "$m" -o "$o/$n.w.dvm" --weights-out "$o/$n.w.dvw" >/dev/null 2>&1
    "$c" "$m" -o "$o/$n.z.dvm" --compress >/dev/null 2>&1
    "$c" "$m" -o "$o/$n.b.dvm" --bound batch=2 --bound prompt_len=8 --bound max_new_tokens=56 >/dev/null 2>&1
  done
  for d in /usr/share/libonnx-testdata/data/*/*/; do
    [ -f "$d/model.onnx" ] || continue
    "$c" "$d/model.onnx" -o "$o/$(basename "$(dirname "$d")")_$(basename "$d").dvm" >/dev/null 2>&1
  done
}
compile_all "$OLD" "$work/old"
compile_all "$NEW" "$work/new"
echo "old: $(ls "$work/old" | wc -l) files, new: $(ls "$work/new" | wc -l) files"
if diff -rq "$work/old" "$work/new"; then
  echo "identical"
else
  echo "DIFFERENT"
  exit 1
fi
