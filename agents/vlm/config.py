"""``TinyVLMConfig``: the size of a tiny random-weight VLM built offline for tests and CPU demos."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agents.core.config import check_ints

#: the smallest useful sizes (32 px, 2 layers, width 64; about 0.2 M parameters): unit tests and smoke runs
MICRO_SIZES: dict[str, int] = dict(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=2,
                                   num_kv_heads=1, intermediate_size=128, vision_hidden_size=64, vision_layers=2,
                                   vision_heads=2, vision_intermediate_size=128)


@dataclass
class TinyVLMConfig:
    """Sizes of a tiny vision-language model (defaults: ~7.5 M parameters, as in ENVIRONMENT.md §2).

    ``family`` is a :data:`agents.vlm.families.FAMILIES` key; ``image_size`` must be a multiple of ``patch_size``
    (``2 * patch_size`` for Qwen2.5-VL, which merges 2x2 patches). ``bpe_vocab_size`` is the size of the byte-level
    BPE trained on ``corpus`` (the family's special tokens come on top).
    """

    family: str = "paligemma"
    image_size: int = 64
    patch_size: int = 16
    hidden_size: int = 256
    num_layers: int = 6
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 768
    vision_hidden_size: int = 192
    vision_layers: int = 6
    vision_heads: int = 4
    vision_intermediate_size: int = 384
    bpe_vocab_size: int = 1024
    corpus: list[str] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self) -> None:
        from agents.vlm.families import get_family

        spec = get_family(self.family)  # ValueError listing the known families
        ints = {
            "image_size": (16, 1024), "patch_size": (2, 64), "hidden_size": (16, 8192), "num_layers": (1, 128),
            "num_heads": (1, 128), "num_kv_heads": (1, 128), "intermediate_size": (16, 65536),
            "vision_hidden_size": (16, 8192), "vision_layers": (1, 128), "vision_heads": (1, 128),
            "vision_intermediate_size": (16, 65536), "bpe_vocab_size": (300, 262144), "seed": (0, 2**31 - 1),
        }
        check_ints(self, ints)
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} must be divisible by num_kv_heads {self.num_kv_heads}")
        if self.vision_hidden_size % self.vision_heads:
            raise ValueError(f"vision_hidden_size {self.vision_hidden_size} must be divisible by vision_heads "
                             f"{self.vision_heads}")
        spec.check_config(self)
        if not all(isinstance(s, str) for s in self.corpus):
            raise ValueError("corpus must be a list of strings")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
