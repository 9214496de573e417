#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test, stage by stage, printing each stage's
# time and budget. This is the README's test command and what CI runs (.ci/run).
#
#   bash tools/test.sh                  all stages
#   bash tools/test.sh --quick          install, format, Release build and ctest only
#   bash tools/test.sh --stages a,b     the stages named, in the order below (install is
#                                       needed once; later stages use earlier stages' builds)
#
# Stages and their budgets, for a cold run (nothing built, nothing cached) on 2 cores. A stage
# over its budget is reported, and so is a whole run over DYNVM_CI_TARGET_S (2700 s: CI's
# target is 45 minutes cold on 2 cores); a run over DYNVM_CI_BUDGET_S (3600 s, well inside CI's
# 90-minute hard limit, past which nothing lands) fails, at the end, after every stage has run:
#   install        6 min  tools/install-deps.sh test (only what is missing)
#   format         1 min  clang-format --dry-run --Werror over every tracked C++/CUDA source,
#                         and no function over 150 lines (tools/lint/function_lengths.py)
#   build         14 min  Release build, with CUDA (-DDYNVM_WITH_CUDA=ON) when
#                         /usr/local/cuda/bin/nvcc exists: one build, not two
#   ctest          4 min  every test, the ONNX conformance runner and the install test included
#   sanitize+fuzz 17 min  clang, address+undefined and fuzzer-no-link: the test suite, then each
#                         fuzzer for 30 s from its checked-in corpus (two at a time)
#   tsan           6 min  ThreadSanitizer build of the threading tests alone (sharing_test's 8
#                         VMs on 8 threads included), oneDNN kernels
#
# Environment:
#   DYNVM_JOBS         parallel jobs for builds, ctest and fuzzers (2)
#   CMAKE_GENERATOR    CMake's generator for new build trees (Ninja when installed; a build tree
#                      keeps the generator it was made with)
#   CMAKE_C_COMPILER_LAUNCHER, CMAKE_CXX_COMPILER_LAUNCHER, CMAKE_CUDA_COMPILER_LAUNCHER
#                      the compiler launcher for new build trees: ccache when installed, with its
#                      own cache (ccache's default, outside the clone); set them, even empty, to
#                      choose another or none
#   DYNVM_FUZZ_SECONDS, DYNVM_FUZZ_SEED, DYNVM_FUZZ_RUNS   the fuzzers (30, 1, -1: docs/trust.md)
#   DYNVM_CI_TARGET_S  the whole run's target in seconds (2700): reported when passed
#   DYNVM_CI_BUDGET_S  the whole run's limit in seconds (3600): fails when passed
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ALL_STAGES=install,format,build,ctest,sanitize+fuzz,tsan
STAGES=$ALL_STAGES
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) STAGES=install,format,build,ctest ;;
    --stages)
      STAGES=${2:-}
      shift || true
      for s in ${STAGES//,/ }; do
        [[ ",$ALL_STAGES," == *",$s,"* ]] ||
          { echo "tools/test.sh: unknown stage '$s' (stages: $ALL_STAGES)" >&2; exit 2; }
      done ;;
    -h|--help) sed -n '2,35s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "tools/test.sh: unknown option: $1 (--quick, --stages LIST, --help)" >&2; exit 2 ;;
  esac
  shift
done
JOBS=${DYNVM_JOBS:-2}
TOTAL_BUDGET=${DYNVM_CI_BUDGET_S:-3600}
TOTAL_TARGET=${DYNVM_CI_TARGET_S:-2700}
declare -A BUDGET=([install]=360 [format]=60 [build]=840 [ctest]=240 [sanitize+fuzz]=1020
                   [tsan]=360)
