"""Process-wide OpenGL (EGL) setup that must happen before the first MuJoCo GL context.

Measured here: when Mesa's EGL (llvmpipe, which links its own LLVM) has made a context and *then*
``triton`` is imported (transformers and ``torch._dynamo`` import it lazily), the process dies with
SIGSEGV inside LLVM's static initialisers. Loading triton first is safe. :func:`prepare_gl` does that
when triton is installed (about 0.2 s once torch is loaded) and is a no-op otherwise.
"""

from __future__ import annotations

import importlib.util
import logging
import os

log = logging.getLogger(__name__)
_done = False


def prepare_gl() -> None:
    """Import the libraries that crash if loaded after an EGL context exists; call before rendering."""
    global _done
    if _done:
        return
    _done = True
    if os.environ.get("ALLDAY_SKIP_GL_PRELOAD") == "1" or importlib.util.find_spec("triton") is None:
        return
    try:
        import triton  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken optional install must not stop the simulator
        log.warning("prepare_gl: could not preload triton (%s); do not import it after rendering", exc)
