# `meson install` puts the ringd package where Python finds it, and it finds the installed libringd.
"""Installs the build into a temporary DESTDIR and imports ringd from there, with no
RINGD_LIBRARY and outside the source tree: the package must load the libringd.so.N installed
with it (ringd/_install.py), not the build tree's."""
import glob
import os
import subprocess
import sys
import tempfile

import pytest


def test_installed_package_loads_installed_library():
    meson, build = os.environ.get("MESON"), os.environ.get("MESON_BUILD_ROOT")
    if not meson or not build:
        pytest.fail("MESON and MESON_BUILD_ROOT are not set (meson test sets them)",
                    pytrace=False)
    with tempfile.TemporaryDirectory(prefix="ringd-py-install.") as tmp:
        dest = os.path.join(tmp, "dest")
        # --no-rebuild: meson test built everything; a second ninja now could race with it.
        done = subprocess.run([meson, "install", "-C", build, "--no-rebuild", "--destdir", dest],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        assert done.returncode == 0, done.stdout.decode(errors="replace")
        inits = glob.glob(os.path.join(dest, "**", "ringd", "__init__.py"), recursive=True)
        assert len(inits) == 1, f"installed ringd packages: {inits}"
        purelib = os.path.dirname(os.path.dirname(inits[0]))
        assert os.path.exists(os.path.join(purelib, "ringd", "torch", "optimizer.py"))
        env = {k: v for k, v in os.environ.items() if k not in ("RINGD_LIBRARY", "PYTHONPATH")}
        env["PYTHONPATH"] = purelib
        probe = ("import ringd; print(ringd.library_path()); "
                 "print(ringd.library_version())")
        done = subprocess.run([sys.executable, "-c", probe], cwd=tmp, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = done.stdout.decode(errors="replace")
        assert done.returncode == 0, out
        path, version = out.split()[-2:]
        assert os.path.realpath(path).startswith(os.path.realpath(dest)), out
        assert os.path.basename(path).startswith("libringd.so."), out
        assert version.count(".") == 2, out
