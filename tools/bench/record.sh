#!/bin/bash
# Runs a benchmark (or any command whose output a document quotes) and keeps its raw output
# under docs/results/ with the header the documents cite: date, machine, commit, command.
#
#   bash tools/bench/record.sh AREA-WHAT [--note TEXT] -- COMMAND [ARGS...]
#
# writes docs/results/AREA-WHAT-YYYY-MM-DD.txt (UTC date) and exits with COMMAND's status.
# The file is the header lines, a line '---', then COMMAND's stdout and stderr as it printed
# them. tools/bench/results_tables.py reads the compare.py records among these files.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=${1:-}
shift || true
note=""
if [[ ${1:-} == --note ]]; then
  note=$2
  shift 2
fi
if [[ -z $name || ${1:-} != -- ]]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
shift
out="$ROOT/docs/results/$name-$(date -u +%Y-%m-%d).txt"
mkdir -p "$ROOT/docs/results"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
commit=$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)
subject=$(git -C "$ROOT" log -1 --format=%s 2> /dev/null | cut -c1-100)
dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no 2> /dev/null | grep -q . && echo ", with uncommitted changes" || true)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "machine: $cpu, $(nproc) logical CPUs, $(awk '{print int($2/1024)}' /proc/meminfo | head -1) MiB; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $commit ($subject)$dirty"
  echo "command: $*"
  [[ -n $note ]] && echo "note: $note"
  echo "---"
} > "$out"
(cd "$ROOT" && "$@") 2>&1 | tee -a "$out"
status=${PIPESTATUS[0]}
echo "(exit status $status; load average at end $(cut -d' ' -f1-3 /proc/loadavg))" >> "$out"
echo "recorded in ${out#"$ROOT"/}" >&2
exit "$status"
