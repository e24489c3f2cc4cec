"""A small CNN for 32x32 RGB images with a feature head (the prototype space) and a linear classifier."""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """conv(3→w)→conv(w→2w)→conv(2w→4w), each with a norm, ReLU and 2x pooling; a 4x4 map; linear to
    ``emb_dim`` features (the prototype space); linear classifier. ``forward`` returns (logits, features).
    ``norm="batch"`` (default; learns several times faster here) or ``"group"`` (no running statistics to average
    across domains)."""

    def __init__(self, num_classes: int = 10, width: int = 16, emb_dim: int = 64, in_channels: int = 3,
                 norm: str = "batch") -> None:
        super().__init__()
        for name, v in (("num_classes", num_classes), ("width", width), ("emb_dim", emb_dim),
                        ("in_channels", in_channels)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")

        if norm not in ("group", "batch"):
            raise ValueError(f"norm must be 'group' or 'batch', got {norm!r}")

        def block(i: int, o: int) -> nn.Sequential:
            nl = nn.GroupNorm(min(4, o), o) if norm == "group" else nn.BatchNorm2d(o)
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nl, nn.ReLU(inplace=True), nn.MaxPool2d(2))

        self.features = nn.Sequential(block(in_channels, width), block(width, 2 * width), block(2 * width, 4 * width),
                                      nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.embed = nn.Linear(16 * 4 * width, emb_dim)
        self.head = nn.Linear(emb_dim, num_classes)
        self.num_classes, self.emb_dim = num_classes, emb_dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.ndim != 4:
            raise ValueError(f"expected images (B, C, H, W), got shape {tuple(x.shape)}")
        z = self.embed(self.features(x))
        return self.head(z), z
