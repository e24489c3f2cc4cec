"""CPU numerics that decide a training run's weights bit for bit, and how to pin them.

On a CPU the same seed and config give the same weights only under the same float reductions: the number of torch
threads, the vector-ISA path of torch's own kernels (``ATEN_CPU_CAPABILITY``), of MKL's GEMMs (``MKL_CBWR``) and of
oneDNN's convolutions (``ONEDNN_MAX_CPU_ISA``). Each picks the widest ISA of the machine by default, so an AVX-512
machine and an AVX2 machine train different models from one config (docs/alldaywalker.md, "A twentieth look").
:func:`pin_cpu_numerics` fixes the three paths before torch loads; :func:`numerics_info` records what a run used.

MKL honours ``MKL_CBWR=AVX2`` / ``AVX512`` on Intel CPUs only; on others it takes its automatic branch, so across
CPU vendors only its ``COMPATIBLE`` branch (the ``portable`` pin, about 2.5x slower GEMMs than AVX2) can give the
same sums. Measured: an AMD Zen 2 box and an Intel AVX-512 box, both pinned to ``avx2``, train different weights
(docs/alldaywalker.md, "A twenty-first look").
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: ISA name -> the environment that fixes torch's, MKL's and oneDNN's code paths to it
PINS: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    # AVX2 kernels with MKL's one branch that every vendor's CPU runs alike (Intel's CNR documentation)
    "portable": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
#: ISA name -> the /proc/cpuinfo flags it needs (torch's AVX-512 kernels use the F, BW, VL and DQ subsets)
NEEDS: dict[str, tuple[str, ...]] = {"avx2": ("avx2", "fma"), "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
                                     "default": (), "portable": ("avx2", "fma")}
ENV_KEYS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def pin_cpu_numerics(isa: str) -> dict[str, str]:
    """Fix torch's, MKL's and oneDNN's CPU code paths to ``isa`` (a key of :data:`PINS`); returns the variables set.

    Call it before torch is imported: the libraries read these variables when they load. Once torch is loaded with
    another ISA it raises RuntimeError instead of silently changing nothing; with the same one it still sets the
    variables (MKL and oneDNN read theirs at their first call). An ISA the CPU lacks (``/proc/cpuinfo``) raises
    ValueError. With the same ISA, threads and library versions, two Intel machines are meant to reduce floats alike
    (MKL's conditional numerical reproducibility for its GEMMs; torch's and oneDNN's kernels follow the ISA path);
    across vendors MKL needs ``portable``. Neither is measured across two machines of one kind here: compare
    ``benchmarks/numerics_repro.py``'s hashes. Rendering (Mesa under EGL) is not covered by the pin; the same script
    hashes frames (an AMD and an Intel box rendered alike)."""
    if isa not in PINS:
        raise ValueError(f"unknown ISA {isa!r} to pin CPU numerics to; choose one of {sorted(PINS)}")
    flags = cpu_flags()
    missing = [f for f in NEEDS[isa] if flags is not None and f not in flags]
    if missing:
        raise ValueError(f"this CPU ({cpu_model()}) lacks {missing}: it cannot run the {isa!r} code paths; pin an ISA "
                         f"it has ({[k for k in NEEDS if cpu_has(k)]})")
    env = PINS[isa]
    if "torch" in sys.modules:
        import torch

        have = torch.backends.cpu.get_cpu_capability().lower()
        if have != env["ATEN_CPU_CAPABILITY"]:
            raise RuntimeError(f"torch is already loaded with CPU capability {have!r}; pin the numerics to {isa!r} "
                               "before importing torch (at the start of the command)")
    os.environ.update(env)
    log.info("CPU numerics pinned to %s: %s", isa, env)
    return dict(env)


def _cpuinfo(field: str) -> str | None:
    """The first ``field : value`` of ``/proc/cpuinfo``; None where the file or the field is missing."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from ``/proc/cpuinfo``; None where that file is not readable (not Linux)."""
    flags = _cpuinfo("flags")
    return set(flags.split()) if flags is not None else None


def cpu_has(isa: str) -> bool:
    """Whether this CPU has the flags the ``isa`` pin (a key of :data:`PINS`) needs; False where the flags are not
    readable and the pin needs any."""
    flags = cpu_flags() or set()
    return all(f in flags for f in NEEDS[isa])


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def numerics_info() -> dict[str, Any]:
    """What decided this process's float reductions: torch version, kernel ISA, threads, the pinning variables, the
    CPU and the versions of the libraries that build the models. Imports torch."""
    import torch

    info: dict[str, Any] = {
        "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(), "cpu": cpu_model(), "vendor": _cpuinfo("vendor_id"),
        "machine": platform.machine(),
        "python": platform.python_version(), "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
    }
    for pkg in ("numpy", "transformers", "tokenizers", "mujoco"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = None
    return info


def numerics_key(info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parts of :func:`numerics_info` (this process's when ``info`` is None) that decide the float reductions:
    kernel ISA, threads, pins, torch. A run resumed under another key does not repeat an uninterrupted one."""
    info = numerics_info() if info is None else info
    return {k: info.get(k) for k in ("torch", "cpu_capability", "threads", "env")}


PIN_CHOICES = ("auto", "none", *PINS)  # what a command's --pin-numerics takes
PIN_HELP = ("CPU code paths fixed before torch loads, so that a run repeats bit for bit (auto: avx2 where the CPU has "
            "it, alike across Intel CPUs with AVX2; portable: avx2 with MKL's vendor-neutral GEMMs, slower; none: "
            "the machine's widest, fastest; see agents.core.numerics)")  # what a command's --pin-numerics says


def pin_choice(choice: str) -> str | None:
    """Apply a command's ``--pin-numerics`` choice: an ISA of :data:`PINS`, ``none`` (the machine's defaults) or
    ``auto`` (``avx2`` where the CPU has it, else none); returns the ISA pinned, or None."""
    if choice not in PIN_CHOICES:
        raise ValueError(f"--pin-numerics must be one of {list(PIN_CHOICES)}, got {choice!r}")
    if choice == "none":
        return None
    if choice == "auto":
        if not cpu_has("avx2"):
            log.info("CPU numerics not pinned: no AVX2 on this CPU (%s)", cpu_model())
            return None
        choice = "avx2"
        if "torch" in sys.modules:  # loaded by the caller (a test, a notebook): best effort, never an error
            import torch

            if torch.backends.cpu.get_cpu_capability().lower() != PINS[choice]["ATEN_CPU_CAPABILITY"]:
                log.warning("CPU numerics not pinned: torch was loaded before the command with %s kernels",
                            torch.backends.cpu.get_cpu_capability())
                return None
    pin_cpu_numerics(choice)
    return choice
