"""Triton kernels == the reference: quant/dequant and fused STaMP codes bit-exact, int GEMM accumulators exact and
the float epilogue above an SQNR floor. CPU cases run in Triton's interpreter (TRITON_INTERPRET=1, set by conftest);
the ``cuda`` twins run the same checks on a GPU and are skipped without one."""

from __future__ import annotations

import os

import pytest
import torch

import quant_kernels.triton as qt
from quant_kernels import reference as ref

pytest.importorskip("triton", reason="the kernels extra (triton) is not installed")

pytestmark = pytest.mark.kernels

_INTERP = os.environ.get("TRITON_INTERPRET", "0") == "1"
DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(not _INTERP, reason="CPU runs need TRITON_INTERPRET=1")),
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
        _INTERP or not torch.cuda.is_available(), reason="needs a CUDA GPU with the interpreter off")]),
]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ar1(b: int, s: int, d: int, seed: int, rho: float = 0.95) -> torch.Tensor:
    """Token-correlated sequences (AR(1) along tokens) with a few outlier feature channels."""
    g = _gen(seed)
    e = torch.randn(b, s, d, generator=g)
    x = torch.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, s):
        x[:, t] = rho * x[:, t - 1] + (1 - rho**2) ** 0.5 * e[:, t]
    x[..., :2] *= 20.0
    return x


SPECS = [
    ref.QuantSpec(4),
    ref.QuantSpec(8, symmetric=False),
    ref.QuantSpec(4, symmetric=False, granularity="per_group", group_size=16),
    ref.QuantSpec(3, granularity="per_tensor", clip_ratio=0.9),
    ref.QuantSpec(8, granularity="per_channel"),
    ref.QuantSpec(16, symmetric=False),
    ref.QuantSpec(2, symmetric=False, clip_ratio=0.5),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"b{s.bits}{'s' if s.symmetric else 'a'}-{s.granularity}")
def test_quant_dequant_bit_exact(device: str, spec: ref.QuantSpec) -> None:
    x = torch.randn(3, 20, 64, generator=_gen(spec.bits)) * 3
    x[0, 0] = 0.0  # an all-zero row: scale floors at SCALE_EPS
    x[1, 2, 5] = 40.0  # an outlier
    xd = x.to(device)
    q, s, z = qt.quantize_dynamic(xd, spec)
    s0, z0 = ref.compute_qparams(x, spec)
    q0 = ref.quantize(x, s0, z0, spec)
    assert torch.equal(s.cpu(), s0) and torch.equal(z.cpu(), z0)
    assert torch.equal(q.cpu(), q0)
    s1, z1 = qt.compute_qparams(xd, spec)
    assert torch.equal(s1.cpu(), s0) and torch.equal(z1.cpu(), z0)
    assert torch.equal(qt.quantize(xd, s0.to(device), z0.to(device), spec).cpu(), q0)
    assert torch.equal(qt.dequantize(q, s, z, spec).cpu(), ref.dequantize(q0, s0, z0, spec))


@pytest.mark.parametrize("device", DEVICES)
def test_rounding_ties_half_to_even_and_half_precision_inputs(device: str) -> None:
    spec = ref.QuantSpec(8)
    x = (torch.arange(-60, 61, dtype=torch.float32) * 0.5).reshape(1, -1)  # every k + 0.5 is a tie
    one, zero = torch.ones(1, 1), torch.zeros(1, 1)
    q = qt.quantize(x.to(device), one.to(device), zero.to(device), spec).cpu()
    assert torch.equal(q, ref.quantize(x, one, zero, spec))
    assert int(q[0, 61]) == 0 and int(q[0, 63]) == 2 and int(q[0, 57]) == -2  # 0.5 -> 0, 1.5 -> 2, -1.5 -> -2
    xb = torch.randn(4, 96, generator=_gen(3)).to(torch.bfloat16)
    sp = ref.QuantSpec(4, symmetric=False)
    qb, sb, zb = qt.quantize_dynamic(xb.to(device), sp)
    sr, zr = ref.compute_qparams(xb, sp)
    assert torch.equal(qb.cpu(), ref.quantize(xb, sr, zr, sp)) and torch.equal(sb.cpu(), sr)


