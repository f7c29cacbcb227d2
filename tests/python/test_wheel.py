# The package installs offline into a fresh venv, as a wheel and from source, and runs an allreduce.
"""python/build_wheel.py builds the wheel with the build's libringd inside. pip installs it,
with no index, into a new virtual environment, and two rank processes of that environment's
Python, started in a temporary directory with no PYTHONPATH, no RINGD_LIBRARY and no
LD_LIBRARY_PATH, allreduce through a real ringd: the package must come from the venv and load
the library the wheel carries. That venv sees the system's site-packages for numpy (a declared
dependency Debian ships as no wheel); the test checks ringd itself is the venv's. In that venv,
RINGD_LIBRARY naming another copy of libringd wins over the packaged one, and naming a missing
file is an error that says so. `pip install ./python` is run as docs/python.md gives it offline
(a --system-site-packages venv, its own pip, --no-index --no-build-isolation) on a copy of the
source staged as build_wheel.py stages it, and the installed package allreduces the same way. A
wheel without the library, in a venv that sees nothing else, imports but refuses to load
libringd, naming the three places it looked."""
import json
import os
import runpy
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RANK = r"""
import json, sys
import numpy, ringd
sock, job = sys.argv[1:3]
with ringd.Session(socket=sock, job=job, world_size=2, local_size=2, open_timeout_ms=60000,
                   op_timeout_ms=60000) as s:
    a = numpy.arange(4096, dtype=numpy.float32) * (s.rank + 1)
    r = s.allreduce("wheel.grad", a)
    print(json.dumps({"rank": s.rank, "sum": float(r.sum()), "first": float(r[1]),
                      "version": ringd.__version__, "library_version": ringd.library_version(),
                      "library": ringd.library_path(), "package": ringd.__file__}))
"""

# Which libringd a process loaded: what ringd reports, and what the loader mapped.
LOADED = r"""
import json, ringd
path = ringd.library_path()
mapped = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libringd" in l})
print(json.dumps({"library": path, "mapped": mapped}))
"""


def _clean_env(keep_preload):
    """The environment without anything pointing into the source or build tree; LD_PRELOAD
    (the ASan runtime of a sanitizer build) only where libringd gets loaded."""
    drop = {"PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "VIRTUAL_ENV"}
    if not keep_preload:
        drop.add("LD_PRELOAD")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("RINGD_")}


def _run(args, cwd, timeout=300, keep_preload=False):
    done = subprocess.run(args, cwd=cwd, env=_clean_env(keep_preload), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout)
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, f"{' '.join(args)}: exit status {done.returncode}\n{out}"
    return out


def _project_version():
    meson, build = os.environ.get("MESON"), os.environ.get("MESON_BUILD_ROOT")
    if not meson or not build:
        pytest.fail("MESON and MESON_BUILD_ROOT are not set (meson test sets them)",
                    pytrace=False)
    info = subprocess.run([meson, "introspect", "--projectinfo", build], check=True,
                          stdout=subprocess.PIPE, timeout=60).stdout
    return json.loads(info)["version"]


def _wheel(tmp, library):
    """Builds the wheel (carrying library, or none) into tmp; returns its path."""
    args = [sys.executable, os.path.join(ROOT, "python", "build_wheel.py"), "--out", str(tmp)]
    if library:
        args += ["--library", library]
    return _run(args, cwd=tmp).split()[-1]


def _venv(tmp, wheel, system_site_packages):
    """A new venv under tmp with wheel installed by pip (no index); returns its python."""
    venv = os.path.join(tmp, "venv")
    args = [sys.executable, "-m", "venv", "--without-pip", venv]
    if system_site_packages:
        args.insert(3, "--system-site-packages")
    _run(args, cwd=tmp)
    python = os.path.join(venv, "bin", "python")
    # The system's pip, installing into the venv: the venv needs no pip of its own.
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index",
          "--disable-pip-version-check", "--no-warn-script-location", wheel]
         + ([] if system_site_packages else ["--no-deps"]), cwd=tmp)
    return python


