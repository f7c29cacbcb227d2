# ringd.__version__: the project version of the top meson.build, the one source of truth.
"""The package's version. A built package (a wheel, `pip install`, `meson install`) has it in
ringd/_install.py; a source checkout on PYTHONPATH reads the checkout's meson.build, as setup.py
and build_wheel.py do (they run this file by path)."""
import os
import re
from typing import Optional

_PROJECT = re.compile(r"project\(\s*'ringd'.*?\bversion\s*:\s*'([^']+)'", re.S)


def from_meson_build(path: str) -> Optional[str]:
    """The version in the project() call of the meson.build at path; None when it has none."""
    try:
        with open(path, encoding="utf-8") as f:
            m = _PROJECT.search(f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def version() -> str:
    """This package's version: as built, else the source checkout's, else "0+unknown"."""
    try:
        from ._install import VERSION

        return VERSION
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    return from_meson_build(os.path.join(here, "..", "..", "meson.build")) or "0+unknown"
