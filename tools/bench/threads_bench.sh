#!/bin/bash
# Intra-op threads, side by side with ONNX Runtime at 1 and 2 threads (docs/threads.md):
# the LSTM/GRU decode comparison (compare.py: dynvm vs onnxruntime-node, and, with BASE set,
# another dynvm build interleaved as dynvm-base, the 1-thread A/B against main) and the
# encoder comparison (encoder_bench.py), each recorded under docs/results/ by record.sh.
#
#   BUILD=build/dev [BASE=/path/to/main/build] [ROUNDS=3] bash tools/bench/threads_bench.sh
#
# Needs build/bench/node_modules (onnxruntime-node) and build/bench/models, as compare.sh makes
# them (run compare.sh once first), and vm-compile, vm-run and vm-decode-bench built in BUILD.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build/release}
ROUNDS=${ROUNDS:-3}
MODELS=${MODELS:-build/bench/models}
NODE=${NODE_MODULES:-build/bench/node_modules}
PY=/usr/bin/python3
for onnx in "$MODELS"/lstm/*.onnx "$MODELS"/gru/*.onnx; do
  "$BUILD/tools/vm-compile" "$onnx" -o "${onnx%.onnx}.dvm" > /dev/null
done
base=()
[[ -n ${BASE:-} ]] && base=(--baseline-build "$BASE")
bash tools/bench/record.sh threads-decode --note "BASE=${BASE:-none}" -- \
  "$PY" tools/bench/compare.py --build "$BUILD" --models "$MODELS" --node-modules "$NODE" \
  --cases lstm-loop,lstm-step,gru-loop --runtimes dynvm,ort --threads 1,2 \
  --rounds "$ROUNDS" --repeat 10 "${base[@]}" || true
bash tools/bench/record.sh threads-encoders -- \
  "$PY" tools/bench/encoder_bench.py --build "$BUILD" --node-modules "$NODE" --threads 1,2 \
  --rounds "$ROUNDS" --repeat 20 || true
