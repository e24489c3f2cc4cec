"""Methods: 16-bit == float, STaMP vs RTN and its error bound, SERQ vs RTN / two-factor baseline, exact folds."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from quant_kernels import reference as ref
from quant_kernels.api import QuantConfig, quantize_, quantized_layers
from quant_kernels.methods import METHODS
from quant_kernels.qlinear import QuantLinear
from tests.quant.conftest import ar1_sequences, make_mlp, outlier_inputs, tiny_bert

ALL_METHODS = ["rtn", "quarot", "smoothquant", "stamp", "serq", "l2qer"]


def test_registry_lists_all_methods() -> None:
    assert set(ALL_METHODS) <= set(METHODS.names())


@pytest.mark.parametrize("hadamard", [False, True])
@pytest.mark.parametrize("method", ALL_METHODS)
def test_16bit_reproduces_float_model(method: str, hadamard: bool) -> None:
    """W16A16 keeps tensors float, so every transform (scales, folds, permutation, rotation, DWT, residual
    split, low rank) must be exact: the quantized MLP equals the float one to float rounding."""
    x = outlier_inputs((2, 64, 64))
    model = make_mlp()
    ref_out = model(x)
    cfg = QuantConfig(method=method, wbits=16, abits=16, stamp_high_bits=16, hadamard=hadamard, serq_rank=16)
    quantize_(model, cfg, [x[:1], x[1:]])
    assert len(quantized_layers(model)) == 3
    out = model(x)
    assert torch.allclose(out, ref_out, rtol=0, atol=1e-5 * float(ref_out.abs().max())), method
    assert ref.quant_error_sqnr(ref_out, out) > 100


@pytest.mark.parametrize("method", ALL_METHODS)
def test_4bit_is_lossy_but_close(method: str) -> None:
    x = outlier_inputs((2, 64, 64))
    model = make_mlp()
    ref_out = model(x)
    quantize_(model, QuantConfig(method=method, wbits=4, abits=8, serq_rank=16), [x])
    sqnr = ref.quant_error_sqnr(ref_out, model(x))
    assert 8.0 < sqnr < 60.0, (method, sqnr)
    for q in quantized_layers(model).values():
        assert q.qweight.dtype in (torch.int8, torch.uint8)
        assert int(q.qweight.min()) >= q.wspec.qmin and int(q.qweight.max()) <= q.wspec.qmax


# --- STaMP -----------------------------------------------------------------------------------------------------


def _stamp_sqnr(x: torch.Tensor, kind: str, k: int, low: int = 4, grid: tuple[int, int] | None = None) -> float:
    xt = ref.sequence_transform(x, kind, 3, grid)
    xq = ref.inverse_sequence_transform(ref.stamp_fake_quant(xt, k, 8, low), kind, 3, grid)
    return ref.quant_error_sqnr(x, xq)


@pytest.mark.parametrize("kind", ["dwt", "dct", "wht"])
def test_stamp_beats_per_token_rtn_at_same_average_bits_on_correlated_sequences(kind: str) -> None:
    x = ar1_sequences(4, 256, 64)
    k = 32  # average bits 4 + 4 * 32 / 256 = 4.5 for both STaMP and the untransformed allocation
    stamp = _stamp_sqnr(x, kind, k)
    same_bits = _stamp_sqnr(x, "identity", k)  # first k tokens at 8 bit, no transform
    uniform4 = ref.quant_error_sqnr(x, ref.fake_quant(x, ref.QuantSpec(4, False)))
    uniform5 = ref.quant_error_sqnr(x, ref.fake_quant(x, ref.QuantSpec(5, False)))
    assert stamp > same_bits + 3.0, (stamp, same_bits)
    assert stamp > uniform4 + 3.0
    assert stamp > uniform5, "4.5 average bits with STaMP should beat 5 uniform bits on AR(1) data"


def test_stamp_2d_grid_on_smooth_image_tokens() -> None:
    g = torch.Generator().manual_seed(0)
    h = w = 16
    base = torch.nn.functional.interpolate(torch.randn(1, 32, 4, 4, generator=g), size=(h, w), mode="bilinear",
                                           align_corners=False)
    x = (base + 0.05 * torch.randn(1, 32, h, w, generator=g)).flatten(2).transpose(1, 2)  # [1, 256 tokens, 32]
    stamp2d = _stamp_sqnr(x, "dwt2d", 16, grid=(h, w))
    assert stamp2d > _stamp_sqnr(x, "identity", 16) + 3.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["dwt", "dct", "wht", "identity"]),
       k=st.integers(0, 32), low=st.integers(2, 6), rho=st.floats(0.0, 0.99))
def test_stamp_error_below_theorem1_bound(seed: int, kind: str, k: int, low: int, rho: float) -> None:
    """Property: ||L^T Q(L X) - X||^2 <= (d/2) sum_i e_i / (2^b_i - 1)^2 for every sample and allocation."""
    x = ar1_sequences(2, 32, 16, rho=rho, seed=seed) * (1 + seed % 7)
    xt = ref.sequence_transform(x, kind, 3)
    err = (ref.inverse_sequence_transform(ref.stamp_fake_quant(xt, k, 8, low), kind, 3) - x).double().pow(2).sum()
    bound = ref.stamp_error_bound(xt, ref.stamp_token_bits(32, k, 8, low))
    assert float(err) <= float(bound) * (1 + 1e-6)
    assert float(err) > 0


def test_stamp_layer_on_image_token_grid() -> None:
    """dwt2d over an 8x8 patch grid inside quantize_: exact at 16 bit, better than RTN at A4 on smooth patches."""
    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.interpolate(torch.randn(2, 64, 2, 2, generator=g), size=(8, 8), mode="bilinear",
                                          align_corners=False)
    x = (img + 0.05 * torch.randn(2, 64, 8, 8, generator=g)).flatten(2).transpose(1, 2)  # [2, 64 tokens, 64]
    out = {}
    for name, kw in {"f16": dict(method="stamp", wbits=16, abits=16, stamp_high_bits=16),
                     "stamp": dict(method="stamp", wbits=8, abits=4), "rtn": dict(method="rtn", wbits=8, abits=4)
                     }.items():
        model = make_mlp()
        ref_out = model(x)
        quantize_(model, QuantConfig(stamp_transform="dwt2d", stamp_grid=(8, 8), stamp_levels=2, stamp_k=4, **kw), [x])
        out[name] = ref.quant_error_sqnr(ref_out, model(x))
    assert out["f16"] > 100 and out["stamp"] > out["rtn"] + 2.0, out


def test_stamp_bound_tracks_energy_compaction() -> None:
    """The bound is lower when the transform packs energy into the 8-bit tokens (why STaMP works)."""
    x = ar1_sequences(2, 128, 32)
    bits = ref.stamp_token_bits(128, 16)
    assert ref.stamp_error_bound(ref.haar_dwt(x, 3), bits) < 0.5 * ref.stamp_error_bound(x, bits)


@pytest.mark.parametrize("pad", ["reflect", "zero"])
def test_stamp_layer_pads_uneven_sequences_and_raises_for_k_above_tokens(pad: str) -> None:
    x = ar1_sequences(1, 60, 64)  # 60 is not divisible by 2**3: padded to 64 inside the layer, cropped after
    model = make_mlp()
    ref_out = model(x)
    quantize_(model, QuantConfig(method="stamp", wbits=16, abits=16, stamp_high_bits=16, stamp_k=16,
                                 stamp_pad=pad), [x])
    assert torch.allclose(model(x), ref_out, atol=1e-4)
    lossy = make_mlp()
    quantize_(lossy, QuantConfig(method="stamp", wbits=8, abits=4, stamp_k=16, stamp_pad=pad), [x])
    rtn = make_mlp()
    quantize_(rtn, QuantConfig(method="rtn", wbits=8, abits=4), [x])
    assert ref.quant_error_sqnr(ref_out, lossy(x)) > ref.quant_error_sqnr(ref_out, rtn(x))
    with pytest.raises(ValueError, match="stamp_k=64 exceeds the number of tokens"):
        quantize_(make_mlp(), QuantConfig(method="stamp", stamp_k=64), [x[:, :40]])
    q = quantized_layers(model)["0"]
    with pytest.raises(ValueError, match="stamp_k=16 exceeds"):
        q(torch.randn(1, 8, 64))


def test_stamp_stacks_with_weight_quantizer_and_hadamard_rotation() -> None:
    """On correlated sequences with outlier channels: STaMP beats per-token RTN at W4A4 on an MLP, and at A4 the
    sequence transform and the feature rotation are complementary (STaMP+Hadamard > STaMP, > QuaRot alone)."""
    x = ar1_sequences(2, 128, 64) + outlier_inputs((2, 128, 64), n_outliers=2, gain=10.0) * 0.1

    def sqnr(model: nn.Module, **kw) -> float:
        ref_out = model(x)
        quantize_(model, QuantConfig(abits=4, **kw), [x])
        return ref.quant_error_sqnr(ref_out, model(x))

    assert sqnr(make_mlp(), method="stamp", wbits=4, stamp_k=16) > sqnr(make_mlp(), method="rtn", wbits=4) + 1.0

    def lin() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 128))

    s = {name: sqnr(lin(), wbits=8, **kw) for name, kw in {
        "rtn": dict(method="rtn"), "quarot": dict(method="quarot"), "stamp": dict(method="stamp", stamp_k=16),
        "stamp_h": dict(method="stamp", stamp_k=16, hadamard=True)}.items()}
    assert s["stamp_h"] > s["stamp"] + 1.0 > s["rtn"] + 2.0, s
    assert s["stamp_h"] > s["quarot"] + 3.0, s


# --- SERQ ------------------------------------------------------------------------------------------------------


def _single_layer_sqnr(method: str, wbits: int, abits: int, x: torch.Tensor, **kw) -> float:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(x.shape[-1], 256))
    ref_out = model(x)
    quantize_(model, QuantConfig(method=method, wbits=wbits, abits=abits, **kw), [x])
    return ref.quant_error_sqnr(ref_out, model(x))


def test_serq_beats_rtn_and_two_factor_baseline_at_w4a4_with_outliers() -> None:
    x = outlier_inputs((512, 256), n_outliers=8, gain=20.0)
    s = {m: _single_layer_sqnr(m, 4, 4, x) for m in ("rtn", "l2qer", "serq", "smoothquant", "quarot")}
    assert s["serq"] > s["rtn"] + 2.0, s
    assert s["serq"] > s["l2qer"] + 1.0, s


def test_serq_w4a8_beats_rtn_with_outliers() -> None:
    x = outlier_inputs((512, 256), n_outliers=8, gain=20.0)
    assert _single_layer_sqnr("serq", 4, 8, x) > _single_layer_sqnr("rtn", 4, 8, x) + 3.0


def test_serq_residual_is_one_gemm_over_the_salient_channels() -> None:
    x = outlier_inputs((2, 64, 64))
    model = make_mlp()
    quantize_(model, QuantConfig(method="serq", wbits=4, abits=4, serq_rank=16, fold=False), [x])
    q = quantized_layers(model)["0"]
    assert q.meta.res_rank == 16 and q.res_qweight.shape == (128, 16)
    xs = (x.index_select(-1, q.perm) / q.in_scale)
    xq = ref.fake_quant(xs, q.aspec)
    manual = xq @ q.dequantized_weight().T + xq[..., :16] @ q.dequantized_residual().T + q.bias
    assert torch.allclose(q(x), manual, atol=1e-5)
    # salient = largest calibrated max|x| first; the outlier channels lead the order
    amax = x.abs().amax(dim=(0, 1))
    assert torch.equal(q.perm[:4].sort().values, amax.topk(4).indices.sort().values)


@pytest.mark.parametrize("method", ["serq", "smoothquant"])
@pytest.mark.parametrize("bits", [(4, 4), (16, 16)])
def test_folding_into_previous_layer_leaves_outputs_unchanged(method: str, bits: tuple[int, int]) -> None:
    x = outlier_inputs((2, 64, 64))
    outs, layers = {}, {}
    for fold in (True, False):
        model = make_mlp()
        quantize_(model, QuantConfig(method=method, wbits=bits[0], abits=bits[1], serq_rank=16, fold=fold), [x])
        outs[fold], layers[fold] = model(x), quantized_layers(model)
    # layer "2" reads ReLU(layer "0"): scales (positive) and the permutation fold into layer 0's rows
    folded = layers[True]["2"]
    assert folded.in_scale is None and folded.perm is None
    assert layers[False]["2"].in_scale is not None
    # layer "4" reads GELU(...): only the permutation may pass through GELU
    if method == "serq":
        assert layers[True]["4"].perm is None and layers[True]["4"].in_scale is not None
    diff = (outs[True] - outs[False]).detach().abs()
    close = diff <= 1e-4 * float(outs[False].abs().max())
    if bits[1] >= 16:
        assert close.all()
    else:
        # folding is exact in real arithmetic; in floating point a value that lands on a 4-bit rounding boundary can
        # round the other way (CPU-dependent: 0.7 % of outputs for SmoothQuant on one machine, none on another).
        # A wrong fold changes most outputs by the quantization error (~15 % of the norm here).
        assert float(close.float().mean()) >= 0.97, float(close.float().mean())
        assert float(diff.norm() / outs[False].detach().norm()) < 0.01


def test_folds_are_checked_on_a_transformer() -> None:
    """BERT: LayerNorm outputs also feed the residual, so those folds are rejected; output.dense's permutation
    folds through GELU into intermediate.dense. The float (16-bit) model is unchanged either way."""
    from tests.quant.conftest import bert_inputs

    model = tiny_bert()
    inp = bert_inputs()
    ref_out = model(**inp).last_hidden_state
    quantize_(model, QuantConfig(method="serq", wbits=16, abits=16, serq_rank=16), [inp])
    layers = quantized_layers(model)
    assert layers["encoder.layer.0.attention.self.query"].in_scale is not None  # LN fold rejected
    assert layers["encoder.layer.0.output.dense"].perm is None  # permutation folded through GELU
    out = model(**inp).last_hidden_state
    assert torch.allclose(out, ref_out, atol=1e-4)


def test_default_serq_rank_scales_with_layer() -> None:
    from quant_kernels.methods.base import default_serq_rank

    assert default_serq_rank(384) == 16 and default_serq_rank(1536) == 96
    assert default_serq_rank(4096) == 128 and default_serq_rank(8) == 8


def test_quantlinear_copies_are_independent() -> None:
    x = outlier_inputs((1, 16, 64))
    model = make_mlp()
    quantize_(model, QuantConfig(method="rtn"), [x])
    clone = copy.deepcopy(model)
    assert isinstance(clone[0], QuantLinear)
    assert torch.equal(clone(x), model(x))
