#!/usr/bin/env python3
"""The zoo's own machinery, without network, models or ONNX Runtime: the skip when nothing is
cached and the registry is out of reach, a wrong sha256 refused (never skipped), the
comparison's verdicts, and the input generators. Exits 1 on the first wrong answer."""
import io
import os
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fetch  # noqa: E402
import manifest  # noqa: E402
import zoo  # noqa: E402


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def test_skip_when_nothing_cached():
    with tempfile.TemporaryDirectory() as cache:
        for script, extra in (("fetch.py", []), ("zoo.py", ["check"])):
            r = subprocess.run([sys.executable, os.path.join(HERE, script), *extra, "--cache",
                                cache, "--offline"], capture_output=True, text=True)
            check(r.returncode == fetch.SKIP,
                  f"{script} {' '.join(extra)} with an empty cache and no registry: exit 77 "
                  f"(got {r.returncode}: {r.stdout.strip()[-200:]})")


def _tarball(path, files):
    with tarfile.open(path, "w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_hashes():
    saved = (dict(manifest.PACKAGES), list(manifest.MODELS))
    try:
        with tempfile.TemporaryDirectory() as cache:
            tgz = os.path.join(cache, fetch.tarball_name("@zoo/fake", "1.0.0"))
            _tarball(tgz, {"package/m.onnx": b"model bytes"})
            manifest.PACKAGES.clear()
            manifest.PACKAGES["@zoo/fake"] = ("1.0.0", fetch.sha256(tgz))
            good = {"name": "fake", "package": "@zoo/fake", "path": "package/m.onnx",
                    "sha256": fetch.sha256(tgz)}  # the wrong hash: the tarball's
            manifest.MODELS[:] = [good]
            try:
                fetch.fetch_all(cache, log=lambda s: None, offline=True)
                check(False, "a model whose sha256 differs is refused")
            except fetch.HashError as e:
                check("sha256" in str(e) and "fake" in str(e),
                      f"a model whose sha256 differs is refused: {e}")
            import hashlib
            good["sha256"] = hashlib.sha256(b"model bytes").hexdigest()
            found = fetch.fetch_all(cache, log=lambda s: None, offline=True)
            check(list(found) == ["fake"] and open(found["fake"], "rb").read() == b"model bytes",
                  "the right sha256 extracts the model into the cache")
            with open(found["fake"], "wb") as f:
                f.write(b"tampered")
            found = fetch.fetch_all(cache, log=lambda s: None, offline=True)
            check(open(found["fake"], "rb").read() == b"model bytes",
                  "a tampered cached model is extracted again from the verified tarball")
    finally:
        manifest.PACKAGES.clear()
        manifest.PACKAGES.update(saved[0])
        manifest.MODELS[:] = saved[1]


def test_compare():
    want = {"y": np.array([[1.0, -2.0, 3.0]], np.float32), "n": np.array([4], np.int64)}
    tol = (1e-4, 1e-3)
    err, problem = zoo.compare({"y": want["y"] + 5e-4, "n": want["n"]}, want, tol)
    check(problem is None and abs(err - 5e-4) < 1e-6, "errors within atol + rtol*|ORT| pass")
    check(abs(err.used - 5e-4 / 1.1e-3) < 1e-3,
          f"the fraction of the tolerance used is the worst element's ({err.used:.3f})")
    bad = want["y"].copy()
    bad[0, 1] += 0.01
    err, problem = zoo.compare({"y": bad, "n": want["n"]}, want, tol)
    check(problem is not None and "y[0, 1]" in problem and abs(err - 0.01) < 1e-6,
          f"an error past the tolerance fails, naming the element: {problem}")
    _, problem = zoo.compare({"y": want["y"][:, :2], "n": want["n"]}, want, tol)
    check(problem is not None and "shape" in problem, "a wrong shape fails")
    nan = want["y"].copy()
    nan[0, 0] = np.nan
    _, problem = zoo.compare({"y": nan, "n": want["n"]}, want, tol)
    check(problem is not None and "NaN" in problem, "a NaN ORT does not have fails")
    _, problem = zoo.compare({"y": want["y"], "n": want["n"] + 1}, want, tol)
    check(problem is not None, "integer outputs must be equal")
    _, problem = zoo.compare({"y": want["y"]}, want, tol)
    check(problem is not None and "missing" in problem, "a missing output fails")
    # atol relative to the output's range: 1e-4 of max |ORT| = 3 allows 3e-4 near zero.
    big = {"y": np.array([[0.001, -2.0, 3.0]], np.float32)}
    near = {"y": big["y"] + np.array([[2.5e-4, 0, 0]], np.float32)}
    check(zoo.compare(near, big, (1e-4, 1e-3))[1] is not None,
          "2.5e-4 off a 1e-3 element fails with a plain atol of 1e-4")
    err, problem = zoo.compare(near, big, (1e-4, 1e-3, "range"))
    check(problem is None and abs(err.used - 2.5e-4 / (3e-4 + 1e-6)) < 1e-2,
          f"and passes with atol 1e-4 of the output's range ({problem})")
    far = {"y": big["y"] + np.array([[4e-4, 0, 0]], np.float32)}
    check(zoo.compare(far, big, (1e-4, 1e-3, "range"))[1] is not None,
          "4e-4 off fails with atol 1e-4 of the range (3e-4)")


def test_inputs():
    rng = np.random.default_rng(1)
    feeds = zoo.make_feeds({"*": ("audio", 16000, 512, 2), "sr": ("scalar_i64", 16000)},
                           ["audio_in"], rng)
    a = feeds["audio_in"]
    check(a.shape == (2, 512) and a.dtype == np.float32 and np.abs(a).max() <= 1 and
          a.std() > 0.01 and feeds["sr"].shape == () and feeds["sr"].dtype == np.int64,
          "audio chunks: [batch, samples] float32 in [-1, 1], a scalar int64 rate")
    img = zoo.make_input(("image", 2, 3, 48, 64), rng)
    check(img.shape == (2, 3, 48, 64) and img.dtype == np.float32 and
          -3 < img.min() < img.max() < 3, "images: NCHW float32, ImageNet-normalized")
    rgba = zoo.make_input(("image_nhwc", 2, 16, 24, 4, 0.0, 255.0, 1.0), rng)
    check(rgba.shape == (2, 16, 24, 4) and rgba.dtype == np.float32 and
          0 <= rgba[..., :3].min() < rgba[..., :3].max() <= 255 and rgba[..., :3].std() > 1 and
          np.all(rgba[..., 3] == 1), "NHWC images: RGB in [lo, hi], a constant alpha channel")
    rgb = zoo.make_input(("image_nhwc", 1, 8, 8, 3, -1.0, 1.0), rng)
    check(rgb.shape == (1, 8, 8, 3) and -1 <= rgb.min() < rgb.max() <= 1,
          "NHWC images in [-1, 1] (BlazeFace)")
    a2 = zoo.make_input(("audio", 8000, 256, 1), np.random.default_rng(zoo.seed_of("m", 0)))
    a3 = zoo.make_input(("audio", 8000, 256, 1), np.random.default_rng(zoo.seed_of("m", 0)))
    check(np.array_equal(a2, a3), "inputs are the same on every run (seeded by name)")


def test_manifest():
    names = [m["name"] for m in manifest.MODELS]
    check(len(set(names)) == len(names), "model names are unique")
    distinct = {m["sha256"] for m in manifest.MODELS}
    packages = {m["package"] for m in manifest.MODELS}
    check(len(distinct) >= 20 and len(packages) >= 6 and packages <= set(manifest.PACKAGES),
          f"{len(distinct)} distinct models from {len(packages)} pinned packages")
    for m in manifest.MODELS:
        check(len(m["sha256"]) == 64 and m["cases"] and m["tol"][0] <= 1e-3 and
              m["tol"][1] <= 1e-3, f"{m['name']}: pinned, with cases and a tolerance no "
              "looser than 1e-3")


def main():
    test_skip_when_nothing_cached()
    test_hashes()
    test_compare()
    test_inputs()
    test_manifest()
    print("zoo_selftest: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
