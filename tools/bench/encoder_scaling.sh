#!/bin/bash
# dynvm's own 2-thread / 1-thread speed on the batch-8 encoders (issue 24): --threads 1 and 2
# alternate, ROUNDS rounds of vm-run --repeat 30; per model the median of the round medians of
# each, and the ratio of the fastest rounds.
#   [BUILD=build/release] [MODELS=build/bench/encoders] [ROUNDS=15] bash tools/bench/encoder_scaling.sh
# (the models as tools/bench/encoder_bench.py compiles them).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build/release}
MODELS=${MODELS:-build/bench/encoders}
ROUNDS=${ROUNDS:-15}
echo "load $(cut -d' ' -f1-3 /proc/loadavg); rounds $ROUNDS x vm-run --repeat 30, threads 1 and 2 alternating"
median_ms() {  # vm-run's median for model $1 at $2 threads
  "$BUILD/tools/vm-run" "$1.dvm" --input "tokens=$1_tokens.npy" --input "pad=$1_pad.npy" \
    --threads "$2" --repeat 30 | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p'
}
for f in classifier_op14_8x64 classifier_op17_8x64 bert_op14_8x64 bert_op17_8x64; do
  b=$MODELS/$f
  t1=""
  t2=""
  for _ in $(seq "$ROUNDS"); do
    t1="$t1 $(median_ms "$b" 1)"
    t2="$t2 $(median_ms "$b" 2)"
  done
  python3 -c "
import statistics as s, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
print(f'$f: 1 thread {s.median(a):.3f} ms, 2 threads {s.median(b):.3f} ms, speed-up '
      f'{s.median(a) / s.median(b):.2f}x (fastest rounds {min(a):.3f} / {min(b):.3f}: '
      f'{min(a) / min(b):.2f}x)')" "$t1" "$t2"
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
