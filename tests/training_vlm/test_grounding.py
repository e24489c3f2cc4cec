"""Grounding pre-training (training.vlm.grounding): the generated questions are answered by the image, the config
rejects bad stages, and a micro VLM learns to localise a single square in a few dozen steps."""

from __future__ import annotations

import numpy as np
import pytest

from training.vlm.grounding import COLOURS, GroundingConfig, grounding_corpus, make_grounding_set


def _mask(img: np.ndarray, colour: tuple[int, int, int], scale: float = 1.0) -> np.ndarray:
    return np.all(np.abs(img.astype(int) - (np.asarray(colour) * scale).astype(int)) <= 1, axis=2)


@pytest.mark.parametrize("objects", [1, 3])
def test_answers_follow_the_asked_square(objects: int) -> None:
    data = make_grounding_set(60, size=6, image_size=32, objects=objects, seed=3)
    assert len(data) == 60
    for img, question, answer in data:
        colour = next(c for c in COLOURS if f" {c} " in question)
        ys, xs = np.nonzero(_mask(img, COLOURS[colour]))
        assert len(xs) == 36, "the asked square is drawn at full brightness, 6 x 6 px"
        centre = (xs.mean() if "side" in question else ys.mean()) + 0.5
        expected = ("left", "right") if "side" in question else ("top", "bottom")
        assert answer == expected[int(centre > 16)]
        assert abs(centre - 16) >= 1.5, "never ambiguous"


def test_colour_tasks_name_the_right_square() -> None:
    for img, question, answer in make_grounding_set(30, size=6, image_size=32, objects=1, seed=2, task="colour"):
        assert question == "what colour is the square?" and _mask(img, COLOURS[answer]).sum() == 36
    for img, question, answer in make_grounding_set(30, size=6, image_size=32, objects=2, seed=2, task="colour_at"):
        side = question.split()[-1].rstrip("?")
        half = img[:, :16] if side == "left" else img[:, 16:]
        other = img[:, 16:] if side == "left" else img[:, :16]
        assert _mask(half, COLOURS[answer]).sum() == 36 and _mask(other, COLOURS[answer]).sum() == 0
    for img, question, answer in make_grounding_set(30, size=6, image_size=32, objects=2, seed=4, task="side_of"):
        colour = next(c for c in COLOURS if f" {c} " in question)
        asked, half = _mask(img, COLOURS[colour]), slice(0, 16) if answer == "left" else slice(16, 32)
        assert asked.sum() == 36 and asked[:, half].sum() == 36, "the named square is on the answered side"
        others = [c for c in COLOURS if c != colour and _mask(img, COLOURS[c]).sum() == 36]
        assert len(others) == 1 and _mask(img, COLOURS[others[0]])[:, half].sum() == 0, "the other is opposite"
    with pytest.raises(ValueError, match="needs 2 object"):
        make_grounding_set(1, size=6, image_size=32, objects=1, task="colour_at")
    with pytest.raises(ValueError, match="needs 2 object"):
        make_grounding_set(1, size=6, image_size=32, objects=3, task="side_of")
    with pytest.raises(ValueError, match="task must be one of"):
        make_grounding_set(1, size=6, image_size=32, task="count")


def test_distractors_are_dimmed() -> None:
    for img, question, _ in make_grounding_set(20, size=8, image_size=64, objects=2, seed=1, distractor_brightness=0.5):
        asked = next(c for c in COLOURS if f" {c} " in question)
        others = [c for c in COLOURS if c != asked and _mask(img, COLOURS[c], 0.5).sum() == 64]
        assert len(others) == 1 and _mask(img, COLOURS[asked]).sum() == 64


@pytest.mark.parametrize("bad", [[], [[24, 1]], [[0, 1, 1.0]], [[8, 9, 1.0]], [[8, 1, 1.5]], [[8.0, 1, 1.0]],
                                 [[8, 2, 1.0, "colour"]], [[8, 1, 1.0, "colour_at"]], [[8, 1, 1.0, "count"]],
                                 [[8, 3, 1.0, "side_of"]]])
def test_config_rejects_bad_stages(bad: list) -> None:
    with pytest.raises(ValueError, match="stages"):
        GroundingConfig(stages=bad)


def test_config_rejects_bad_numbers_and_sizes() -> None:
    with pytest.raises(ValueError, match="lr"):
        GroundingConfig(lr=0.0)
    with pytest.raises(ValueError, match="object size"):
        make_grounding_set(1, size=20, image_size=32)
    assert GroundingConfig.from_dict(GroundingConfig().to_dict()) == GroundingConfig()
    assert GroundingConfig(stages=[[8, 1, 1.0]]).stage_list() == [(8, 1, 1.0, "where")]
    assert GroundingConfig(stages=[[8, 2, 1.0, "colour_at"]]).stage_list() == [(8, 2, 1.0, "colour_at")]
    bind = GroundingConfig(stages="bind")
    assert bind.stage_list()[0] == (24, 1, 1.0, "colour") and bind.stage_list()[-1] == (12, 2, 1.0, "side_of")
    assert GroundingConfig.from_dict(bind.to_dict()) == bind
    with pytest.raises(ValueError, match="unknown preset 'binding'"):
        GroundingConfig(stages="binding")


def test_micro_vlm_learns_to_localise(tmp_path) -> None:
    import torch

    from agents.vlm import MICRO_SIZES, build_tiny_vlm, load_vlm
    from training.vlm.grounding import pretrain_grounding

    torch.manual_seed(0)
    path = build_tiny_vlm(tmp_path / "vlm", corpus=grounding_corpus(), seed=0, **MICRO_SIZES)
    bundle = load_vlm(path)
    res = pretrain_grounding(bundle, GroundingConfig(stages=[[14, 1, 1.0]], steps_per_stage=600,
                                                     samples_per_stage=800, batch_size=16, lr=2e-3), progress=False)
    (stage,) = res["stages"]
    assert stage["accuracy"] >= 0.9, res  # chance is 0.5
    assert not bundle.model.training and all(p.requires_grad for p in bundle.model.parameters())
