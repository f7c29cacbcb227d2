# How the ringd package finds libringd, and the clear errors when what it finds will not do.
"""Each case imports ringd in a fresh interpreter (no torch: it starts in a fraction of a
second) with the environment changed, and reads what it loaded or why it refused."""
import os
import subprocess
import sys

import pytest

PROBE = "import ringd; print(ringd.library_path())"


def _python(env, code=PROBE):
    done = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60, cwd="/")
    return done.returncode, done.stdout.decode(errors="replace")


def _env(**changes):
    env = dict(os.environ)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def test_ringd_library_that_does_not_exist():
    rc, out = _python(_env(RINGD_LIBRARY="/nonexistent/libringd.so"))
    assert rc != 0 and "RINGD_LIBRARY=/nonexistent/libringd.so: no such file" in out, out


def test_a_library_that_is_not_libringd():
    libm = "/lib/x86_64-linux-gnu/libm.so.6"
    if not os.path.exists(libm):
        libm = "/usr/lib64/libm.so.6"
    rc, out = _python(_env(RINGD_LIBRARY=libm))
    assert rc != 0 and "does not export ringd_" in out, out


def test_build_tree_not_searched_without_ringd_library():
    """From the source tree, which has built libraries, with no RINGD_LIBRARY: nothing is
    found (a checkout's build folders are never a default), and the error names the three
    places looked at and the fixes."""
    env = _env(RINGD_LIBRARY=None, LD_LIBRARY_PATH=None)  # meson test's names build/client
    _, found = _python(env, "import ctypes.util; print(ctypes.util.find_library('ringd'))")
    if found.strip() != "None":
        pytest.skip("this system has a libringd of its own, which the package would load")
    rc, out = _python(env)
    assert rc != 0, out
    for part in ("libringd not found. Looked at: (1) RINGD_LIBRARY: not set;",
                 "(2) the copy installed with this package",
                 "none recorded (a source checkout", "(3) the system's",
                 "Fix: set RINGD_LIBRARY to a libringd.so"):
        assert part in out, out


def test_sanitizer_build_without_its_runtime_is_refused():
    lib = os.environ["RINGD_LIBRARY"]
    with open(lib, "rb") as f:
        if b"libasan.so" not in f.read():
            pytest.skip("libringd is not an AddressSanitizer build")
    rc, out = _python(_env(LD_PRELOAD=None))
    assert rc != 0 and "LD_PRELOAD=$(gcc -print-file-name=libasan.so)" in out, out
