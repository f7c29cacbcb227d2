# The build steps pyproject.toml cannot say: the version, ringd/_install.py, a wheel's platform.
"""setuptools glue of the ringd package.

The version is the project version of the top meson.build (../meson.build: this directory is
built from the ringd source tree, or from build_wheel.py's copy of it). Every build writes
ringd/_install.py (install.py.in) into what it installs. When ringd/ holds a libringd.so.N
(build_wheel.py copies the build's there), the wheel carries it, records it as the library
installed with the package and is tagged for this platform (py3-none-linux_x86_64: the library
is loaded by ctypes, so any Python 3 of the platform can use it).

setup.py imports no wheel module: bdist_wheel comes from whichever package provides it (the wheel
package for setuptools before 70.1, Debian's 66 included; setuptools itself from 70.1), looked up
when pip builds the wheel, so a missing one gets an error that says how to install it offline.
"""
import glob
import os
import runpy

import setuptools
from setuptools.errors import ModuleError
from setuptools.command.build_py import build_py

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
    """With libringd inside, the package installs into platlib and its wheel is for this
    platform, tagged py3-none-<platform>; without it, the wheel is pure (py3-none-any)."""

    def has_ext_modules(self):
        return bool(LIBRARIES)

    def get_command_class(self, command):
        try:
            cls = super().get_command_class(command)
        except ModuleError:
            if command != "bdist_wheel":
                raise
            raise SystemExit(
                "setup.py: no bdist_wheel command: setuptools before 70.1 takes it from the "
                "wheel package, which this Python lacks. Offline, install Debian's into the venv "
                "first (pip install --no-index --find-links /usr/share/python-wheels wheel) or "
                "make the venv with --system-site-packages (docs/python.md, Install)")
        if command == "bdist_wheel" and LIBRARIES and not hasattr(cls, "ringd_tagged"):
            cls = self.cmdclass[command] = _platform_tagged(cls)
        return cls


def _platform_tagged(bdist_wheel):
    """bdist_wheel, tagging the wheel for any Python 3 of this platform."""

    class BdistWheel(bdist_wheel):
        ringd_tagged = True

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    return BdistWheel


setuptools.setup(version=VERSION, distclass=Distribution, cmdclass={"build_py": BuildPy})
