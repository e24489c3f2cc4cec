"""Relabelling (scripted + VLM) and codec samples: steps tile the episode, targets follow grammar v1 and decode
back to the demonstrated chunks."""

from __future__ import annotations

import numpy as np
import pytest

from agents.vla import check_motion, format_subtasks, gripper_states, make_codec, merge_deltas, parse_chunk
from tests.training_vla.conftest import lift_like_episode
from training.vla.relabel import RELABELLERS, ScriptedRelabeller, VLMRelabeller, make_relabeller
from training.vla.relabel.vlm import clean_subtask
from training.vla.samples import Sample, build_samples, sample_corpus


def test_scripted_relabeller_from_phases():
    ep = lift_like_episode()
    le = make_relabeller("scripted").relabel(ep)
    assert [(s.start, s.end) for s in le.steps] == [(0, 3), (3, 6), (6, 9), (9, 11)]
    assert le.subtasks == ["move above the red cube", "lower the gripper to the red cube", "grasp the red cube",
                           "lift the red cube"]
    format_subtasks(le.subtasks)  # grammar-v1 subtasks
    motions = [check_motion(s.motion) for s in le.steps]
    assert motions[0] == "move forward and slightly left and down" and motions[1] == "move down"
    assert motions[2] == "close the gripper" and motions[3] == "move up"
    # the chunk of each step is the paper's merge of its deltas
    chunk, spans = le.chunk(1)
    ref, _ = merge_deltas(ep.deltas[3:6], gripper_states(ep.gripper)[3:6])
    np.testing.assert_allclose(chunk, ref)
    assert spans[0][0] == 3 and spans[-1][1] == 6
    assert chunk[:, 2].sum() == pytest.approx(-9.0, abs=0.05) and chunk[0, 3] == 1.0  # cm, gripper open
    assert make_relabeller("scripted", max_step_len=2).relabel(ep).steps[0].end == 2
    with pytest.raises(KeyError, match="scripted"):
        make_relabeller("gpt")


def test_scripted_relabeller_without_phases_splits_on_gripper_and_direction():
    ep = lift_like_episode(phases=False)
    le = ScriptedRelabeller().relabel(ep)
    bounds = [(s.start, s.end) for s in le.steps]
    assert bounds == [(0, 3), (3, 6), (6, 9), (9, 11)]  # direction changes at 3 and 9, gripper flip at 6
    assert any("close the gripper" in s.motion for s in le.steps)
    assert "move the gripper up" in le.subtasks
    for s in le.steps:
        check_motion(s.motion)
    format_subtasks(le.subtasks)


def test_vlm_relabeller_flow_on_tiny_model(bundle):
    ep = lift_like_episode()
    rl = RELABELLERS.get("vlm")(bundle=bundle, max_new_tokens=6)
    le = rl.relabel(ep)
    ref = ScriptedRelabeller().relabel(ep)
    assert [(s.start, s.end) for s in le.steps] == [(s.start, s.end) for s in ref.steps]
    assert [s.motion for s in le.steps] == [s.motion for s in ref.steps]
    assert len(le.meta["replies"]) == len(le.steps)
    # each step got the model's cleaned reply or (counted) the scripted name
    n_clean = sum(clean_subtask(r) is not None for r in le.meta["replies"])
    assert le.meta["fallbacks"] == len(le.steps) - n_clean
    for s, r, base in zip(le.steps, le.meta["replies"], ref.steps):
        assert s.subtask == (clean_subtask(r) or base.subtask)
    assert clean_subtask("Grasp the cube.\nmore") == "grasp the cube"
    assert clean_subtask("[[1, 2]]") is None and clean_subtask("") is None
    with pytest.raises(ValueError, match="needs a VLM"):
        VLMRelabeller()


def test_language_samples_decode_back_to_the_chunks(bundle):
    le = ScriptedRelabeller().relabel(lift_like_episode())
    codec = make_codec("language", bundle.tokenizer)
    samples = build_samples([le], codec, aux=True)
    kinds = [s.kind for s in samples]
    assert kinds.count("subtasks") == 1 and kinds.count("motion") == 4 and kinds.count("action") == 4
    assert kinds.count("completion") == 4 + 3 and kinds.count("direction") == 4
    actions = [s for s in samples if s.kind == "action"]
    for i, s in enumerate(actions):
        np.testing.assert_allclose(parse_chunk(s.target), le.chunk(i)[0], atol=0.051)
        assert "motion: " + le.steps[i].motion in s.prompt
    assert len(build_samples([le], codec, aux=False)) == 9
    assert "list the subtasks" in " ".join(sample_corpus([le]))


