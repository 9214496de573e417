#!/usr/bin/env bash
# The model zoo's correctness run (docs/zoo.md): fetches the pinned models into the cache
# (~/.cache/dynvm-zoo, checking every sha256), compiles and runs each in dynvm and in ONNX
# Runtime at 1 and 2 threads, runs the streaming and bad-input checks, and prints a table.
#
#   bash tools/zoo/run.sh [--models a,b] [--threads 1,2] [--offline] [--install-ort]
#
# DYNVM_BUILD_DIR (default build/release) holds the dynvm Python package; DYNVM_ORT_DIR a
# node_modules with onnxruntime-node (default: the cache ~/.cache/dynvm/ort; --install-ort puts
# it there). Exit 0: every model passed; 1: one failed; 77: skipped (no model cached and the
# registry unreachable, or no ONNX Runtime).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${DYNVM_BUILD_DIR:-$root/build/release}
if [[ ! -d $build/python/dynvm ]]; then
  echo "no dynvm Python package in $build/python: build the dynvm_python target" >&2
  exit 1
fi
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 "$here/zoo.py" check "$@"
