#!/bin/bash
# Interleaved A/B of the attention fusion, 1 thread (docs/benchmarks.md, "Attention fusion"):
# each model compiled with every rule (fused) and with the attention rules disabled
# (unfused), vm-run / vm-decode-bench alternating, 3 rounds; prints the per-round medians.
# Needs encoder_bench.py's exports in build/bench/encoders and export_bench_models.py's in
# build/bench/models14 and build/bench/models.
#   bash tools/bench/attention_ab.sh [BUILD]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${1:-build/release}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OFF=(--disable-rewrite attention --disable-rewrite attention_transpose)
median() { /usr/bin/python3 -c "import json,sys,statistics; print(round(statistics.median(json.load(sys.stdin)['ms']),2))"; }
for base in build/bench/encoders/{classifier_op14_1x128,classifier_op14_8x64,bert_op14_1x128,bert_op14_8x64,bert_op17_8x64}; do
  "$BUILD/tools/vm-compile" "$base.onnx" -o "$TMP/A.dvm" > /dev/null
  "$BUILD/tools/vm-compile" "$base.onnx" -o "$TMP/B.dvm" "${OFF[@]}" > /dev/null
  a=() b=()
  for _ in 1 2 3; do
    for v in A B; do
      ms=$("$BUILD/tools/vm-run" "$TMP/$v.dvm" --input "tokens=${base}_tokens.npy" \
        --input "pad=${base}_pad.npy" --threads 1 --repeat 20 | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')
      if [[ $v == A ]]; then a+=("$ms"); else b+=("$ms"); fi
    done
  done
  echo "$(basename "$base") fused_ms ${a[*]} unfused_ms ${b[*]}"
done
for o in models14 models; do
  "$BUILD/tools/vm-compile" "build/bench/$o/gpt/loop.onnx" -o "$TMP/A.dvm" > /dev/null
  "$BUILD/tools/vm-compile" "build/bench/$o/gpt/loop.onnx" -o "$TMP/B.dvm" "${OFF[@]}" > /dev/null
  a=() b=()
  for _ in 1 2 3; do
    for v in A B; do
      ms=$("$BUILD/tools/bench/vm-decode-bench" --loop "$TMP/$v.dvm" --json --prompt 3,14,15,9 \
        --max-new-tokens 128 --stop-token -1 --threads 1 --repeat 5 | median)
      if [[ $v == A ]]; then a+=("$ms"); else b+=("$ms"); fi
    done
  done
  echo "gpt-decode-$o (128 tokens) fused_ms ${a[*]} unfused_ms ${b[*]}"
done