@pytest.mark.parametrize("name,atol", [("action_tokens", 0.051), ("binned", 20 / 256 + 1e-6)])
def test_token_codec_samples(bundle, name, atol):
    le = ScriptedRelabeller().relabel(lift_like_episode())
    codec = make_codec(name, bundle.tokenizer)
    samples = [s for s in build_samples([le], codec) if s.kind == "action"]
    assert all(isinstance(s.target, tuple) for s in samples)
    if name == "binned":  # flat: one sample per merged chunk element, 4 tokens each, prompt without subtask
        chunks = np.concatenate([le.chunk(i)[0] for i in range(len(le.steps))])
        assert len(samples) == len(chunks) and all(len(s.target) == 4 for s in samples)
        assert all("subtask" not in s.prompt for s in samples)
        got = np.concatenate([codec.decode("", s.target) for s in samples])
    else:
        chunks = np.concatenate([le.chunk(i)[0] for i in range(len(le.steps))])
        got = np.concatenate([codec.decode("", s.target) for s in samples])
        assert set(codec.digit_ids) & {t for s in samples for t in s.target}
    np.testing.assert_allclose(got[:, :3], chunks[:, :3], atol=atol)
    np.testing.assert_array_equal(got[:, 3], chunks[:, 3])


def test_sample_validation():
    img = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="non-empty"):
        Sample(img, "p", "", "x")
    with pytest.raises(ValueError, match="uint8"):
        Sample(img.astype(float), "p", "t", "x")
    assert Sample(img, "p", [3, 4], "x").target == (3, 4)


def test_scene_vqa_generation_and_accuracy(bundle, tmp_path):
    pytest.importorskip("robosuite")
    from training.vla.evaluate import majority_baseline, vqa_accuracy
    from training.vla.vqa_scenes import ANSWER_WORDS, cached_vqa, generate_vqa, load_vqa, save_vqa, split_vqa

    items = generate_vqa(4, image_size=32, seed=1, progress=False)
    assert len(items) == 16 and {it.kind for it in items} >= {"count", "table", "exists"}
    assert all(it.answer in ANSWER_WORDS and it.image.shape == (32, 32, 3) for it in items)
    for it in items:  # ground truth consistency inside each scene
        same = [o for o in items if o.scene == it.scene]
        if it.kind == "colour":
            assert any(o.kind == "count" and o.answer == "one" for o in same)
        if it.kind in ("side", "top"):
            assert any(o.kind == "count" and o.answer == "two" for o in same)
    train, test = split_vqa(items, 0.25)
    assert {it.scene for it in train}.isdisjoint({it.scene for it in test}) and len(test) == 4
    back = load_vqa(save_vqa(items, tmp_path / "v.npz"))
    assert [(b.question, b.answer) for b in back] == [(it.question, it.answer) for it in items]
    assert np.array_equal(back[5].image, items[5].image)
    assert [p.name for p in tmp_path.iterdir()] == ["v.npz"]  # written through a temporary file, none left
    first = cached_vqa(tmp_path / "c", 4, image_size=32, seed=1, progress=False)  # generated, then saved
    assert [(a.question, a.answer) for a in first] == [(it.question, it.answer) for it in items]
    (saved,) = (tmp_path / "c").iterdir()
    stamp = saved.stat().st_mtime_ns
    again = cached_vqa(tmp_path / "c", 4, image_size=32, seed=1, progress=False)  # read, not rewritten
    assert saved.stat().st_mtime_ns == stamp and np.array_equal(again[5].image, items[5].image)
    saved.write_bytes(saved.read_bytes()[:300])  # cut short (a pre-atomic writer killed mid-write)
    with pytest.raises(ValueError, match="unreadable VQA cache"):
        load_vqa(saved)
    rebuilt = cached_vqa(tmp_path / "c", 4, image_size=32, seed=1, progress=False)  # regenerated, not a crash
    assert [(a.question, a.answer) for a in rebuilt] == [(it.question, it.answer) for it in items]
    assert load_vqa(saved)[5].question == items[5].question
    res = vqa_accuracy(bundle, test)
    assert res["n"] == 4 and 0.0 <= res["accuracy"] <= 1.0 and set(res["by_kind"]) == {it.kind for it in test}
    assert res["accuracy"] <= res["in_vocabulary"] <= 1.0  # a right answer is an answer word
    assert 0.0 <= majority_baseline(train, test) <= 1.0


