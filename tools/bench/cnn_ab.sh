#!/usr/bin/env bash
# A/B of two builds' vm-run on compiled CNN models, interleaved rounds, 1 thread: per case the
# fastest run of each build over every round (min_ms of `vm-run --repeat REPEAT`) and old/new.
#   OLD=../lead/build/release NEW=build/release MODELS=build/bench/cnn \
#     bash tools/bench/cnn_ab.sh [ROUNDS] [REPEAT] CASE...
# A case is NAME (MODELS/NAME.dvm with input x=MODELS/NAME.npy) or NAME.dvm:INPUT.npy (paths
# under MODELS).
set -u
OLD=${OLD:?build dir of the old tree}
NEW=${NEW:-build/release}
MODELS=${MODELS:?directory of the compiled models}
rounds=${1:?rounds}
repeat=${2:?repeat}
shift 2
echo "old: $OLD  new: $NEW  rounds: $rounds  repeat: $repeat  (rounds alternate old/new)"
echo "case old_min_ms new_min_ms old/new"
for c in "$@"; do
  if [[ $c == *:* ]]; then dvm=${c%%:*}; npy=${c#*:}; else dvm=$c.dvm; npy=$c.npy; fi
  best_old=""; best_new=""
  for _ in $(seq "$rounds"); do
    for side in old new; do
      b=$OLD; [[ $side == new ]] && b=$NEW
      t=$("$b/tools/vm-run" "$MODELS/$dvm" --input "x=$MODELS/$npy" --repeat "$repeat" \
        --threads 1 | sed -n 's/.*min_ms=\([0-9.]*\).*/\1/p')
      if [[ $side == old ]]; then
        best_old=$(printf '%s\n%s\n' "$best_old" "$t" | sed '/^$/d' | sort -g | head -1)
      else
        best_new=$(printf '%s\n%s\n' "$best_new" "$t" | sed '/^$/d' | sort -g | head -1)
      fi
    done
  done
  echo "$c $best_old $best_new $(python3 -c "print(f'{$best_old / $best_new:.3f}')")"
done
