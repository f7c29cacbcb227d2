# The build steps pyproject.toml cannot say: the version, ringd/_install.py, a wheel's platform.
"""setuptools glue of the ringd package.

The version is the project version of the top meson.build (../meson.build: this directory is
built from the ringd source tree, or from build_wheel.py's copy of it). Every build writes
ringd/_install.py (install.py.in) into what it installs. When ringd/ holds a libringd.so.N
(build_wheel.py copies the build's there), the wheel carries it, records it as the library
installed with the package and is tagged for this platform (py3-none-linux_x86_64: the library
is loaded by ctypes, so any Python 3 of the platform can use it).
"""
import glob
import os
import runpy

import setuptools
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = runpy.run_path(os.path.join(HERE, "ringd", "_version.py"))["from_meson_build"](
    os.path.join(HERE, "..", "meson.build"))
if VERSION is None:
    raise SystemExit(f"{HERE}/../meson.build: no ringd project version; build the package "
                     "from the ringd source tree (pip install ./python) or with "
                     "python/build_wheel.py")
LIBRARIES = sorted(os.path.basename(p)
                   for p in glob.glob(os.path.join(HERE, "ringd", "libringd.so.*")))
if len(LIBRARIES) > 1:
    raise SystemExit(f"{HERE}/ringd holds {', '.join(LIBRARIES)}: a wheel carries one libringd")


class BuildPy(build_py):
    """build_py, then ringd/_install.py from install.py.in."""

    def run(self):
        super().run()
        with open(os.path.join(HERE, "install.py.in"), encoding="utf-8") as f:
            text = f.read()
        values = {"VERSION": VERSION, "LIBRARY_FROM_PACKAGE": LIBRARIES[0] if LIBRARIES else "",
                  "LIBRARY": ""}
        for key, value in values.items():
            text = text.replace(f"@{key}@", value)
        with open(os.path.join(self.build_lib, "ringd", "_install.py"), "w",
                  encoding="utf-8") as f:
            f.write(text)


class Distribution(setuptools.Distribution):
    """With libringd inside, the package installs into platlib and its wheel is not pure."""

    def has_ext_modules(self):
        return bool(LIBRARIES)


class BdistWheel(bdist_wheel):
    """A wheel carrying libringd is for this platform, and for any Python 3 of it."""

    def get_tag(self):
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if LIBRARIES else (python, abi, plat)


setuptools.setup(version=VERSION, distclass=Distribution,
                 cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
