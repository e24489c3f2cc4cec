"""Training stages shared by every VLM backbone (navigator and manipulation policies): grounding pre-training."""

from training.vlm.grounding import GroundingConfig, grounding_corpus, make_grounding_set, pretrain_grounding

__all__ = ["GroundingConfig", "grounding_corpus", "make_grounding_set", "pretrain_grounding"]
