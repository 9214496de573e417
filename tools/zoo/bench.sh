#!/usr/bin/env bash
# The model zoo's speed against ONNX Runtime (docs/zoo.md): every zoo model and case in dynvm
# and in ORT (all graph optimizations) at 1 and 2 threads, interleaved in one run, niced. The
# raw output, with lscpu's model name and flags, goes to docs/results/zoo-bench-DATE.txt.
#
#   bash tools/zoo/bench.sh [--models a,b] [--rounds 3] [--target-ms 150]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${DYNVM_BUILD_DIR:-$root/build/release}
out=${DYNVM_ZOO_BENCH_OUT:-$root/docs/results/zoo-bench-$(date -u +%F).txt}
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "# tools/zoo/bench.sh $*"
  echo "# $(date -u '+%F %T UTC'), commit $(git -C "$root" rev-parse --short HEAD)$(
    git -C "$root" diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')"
  echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs available"
  echo "# flags: $(lscpu | sed -n 's/^Flags: *//p')"
  echo "# onnxruntime-node $(sed -n 's/^  "version": "\(.*\)",/\1/p' \
    "${DYNVM_ORT_DIR:-$HOME/.cache/dynvm/ort}/node_modules/onnxruntime-node/package.json" \
    2> /dev/null || echo '?')"
  echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
  nice -n 19 /usr/bin/python3 "$here/zoo.py" bench "$@"
  echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$out"
echo "raw output: $out"