declare -a SUMMARY=()
RUNNING=""

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# Prints the stage times so far; on a failure, names the stage that failed.
summary() {
  local rc=$?
  rm -f "$TIMES_FILE"
  [[ ${#SUMMARY[@]} -gt 0 || -n "$RUNNING" ]] || return 0
  echo "=== stage times (budgets for a cold run on 2 cores)"
  [[ ${#SUMMARY[@]} -eq 0 ]] || printf '%s\n' "${SUMMARY[@]}"
  if [[ $rc -ne 0 && -n "$RUNNING" ]]; then
    echo "!!! stage $RUNNING failed after $(fmt_time $((SECONDS - STAGE_START))) (exit status $rc)"
  fi
}
trap summary EXIT

# The CPU seconds (user + system) of every process this shell has waited for so far, in
# CHILD_CPU: with the wall time, it shows how much of a stage's time was the machine's work (on a
# shared machine, the wall time alone also counts other users' load). `times` runs in this shell:
# a command substitution's subshell would have no children.
TIMES_FILE=$(mktemp)
children_cpu() {
  local shell_times user sys
  times > "$TIMES_FILE"
  { read -r shell_times; read -r user sys; } < "$TIMES_FILE"
  CHILD_CPU=0
  for t in "$user" "$sys"; do
    local sec=${t#*m}
    CHILD_CPU=$((CHILD_CPU + ${t%%m*} * 60 + ${sec%%.*}))
  done
}

stage() {
  local name=$1; shift
  RUNNING=$name
  STAGE_START=$SECONDS
  children_cpu
  local cpu0=$CHILD_CPU
  echo "=== stage: $name (budget $(fmt_time "${BUDGET[$name]}"))"
  "$@"
  local took=$((SECONDS - STAGE_START)) budget=${BUDGET[$name]} note="" cpu
  children_cpu
  cpu=$((CHILD_CPU - cpu0))
  if [[ $took -gt $budget ]]; then note="  OVER BUDGET"; fi
  SUMMARY+=("$(printf '%-14s %8s  budget %8s  (cpu %5ds)%s' "$name" "$(fmt_time $took)" "$(fmt_time "$budget")" "$cpu" "$note")")
  echo "=== stage $name took ${took}s (budget ${budget}s, ${cpu} cpu-seconds)${note:+: over budget}"
  RUNNING=""
}

install() { bash tools/install-deps.sh test; }

# The generator and compiler launcher of the build trees this run creates (see the top).
GENERATOR=${CMAKE_GENERATOR:-}
CCACHE_BEFORE=""
setup_build_env() {
  if [[ -z "$GENERATOR" ]] && command -v ninja > /dev/null; then GENERATOR=Ninja; fi
  echo "generator for new build trees: ${GENERATOR:-the default}"
  if [[ -n "${CMAKE_CXX_COMPILER_LAUNCHER+set}" ]]; then
    echo "compiler launcher: '${CMAKE_CXX_COMPILER_LAUNCHER}' (from the environment)"
  elif command -v ccache > /dev/null; then
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache \
      CMAKE_CUDA_COMPILER_LAUNCHER=ccache
    # Paths under the clone are hashed relative to it, so that a clone elsewhere (a CI run in a
    # fresh folder) finds what an earlier run cached; a base_dir the user configured is kept.
    if [[ -z "$(ccache -k base_dir 2> /dev/null)" ]]; then export CCACHE_BASEDIR=$ROOT; fi
    echo "compiler launcher: ccache, cache $(ccache -k cache_dir) (max $(ccache -k max_size))," \
      "base_dir $(ccache -k base_dir)"
    CCACHE_BEFORE=$(ccache_counts)
  else
    echo "compiler launcher: none (ccache is not installed)"
  fi
}

# "hits misses" from ccache's counters.
ccache_counts() {
  ccache --print-stats 2> /dev/null | awk '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
    $1 == "cache_miss" { m += $2 }
    END { print h + 0, m + 0 }'
}

# configure DIR ARGS...: cmake -S . -B DIR ARGS, with the run's generator for a new tree. The
# output goes to DIR-configure.log, printed on failure.
configure() {
  local dir=$1; shift
  local gen=()
  if [[ ! -f "$dir/CMakeCache.txt" && -n "$GENERATOR" ]]; then gen=(-G "$GENERATOR"); fi
  mkdir -p "$(dirname "$dir")"
  cmake -S . -B "$dir" "${gen[@]}" "$@" > "$dir-configure.log" 2>&1 ||
    { cat "$dir-configure.log"; echo "!!! cmake could not configure $dir"; return 1; }
}

# Every tracked C++/CUDA source is formatted by .clang-format (Debian 12's clang-format 14).
# To fix: git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i
check_format() {
  git ls-files -z '*.cc' '*.h' '*.cu' '*.cuh' | xargs -0 -P "$JOBS" -n 50 clang-format --dry-run --Werror
  echo "format: $(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | wc -l) files formatted"
  # No function over 150 lines outside the interpreter's dispatch function (docs/compiler.md).
  python3 tools/lint/function_lengths.py compiler isa vm tools python kernels
}

build_release() {
  # The CUDA device and kernels build where the toolkit is (the tests skip without a GPU).
  local cuda=OFF
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    cuda=ON
    echo "CUDA toolkit at /usr/local/cuda: building with -DDYNVM_WITH_CUDA=ON"
  else
    echo "no CUDA toolkit at /usr/local/cuda: building without CUDA"
  fi
  configure build/release -DCMAKE_BUILD_TYPE=Release -DDYNVM_WITH_CUDA=$cuda
  cmake --build build/release -j"$JOBS"
}

run_ctest() {
  (cd build/release && ctest --output-on-failure -j"$JOBS") | tee build/release-ctest.log
  # A test that did not run (a device test without a GPU, a test without ONNX Runtime where it
  # cannot be fetched) is reported as skipped: name them.
  local skipped names
  skipped=$(grep -c -- '\*\*\*Skipped' build/release-ctest.log || true)
  names=$(grep -- '\*\*\*Skipped' build/release-ctest.log | sed -E 's/.*Test +#[0-9]+: ([^ ]+).*/\1/' |
          paste -sd ' ' - || true)
  SUMMARY+=("$(printf '%-14s %d skipped: %s (build/release-ctest.log says why)' ctest "$skipped" "${names:-none}")")
}

sanitize_and_fuzz() {
  CC=clang CXX=clang++ configure build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDYNVM_SANITIZE=address -DDYNVM_BUILD_FUZZERS=ON -DDYNVM_BUILD_BENCHMARKS=OFF
  cmake --build build/asan -j"$JOBS"
  (cd build/asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j"$JOBS" -LE slow)
  run_fuzzers
}

# Each fuzzer runs for 30 s from its checked-in corpus with a fixed seed, so a CI run replays the
# inputs a local run with the same seed tried (DYNVM_FUZZ_SEED=0 asks libFuzzer for a random
# seed; DYNVM_FUZZ_RUNS caps the number of inputs, -1 = no cap). They run DYNVM_JOBS at a time,
# each on its own core. A failure prints the fuzzer's report and the input (libFuzzer writes it
# to the work folder and prints it in base64).
run_fuzzers() {
  local seconds=${DYNVM_FUZZ_SECONDS:-30}
  local seed=${DYNVM_FUZZ_SEED:-1}
  local runs=${DYNVM_FUZZ_RUNS:--1}
  # The fuzzers CMake declared (dynvm_fuzzer writes build/asan/fuzz_corpus_dirs/NAME, its corpus
  # folders one per line): each must have been built and have its corpus, and there must be
  # some; a missing one fails the stage rather than passing it unfuzzed.
  local names
  names=$(ls build/asan/fuzz_corpus_dirs 2> /dev/null | sort || true)
  if [[ -z "$names" ]]; then
    echo "!!! no fuzzers declared in build/asan (DYNVM_BUILD_FUZZERS=ON with clang)"
    return 1
  fi
  local name failed=0 started=()
  for name in $names; do
    local fuzzer work="build/asan/fuzz_work/$name"
    fuzzer=$(find build/asan -maxdepth 3 -type f -name "$name" -perm -u+x | head -1)
    rm -rf "$work" && mkdir -p "$work/corpus"
    # The checked-in seeds are copied (libFuzzer adds what it finds to its first folder, and may
    # rewrite the others): each folder of the corpus under its own name.
    local dirs=() dir i=0
    mapfile -t dirs < "build/asan/fuzz_corpus_dirs/$name"
    if [[ -z "$fuzzer" || ${#dirs[@]} -eq 0 ]]; then
      echo "!!! $name: no fuzzer binary under build/asan, or no corpus declared"
      failed=1
      continue
    fi
    local seeds=()
    for dir in "${dirs[@]}"; do
      if [[ ! -d "$dir" ]]; then
        echo "!!! $name: its corpus folder $dir does not exist"
        failed=1
        continue 2
      fi
      i=$((i + 1))
      mkdir -p "$work/seeds/$i" && cp -r "$dir"/. "$work/seeds/$i"/
      seeds+=("$work/seeds/$i")
    done
    # At most JOBS fuzzers at a time; each leaves its exit status in its work folder.
    while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
    echo "--- $name for ${seconds}s, seed $seed, corpus ${dirs[*]#"$ROOT/"}"
    ( rc=0
      "$fuzzer" -max_total_time="$seconds" -runs="$runs" -seed="$seed" -print_final_stats=1 \
        -artifact_prefix="$work/" "$work/corpus" "${seeds[@]}" > "$work/log" 2>&1 || rc=$?
      echo "$rc" > "$work/rc" ) &
    started+=("$name")
  done
  wait
  for name in "${started[@]}"; do
    local work="build/asan/fuzz_work/$name"
    if [[ "$(cat "$work/rc" 2> /dev/null)" == 0 ]]; then
      echo "--- $name: $(grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$work/log" |
        sed 's/^stat:://; s/: */ /' | tr '\n' ' ')"
    else
      echo "!!! $name failed (exit status $(cat "$work/rc" 2> /dev/null || echo unknown)):" \
        "its report (the last 80 lines of $work/log):"
      tail -80 "$work/log"
      ls -l "$work"
      failed=1
    fi
  done
  echo "fuzzers declared: $(echo $names | wc -w), run: ${#started[@]}"
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
  CC=clang CXX=clang++ configure build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDYNVM_SANITIZE=thread -DDYNVM_WITH_ONNX=OFF -DDYNVM_BUILD_BENCHMARKS=OFF
  local targets
  # Each threading test is the executable of its name (dynvm_test): only they, and what they
  # need, are built.
  targets=$(cd build/tsan && ctest -N -L threads | sed -n 's/^ *Test *#[0-9]*: *//p')
  if [[ -z "$targets" ]]; then echo "!!! no threading tests"; return 1; fi
  # shellcheck disable=SC2086
  cmake --build build/tsan -j"$JOBS" --target $targets
  (cd build/tsan && TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1" \
     ctest --output-on-failure -j"$JOBS" -L threads)
}

wanted() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p build
if wanted install; then stage install install; fi
setup_build_env
if wanted format; then stage format check_format; fi
if wanted build; then stage build build_release; fi
if wanted ctest; then stage ctest run_ctest; fi
if wanted sanitize+fuzz; then stage sanitize+fuzz sanitize_and_fuzz; fi
if wanted tsan; then stage tsan thread_sanitize; fi
if [[ -n "$CCACHE_BEFORE" ]]; then
  read -r h0 m0 <<< "$CCACHE_BEFORE"
  read -r h1 m1 <<< "$(ccache_counts)"
  SUMMARY+=("$(printf '%-14s %d hits, %d misses this run' ccache $((h1 - h0)) $((m1 - m0)))")
fi
TOTAL_NOTE=""
if [[ $SECONDS -gt $TOTAL_TARGET ]]; then TOTAL_NOTE="  OVER THE $(fmt_time "$TOTAL_TARGET") TARGET"; fi
SUMMARY+=("$(printf '%-14s %8s  target %8s, limit %8s%s' total "$(fmt_time $SECONDS)" "$(fmt_time "$TOTAL_TARGET")" "$(fmt_time "$TOTAL_BUDGET")" "$TOTAL_NOTE")")
if [[ $SECONDS -gt $TOTAL_BUDGET ]]; then
  summary
  trap - EXIT
  echo "!!! FAILED: the run took $(fmt_time $SECONDS), over its budget of $(fmt_time "$TOTAL_BUDGET")" \
    "(DYNVM_CI_BUDGET_S): every stage passed, but a run this slow is a defect to fix" >&2
  exit 1
fi
echo "all stages passed ($STAGES) in $(fmt_time $SECONDS)"