def test_spatial_prior_questions_speak_the_action_language(tmp_path):
    """``spatial=True`` adds per visible cube its offset from the gripper in the chunk's numbers and its direction
    as a motion phrase; the general questions are unchanged and ``general_only`` recovers them exactly."""
    pytest.importorskip("robosuite")
    from training.vla.vqa_scenes import (
        SPATIAL_KINDS,
        _spatial_questions,
        cached_vqa,
        general_only,
        generate_vqa,
        split_vqa,
    )

    col = {"cubeA": "red", "cubeB": "blue"}
    pos = {"cubeA": np.array([0.10, -0.05, 0.83]), "cubeB": np.array([3.0, 3.0, -1.0])}  # cubeB out of view
    qa = _spatial_questions(col, pos, ee=np.array([0.0, 0.0, 1.0]))
    assert qa == [("where", "where is the red cube from the gripper in cm?", "[10.0, -5.0, -17.0]"),
                  ("way", "which way is the red cube from the gripper?", "move forward and slightly right and down")]
    plain = generate_vqa(3, image_size=32, seed=2, progress=False)
    both = cached_vqa(tmp_path, 3, image_size=32, seed=2, progress=False, spatial=True)
    assert [(a.question, a.answer, a.scene) for a in general_only(both)] == [
        (a.question, a.answer, a.scene) for a in plain]
    extra = [it for it in both if it.kind in SPATIAL_KINDS]
    visible = sum(2 if it.answer == "two" else 1 for it in plain if it.kind == "count")
    assert len(extra) == 2 * visible
    for it in extra:
        if it.kind == "where":
            d = parse_chunk(f"[{it.answer[:-1]}, 1]]")  # the offset is a chunk element without its gripper
            assert d.shape == (1, 4) and d[0, 2] < 0  # cubes lie below the gripper's reset pose
        else:
            assert check_motion(it.answer).startswith("move ")
    assert [p.name for p in tmp_path.iterdir()] == ["vqa3s_32px_3scenes_seed2.npz"]  # its own cache file
    _, test = split_vqa(both, 0.34)
    assert {it.kind for it in general_only(test)}.isdisjoint(SPATIAL_KINDS)


def test_spatial_questions_through_the_policys_camera(tmp_path):
    """``spatial_camera`` asks the spatial questions on the same scene seen through that camera (the answers stay
    the same offsets); the cache keeps both images per scene, and an older cache (one image per scene) still reads."""
    pytest.importorskip("robosuite")
    from agents.core.io import save_npz
    from training.vla.vqa_scenes import SPATIAL_KINDS, cached_vqa, generate_vqa, load_vqa

    agent = generate_vqa(3, image_size=32, seed=2, progress=False, spatial=True)
    wrist = cached_vqa(tmp_path, 3, image_size=32, seed=2, progress=False, spatial=True,
                       spatial_camera="robot0_eye_in_hand")
    assert [(a.question, a.answer, a.kind, a.scene) for a in wrist] == [
        (a.question, a.answer, a.kind, a.scene) for a in agent]
    for a, w in zip(agent, wrist, strict=True):
        assert np.array_equal(a.image, w.image) is (a.kind not in SPATIAL_KINDS)
    scene0 = [w for w in wrist if w.scene == 0]
    general = [w for w in scene0 if w.kind not in SPATIAL_KINDS]
    spatial = [w for w in scene0 if w.kind in SPATIAL_KINDS]
    assert spatial and all(np.array_equal(w.image, spatial[0].image) for w in spatial)  # one wrist image per scene
    assert not np.array_equal(general[0].image, spatial[0].image)
    (saved,) = tmp_path.iterdir()
    assert saved.name == "vqa3s_robot0_eye_in_hand_32px_3scenes_seed2.npz"
    back = load_vqa(saved)
    assert all(np.array_equal(b.image, w.image) for b, w in zip(back, wrist, strict=True))
    # the layout before spatial cameras: images per scene, in scene_ids order
    old = [a for a in agent if a.kind not in SPATIAL_KINDS]
    per_scene = {a.scene: a.image for a in old}
    save_npz(tmp_path / "old.npz", images=np.stack([per_scene[2], per_scene[0], per_scene[1]]),
             scene_ids=np.asarray([2, 0, 1]), scene=np.asarray([a.scene for a in old]),
             question=np.asarray([a.question for a in old]), answer=np.asarray([a.answer for a in old]),
             kind=np.asarray([a.kind for a in old]))
    read = load_vqa(tmp_path / "old.npz")
    assert all(np.array_equal(r.image, a.image) and r.question == a.question for r, a in zip(read, old, strict=True))
    with pytest.raises(ValueError, match="spatial=True"):
        generate_vqa(1, image_size=32, seed=2, progress=False, spatial_camera="robot0_eye_in_hand")
    with pytest.raises(ValueError, match="not in this scene"):
        generate_vqa(1, image_size=32, seed=2, progress=False, spatial=True, spatial_camera="wristcam")


