"""Pinned CPU numerics (agents.core.numerics): the pin reaches torch when set first, fails loudly when it cannot,
and a run's record says which kernels and threads it used."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import agents.core.numerics as num

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean_env(monkeypatch):
    """The pinning variables unset for the test and restored after it."""
    for k in num.ENV_KEYS:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_a_pin_set_before_torch_loads_decides_its_kernels():
    code = ("import os; from agents.core.numerics import pin_cpu_numerics as p; p('default'); import torch; "
            "print(torch.backends.cpu.get_cpu_capability(), os.environ['MKL_CBWR'], os.environ['ONEDNN_MAX_CPU_ISA'])")
    env = {k: v for k, v in os.environ.items() if k not in num.ENV_KEYS}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    assert out.stdout.split() == ["DEFAULT", "COMPATIBLE", "SSE41"]


@pytest.mark.skipif(not num.cpu_has("avx2"), reason="needs AVX2")
def test_the_portable_pin_runs_avx2_kernels_with_mkls_vendor_neutral_gemms():
    code = ("import os; from agents.core.numerics import pin_choice as p; print(p('portable')); import torch; "
            "print(torch.backends.cpu.get_cpu_capability(), os.environ['MKL_CBWR'], os.environ['ONEDNN_MAX_CPU_ISA'])")
    env = {k: v for k, v in os.environ.items() if k not in num.ENV_KEYS}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    assert out.stdout.split() == ["portable", "AVX2", "COMPATIBLE", "AVX2"]


def test_pinning_another_isa_after_torch_loaded_is_an_error(clean_env):
    have = torch.backends.cpu.get_cpu_capability().lower()
    other = "default" if have != "default" else "avx2"
    if other == "avx2" and not num.cpu_has("avx2"):
        pytest.skip("torch runs its baseline kernels and the CPU has no AVX2: no other ISA to pin")
    with pytest.raises(RuntimeError, match="before importing torch"):
        num.pin_cpu_numerics(other)
    assert "MKL_CBWR" not in os.environ  # nothing half-set
    if have in num.PINS:  # the ISA torch runs: the variables the libraries read later are still set
        assert num.pin_cpu_numerics(have) == num.PINS[have] and os.environ["MKL_CBWR"] == num.PINS[have]["MKL_CBWR"]


def test_unknown_isa_and_an_isa_the_cpu_lacks(clean_env):
    with pytest.raises(ValueError, match="unknown ISA 'sse9'"):
        num.pin_cpu_numerics("sse9")
    clean_env.setattr(num, "cpu_flags", lambda: {"sse4_1", "fma"})
    with pytest.raises(ValueError, match=r"lacks \['avx2'\].*pin an ISA it has \(\['default'\]\)"):
        num.pin_cpu_numerics("avx2")
    assert num.pin_choice("auto") is None  # auto pins nothing on a CPU without AVX2
    assert not num.cpu_has("avx2") and not num.cpu_has("portable") and num.cpu_has("default")
    clean_env.setattr(num, "cpu_flags", lambda: {"avx2", "fma", "avx512f"})
    assert num.cpu_has("avx2") and num.cpu_has("portable") and not num.cpu_has("avx512")  # no BW, VL, DQ
    clean_env.setattr(num, "cpu_flags", lambda: None)
    assert not num.cpu_has("avx2") and num.cpu_has("default")
    assert not any(k in os.environ for k in num.ENV_KEYS)


def test_pin_choice_none_and_bad_choices(clean_env):
    assert num.pin_choice("none") is None and not any(k in os.environ for k in num.ENV_KEYS)
    with pytest.raises(ValueError, match="--pin-numerics must be one of"):
        num.pin_choice("fast")


def test_auto_after_torch_loaded_with_other_kernels_warns_and_pins_nothing(clean_env, caplog):
    clean_env.setattr(num, "cpu_flags", lambda: {"avx2", "fma"})
    clean_env.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    with caplog.at_level(logging.WARNING, logger="agents.core.numerics"):
        assert num.pin_choice("auto") is None
    assert "AVX512 kernels" in caplog.text and not any(k in os.environ for k in num.ENV_KEYS)


def test_numerics_info_is_what_this_process_runs(clean_env):
    clean_env.setenv("MKL_CBWR", "AVX2")
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads != 1 else 2)
    try:
        info = num.numerics_info()
        assert info["threads"] == torch.get_num_threads() != threads and info["torch"] == torch.__version__
    finally:
        torch.set_num_threads(threads)
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["env"] == {"MKL_CBWR": "AVX2"} and info["transformers"] and info["numpy"]
    assert isinstance(info["cpu"], str) and info["cpu"]
    if Path("/proc/cpuinfo").is_file():  # MKL honours its ISA branches on Intel CPUs only: the vendor is recorded
        assert info["vendor"] in Path("/proc/cpuinfo").read_text()


def test_numerics_key_is_what_decides_the_reductions_and_nothing_else(clean_env):
    clean_env.setenv("MKL_CBWR", "AVX2")
    key = num.numerics_key()
    assert key == {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                   "threads": torch.get_num_threads(), "env": {"MKL_CBWR": "AVX2"}}
    info = num.numerics_info()
    assert num.numerics_key({**info, "cpu": "another CPU", "python": "0.0"}) == key  # the CPU's name does not decide
    assert num.numerics_key({**info, "threads": key["threads"] + 1}) != key
