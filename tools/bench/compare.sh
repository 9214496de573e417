#!/bin/bash
# Side-by-side greedy decode throughput of dynvm, ONNX Runtime and TorchScript
# (docs/benchmarks.md). From the repository root, after the README's setup:
#
#   bash tools/bench/compare.sh [compare.py flags: --threads 1,2 --rounds 5 --repeat 10 ...]
#
# Builds vm-compile and vm-decode-bench (Release, in $DYNVM_BUILD_DIR, default build/release),
# installs onnxruntime-node into build/bench/node_modules with npm (once: the version pinned in
# tools/bench/package.json; --ignore-scripts, the package ships its CPU binary), exports the
# models into build/bench/models with Debian's /usr/bin/python3 (torch, onnx) when missing,
# compiles them with vm-compile, then runs tools/bench/compare.py. JOBS sets the build's
# parallelism (default: all cores).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${DYNVM_BUILD_DIR:-$ROOT/build/release}
BENCH=$ROOT/build/bench
PY=/usr/bin/python3
cd "$ROOT"

for tool in node npm "$PY"; do
  command -v "$tool" > /dev/null || { echo "compare.sh: $tool is missing (docs/benchmarks.md)" >&2; exit 1; }
done
"$PY" -c 'import torch, onnx, numpy' 2> /dev/null ||
  { echo "compare.sh: $PY needs torch, onnx and numpy (python3-torch python3-onnx python3-numpy)" >&2; exit 1; }

echo "== build (vm-compile, vm-decode-bench) in $BUILD"
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
fi
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target vm-compile vm-decode-bench > /dev/null

mkdir -p "$BENCH"
want_ort=$(sed -n 's/.*"onnxruntime-node": "\(.*\)".*/\1/p' tools/bench/package.json)
have_ort=$(sed -n 's/^  "version": "\(.*\)",/\1/p' "$BENCH/node_modules/onnxruntime-node/package.json" 2> /dev/null || true)
if [[ $have_ort != "$want_ort" ]]; then
  echo "== npm install onnxruntime-node@$want_ort into $BENCH"
  cp tools/bench/package.json "$BENCH/package.json"
  (cd "$BENCH" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error > /dev/null)
fi

MODELS=$BENCH/models
if [[ ! -f $MODELS/gru/loop.pt || tools/bench/export_bench_models.py -nt $MODELS/gru/loop.pt ]]; then
  echo "== export the models into $MODELS"
  "$PY" tools/bench/export_bench_models.py --out "$MODELS" 2>&1 | grep -v -i 'warn\|_jit_pass' || true
  [[ -f $MODELS/gru/loop.pt ]] || { echo "compare.sh: the model export failed" >&2; exit 1; }
fi
for onnx in "$MODELS"/*/*.onnx; do
  dvm=${onnx%.onnx}.dvm
  if [[ ! -f $dvm || $onnx -nt $dvm || $BUILD/tools/vm-compile -nt $dvm ]]; then
    "$BUILD/tools/vm-compile" "$onnx" -o "$dvm" > /dev/null
  fi
done

echo "== compare"
exec "$PY" tools/bench/compare.py --build "$BUILD" --models "$MODELS" \
  --node-modules "$BENCH/node_modules" "$@"
