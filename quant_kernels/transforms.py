"""Orthonormal sequence and feature transforms: Haar DWT (1-D, 2-D), DCT-II, Walsh-Hadamard, random Hadamard.

Sequence transforms act along ``dim`` (default ``-2``, the token dim of ``[..., tokens, features]``). All are
orthonormal, so the inverse is the transpose and energy is preserved. Lengths that do not fit a transform (not
divisible by ``2**levels`` for Haar, not a power of two for Hadamard) raise ``ValueError``: padding is left to the
caller because the padding rule changes min-max statistics (see methods/stamp.md, "Sequence length").
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "dct",
    "dct_matrix",
    "haar_dwt",
    "haar_dwt2d",
    "haar_idwt",
    "haar_idwt2d",
    "haar_matrix",
    "hadamard_matrix",
    "idct",
    "block_random_hadamard_matrix",
    "inverse_sequence_transform",
    "pad_tokens",
    "random_hadamard_matrix",
    "sequence_transform",
    "sequency_order",
    "walsh_hadamard",
    "SEQUENCE_TRANSFORMS",
]

_SQRT2 = math.sqrt(2.0)


def _check_levels(n: int, levels: int, what: str) -> None:
    if levels < 0:
        raise ValueError(f"levels must be >= 0, got {levels}")
    if n % (2**levels) != 0:
        raise ValueError(f"{what} length {n} is not divisible by 2**levels = {2**levels}")


def _check_pow2(n: int) -> None:
    if n < 1 or n & (n - 1):
        raise ValueError(f"length must be a power of two, got {n}")


def haar_dwt(x: torch.Tensor, levels: int = 1, dim: int = -2) -> torch.Tensor:
    """Multi-level orthonormal 1-D Haar DWT along ``dim``.

    One step maps pairs to ``a_i = (x_2i + x_2i+1)/sqrt2`` and ``d_i = (x_2i - x_2i+1)/sqrt2`` and is repeated on
    the low-pass half. Output order is ``[a^(L), d^(L), ..., d^(1)]``: low-frequency energy lands in the first
    ``n / 2**levels`` positions. ``x.shape[dim]`` must be divisible by ``2**levels``.
    """
    t = x.movedim(dim, 0)
    n = t.shape[0]
    _check_levels(n, levels, "sequence")
    m = n
    for _ in range(levels):
        even, odd = t[0:m:2], t[1:m:2]
        t = torch.cat(((even + odd) / _SQRT2, (even - odd) / _SQRT2, t[m:]), dim=0)
        m //= 2
    return t.movedim(0, dim)


def haar_idwt(y: torch.Tensor, levels: int = 1, dim: int = -2) -> torch.Tensor:
    """Inverse of :func:`haar_dwt` (same ``levels`` and ``dim``)."""
    t = y.movedim(dim, 0)
    n = t.shape[0]
    _check_levels(n, levels, "sequence")
    for lvl in range(levels, 0, -1):
        m = n // 2 ** (lvl - 1)
        a, d = t[: m // 2], t[m // 2 : m]
        even, odd = (a + d) / _SQRT2, (a - d) / _SQRT2
        merged = torch.stack((even, odd), dim=1).reshape(m, *t.shape[1:])
        t = torch.cat((merged, t[m:]), dim=0)
    return t.movedim(0, dim)


def _grid_tokens(x: torch.Tensor, grid_hw: tuple[int, int], levels: int, dim: int) -> torch.Tensor:
    """``x`` with its token dim first, after checking it holds an ``H x W`` grid divisible by ``2**levels``."""
    h, w = grid_hw
    t = x.movedim(dim, 0)
    if t.shape[0] != h * w:
        raise ValueError(f"token count {t.shape[0]} does not match grid {h}x{w}")
    _check_levels(h, levels, "grid height")
    _check_levels(w, levels, "grid width")
    return t


def haar_dwt2d(x: torch.Tensor, grid_hw: tuple[int, int], levels: int = 1, dim: int = -2) -> torch.Tensor:
    """Multi-level orthonormal 2-D Haar DWT over image tokens laid out row-major as an ``H x W`` grid along ``dim``.

    Per level, each 2x2 block ``[[a, b], [c, e]]`` of the current LL band gives ``LL = (a+b+c+e)/2``,
    ``H = (a-b+c-e)/2`` (detail across width), ``V = (a+b-c-e)/2`` (across height), ``D = (a-b-c+e)/2``.
    Output token order (each band flattened row-major): ``[LL^(L), H^(L), V^(L), D^(L), ..., H^(1), V^(1), D^(1)]``,
    so a 64x64 grid at 3 levels puts its 8x8 = 64 LL tokens first. ``H`` and ``W`` must divide by ``2**levels``.
    """
    h, w = grid_hw
    t = _grid_tokens(x, grid_hw, levels, dim)
    rest = t.shape[1:]
    a = t.reshape(h, w, *rest)
    details: list[torch.Tensor] = []
    for _ in range(levels):
        p, q, r, s = a[0::2, 0::2], a[0::2, 1::2], a[1::2, 0::2], a[1::2, 1::2]
        bands = ((p - q + r - s) / 2, (p + q - r - s) / 2, (p - q - r + s) / 2)
        details.insert(0, torch.cat([b.reshape(-1, *rest) for b in bands], dim=0))
        a = (p + q + r + s) / 2
    return torch.cat([a.reshape(-1, *rest), *details], dim=0).movedim(0, dim)


def haar_idwt2d(y: torch.Tensor, grid_hw: tuple[int, int], levels: int = 1, dim: int = -2) -> torch.Tensor:
    """Inverse of :func:`haar_dwt2d` (same ``grid_hw``, ``levels`` and ``dim``)."""
    h, w = grid_hw
    t = _grid_tokens(y, grid_hw, levels, dim)
    rest = t.shape[1:]
    hh, ww = h // 2**levels, w // 2**levels
    a = t[: hh * ww].reshape(hh, ww, *rest)
    pos = hh * ww
    for _ in range(levels):
        size = hh * ww
        hb, vb, db = (t[pos + i * size : pos + (i + 1) * size].reshape(hh, ww, *rest) for i in range(3))
        pos += 3 * size
        p, q = (a + hb + vb + db) / 2, (a - hb + vb - db) / 2
        r, s = (a + hb - vb - db) / 2, (a - hb - vb + db) / 2
        top = torch.stack((p, q), dim=2).reshape(hh, 2 * ww, *rest)
        bottom = torch.stack((r, s), dim=2).reshape(hh, 2 * ww, *rest)
        a = torch.stack((top, bottom), dim=1).reshape(2 * hh, 2 * ww, *rest)
        hh, ww = 2 * hh, 2 * ww
    return a.reshape(h * w, *rest).movedim(0, dim)


def haar_matrix(n: int, levels: int = 1, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``n x n`` orthonormal matrix ``T`` with ``haar_dwt(x, levels, dim=0) == T @ x``."""
    return haar_dwt(torch.eye(n, dtype=torch.float64), levels, dim=0).to(dtype)


