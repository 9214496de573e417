#!/bin/bash
# The serving figures of docs/serving.md ("Measurements") in one run, against one server:
#   1. overhead: p50 of a client's back-to-back calls on one connection minus p50 of the
#      in-process Run, one protocol at a time (perf_analyzer's concurrency 1), PASSES passes of
#      ROUNDS calls each, for gRPC raw, REST binary and REST JSON on the one-op model; then the
#      three protocols interleaved call by call on one server (each connection idles while the
#      two others' calls run), with generate_stream's first token against the in-process first
#      emit (charlm);
#   2. throughput: 2 instances against 2 in-process VMs on threads, over gRPC raw and REST binary,
#      on the BERT-base-sized classifier at sequence 8 (bert_s8);
#   3. dynamic batching: batching_bench.py on the BERT-base-sized encoder, 16 clients of batch-1
#      requests, batching against no batching, p99 stated.
# Every figure is side by side with its in-process counterpart in the same run.
#
#   bash tools/server/serving_record.sh [BUILD] [REPO_DIR] > OUT.txt
# Run it alone on the machine (timed: under `flock -x /tmp/dynvm-timing.lock` where others share
# it). PASSES, ROUNDS, ROUND_SECONDS and SKIP_BATCHING=1 (environment) shorten it.
set -euo pipefail
BUILD=${1:-build/release}
REPO=${2:-/tmp/dynvm-serving-record}
PASSES=${PASSES:-3}
ROUNDS=${ROUNDS:-3000}
ROUND_SECONDS=${ROUND_SECONDS:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH="$BUILD/tools/server/server-bench"
HTTP=${HTTP_PORT:-18600}
GRPC=${GRPC_PORT:-18601}

stamp() {
  echo "# $(date -u +%FT%TZ); uptime: $(uptime)"
  ps -eo pcpu,comm --sort=-pcpu | head -6 | sed 's/^/#   /'
}

echo "# serving_record.sh: commit $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
stamp
if [ ! -d "$REPO/bert_s8" ]; then
  /usr/bin/python3 "$HERE/make_bench_repo.py" "$REPO" --bert > /dev/null
fi

"$BUILD/tools/dynvm-server" --model-repository "$REPO" --http-port "$HTTP" --grpc-port "$GRPC" \
  --access-log off > /tmp/serving_record_server.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$HTTP/v2/health/ready" > /dev/null 2>&1; then break; fi
  sleep 0.1
done
head -1 /tmp/serving_record_server.log

echo "## 1. overhead, one-op model: back-to-back calls, one protocol at a time"
for pass in $(seq 1 "$PASSES"); do
  for mode in grpc rest-binary rest-json; do
    echo "### pass $pass, --modes $mode --rounds $ROUNDS"
    "$BENCH" --model-repository "$REPO" --model oneop --http-port "$HTTP" --grpc-port "$GRPC" \
      --modes "$mode" --rounds "$ROUNDS"
  done
done
echo "## 1b. overhead, the three protocols interleaved call by call; generate_stream's first token"
"$BENCH" --model-repository "$REPO" --model oneop --http-port "$HTTP" --grpc-port "$GRPC" \
  --rounds "$ROUNDS" --generate charlm
stamp

echo "## 2. throughput: 2 instances against 2 in-process VMs (bert_s8)"
for via in grpc rest-binary; do
  echo "### --throughput 2 --throughput-via $via"
  "$BENCH" --model-repository "$REPO" --model bert_s8 --http-port "$HTTP" --grpc-port "$GRPC" \
    --modes grpc --rounds 10 --throughput 2 --throughput-via "$via" --server-pid "$SERVER" \
    --seconds "$ROUND_SECONDS"
done
kill "$SERVER"
wait "$SERVER" 2>/dev/null || true
trap - EXIT
stamp

if [ "${SKIP_BATCHING:-0}" != 1 ]; then
  echo "## 3. dynamic batching, BERT-base-sized encoder, sequence 8, 16 clients"
  /usr/bin/python3 "$HERE/batching_bench.py" --build "$BUILD" --dims 768,12,12,3072 --seq 8 \
    --seconds 5 --rounds 3 --repeat 5
  stamp
fi
