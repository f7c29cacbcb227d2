#!/usr/bin/env python3
# Builds the ringd wheel offline: the package of this tree, with a build's libringd inside.
"""usage: build_wheel.py [--library PATH] [--out DIR]

Stages python/ (pyproject.toml, setup.py, install.py.in, ringd/) and the top meson.build (the
version) into a temporary directory, copies the library at PATH there as ringd/libringd.so.N
(N: the project's major version, libringd's soname), and runs
`python3 -m pip wheel --no-deps --no-build-isolation --no-index` on it, so that nothing is
fetched and the source tree is left untouched. Without --library the wheel is pure Python and
uses the system's libringd. Prints the wheel's path. `ninja -C build python-wheel` runs it on
the build's libringd, writing into build/python/dist.
"""
import argparse
import glob
import os
import runpy
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def stage(into, library):
    """Copies the package's sources (and library, when given) under into; returns python/'s copy."""
    python = os.path.join(into, "python")
    os.makedirs(python)
    shutil.copyfile(os.path.join(ROOT, "meson.build"), os.path.join(into, "meson.build"))
    for name in ("pyproject.toml", "setup.py", "install.py.in"):
        shutil.copyfile(os.path.join(HERE, name), os.path.join(python, name))
    shutil.copytree(os.path.join(HERE, "ringd"), os.path.join(python, "ringd"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_install.py",
                                                  "libringd.so*"))
    if library:
        version = runpy.run_path(os.path.join(HERE, "ringd", "_version.py"))[
            "from_meson_build"](os.path.join(ROOT, "meson.build"))
        soname = "libringd.so." + version.split(".")[0]
        shutil.copyfile(library, os.path.join(python, "ringd", soname))  # follows the links
    return python


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", help="the libringd.so the wheel carries (none: pure wheel)")
    ap.add_argument("--out", default=".", help="directory the wheel is written to")
    args = ap.parse_args()
    if args.library and not os.path.isfile(args.library):
        sys.exit(f"build_wheel.py: --library {args.library}: no such file")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ringd-wheel.") as tmp:
        src = stage(tmp, args.library)
        wheels = os.path.join(tmp, "wheels")
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                               "--no-build-isolation", "--no-index", "--disable-pip-version-check",
                               "-q", "-w", wheels, src], cwd=tmp)
        if done.returncode != 0:
            sys.exit(f"build_wheel.py: pip wheel {src} failed (exit status {done.returncode})")
        built = glob.glob(os.path.join(wheels, "ringd-*.whl"))
        if len(built) != 1:
            sys.exit(f"build_wheel.py: pip wheel wrote {built}, not one ringd wheel")
        target = os.path.join(out, os.path.basename(built[0]))
        shutil.copyfile(built[0], target)
    print(target)


if __name__ == "__main__":
    main()
