#!/usr/bin/env bash
# The main job: installs what is missing, builds, compiles the character-level LSTM language
# model (tools/lm/charlm.onnx, trained on the King James Bible) to a .dvm executable, and
# generates text from a prompt. The whole decode loop (prompt, LSTM steps, output layer,
# sampling, early stop) runs inside one VM call; tokens stream out as they are produced.
#
#   bash tools/demo.sh [--prompt TEXT] [--length N] [--temperature T] [--seed S] [--stop-at-newline]
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT="And it came to pass"
LENGTH=400
TEMPERATURE=0.7
SEED=1
STOP=-1
while [ $# -gt 0 ]; do
  case "$1" in
    --prompt) PROMPT=$2; shift 2 ;;
    --length) LENGTH=$2; shift 2 ;;
    --temperature) TEMPERATURE=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --stop-at-newline) STOP=newline; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown option: $1 (try --help)" >&2; exit 2 ;;
  esac
done
JOBS=${DYNVM_JOBS:-2}

# DYNVM_DEMO_TOOLS=DIR uses the vm-compile and vm-run in DIR and skips the install and the build;
# DYNVM_DEMO_OUT=DIR puts the executable and the run's outputs (DIR/charlm-out/tokens.npy) there
# instead of build/ (the demo_test ctest runs this script that way).
OUT=${DYNVM_DEMO_OUT:-build}
TOOLS=${DYNVM_DEMO_TOOLS:-}
if [ -z "$TOOLS" ]; then
  bash tools/install-deps.sh build
  if [ ! -f build/release/CMakeCache.txt ]; then
    cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release > /dev/null
  fi
  cmake --build build/release -j"$JOBS" --target vm-compile vm-run > build/demo-build.log 2>&1 ||
    { tail -40 build/demo-build.log; exit 1; }
  TOOLS=build/release/tools
fi
mkdir -p "$OUT"

if [ "$STOP" = newline ]; then
  STOP=$(grep -n '^10$' tools/lm/vocab.txt | cut -d: -f1)
  STOP=$((STOP - 1))
fi
"$TOOLS/vm-compile" tools/lm/charlm.onnx -o "$OUT/charlm.dvm" --bound batch=1 \
  --bound max_new_tokens=4096 --bound prompt_len=1024
echo "--- generating (prompt, then $LENGTH characters at temperature $TEMPERATURE, seed $SEED)"
"$TOOLS/vm-run" "$OUT/charlm.dvm" --vocab tools/lm/vocab.txt \
  --text prompt="$PROMPT" --set max_new_tokens="$LENGTH" --set temperature="$TEMPERATURE" \
  --set seed="$SEED" --set stop_token="$STOP" --stream-prefix "$PROMPT" --output-dir "$OUT/charlm-out"
