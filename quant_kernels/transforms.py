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
    "random_hadamard_matrix",
    "walsh_hadamard",
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