def _stamp_ref(x: torch.Tensor, kind: str, n_high: int, hb: int, lb: int, levels: int = 3,
               sym: bool = False) -> tuple[torch.Tensor, ...]:
    return ref.stamp_quantize(ref.sequence_transform(x, kind, levels), n_high, hb, lb, sym)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("levels", "s", "d", "n_high", "hb", "lb", "sym"),
    [(3, 64, 96, 16, 8, 4, False), (1, 8, 20, 2, 8, 4, False), (2, 32, 300, 32, 6, 3, True),
     (3, 64, 40, 0, 8, 4, False), (3, 16, 24, 16, 8, 4, False)],
)
def test_stamp_dwt_bit_exact(device: str, levels: int, s: int, d: int, n_high: int, hb: int, lb: int,
                             sym: bool) -> None:
    x = _ar1(2, s, d, seed=s + d)
    q, sc, zp, y = qt.stamp_quantize(x.to(device), n_high, hb, lb, sym, levels=levels, return_transformed=True)
    assert torch.equal(y.cpu(), ref.haar_dwt(x, levels, dim=-2))
    q0, s0, z0 = _stamp_ref(x, "dwt", n_high, hb, lb, levels, sym)
    assert torch.equal(q.cpu(), q0) and torch.equal(sc.cpu(), s0) and torch.equal(zp.cpu(), z0)
    assert sc.shape == (2, s, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_stamp_identity_is_the_reference_stamp_quantize(device: str) -> None:
    x = torch.randn(3, 12, 40, generator=_gen(5))
    q, sc, zp = qt.stamp_quantize(x.to(device), 5, transform="identity")
    q0, s0, z0 = ref.stamp_quantize(x, 5)
    assert torch.equal(q.cpu(), q0) and torch.equal(sc.cpu(), s0) and torch.equal(zp.cpu(), z0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["dct", "wht", "matrix2d"])
def test_stamp_matrix_transforms(device: str, kind: str) -> None:
    s, d = 32, 40
    x = _ar1(2, s, d, seed=11)
    if kind == "matrix2d":
        t = ref.haar_dwt2d(torch.eye(s, dtype=torch.float64), (4, 8), 2, dim=0).float()
        transform: str | torch.Tensor = t
        y_ref = ref.haar_dwt2d(x, (4, 8), 2, dim=-2)
    else:
        transform = kind
        y_ref = ref.sequence_transform(x, kind)
    q, sc, zp, y = qt.stamp_quantize(x.to(device), 8, transform=transform, return_transformed=True)
    y = y.cpu()
    assert torch.allclose(y, y_ref, atol=1e-4 * float(y_ref.abs().max()))
    # bit-exact given the kernel's own transformed values ...
    q1, s1, z1 = ref.stamp_quantize(y, 8)
    assert torch.equal(q.cpu(), q1) and torch.equal(sc.cpu(), s1) and torch.equal(zp.cpu(), z1)
    # ... and at most one step from the torch path (float summation order of T @ x differs)
    q0, _, _ = ref.stamp_quantize(y_ref, 8)
    assert int((q.cpu() - q0).abs().max()) <= 1


@pytest.mark.parametrize("device", DEVICES)
def test_stamp_kernel_beats_per_token_rtn_and_respects_the_bound(device: str) -> None:
    s, d, levels, k = 64, 48, 3, 8
    x = _ar1(4, s, d, seed=2)
    q, sc, zp = qt.stamp_quantize(x.to(device), k, 8, 4, levels=levels)
    xt_hat = ref.stamp_dequantize(q.cpu(), sc.cpu(), zp.cpu())
    x_hat = ref.haar_idwt(xt_hat, levels, dim=-2)
    avg_bits = 4 + 4 * k / s  # 4.5 bits on average
    rtn = ref.fake_quant(x, ref.QuantSpec(4, symmetric=False))  # uniform 4-bit per token
    rtn5 = ref.fake_quant(x, ref.QuantSpec(5, symmetric=False))  # more bits than STaMP's average
    assert avg_bits < 5
    sqnr = ref.quant_error_sqnr(x, x_hat)
    assert sqnr > ref.quant_error_sqnr(x, rtn) + 3.0
    assert sqnr > ref.quant_error_sqnr(x, rtn5)
    err = float((x_hat.double() - x.double()).pow(2).sum())
    bound = float(ref.stamp_error_bound(ref.haar_dwt(x, levels, dim=-2), ref.stamp_token_bits(s, k, 8, 4)))
    assert err <= bound


def _weight(n: int, k: int, bits: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, ref.QuantSpec]:
    w = torch.randn(n, k, generator=_gen(seed))
    spec = ref.QuantSpec(bits, granularity="per_channel")
    s, z = ref.compute_qparams(w, spec)
    return w, ref.quantize(w, s, z, spec), s, spec


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("m", "k", "n", "r", "wb", "ab", "sym"),
    [(40, 96, 48, 16, 4, 8, True), (33, 128, 70, 32, 8, 4, False), (16, 64, 32, 0, 4, 4, False),
     (5, 200, 10, 64, 4, 8, False), (70, 256, 96, 128, 4, 4, False)],
)
def test_int_gemm_exact_accumulation_and_sqnr(device: str, m: int, k: int, n: int, r: int, wb: int, ab: int,
                                              sym: bool) -> None:
    g = _gen(m + k)
    x = torch.randn(m, k, generator=g)
    x[:, :3] *= 15.0  # outlier channels
    xs = ref.QuantSpec(ab, symmetric=sym)
    s, z = ref.compute_qparams(x, xs)
    xq = ref.quantize(x, s, z, xs)
    w = torch.randn(n, k, generator=g)
    wspec = ref.QuantSpec(wb, granularity="per_channel")
    res = None
    w_main = w.clone()
    if r:  # SERQ code form: R = Q(W[:, :r]); the main weight keeps W[:, :r] - deq(R) in those columns
        rspec = ref.QuantSpec(wb, granularity="per_channel")
        rs, rz = ref.compute_qparams(w[:, :r], rspec)
        rq = ref.quantize(w[:, :r], rs, rz, rspec)
        w_main[:, :r] = w[:, :r] - ref.dequantize(rq, rs, rz, rspec)
        res = qt.pack_weight(rq, rs, rspec)
    ws, wz = ref.compute_qparams(w_main, wspec)
    wq = ref.quantize(w_main, ws, wz, wspec)
    pw = qt.pack_weight(wq, ws, wspec)
    assert torch.equal(pw.codes(), wq)
    bias = torch.randn(n, generator=g)
    dv = device
    acc, racc = qt.int_gemm_acc(xq.to(dv), z.to(dv), xs, _to(pw, dv), _to(res, dv))
    assert acc.dtype == torch.int32
    assert torch.equal(acc.cpu().long(), (xq.long() - z.long()) @ wq.long().T)
    xd = ref.dequantize(xq, s, z, xs)
    y_ref = xd @ ref.dequantize(wq, ws, torch.zeros_like(ws), wspec).T + bias
    if r:
        assert racc is not None
        assert torch.equal(racc.cpu().long(), (xq[:, :r].long() - z.long()) @ rq.long().T)
        y_ref = y_ref + xd[:, :r] @ ref.dequantize(rq, rs, torch.zeros_like(rs), rspec).T
    y = qt.int_gemm(xq.to(dv), s.to(dv), z.to(dv), xs, _to(pw, dv), _to(res, dv), bias.to(dv)).cpu()
    assert ref.quant_error_sqnr(y_ref, y) > 100.0  # float32 epilogue vs float reference of the same codes
    floor = {4: 8.0, 8: 25.0}[min(wb, ab)]  # W4A4 with x15 outlier channels and no flattening: ~9.7 dB
    assert ref.quant_error_sqnr(x @ w.T + bias, y) > floor  # vs the unquantized layer


