#!/usr/bin/env bash
# Runs CI on a bare Debian 12: makes a minimal bookworm chroot (debootstrap --variant=minbase),
# copies a clean clone of this repository's HEAD into it (with ../shared beside it when there is
# one, as CI has), and runs `bash .ci/run` inside it as root. It shows that tools/install-deps.sh
# installs everything the build and the tests need: nothing from this machine leaks in.
#
#   sudo bash tools/ci/bare-debian-check.sh [--quick] [--warm] [--cuda] [--keep] [--dir DIR]
#                                           [--mirror URL]
#
#   --quick       stop after the cheap part: install-deps.sh test, the Python imports of the
#                 tests (tools/ci/check_test_imports.py), the format stage, and configuring the
#                 Release, address-sanitizer and thread-sanitizer trees. Minutes, not the full
#                 cold CI run's hour of both cores.
#   --warm        after the cold run, remove the clone, clone again into the same folder and run
#                 `.ci/run` a second time in the same chroot: packages installed and ccache warm,
#                 as on a CI machine that keeps its cache between runs. Each run's time is
#                 printed.
#   --cuda        bind the host's /usr/local/cuda into the chroot, read-only, as CI machines have
#                 the toolkit there (it does not come from Debian): the build then has CUDA too
#   --keep        leave the chroot in place (default: removed at the end)
#   --dir DIR     where to make the chroot (default: /var/tmp/dynvm-bare-debian; must not exist)
#   --mirror URL  the Debian mirror (default: http://deb.debian.org/debian)
#
# Needs root, debootstrap, and the mirror. The log of the run inside is DIR.log beside the chroot
# (kept either way); the exit status is the run's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
QUICK=0
WARM=0
CUDA=0
KEEP=0
DIR=/var/tmp/dynvm-bare-debian
MIRROR=http://deb.debian.org/debian
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --warm) WARM=1 ;;
    --cuda) CUDA=1 ;;
    --keep) KEEP=1 ;;
    --dir) DIR=${2:?--dir needs a folder}; shift ;;
    --mirror) MIRROR=${2:?--mirror needs a URL}; shift ;;
    -h|--help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bare-debian-check: unknown option $1 (--quick, --warm, --cuda, --keep, --dir DIR, --mirror URL)" >&2; exit 2 ;;
  esac
  shift
done
if [[ $EUID -ne 0 ]]; then echo "bare-debian-check: run as root (debootstrap, chroot, mount)" >&2; exit 1; fi
command -v debootstrap > /dev/null || { echo "bare-debian-check: apt-get install debootstrap" >&2; exit 1; }
if [[ -e "$DIR" ]]; then
  echo "bare-debian-check: $DIR exists: remove it, or choose another with --dir" >&2
  exit 1
fi
LOG=$DIR.log
START=$SECONDS

mounted=()
cleanup() {
  local rc=$?
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -R -l "${mounted[$i]}" 2> /dev/null || true; done
  if [[ $KEEP = 0 && -d "$DIR" ]]; then
    # Only after every mount is gone: rm must not reach the host's /dev or /proc.
    if ! grep -q " $DIR/" /proc/mounts; then rm -rf --one-file-system "$DIR"; fi
  fi
  echo "bare-debian-check: exit status $rc after $((SECONDS - START)) s; log: $LOG"
}
trap cleanup EXIT

echo "=== debootstrap --variant=minbase bookworm $DIR $MIRROR"
debootstrap --variant=minbase bookworm "$DIR" "$MIRROR" > "$LOG" 2>&1 ||
  { tail -30 "$LOG"; echo "bare-debian-check: debootstrap failed" >&2; exit 1; }
echo "=== chroot made in $((SECONDS - START)) s: $(du -sh "$DIR" | cut -f1)"
cp /etc/resolv.conf "$DIR/etc/resolv.conf"
# The network's own certificate authorities (a TLS-intercepting proxy's, where there is one): the
# network's, like resolv.conf, not the project's. ca-certificates, installed by install-deps.sh,
# adds them to the system's store, which apt, git, npm and node use.
if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
  mkdir -p "$DIR/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$DIR/usr/local/share/ca-certificates/"
fi
mount -t proc proc "$DIR/proc" && mounted+=("$DIR/proc")
mount --rbind /dev "$DIR/dev" && mount --make-rslave "$DIR/dev" && mounted+=("$DIR/dev")
if [[ $CUDA = 1 ]]; then
  [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "bare-debian-check: --cuda: no /usr/local/cuda/bin/nvcc" >&2; exit 1; }
  mkdir -p "$DIR/usr/local/cuda"
  mount --bind /usr/local/cuda "$DIR/usr/local/cuda" && mounted+=("$DIR/usr/local/cuda")
  mount -o remount,bind,ro "$DIR/usr/local/cuda"
fi

# A clean clone of HEAD (what CI checks out), without this machine's git hooks or config.
mkdir -p "$DIR/ci"
git clone -q --no-hardlinks "$ROOT" "$DIR/ci/dynvm"
echo "=== cloned $(git -C "$DIR/ci/dynvm" log -1 --format='%h %s')"
if [[ -d "$ROOT/../shared" ]]; then cp -r "$ROOT/../shared" "$DIR/ci/shared"; fi

if [[ $QUICK = 1 ]]; then
  inside='set -euo pipefail
    bash tools/test.sh --stages install,format
    /usr/bin/python3 tools/ci/check_test_imports.py
    configure() {
      local dir=$1; shift
      cmake -S . -B "build/$dir" -G Ninja "$@" > "build/$dir-configure.log" 2>&1 ||
        { cat "build/$dir-configure.log"; echo "!!! configuring build/$dir failed"; return 1; }
      grep -E "Python package|CUDA" "build/$dir-configure.log" || true
      echo "configured build/$dir"
    }
    configure release -DCMAKE_BUILD_TYPE=Release
    CC=clang CXX=clang++ configure asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DDYNVM_SANITIZE=address -DDYNVM_BUILD_FUZZERS=ON -DDYNVM_BUILD_BENCHMARKS=OFF
    CC=clang CXX=clang++ configure tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DDYNVM_SANITIZE=thread -DDYNVM_WITH_ONNX=OFF -DDYNVM_BUILD_BENCHMARKS=OFF
    echo "quick check passed"'
else
  inside='bash .ci/run'
fi
# A bare environment: no variables from this shell (no ccache, no launcher, no PATH extras).
# OPENBLAS_CORETYPE is the machine's, not this shell's: passed on as it is.
run_inside() {
  local clone=$1 t0=$SECONDS rc
  echo "=== in the chroot, $clone: ${inside%%$'\n'*}..."
  set +e
  chroot "$DIR" /usr/bin/env -i HOME=/root TERM=dumb CI=true \
    ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE} \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd $clone && $inside" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  set -e
  echo "=== the run inside the chroot ($clone) exited with $rc after $((SECONDS - t0)) s" | tee -a "$LOG"
  return "$rc"
}
rc=0
run_inside /ci/dynvm || rc=$?
if [[ $rc = 0 && $WARM = 1 && $QUICK = 0 ]]; then
  # The same path as the first clone: ccache keys hold the source paths, as on a CI machine
  # that checks out into the same folder every time.
  rm -rf "$DIR/ci/dynvm"
  git clone -q --no-hardlinks "$ROOT" "$DIR/ci/dynvm"
  echo "=== warm run: a fresh clean clone in the same place, packages installed, ccache warm"
  run_inside /ci/dynvm || rc=$?
fi
exit "$rc"
