"""QuantLinear layers from ``quantize_`` (rtn, smoothquant, quarot, stamp, serq) run through the Triton kernels
give the layer's own outputs up to float32 summation order (the activation codes are bit-identical)."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from torch import nn

pytest.importorskip("triton", reason="the kernels extra (triton) is not installed")

import quant_kernels.triton as qt  # noqa: E402
from quant_kernels import reference as ref  # noqa: E402
from quant_kernels.api import QuantConfig, quantize_, quantized_layers  # noqa: E402

pytestmark = pytest.mark.kernels

_INTERP = os.environ.get("TRITON_INTERPRET", "0") == "1"
DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(not _INTERP, reason="CPU runs need TRITON_INTERPRET=1")),
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
        _INTERP or not torch.cuda.is_available(), reason="needs a CUDA GPU with the interpreter off")]),
]


class _Block(nn.Module):
    """LayerNorm -> up -> GELU -> down with a residual: a transformer MLP block over [batch, tokens, features]."""

    def __init__(self, d: int = 64, h: int = 128) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, h)
        self.down = nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def _data(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.cumsum(torch.randn(2, 32, 64, generator=g), dim=1) * 0.3
    x[..., 3] += 8.0  # an outlier channel
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "cfg",
    [
        dict(method="rtn", wbits=4, abits=8),
        dict(method="smoothquant", wbits=8, abits=8),
        dict(method="quarot", wbits=4, abits=4),
        dict(method="stamp", wbits=4, abits=4, stamp_k=4, stamp_levels=3),
        dict(method="stamp", wbits=4, abits=4, stamp_k=8, stamp_transform="dct", hadamard=True),
        dict(method="serq", wbits=4, abits=4, serq_rank=16),
    ],
    ids=lambda c: "-".join(str(v) for v in c.values()),
)
def test_quantized_model_layers_match_under_triton(device: str, cfg: dict) -> None:
    torch.manual_seed(0)
    model = _Block().eval()
    quantize_(model, QuantConfig(**cfg), [_data(1)])
    layers = quantized_layers(model)
    assert set(layers) == {"up", "down"}
    x = _data(2)
    captured: dict[str, torch.Tensor] = {}
    hooks = [m.register_forward_pre_hook(lambda mod, a, n=n: captured.__setitem__(n, a[0].detach()))
             for n, m in layers.items()]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    for name, layer in layers.items():
        inp = captured[name]
        with torch.no_grad():
            y_ref = layer(inp)
        layer_d = layer.to(device)
        y = qt.qlinear_forward(layer_d, inp.to(device)).cpu()
        layer.to("cpu")
        assert ref.quant_error_sqnr(y_ref, y) > 80.0, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("transform", ["dwt", "wht"])
def test_stamp_pads_odd_token_counts_like_the_reference(device: str, transform: str) -> None:
    torch.manual_seed(0)
    model = _Block().eval()
    quantize_(model, QuantConfig(method="stamp", wbits=4, abits=4, stamp_k=4, stamp_levels=2,
                                 stamp_transform=transform), [_data(1)])
    x = _data(2)[:, :27]  # 27 tokens: not a multiple of 2**levels, not a power of two
    with torch.no_grad():
        y_ref = model.up(x)
        y = qt.qlinear_forward(model.up.to(device), x.to(device)).cpu()
    model.up.to("cpu")
    assert y.shape == y_ref.shape == (2, 27, 128)
    assert ref.quant_error_sqnr(y_ref, y) > 80.0


def test_unsupported_layers_raise() -> None:
    model = _Block().eval()
    quantize_(model, QuantConfig(method="stamp", wbits=4, abits=4, stamp_k=4, stamp_levels=2), [_data(1)])
    packed = qt.pack_layer(model.up)
    model.up.stamp = dataclasses.replace(model.up.stamp, high_bits=16)  # changed after packing
    with pytest.raises(ValueError, match="high_bits"):  # the forward checks the layer even when given packed
        qt.qlinear_forward(model.up, _data(2), packed)
    model = _Block().eval()
    quantize_(model, QuantConfig(method="rtn", wbits=4, abits=16), None)
    with pytest.raises(ValueError, match="abits"):
        qt.pack_layer(model.up)
    model = _Block().eval()
    quantize_(model, QuantConfig(method="rtn", wbits=4, abits=8, group_size=32), None)
    with pytest.raises(ValueError, match="w_group_size"):
        qt.pack_layer(model.up)
    with pytest.raises(TypeError, match="QuantLinear"):
        qt.pack_layer(nn.Linear(4, 4))
