#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test, stage by stage, printing each stage's
# time. This is the README's test command and what CI runs (.ci/run).
#
#   bash tools/test.sh            all stages
#   bash tools/test.sh --quick    install, Release build, ctest only
#
# Stages (budgets on 2 cores, from the hardening issue):
#   install            <= 6 min   tools/install-deps.sh test (only what is missing)
#   format             <= 1 min   clang-format --dry-run --Werror over every tracked C++/CUDA source,
#                                 and no function over 150 lines (tools/lint/function_lengths.py)
#   build              <= 12 min  Release build, with CUDA (-DDYNVM_WITH_CUDA=ON) when
#                                 /usr/local/cuda/bin/nvcc exists: one build, not two
#   ctest              <= 8 min   every test, the ONNX conformance runner included
#   sanitize+fuzz      <= 15 min  clang, address+undefined and fuzzer-no-link; the test suite,
#                                 then each fuzzer for 30 s from its checked-in corpus
#   tsan               <= 6 min   ThreadSanitizer build of the threading tests (sharing_test's
#                                 8 VMs on 8 threads included), oneDNN kernels
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done
JOBS=${DYNVM_JOBS:-2}
declare -a SUMMARY=()
stage() {
  local name=$1; shift
  local start=$SECONDS
  echo "=== stage: $name"
  "$@"
  local took=$((SECONDS - start))
  SUMMARY+=("$(printf '%-16s %4dm%02ds' "$name" $((took / 60)) $((took % 60)))")
  echo "=== stage $name took ${took}s"
}

install() { bash tools/install-deps.sh test; }

# Every tracked C++/CUDA source is formatted by .clang-format (Debian 12's clang-format 14).
# To fix: git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i
check_format() {
  git ls-files -z '*.cc' '*.h' '*.cu' '*.cuh' | xargs -0 clang-format --dry-run --Werror
  echo "format: $(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | wc -l) files formatted"
  # No function over 150 lines outside the interpreter's dispatch function (docs/compiler.md).
  python3 tools/lint/function_lengths.py compiler isa vm tools python
}

build_release() {
  # The CUDA device and kernels build where the toolkit is (the tests skip without a GPU).
  local cuda=OFF
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    cuda=ON
    echo "CUDA toolkit at /usr/local/cuda: building with -DDYNVM_WITH_CUDA=ON"
  else
    echo "no CUDA toolkit at /usr/local/cuda: building without CUDA"
  fi
  cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DDYNVM_WITH_CUDA=$cuda \
    > build/release-configure.log 2>&1 || { cat build/release-configure.log; return 1; }
  cmake --build build/release -j"$JOBS"
}

run_ctest() {
  (cd build/release && ctest --output-on-failure -j"$JOBS") | tee build/release-ctest.log
  # A test that did not run (a device test without a GPU) is reported as skipped: count them.
  local skipped
  skipped=$(grep -c -- '\*\*\*Skipped' build/release-ctest.log || true)
  SUMMARY+=("$(printf '%-16s %4d skipped (device tests without a device: see build/release-ctest.log)' ctest "$skipped")")
}

