"""The quantization reference: transforms are orthonormal and invertible; quantizer ranges, shapes and errors."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import quant_kernels.reference as ref
from quant_kernels.reference import (
    QuantSpec,
    block_random_hadamard_matrix,
    code_dtype,
    compute_qparams,
    dct,
    dct_matrix,
    dequantize,
    fake_quant,
    haar_dwt,
    haar_dwt2d,
    haar_idwt,
    haar_idwt2d,
    haar_matrix,
    hadamard_matrix,
    idct,
    inverse_sequence_transform,
    pack_int4,
    quant_error_sqnr,
    quantize,
    random_hadamard_matrix,
    sequence_transform,
    smoothquant_scales,
    stamp_dequantize,
    stamp_fake_quant,
    stamp_quantize,
    unpack_int4,
    walsh_hadamard,
)

TOL = 1e-5
Fn = Callable[[torch.Tensor], torch.Tensor]


def _matrix_of(fwd: Fn, n: int) -> torch.Tensor:
    """Matrix T with fwd(x) == T @ x along dim 0 (columns of the identity)."""
    return fwd(torch.eye(n, dtype=torch.float64))


# name -> (forward along dim 0, inverse along dim 0, n)
TRANSFORMS: dict[str, tuple[Fn, Fn, int]] = {
    **{
        f"haar{lv}": (
            lambda x, lv=lv: haar_dwt(x, lv, dim=0),
            lambda y, lv=lv: haar_idwt(y, lv, dim=0),
            24,
        )
        for lv in (1, 2, 3)
    },
    "haar2d_l1": (
        lambda x: haar_dwt2d(x, (4, 6), 1, dim=0),
        lambda y: haar_idwt2d(y, (4, 6), 1, dim=0),
        24,
    ),
    "haar2d_l2": (
        lambda x: haar_dwt2d(x, (8, 4), 2, dim=0),
        lambda y: haar_idwt2d(y, (8, 4), 2, dim=0),
        32,
    ),
    "dct": (lambda x: dct(x, dim=0), lambda y: idct(y, dim=0), 20),
    "wht": (lambda x: walsh_hadamard(x, dim=0), lambda y: walsh_hadamard(y, dim=0), 32),
    "block_hadamard_24": (
        lambda x: torch.tensordot(block_random_hadamard_matrix(24, seed=1, dtype=x.dtype), x, dims=1),
        lambda y: torch.tensordot(block_random_hadamard_matrix(24, seed=1, dtype=y.dtype).T, y, dims=1),
        24,
    ),
    **{
        f"seq_{kind}": (
            lambda x, kind=kind: sequence_transform(x, kind, 2, (4, 8), dim=0),
            lambda y, kind=kind: inverse_sequence_transform(y, kind, 2, (4, 8), dim=0),
            32,
        )
        for kind in ("dwt", "dwt2d", "dct", "wht", "identity")
    },
    "rand_hadamard": (
        lambda x: torch.tensordot(random_hadamard_matrix(16, seed=3, dtype=x.dtype), x, dims=1),
        lambda y: torch.tensordot(random_hadamard_matrix(16, seed=3, dtype=y.dtype).T, y, dims=1),
        16,
    ),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transform_orthonormal_and_invertible(name: str) -> None:
    fwd, inv, n = TRANSFORMS[name]
    t = _matrix_of(fwd, n)
    assert torch.allclose(t @ t.T, torch.eye(n, dtype=t.dtype), atol=TOL)
    x = torch.randn(n, 5, 3, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(inv(fwd(x)), x, atol=TOL)
    assert torch.allclose(fwd(x).pow(2).sum(), x.pow(2).sum(), rtol=TOL)


def test_transforms_act_along_default_token_dim() -> None:
    x = torch.randn(2, 16, 8, generator=torch.Generator().manual_seed(1))
    for fwd, inv in [
        (lambda v: haar_dwt(v, 2), lambda v: haar_idwt(v, 2)),
        (lambda v: haar_dwt2d(v, (4, 4), 2), lambda v: haar_idwt2d(v, (4, 4), 2)),
        (dct, idct),
        (walsh_hadamard, walsh_hadamard),
    ]:
        y = fwd(x)
        assert y.shape == x.shape
        assert torch.allclose(inv(y), x, atol=TOL)
    assert torch.allclose(haar_dwt(x, 3), torch.einsum("st,btd->bsd", haar_matrix(16, 3), x), atol=TOL)
    assert torch.allclose(dct(x), torch.einsum("st,btd->bsd", dct_matrix(16), x), atol=TOL)
    assert torch.allclose(walsh_hadamard(x), torch.einsum("st,btd->bsd", hadamard_matrix(16), x), atol=TOL)


def test_haar_coefficient_layout() -> None:
    x = torch.arange(8, dtype=torch.float64).unsqueeze(-1)
    y = haar_dwt(x, 1)
    s2 = math.sqrt(2)
    assert torch.allclose(y[:4, 0], torch.tensor([1.0, 5.0, 9.0, 13.0], dtype=torch.float64) / s2)
    assert torch.allclose(y[4:, 0], torch.full((4,), -1 / s2, dtype=torch.float64))
    # the approximation at level L is the scaled block mean
    y3 = haar_dwt(x, 3)
    assert math.isclose(float(y3[0, 0]), float(x.sum()) / math.sqrt(8))
    # 2-D: a constant grid has all its energy in the LL token(s)
    g = haar_dwt2d(torch.ones(64, 1), (8, 8), 3)
    assert math.isclose(float(g[0, 0]), 8.0, rel_tol=1e-6)
    assert float(g[1:].abs().max()) < 1e-6


def test_haar_concentrates_energy_of_random_walk() -> None:
    gen = torch.Generator().manual_seed(0)
    n, levels = 64, 3
    x = torch.randn(n, 32, generator=gen).cumsum(0)  # strongly correlated tokens
    y = haar_dwt(x, levels)
    head = n // 2**levels
    assert float(y[:head].pow(2).sum() / y.pow(2).sum()) > 0.9
    # 2-D: a grid smooth along both axes packs its energy into the LL band, better than a row-major 1-D Haar
    share2d, share1d = [], []
    for _ in range(8):
        rows, cols = torch.randn(16, 1, 8, generator=gen).cumsum(0), torch.randn(1, 16, 8, generator=gen).cumsum(1)
        grid = (rows + cols).reshape(256, 8)
        y2, y1 = haar_dwt2d(grid, (16, 16), 2), haar_dwt(grid, 4)
        share2d.append(float(y2[:16].pow(2).sum() / y2.pow(2).sum()))
        share1d.append(float(y1[:16].pow(2).sum() / y1.pow(2).sum()))
    assert min(share2d) > 0.75
    assert sum(share2d) > sum(share1d)


@pytest.mark.parametrize(
    ("call", "msg"),
    [
        (lambda: haar_dwt(torch.zeros(12, 2), 3), "not divisible by 2\\*\\*levels"),
        (lambda: haar_dwt2d(torch.zeros(12, 2), (4, 4), 1), "does not match grid"),
        (lambda: haar_dwt2d(torch.zeros(24, 2), (4, 6), 2), "grid width length 6"),
        (lambda: walsh_hadamard(torch.zeros(12, 2)), "power of two"),
        (lambda: random_hadamard_matrix(12), "power of two"),
    ],
)
def test_transform_bad_lengths_raise(call: Callable[[], object], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        call()


def test_random_hadamard_depends_on_seed_and_folds_into_weights() -> None:
    r0, r1 = random_hadamard_matrix(32, seed=0), random_hadamard_matrix(32, seed=1)
    assert torch.equal(r0, random_hadamard_matrix(32, seed=0))
    assert not torch.equal(r0, r1)
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(5, 32, generator=gen), torch.randn(7, 32, generator=gen)
    assert torch.allclose((x @ r0) @ (w @ r0).T, x @ w.T, atol=1e-4)


# --- quantizer ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"bits": 0}, "bits must be in 2..16, got 0"),
        ({"bits": 17}, "bits must be in 2..16, got 17"),
        ({"bits": 4, "granularity": "per_group"}, "per_group granularity needs group_size > 0, got None"),
        ({"bits": 4, "granularity": "per_group", "group_size": 0}, "group_size > 0, got 0"),
        ({"bits": 4, "granularity": "per_row"}, "granularity must be one of"),
        ({"bits": 4, "group_size": 8}, "group_size is only valid with per_group"),
        ({"bits": 4, "clip_ratio": 0.0}, "clip_ratio must be in \\(0, 1\\], got 0.0"),
        ({"bits": 4, "clip_ratio": 1.5}, "clip_ratio must be in \\(0, 1\\], got 1.5"),
    ],
)
def test_bad_spec_raises(kwargs: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        QuantSpec(**kwargs)


def test_group_size_not_dividing_raises() -> None:
    spec = QuantSpec(4, granularity="per_group", group_size=5)
    with pytest.raises(ValueError, match="last dim 12 is not divisible by group_size 5"):
        compute_qparams(torch.randn(3, 12), spec)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_ranges_are_exact(symmetric: bool, bits: int) -> None:
    spec = QuantSpec(bits, symmetric=symmetric, granularity="per_tensor")
    zero_code = spec.qmax // 3  # asymmetric: a range whose zero point is exactly representable
    lo, hi = (-3.0, 3.0) if symmetric else (-0.25 * zero_code, 0.25 * (spec.qmax - zero_code))
    x = torch.linspace(lo, hi, 1001)
    scale, zero = compute_qparams(x, spec)
    q = quantize(x, scale, zero, spec)
    assert q.dtype == torch.int32
    if symmetric:
        bound = 2 ** (bits - 1) - 1
        assert (int(q.min()), int(q.max())) == (-bound, bound)
        assert float(zero) == 0.0
    else:
        assert (int(q.min()), int(q.max())) == (0, 2**bits - 1)
        assert (float(scale), float(zero)) == (0.25, float(zero_code))
    # range ends are reproduced to within half a step
    xd = dequantize(q, scale, zero, spec)
    assert float((xd - x).abs().max()) <= float(scale) / 2 * (1 + 1e-5)


@pytest.mark.parametrize(
    ("spec", "shape", "scale_shape"),
    [
        (QuantSpec(4, granularity="per_token"), (2, 6, 16), (2, 6, 1)),
        (QuantSpec(4, granularity="per_channel"), (6, 16), (6, 1)),
        (QuantSpec(4, granularity="per_group", group_size=4), (2, 6, 16), (2, 6, 4)),
        (QuantSpec(4, symmetric=False, granularity="per_group", group_size=8), (6, 16), (6, 2)),
        (QuantSpec(4, granularity="per_tensor"), (2, 6, 16), ()),
    ],
)
def test_qparam_shapes(spec: QuantSpec, shape: tuple[int, ...], scale_shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    scale, zero = compute_qparams(x, spec)
    assert scale.shape == zero.shape == scale_shape
    q = quantize(x, scale, zero, spec)
    assert q.shape == x.shape
    assert int(q.min()) >= spec.qmin and int(q.max()) <= spec.qmax
    assert dequantize(q, scale, zero, spec).shape == x.shape


def test_per_group_matches_reshaped_per_token() -> None:
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(4))
    grouped = fake_quant(x, QuantSpec(4, symmetric=False, granularity="per_group", group_size=4))
    rows = fake_quant(x.reshape(3, 5, 4, 4), QuantSpec(4, symmetric=False)).reshape(x.shape)
    assert torch.equal(grouped, rows)


def test_16bit_fake_quant_is_near_identity_and_keeps_dtype() -> None:
    x = torch.randn(4, 8, 32, generator=torch.Generator().manual_seed(0)) * 10
    for sym in (True, False):
        y = fake_quant(x, QuantSpec(16, symmetric=sym))
        assert y.dtype == x.dtype
        assert float((y - x).norm() / x.norm()) < 1e-3
        assert float((y - x).abs().max() / x.abs().max()) < 1e-3
    assert fake_quant(x.double(), QuantSpec(8)).dtype == torch.float64


def test_zero_and_constant_rows_are_exact() -> None:
    x = torch.tensor([[0.0, 0.0, 0.0], [2.5, 2.5, 2.5], [-1.0, -1.0, -1.0]])
    for sym in (True, False):
        spec = QuantSpec(4, symmetric=sym)
        scale, _ = compute_qparams(x, spec)
        assert bool(torch.all(scale > 0))
        assert torch.allclose(fake_quant(x, spec), x, atol=1e-6)


def test_clip_ratio_shrinks_scale() -> None:
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    s_full, _ = compute_qparams(x, QuantSpec(4))
    s_clip, _ = compute_qparams(x, QuantSpec(4, clip_ratio=0.5))
    assert torch.allclose(s_clip, s_full * 0.5)


def test_round_half_to_even() -> None:
    spec = QuantSpec(8, granularity="per_tensor")
    q = quantize(torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5]), torch.tensor(1.0), torch.tensor(0.0), spec)
    assert q.tolist() == [0, 2, 2, 0, -2]


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(1, 4),
    groups=st.integers(1, 3),
    bits=st.integers(2, 8),
    symmetric=st.booleans(),
    granularity=st.sampled_from(["per_token", "per_channel", "per_group", "per_tensor"]),
    seed=st.integers(0, 2**16),
    magnitude=st.sampled_from([1e-3, 1.0, 1e3]),
    offset=st.floats(-2.0, 2.0),
)
def test_roundtrip_error_bounded_by_half_scale(
    rows: int, groups: int, bits: int, symmetric: bool, granularity: str, seed: int, magnitude: float, offset: float
) -> None:
    gs = 4 if granularity == "per_group" else None
    spec = QuantSpec(bits, symmetric=symmetric, granularity=granularity, group_size=gs)
    x = (torch.randn(rows, groups * 4, generator=torch.Generator().manual_seed(seed)) + offset) * magnitude
    scale, zero = compute_qparams(x, spec)
    q = quantize(x, scale, zero, spec)
    err = (dequantize(q, scale, zero, spec) - x).abs()
    half = scale / 2
    if granularity == "per_group":
        half = half.repeat_interleave(4, dim=-1)
    assert bool(torch.all(err <= half * (1 + 1e-4) + 1e-6 * magnitude))


def test_sqnr_grows_about_6db_per_bit() -> None:
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    sqnr = {b: quant_error_sqnr(x, fake_quant(x, QuantSpec(b))) for b in (4, 6, 8)}
    assert sqnr[8] - sqnr[4] > 20.0
    assert 8.0 < sqnr[6] - sqnr[4] < 14.0
    assert quant_error_sqnr(x, x) == math.inf
    assert math.isclose(quant_error_sqnr(x, 0.9 * x), 20.0, rel_tol=1e-6)


def test_stamp_quantize_is_two_per_token_quantizers() -> None:
    """Rows [:k] use the high-bit spec, rows [k:] the low-bit spec, each bit-exact with ``quantize``."""
    x = torch.randn(3, 40, 24, generator=torch.Generator().manual_seed(0))
    q, scale, zero = stamp_quantize(x, 8, 8, 4)
    assert q.dtype == torch.int32 and scale.shape == (3, 40, 1)
    for part, bits in ((slice(0, 8), 8), (slice(8, 40), 4)):
        spec = QuantSpec(bits, False, "per_token")
        s, z = compute_qparams(x[:, part], spec)
        assert torch.equal(q[:, part], quantize(x[:, part], s, z, spec))
        assert int(q[:, part].max()) <= 2**bits - 1
    assert torch.equal(stamp_dequantize(q, scale, zero), stamp_fake_quant(x, 8, 8, 4))
    with pytest.raises(ValueError, match="stamp k"):
        stamp_quantize(x, 41)


def test_wht_sequence_transform_is_sequency_ordered() -> None:
    """Sequency order puts the smooth (few sign changes) Walsh functions first, like DCT/DWT."""
    x = torch.linspace(0, 1, 64).unsqueeze(1).repeat(1, 4)
    energy = sequence_transform(x, "wht").pow(2).sum(1)
    natural = walsh_hadamard(x).pow(2).sum(1)
    assert float(energy[:8].sum()) > 0.99 * float(energy.sum())
    assert float(natural[:8].sum()) < 0.8 * float(natural.sum())


def test_pack_int4_round_trip_and_layout() -> None:
    codes = torch.randint(0, 16, (5, 32), generator=torch.Generator().manual_seed(0))
    packed = pack_int4(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 16)
    assert int(packed[0, 0]) == int(codes[0, 0]) | (int(codes[0, 1]) << 4)  # low nibble = even index
    assert torch.equal(unpack_int4(packed), codes.to(torch.int32))
    with pytest.raises(ValueError, match="0..15"):
        pack_int4(torch.tensor([[-1, 3]]))


def test_code_dtype_and_smoothquant_scales() -> None:
    assert code_dtype(QuantSpec(4, True)) == torch.int8 and code_dtype(QuantSpec(8, False)) == torch.uint8
    assert code_dtype(QuantSpec(12, True)) == torch.int16 and code_dtype(QuantSpec(16, False)) == torch.int32
    a, w = torch.tensor([4.0, 1.0, 0.0]), torch.tensor([1.0, 4.0, 2.0])
    s = smoothquant_scales(a, w, 0.5)
    assert torch.allclose(s[:2], torch.tensor([2.0, 0.5])) and float(s[2]) > 0
    assert torch.allclose(smoothquant_scales(a, None, 1.0)[:2], a[:2])
    with pytest.raises(ValueError, match="alpha"):
        smoothquant_scales(a, w, 1.5)


def test_pad_tokens_reflects_and_fits_each_transform() -> None:
    x = torch.arange(10.0).reshape(1, 5, 2)
    y, n = ref.pad_tokens(x, "dwt", levels=2)  # 5 -> 8 tokens, mirror without the edge token
    assert n == 5 and y.shape == (1, 8, 2)
    assert torch.equal(y[0, 5:, 0], torch.tensor([6.0, 4.0, 2.0]))
    assert ref.pad_tokens(x, "wht", mode="zero")[0][0, 5:].abs().sum() == 0
    assert ref.pad_tokens(x, "dct")[0] is x
    assert ref.pad_tokens(torch.ones(1, 1, 2), "dwt", levels=3)[0].shape == (1, 8, 2)  # pad > n: zeros
    with pytest.raises(ValueError, match="pad mode"):
        ref.pad_tokens(x, "dwt", mode="edge")
