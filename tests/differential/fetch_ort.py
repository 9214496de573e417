#!/usr/bin/python3
"""Fetches ONNX Runtime for node (onnxruntime-node) once, for every test that compares with it.

ctest's `ort_fetch` runs this first (a fixture: the tests against ONNX Runtime require it), so
that the tests which use ONNX Runtime never race to npm-install it into the same cache. It looks
in DYNVM_ORT_DIR and the cache (${XDG_CACHE_HOME:-~/.cache}/dynvm/ort), and npm-installs the
pinned version into the cache when it is missing. When it cannot be had (no npm, no network and
nothing cached) it exits 77: ctest reports it skipped, and so do the tests that need it.

  /usr/bin/python3 tests/differential/fetch_ort.py
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workers  # noqa: E402

SKIP = 77


def main():
    found = workers.find_ort()
    if found is not None:
        print(f"onnxruntime-node: {found} (cached)")
        return 0
    if shutil.which("npm") is None:
        print("SKIPPED: onnxruntime-node is not cached and npm is missing "
              "(tools/install-deps.sh test installs nodejs and npm)")
        return SKIP
    found = workers.install_ort()
    if found is None:
        print(f"SKIPPED: npm could not install onnxruntime-node into {workers.ort_cache_dir()} "
              "(no network?): the tests against ONNX Runtime are skipped")
        return SKIP
    print(f"onnxruntime-node: {found} (installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
