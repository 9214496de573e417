#!/usr/bin/env bash
# A/B: the interpreter microbenchmarks and two decode loops of two builds, interleaved rounds.
#   OLD=../old-tree/build/release NEW=build/release bash tools/bench/ab_refactor.sh
set -u
OLD=${OLD:?build dir of the old tree}; NEW=${NEW:-build/release}
cd "$(dirname "$0")/../.."
$NEW/tools/vm-compile tools/models/gpt/model.onnx -o /tmp/ab_gpt.dvm --bound batch=1 --bound prompt_len=8 --bound max_new_tokens=64 >/dev/null 2>&1
$NEW/tools/vm-compile tools/models/lstm_cat/model.onnx -o /tmp/ab_lstm.dvm >/dev/null 2>&1
echo "date: $(date -u +%FT%TZ)"; echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"; echo "old: a14e196 (before the refactor)  new: $(git rev-parse --short HEAD)"
echo "load: other engineers' builds were running on the same 2 cores; rounds alternate old/new"
for round in 1 2 3; do
  for side in old new; do
    B=$OLD; [ $side = new ] && B=$NEW
    echo "--- round $round $side vm_benchmark"
    $B/vm/vm_benchmark --benchmark_min_time=0.2 2>/dev/null | grep '^BM_'
    echo "--- round $round $side decode gpt (bounded, 56 new tokens)"
    $B/tools/bench/vm-decode-bench --loop /tmp/ab_gpt.dvm --prompt 3,14,15,9 --max-new-tokens 56 --repeat 10 2>&1 | tail -3
    echo "--- round $round $side decode lstm_cat (64 new tokens)"
    $B/tools/bench/vm-decode-bench --loop /tmp/ab_lstm.dvm --prompt 3,14,15,9 --max-new-tokens 64 --repeat 10 2>&1 | tail -3
  done
done