def _allreduce(python, tmp, daemon):
    """Two rank processes of python, in a new directory under tmp with a clean environment,
    allreduce through daemon; returns their reports (RANK), rank 0's first."""
    run_dir = os.path.join(tmp, "run")
    os.mkdir(run_dir)
    ranks = [subprocess.Popen([python, "-c", RANK, daemon.sock, f"wheel.{os.getpid()}"],
                              cwd=run_dir, env=_clean_env(True), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    for r in ranks:
        try:
            outs.append(r.communicate(timeout=120))
        except subprocess.TimeoutExpired:
            for k in ranks:
                k.kill()
            raise
    for r, (out, err) in zip(ranks, outs):
        assert r.returncode == 0, f"rank exit status {r.returncode}:\n{out}{err}"
    return sorted((json.loads(out.splitlines()[-1]) for out, _ in outs), key=lambda g: g["rank"])


def _check_installed(got, venv, version):
    """The ranks' reports: the right sums, and package and library from venv."""
    venv = os.path.realpath(venv)
    assert [g["rank"] for g in got] == [0, 1], got
    for g in got:
        assert g["sum"] == 3 * sum(range(4096)) and g["first"] == 3.0, g
        assert g["version"] == version and g["library_version"] == version, g
        assert os.path.realpath(g["package"]).startswith(venv + os.sep), g
        assert os.path.realpath(g["library"]).startswith(venv + os.sep), g
        assert os.path.basename(g["library"]) == f"libringd.so.{version.split('.')[0]}", g


def _loaded(python, cwd, ringd_library):
    """python's ringd with RINGD_LIBRARY=ringd_library: (exit status, output)."""
    env = dict(_clean_env(True), RINGD_LIBRARY=ringd_library)
    done = subprocess.run([python, "-c", LOADED], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60)
    return done.returncode, done.stdout.decode(errors="replace")


def _check_ringd_library_wins(python, tmp, library):
    """RINGD_LIBRARY comes before the package's own libringd: another copy of it is the one
    loaded, and a missing file is an error naming RINGD_LIBRARY, not a fall back."""
    other = os.path.join(tmp, "other", "libringd.so")
    os.makedirs(os.path.dirname(other))
    shutil.copyfile(library, other)
    rc, out = _loaded(python, tmp, other)
    assert rc == 0, out
    got = json.loads(out.splitlines()[-1])
    assert got == {"library": other, "mapped": [os.path.realpath(other)]}, got
    missing = os.path.join(tmp, "other", "missing.so")
    rc, out = _loaded(python, tmp, missing)
    assert rc != 0 and f"RINGD_LIBRARY={missing}: no such file" in out, out


def _library():
    library = os.environ.get("RINGD_LIBRARY")
    if not library:
        pytest.fail("RINGD_LIBRARY is not set (meson test sets it)", pytrace=False)
    return library


def test_wheel_with_library_allreduces_from_a_fresh_venv(tmp_path, daemon):
    library = _library()
    version = _project_version()
    wheel = _wheel(tmp_path, library)
    assert os.path.basename(wheel).startswith(f"ringd-{version}-py3-none-linux_"), wheel
    python = _venv(tmp_path, wheel, system_site_packages=True)
    got = _allreduce(python, tmp_path, daemon)
    _check_installed(got, os.path.join(tmp_path, "venv"), version)
    _check_ringd_library_wins(python, tmp_path, library)


def test_pip_install_source_offline_allreduces_from_a_fresh_venv(tmp_path, daemon):
    # docs/python.md's offline recipe, on python/ and the top meson.build staged with the
    # build's libringd inside, as build_wheel.py stages them.
    version = _project_version()
    stage = runpy.run_path(os.path.join(ROOT, "python", "build_wheel.py"))["stage"]
    src = stage(os.path.join(tmp_path, "src"), _library())
    venv = os.path.join(tmp_path, "venv")
    _run([sys.executable, "-m", "venv", "--system-site-packages", venv], cwd=tmp_path)
    _run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation",
          src], cwd=tmp_path)
    _check_installed(_allreduce(os.path.join(venv, "bin", "python"), tmp_path, daemon), venv,
                     version)


def test_wheel_without_library_says_where_it_looked(tmp_path):
    # In the environment the venv's Python gets (meson test's LD_LIBRARY_PATH, which names
    # the build's client/, is not in it).
    found = _run([sys.executable, "-c",
                  "import ctypes.util; print(ctypes.util.find_library('ringd'))"], cwd=tmp_path)
    if found.strip() != "None":
        pytest.skip("this system has a libringd of its own, which the package would load")
    version = _project_version()
    wheel = _wheel(tmp_path, None)
    assert os.path.basename(wheel) == f"ringd-{version}-py3-none-any.whl", wheel
    python = _venv(tmp_path, wheel, system_site_packages=False)
    probe = "import ringd; print(ringd.__version__); print(ringd.library_path())"
    done = subprocess.run([python, "-c", probe], cwd=tmp_path, env=_clean_env(True),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = done.stdout.decode(errors="replace")
    assert done.returncode != 0 and out.startswith(version + "\n"), out
    assert "libringd not found. Looked at: (1) RINGD_LIBRARY: not set; (2) the copy installed " \
        "with this package" in out and "(3) the system's" in out, out