TILES = [qt.GemmTiles(16, 16, 64, 1, 1, False), qt.GemmTiles(32, 64, 64, 2, 3, False),
         qt.GemmTiles(128, 128, 128, 8, 3, False), qt.GemmTiles(16, 16, 32, 1, 1), qt.GemmTiles(64, 64, 128, 4, 2),
         qt.GemmTiles(128, 128, 128, 8, 3), qt.GemmTiles(128, 256, 64, 8, 4), qt.GemmTiles(256, 128, 128, 8, 3),
         qt.GemmTiles(128, 128, 256, 8, 3)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tiles", TILES, ids=lambda t: t.label)
@pytest.mark.parametrize("wb", [4, 8])
def test_int_gemm_result_does_not_depend_on_the_tiling(device: str, tiles: qt.GemmTiles, wb: int) -> None:
    """Every tiling gives the exact int32 accumulators (partial edge tiles in M, N and K, an odd K for int8 weights,
    SERQ residual included), with and without the code checks."""
    m, k, n, r = 131, (288 if wb == 4 else 203), 150, 40
    g = _gen(wb)
    xq = torch.randint(-8, 8, (m, k), generator=g)
    z = torch.randint(-3, 4, (m, 1), generator=g).float()
    lim = 8 if wb == 4 else 128
    wq = torch.randint(-lim, lim, (n, k), generator=g).clamp_min(1 - lim)
    rq = torch.randint(-lim, lim, (n, r), generator=g).clamp_min(1 - lim)
    spec = ref.QuantSpec(wb, granularity="per_channel")
    pw, pr = qt.pack_weight(wq, torch.rand(n) + 0.5, spec), qt.pack_weight(rq, torch.rand(n) + 0.5, spec)
    args = (xq.to(device), z.to(device), ref.QuantSpec(4, symmetric=False), _to(pw, device), _to(pr, device))
    acc, racc = qt.int_gemm_acc(*args, tiles=tiles)
    xl = xq.long() - z.long()
    assert torch.equal(acc.cpu().long(), xl @ wq.long().T)
    assert racc is not None and torch.equal(racc.cpu().long(), xl[:, :r] @ rq.long().T)
    acc2, racc2 = qt.int_gemm_acc(*args, tiles=tiles, check_codes=False)
    assert torch.equal(acc2, acc) and racc2 is not None and torch.equal(racc2, racc)


def test_gemm_tiles_are_validated() -> None:
    assert qt.default_tiles(8, 8, 64) == qt.GemmTiles(16, 32, 64)
    assert qt.GemmTiles(64, 64, 128, 4, 2, False).label == "64x64x128w4s2h"  # the benchmark JSON's keys
    assert qt.GemmTiles().label == "128x128x128w4s3i"
    assert qt.default_tiles(40, 4096, 4096) == qt.GemmTiles(64, 64, 128)
    assert qt.default_tiles(2048, 4096, 4096, packed=True).block_m == 256
    assert qt.default_tiles(512, 4096, 4096, packed=True) == qt.GemmTiles(128, 128, 128, 8, 3)
    assert qt.default_tiles(64, 4096, 4096).block_m == 64 and qt.default_tiles(65, 4096, 4096).block_m == 128
    assert qt.default_tiles(1023, 64, 64, packed=True).block_m == 128
    assert qt.default_tiles(1024, 64, 64, packed=True).block_m == 256
    for bad in ({"block_m": 8}, {"block_n": 48}, {"block_k": 16}, {"num_warps": 3}, {"num_stages": 0},
                {"interleave": 1}, {"block_k": 32, "interleave": False}):
        with pytest.raises(ValueError, match="GemmTiles"):
            qt.GemmTiles(**bad)
    spec = ref.QuantSpec(8, granularity="per_channel")
    pw = qt.pack_weight(torch.zeros(4, 8, dtype=torch.int32), torch.ones(4), spec)
    with pytest.raises(TypeError, match="tiles"):
        qt.int_gemm_acc(torch.zeros(2, 8, dtype=torch.int32), torch.zeros(2, 1), ref.QuantSpec(8), pw, tiles=(64, 64))


def _to(pw: qt.PackedWeight | None, device: str) -> qt.PackedWeight | None:
    if pw is None:
        return None
    return qt.PackedWeight(pw.data.to(device), pw.scale.to(device), pw.colsum.to(device), pw.bits, pw.in_features)


@pytest.mark.parametrize("device", DEVICES)
def test_stamp_codes_through_the_gemm_match_the_fake_quant_layer(device: str) -> None:
    """Mixed 8/4-bit STaMP rows go straight into the int GEMM (per-row bits); inverse DWT after the matmul."""
    s, d, n, k, levels = 32, 64, 24, 8, 2
    x = _ar1(1, s, d, seed=4)[0]
    w, wq, ws, wspec = _weight(n, d, 4, seed=9)
    q, sc, zp = qt.stamp_quantize(x.to(device), k, 8, 4, levels=levels)
    bits = ref.stamp_token_bits(s, k, 8, 4)
    y_t = qt.int_gemm(q, sc, zp, ref.QuantSpec(8, symmetric=False), _to(qt.pack_weight(wq, ws, wspec), device),
                      x_bits=bits.to(device)).cpu()
    y = ref.haar_idwt(y_t, levels, dim=-2)
    xt_hat = ref.stamp_fake_quant(ref.haar_dwt(x, levels, dim=-2), k, 8, 4)
    y_ref = ref.haar_idwt(xt_hat @ ref.dequantize(wq, ws, torch.zeros_like(ws), wspec).T, levels, dim=-2)
    assert ref.quant_error_sqnr(y_ref, y) > 100.0


def test_bad_inputs_raise_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(2, 16, 8)
    with pytest.raises(ValueError, match="stamp k"):
        qt.stamp_quantize(x, 17)
    with pytest.raises(ValueError, match="low_bits"):
        qt.stamp_quantize(x, 4, 8, 0)
    with pytest.raises(ValueError, match="divisible"):
        qt.stamp_quantize(torch.randn(12, 8), 4, levels=3)
    with pytest.raises(ValueError, match="transform"):
        qt.stamp_quantize(x, 4, transform=torch.eye(8))
    with pytest.raises(ValueError, match="transform"):
        qt.stamp_quantize(x, 4, transform="fft")
    with pytest.raises(ValueError, match="floating-point"):
        qt.quantize_dynamic(torch.ones(3, 4, dtype=torch.int32), ref.QuantSpec(8))
    with pytest.raises(ValueError, match="divisible by group_size"):
        qt.quantize_dynamic(torch.randn(3, 10), ref.QuantSpec(4, granularity="per_group", group_size=4))
    with pytest.raises(ValueError, match="does not broadcast"):
        qt.quantize(torch.randn(3, 4), torch.ones(5, 1), torch.zeros(5, 1), ref.QuantSpec(8))
    w, wq, ws, wspec = _weight(4, 8, 4, seed=0)
    with pytest.raises(ValueError, match="symmetric per_channel"):
        qt.pack_weight(wq, ws, ref.QuantSpec(4, symmetric=False, granularity="per_channel"))
    pw = qt.pack_weight(wq, ws, wspec)
    with pytest.raises(ValueError, match=r"xq must be \[\.\.\., 8\]"):
        qt.int_gemm(torch.zeros(2, 6, dtype=torch.int32), torch.ones(2, 1), torch.zeros(2, 1), ref.QuantSpec(8), pw)
    with pytest.raises(ValueError, match="activation bits"):
        qt.int_gemm(torch.zeros(2, 8, dtype=torch.int32), torch.ones(2, 1), torch.zeros(2, 1), ref.QuantSpec(12), pw)
    with pytest.raises(ValueError, match="activation bits"):  # per-row bits above 8 (checked by default)
        qt.int_gemm(torch.zeros(2, 8, dtype=torch.int32), torch.ones(2, 1), torch.zeros(2, 1), ref.QuantSpec(8), pw,
                    x_bits=torch.tensor([8, 12]))
    with pytest.raises(ValueError, match="do not fit int8"):  # codes of another bit width than the spec says
        qt.int_gemm(torch.full((2, 8), 300, dtype=torch.int32), torch.ones(2, 1), torch.zeros(2, 1),
                    ref.QuantSpec(8), pw)
    with pytest.raises(TypeError, match="PackedWeight"):
        qt.int_gemm(torch.zeros(2, 8, dtype=torch.int32), torch.ones(2, 1), torch.zeros(2, 1), ref.QuantSpec(8), wq)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="TRITON_INTERPRET"):
            qt.quantize_dynamic(torch.randn(2, 4), ref.QuantSpec(8))


def test_package_surface() -> None:
    assert qt.triton_available() == (_INTERP or torch.cuda.is_available())
    assert qt.triton_device() in ("cpu", "cuda")
    with pytest.raises(AttributeError):
        _ = qt.not_a_kernel
