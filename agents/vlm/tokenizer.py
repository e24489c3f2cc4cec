"""A byte-level BPE tokenizer trained offline (``tokenizers``) for tiny VLMs; any text stays encodable."""

from __future__ import annotations

import logging
from collections.abc import Sequence

log = logging.getLogger(__name__)

#: default training text: instructions, subtasks, motion plans, numbers and VQA-style questions/answers
DEFAULT_CORPUS: tuple[str, ...] = (
    "pick up the red cube and lift it. stack the red cube on the green cube. put the can into the bin.",
    "move above the cube, descend, grasp, lift, move to the target, release, done.",
    "move forward and slightly left. move down. move up and slightly backward. stay still. open the gripper.",
    "close the gripper. forward backward left right up down none yes no completed not completed.",
    "[[1.2, -0.4, -2.5, 1], [0.0, 0.0, -5.0, 0], [-3.1, 2.0, 0.5, 1]] [[2.5, 0.0, 0.0, 1]]",
    "0 1 2 3 4 5 6 7 8 9 10 0.1 0.25 -0.5 1.5 -2.75 3.0 -4.2 5.0 12.5 -0.0 100",
    "what colour is the cube? red. green. blue. yellow. how many objects are on the table? one two three four.",
    "is the cube left or right of the gripper? left. right. which object is on top? the red cube is on top.",
    "subtask: motion: actions: instruction: task: question: answer: the robot arm gripper table bin can.",
    "go to the kitchen and stop next to the sofa. turn left at the door. walk past the table, then turn right.",
)


def build_bpe_tokenizer(corpus: Sequence[str], vocab_size: int, special_tokens: Sequence[str], *,
                        bos: str | None, eos: str, pad: str, unk: str | None = None,
                        extra_init: dict[str, str] | None = None):
    """Train a byte-level BPE on ``corpus`` (+ :data:`DEFAULT_CORPUS`) and wrap it as a fast tokenizer.

    ``special_tokens`` come first in the vocabulary (ids 0..). The post-processor marks the second segment of a
    pair with type id 1 (PaliGemma's prefix-LM ``suffix=`` path needs it) and adds no special tokens itself.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 300:
        raise ValueError(f"vocab_size must be >= 300 (256 bytes + special tokens), got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    text = [*DEFAULT_CORPUS, *corpus]
    tok.train_from_iterator(text * 4, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    kw = {"bos_token": bos, "eos_token": eos, "pad_token": pad, "unk_token": unk, **(extra_init or {})}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **{k: v for k, v in kw.items() if v is not None})
    log.debug("trained byte-level BPE: %d tokens", len(fast))
    return fast