def dct_matrix(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Orthonormal DCT-II matrix ``C[k, i] = c_k cos(pi (2i+1) k / 2n)``, ``c_0 = sqrt(1/n)``, else ``sqrt(2/n)``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    k = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(n, dtype=torch.float64).unsqueeze(0)
    c = torch.cos(math.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2.0 / n)
    c[0] /= _SQRT2
    return c.to(dtype)


def dct(x: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """Orthonormal DCT-II along ``dim`` (coefficient 0, the mean, first)."""
    t = x.movedim(dim, -1)
    c = dct_matrix(t.shape[-1], dtype=t.dtype).to(t.device)
    return (t @ c.T).movedim(-1, dim)


def idct(y: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """Inverse of :func:`dct` (DCT-III, the transpose)."""
    t = y.movedim(dim, -1)
    c = dct_matrix(t.shape[-1], dtype=t.dtype).to(t.device)
    return (t @ c).movedim(-1, dim)


def walsh_hadamard(x: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """Normalised fast Walsh-Hadamard transform (Sylvester/natural order) along ``dim``; its own inverse.

    ``x.shape[dim]`` must be a power of two. Equals ``hadamard_matrix(n) @ x`` along ``dim``.
    """
    t = x.movedim(dim, -1)
    n = t.shape[-1]
    _check_pow2(n)
    lead = t.shape[:-1]
    hlen = 1
    while hlen < n:
        v = t.reshape(*lead, n // (2 * hlen), 2, hlen)
        a, b = v[..., 0, :], v[..., 1, :]
        t = torch.stack((a + b, a - b), dim=-2).reshape(*lead, n)
        hlen *= 2
    return (t / math.sqrt(n)).movedim(-1, dim)


def hadamard_matrix(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Normalised symmetric Sylvester Hadamard matrix ``H / sqrt(n)`` (``n`` a power of two)."""
    return walsh_hadamard(torch.eye(n, dtype=torch.float64), dim=0).to(dtype)


def random_hadamard_matrix(n: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Orthonormal ``H / sqrt(n) @ diag(s)`` with seeded random signs ``s`` in {-1, +1} (QuaRot-style rotation).

    For a feature rotation ``R``: ``x @ W.T == (x @ R) @ (W @ R).T`` since ``R @ R.T = I``.
    """
    _check_pow2(n)
    gen = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (n,), generator=gen, dtype=torch.int64).to(torch.float64) * 2 - 1
    return (hadamard_matrix(n, dtype=torch.float64) * signs).to(dtype)


def block_random_hadamard_matrix(n: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Orthonormal ``n x n`` block-diagonal random Hadamard rotation for any ``n`` (QuaRot-style).

    Uses blocks of the largest power of two ``b`` dividing ``n`` (``n = 384`` -> ``b = 128``); each block is
    :func:`random_hadamard_matrix` with its own seed. For a power-of-two ``n`` it is one full rotation.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    b = n & (-n)  # largest power of two dividing n
    blocks = [random_hadamard_matrix(b, seed=seed + i, dtype=torch.float64) for i in range(n // b)]
    return torch.block_diag(*blocks).to(dtype)


def sequency_order(n: int) -> torch.Tensor:
    """Permutation putting natural-order Walsh-Hadamard rows in sequency order (number of sign changes)."""
    _check_pow2(n)
    h = hadamard_matrix(n, dtype=torch.float64)
    changes = (h[:, 1:] * h[:, :-1] < 0).sum(dim=1)
    return torch.argsort(changes, stable=True)


def _check_kind(kind: str, grid_hw: tuple[int, int] | None) -> None:
    if kind not in SEQUENCE_TRANSFORMS:
        raise ValueError(f"sequence transform must be one of {SEQUENCE_TRANSFORMS}, got {kind!r}")
    if kind == "dwt2d" and grid_hw is None:
        raise ValueError("sequence transform 'dwt2d' needs grid_hw=(H, W)")


def _wht_forward(x: torch.Tensor, dim: int) -> torch.Tensor:
    order = sequency_order(x.shape[dim]).to(x.device)
    return walsh_hadamard(x, dim=dim).index_select(dim, order)


def _wht_inverse(y: torch.Tensor, dim: int) -> torch.Tensor:
    inv = torch.argsort(sequency_order(y.shape[dim])).to(y.device)
    return walsh_hadamard(y.index_select(dim, inv), dim=dim)


# kind -> (forward, inverse), each called as f(x, levels, grid_hw, dim)
_SEQ_PAIRS = {
    "dwt": (lambda x, lv, g, d: haar_dwt(x, lv, dim=d), lambda y, lv, g, d: haar_idwt(y, lv, dim=d)),
    "dwt2d": (lambda x, lv, g, d: haar_dwt2d(x, g, lv, dim=d), lambda y, lv, g, d: haar_idwt2d(y, g, lv, dim=d)),
    "dct": (lambda x, lv, g, d: dct(x, dim=d), lambda y, lv, g, d: idct(y, dim=d)),
    "wht": (lambda x, lv, g, d: _wht_forward(x, d), lambda y, lv, g, d: _wht_inverse(y, d)),
    "identity": (lambda x, lv, g, d: x, lambda y, lv, g, d: y),
}
SEQUENCE_TRANSFORMS = tuple(_SEQ_PAIRS)


def sequence_transform(
    x: torch.Tensor, kind: str, levels: int = 3, grid_hw: tuple[int, int] | None = None, dim: int = -2
) -> torch.Tensor:
    """Orthonormal transform ``L x`` along the token dim: ``dwt`` (1-D Haar, ``levels``), ``dwt2d`` (2-D Haar over
    an ``H x W`` token grid), ``dct``, ``wht`` (Walsh-Hadamard in sequency order) or ``identity``.
    Low-frequency tokens come first."""
    _check_kind(kind, grid_hw)
    return _SEQ_PAIRS[kind][0](x, levels, grid_hw, dim)


def inverse_sequence_transform(
    y: torch.Tensor, kind: str, levels: int = 3, grid_hw: tuple[int, int] | None = None, dim: int = -2
) -> torch.Tensor:
    """Inverse of :func:`sequence_transform` (``L^T y``) with the same arguments."""
    _check_kind(kind, grid_hw)
    return _SEQ_PAIRS[kind][1](y, levels, grid_hw, dim)


def pad_tokens(x: torch.Tensor, kind: str, levels: int = 3, mode: str = "reflect") -> tuple[torch.Tensor, int]:
    """Pad the token dim (-2) of ``x`` to a length ``kind`` accepts: a multiple of ``2**levels`` for ``dwt``, a
    power of two for ``wht`` (others unchanged). ``mode="reflect"`` mirrors the last tokens without repeating the
    edge (keeps min-max statistics, methods/stamp.md), falling back to zeros when the pad exceeds the sequence;
    ``"zero"`` appends zeros. Returns ``(x_padded, n_original)``: slice outputs with ``[..., :n, :]``."""
    if mode not in ("reflect", "zero"):
        raise ValueError(f"pad mode must be 'reflect' or 'zero', got {mode!r}")
    if x.dim() < 2:
        raise ValueError(f"sequence transforms need inputs [..., tokens, features], got shape {tuple(x.shape)}")
    n = x.shape[-2]
    if kind == "wht":
        target = 1 << max(n - 1, 0).bit_length()
    elif kind == "dwt":
        target = -(-n // 2**levels) * 2**levels
    else:
        target = n
    p = target - n
    if p <= 0:
        return x, n
    if mode == "reflect" and p < n:
        return torch.cat((x, x[..., n - 1 - p : n - 1, :].flip(-2)), -2), n
    return torch.cat((x, x.new_zeros(*x.shape[:-2], p, x.shape[-1])), -2), n
