"""Loading the allday_interfaces package (custom message, action and service types built by colcon)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any


def load_interfaces(kind: str = "action") -> Any:
    """Import ``allday_interfaces.<kind>`` (msg, action or srv).

    Preloads its typesupport libraries when their folder is not on ``LD_LIBRARY_PATH``: rosidl dlopens them by
    bare file name and the loader reads ``LD_LIBRARY_PATH`` only at process start, so this lets ``PYTHONPATH``
    alone suffice."""
    try:
        import importlib

        import allday_interfaces

        module = importlib.import_module(f"allday_interfaces.{kind}")
    except ImportError as exc:
        raise ImportError(f"allday_interfaces is not importable ({exc}): build the workspace with "
                          "scripts/build_ros.sh and `source scripts/ros_env.sh`") from exc

    here = Path(allday_interfaces.__file__).parent  # <prefix>/lib/python3.X/site-packages/allday_interfaces
    ld = set(filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)))
    for libdir in (here.parents[2], here.parents[3] / "lib"):
        libs = sorted(libdir.glob("liballday_interfaces__*.so"))
        if libs and str(libdir) not in ld:
            for lib in libs:  # generator_c sorts first: the others link against it
                ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
            break
    return module