sanitize_and_fuzz() {
  CC=clang CXX=clang++ cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDYNVM_SANITIZE=address -DDYNVM_BUILD_FUZZERS=ON -DDYNVM_BUILD_BENCHMARKS=OFF > /dev/null
  cmake --build build/asan -j"$JOBS"
  (cd build/asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j"$JOBS" -LE slow)
  # Each fuzzer runs for 30 s from its checked-in corpus with a fixed seed, so a CI run replays
  # the inputs a local run with the same seed tried (DYNVM_FUZZ_SEED=0 asks libFuzzer for a random
  # seed; DYNVM_FUZZ_RUNS caps the number of inputs, -1 = no cap). A failure prints the fuzzer's
  # report and the input (libFuzzer writes it to the work folder and prints it in base64).
  local seconds=${DYNVM_FUZZ_SECONDS:-30}
  local seed=${DYNVM_FUZZ_SEED:-1}
  local runs=${DYNVM_FUZZ_RUNS:--1}
  local failed=0
  # The fuzzers CMake declared (dynvm_fuzzer writes build/asan/fuzz_corpus_dirs/NAME): each
  # must have been built and have its corpus, and there must be some; a missing one fails the
  # stage rather than passing it unfuzzed.
  local names
  names=$(ls build/asan/fuzz_corpus_dirs 2>/dev/null | sort || true)
  if [ -z "$names" ]; then
    echo "!!! no fuzzers declared in build/asan (DYNVM_BUILD_FUZZERS=ON with clang)"
    return 1
  fi
  local name
  for name in $names; do
    local fuzzer
    fuzzer=$(find build/asan -maxdepth 3 -type f -name "$name" -perm -u+x | head -1)
    # Its corpus: one or more folders, one per line, copied into one.
    local dirs=() dir missing=0
    mapfile -t dirs < "build/asan/fuzz_corpus_dirs/$name"
    for dir in "${dirs[@]}"; do [ -d "$dir" ] || missing=1; done
    if [ -z "$fuzzer" ] || [ ${#dirs[@]} -eq 0 ] || [ $missing = 1 ]; then
      echo "!!! $name: no fuzzer binary under build/asan, or no corpus at '${dirs[*]}'"
      failed=1
      continue
    fi
    local work="build/asan/fuzz_work/$name"
    rm -rf "$work" && mkdir -p "$work/corpus"
    for dir in "${dirs[@]}"; do cp -r "$dir"/. "$work/corpus"/; done
    echo "--- $name for ${seconds}s, seed $seed"
    if "$fuzzer" -max_total_time="$seconds" -runs="$runs" -seed="$seed" -print_final_stats=1 \
         -artifact_prefix="$work/" "$work/corpus" > "$work/log" 2>&1; then
      tail -5 "$work/log"
    else
      echo "!!! $name failed: its report (the last 80 lines of $work/log):"
      tail -80 "$work/log"
      ls -l "$work"
      failed=1
    fi
  done
  echo "fuzzers declared: $(echo $names | wc -w)"
  return $failed
}

# The threading tests (label threads: the pool allocator, the VM API's threads, two models on
# their own threads, and sharing_instances_test's 8 VMs on 8 threads through vm-run) under
# ThreadSanitizer, with the default oneDNN kernels. No suppressions: libdnnl and its OpenMP
# runtime (libgomp) are not instrumented, so ignore_noninstrumented_modules leaves their own
# accesses out, and no instrumented code runs on libgomp's threads (the project has no OpenMP
# code of its own). A oneDNN primitive with a library-managed scratchpad must not run on two
# threads at once, which is why the kernels use scratchpad_mode::user (per-site workspaces).
thread_sanitize() {
  CC=clang CXX=clang++ cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDYNVM_SANITIZE=thread \
    -DDYNVM_WITH_ONNX=OFF -DDYNVM_BUILD_BENCHMARKS=OFF > /dev/null
  local targets
  # Each threading test is the executable of its name (dynvm_test).
  targets=$(cd build/tsan && ctest -N -L threads | sed -n 's/^ *Test *#[0-9]*: *//p')
  if [ -z "$targets" ]; then echo "!!! no threading tests"; return 1; fi
  # shellcheck disable=SC2086
  cmake --build build/tsan -j"$JOBS" --target $targets
  (cd build/tsan && TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1" \
     ctest --output-on-failure -L threads)
}

mkdir -p build
stage install install
stage format check_format
stage build build_release
stage ctest run_ctest
if [ "$QUICK" = 0 ]; then
  stage sanitize+fuzz sanitize_and_fuzz
  stage tsan thread_sanitize
fi
echo "=== stage times"
printf '%s\n' "${SUMMARY[@]}"
echo "all stages passed"