def test_action_token_text_encoding(bundle):
    """``encode_text`` writes every digit as one of AT's rare tokens and the rest as ordinary tokens; it reads back."""
    at = make_codec("action_tokens", bundle.tokenizer)
    ids = at.encode_text("[10.5, -3.0, 7.2]")
    assert [t for t in ids if t in at.digit_ids] == [at.digit_ids[d] for d in (1, 0, 5, 3, 0, 7, 2)]
    assert at.to_text(ids) == "[10.5, -3.0, 7.2]"
    assert at.encode_text("[[1.0, 0.0, 0.0, 1]]") == at.encode(np.array([[1.0, 0.0, 0.0, 1.0]]))


def test_rest_of_a_step_and_replan_samples(bundle):
    ep = lift_like_episode()
    le = ScriptedRelabeller().relabel(ep)  # steps (0,3) (3,6) (6,9) (9,11)
    # from the step's first frame the rest is the whole step
    np.testing.assert_allclose(le.rest(0, 0)[0], le.chunk(0)[0])
    assert le.rest(0, 0)[1] == le.steps[0].motion
    # mid-step: the merge of the remaining deltas, its own motion plan; the close is already done mid-grasp
    rest, motion = le.rest(1, 4)
    np.testing.assert_allclose(rest[:, :3].sum(axis=0), ep.deltas[4:6].sum(axis=0) * 100, atol=1e-6)
    assert motion == "move down" and le.chunk(1, 4)[1][0][0] == 4
    assert le.rest(2, 7)[1] != le.steps[2].motion  # "close the gripper" only where the gripper changes
    with pytest.raises(ValueError, match="outside step 1"):
        le.chunk(1, 6)
    codec = make_codec("language", bundle.tokenizer)
    base = build_samples([le], codec, aux=False)
    more = build_samples([le], codec, aux=False, replan=True)
    # every frame after a step's first adds a motion and an action sample: 2 + 2 + 2 + 1 frames
    assert len(more) == len(base) + 2 * 7
    acts = [s for s in more if s.kind == "action" and np.array_equal(s.image, ep.frames[4])]
    assert len(acts) == 1 and "motion: move down" in acts[0].prompt
    np.testing.assert_allclose(parse_chunk(acts[0].target), rest, atol=0.051)
    key = [(s.prompt, s.target, s.kind) for s in base]  # the step-start samples are all kept
    assert all(k in [(s.prompt, s.target, s.kind) for s in more] for k in key)
    assert sum(s.kind == "action" for s in more) == 4 + 7


def test_spatial_accuracy_scores_offsets_and_phrases(bundle, monkeypatch):
    """``spatial_accuracy``: the median horizontal error of the parsed ``where`` offsets (an unparsed answer counts
    as the training mean's), the exact-phrase ``way`` accuracy and the mean-answer reference."""
    import agents.vlm
    from agents.vlm.generate import Generation
    from training.vla.evaluate import spatial_accuracy
    from training.vla.vqa_scenes import VQAItem

    img = np.zeros((32, 32, 3), dtype=np.uint8)
    where = [VQAItem(img, "where is the red cube from the gripper in cm?", a, "where", i)
             for i, a in enumerate(["[10.0, 0.0, -17.0]", "[0.0, 4.0, -17.0]", "[-6.0, -8.0, -17.0]"])]
    way = [VQAItem(img, "which way is the red cube from the gripper?", "move forward and down", "way", 9)]
    train = [VQAItem(img, "q", "[2.0, 2.0, -17.0]", "where", 20), VQAItem(img, "q", "[0.0, 0.0, -17.0]", "where", 21)]
    real = spatial_accuracy(bundle, where + way, train)  # the tiny random model: whatever it says is scored
    assert 0.0 <= real["where_parsed"] <= 1.0 and real["n_where"] == 3 and real["n_way"] == 1
    answers = iter(["[10.0, 3.0, -17.0] ok", "no idea", "[-6.0, -8.0, -10.0]", "move forward and down"])

    def fake(bundle, images, prompts, settings):
        return [Generation(text=next(answers), token_ids=()) for _ in prompts]

    monkeypatch.setattr(agents.vlm, "generate", fake)
    got = spatial_accuracy(bundle, where + way, train)
    # errors 3 (dy), |(0,4)-(1,1)| = 3.16 (unparsed: the mean [1, 1]), 0 (dz ignored) -> median 3.0
    assert got["where_err_cm"] == pytest.approx(3.0) and got["where_parsed"] == pytest.approx(2 / 3)
    assert got["way_accuracy"] == 1.0
    # the mean answer [1, 1]: errors |(9,-1)| = 9.06, |(-1,3)| = 3.16, |(-7,-9)| = 11.4 -> 9.06
    assert got["where_prior_cm"] == pytest.approx(np.hypot(9, 1))
    with pytest.raises(ValueError, match="no spatial"):
        spatial_accuracy(bundle, [VQAItem(img, "q", "red", "colour", 0)])
