"""R2R-CE / RxR-CE episode file I/O: round trip, hand-written official-style samples, error reporting."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from sim.core.episodes import (
    Episode,
    EpisodeFormatError,
    Goal,
    GroundTruth,
    build_vocab,
    load_split,
    load_vocab,
    save_split,
    split_words,
    tokenize,
)

S = math.sqrt(0.5)


def _episode(eid: int | str = 1, **kw: Any) -> Episode:
    base: dict[str, Any] = {
        "episode_id": eid, "trajectory_id": 4, "scene_id": "mp3d/abc/abc.glb", "start_position": [1.0, 0.1, -2.5],
        "start_rotation": [0.0, S, 0.0, S], "goals": [Goal([4.0, 0.1, -6.5])],
        "instruction_text": "Walk past the sofa.", "reference_path": [[1.0, 0.1, -2.5], [4.0, 0.1, -6.5]],
        "geodesic_distance": 5.25}
    base.update(kw)
    return Episode(**base)


def _r2r_record(eid: int = 7) -> dict[str, Any]:
    return {"episode_id": eid, "trajectory_id": 3, "scene_id": "mp3d/zsNo4HB9uLZ/zsNo4HB9uLZ.glb",
            "start_position": [-1.5, 0.17, 2.25], "start_rotation": [0, 0.9238795, 0, 0.3826834],
            "info": {"geodesic_distance": 9.75}, "goals": [{"position": [3.0, 0.17, -4.0], "radius": 3.0}],
            "instruction": {"instruction_text": "Go up the stairs, stop.", "instruction_tokens": [5, 6, 7, 1, 3, 4, 2]},
            "reference_path": [[-1.5, 0.17, 2.25], [0.5, 0.17, -1.0], [3.0, 0.17, -4.0]]}


def _write(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(obj, fh)
    return path


def _gt(n: int = 2) -> GroundTruth:
    return GroundTruth(locations=[[0.0, 0.0, float(i)] for i in range(n)], actions=[1] * (n - 1) + [0],
                       forward_steps=n - 1)


def test_vocab_and_tokenize() -> None:
    assert split_words("Walk past the sofa, then STOP.") == ["walk", "past", "the", "sofa", ",", "then", "stop", "."]
    vocab = build_vocab(["Walk past the sofa.", "walk to the door"])
    assert vocab["word_list"][:2] == ["<PAD>", "<UNK>"] and vocab["itos"] == vocab["word_list"]
    assert vocab["PAD_INDEX"] == 0 and vocab["UNK_INDEX"] == 1 and vocab["num_vocab"] == len(vocab["word_list"])
    assert vocab["stoi"] == vocab["word2idx_dict"] and vocab["stoi"]["walk"] == vocab["word_list"].index("walk")
    ids = tokenize("Walk to the kitchen", vocab, max_length=6)
    assert ids == [vocab["stoi"]["walk"], vocab["stoi"]["to"], vocab["stoi"]["the"], 1, 0, 0]
    assert tokenize("walk walk walk", vocab, max_length=2) == [vocab["stoi"]["walk"]] * 2


def test_round_trip(tmp_path: Path) -> None:
    eps = [_episode(1, info={"condition": "night"}), _episode(2, instruction_tokens=[3, 2]),
           _episode(3, goals=[Goal([0.0, 0.0, 1.0], radius=2.0), Goal([5.0, 0.0, 1.0])])]
    gt = {"1": _gt(3), "2": _gt(2), "3": GroundTruth([[0.0, 0.0, 0.0]], [0], None)}
    path = save_split(tmp_path, "val_seen", eps, gt)
    assert path == tmp_path / "val_seen" / "val_seen.json.gz"
    assert (tmp_path / "val_seen" / "val_seen_gt.json.gz").is_file()

    loaded, lgt = load_split(tmp_path, "val_seen")
    vocab = load_vocab(path)
    expected = [dataclasses.replace(eps[0], instruction_tokens=tokenize(eps[0].instruction_text, vocab)), eps[1],
                dataclasses.replace(eps[2], instruction_tokens=tokenize(eps[2].instruction_text, vocab))]
    assert loaded == expected
    assert loaded[0].info == {"condition": "night"} and loaded[0].instruction_tokens[0] != 1  # known word, not UNK
    assert lgt == gt
    # the three path forms agree
    assert load_split(tmp_path / "val_seen")[0] == loaded and load_split(path)[0] == loaded

    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)
    assert set(raw) == {"episodes", "instruction_vocab"}
    rec = raw["episodes"][0]
    assert list(rec) == ["episode_id", "trajectory_id", "scene_id", "start_position", "start_rotation", "info",
                         "goals", "instruction", "reference_path"]
    assert rec["info"] == {"geodesic_distance": 5.25, "condition": "night"}
    assert rec["goals"] == [{"position": [4.0, 0.1, -6.5], "radius": 3.0}]
    assert set(rec["instruction"]) == {"instruction_text", "instruction_tokens"}


def test_save_without_gt_removes_stale_gt(tmp_path: Path) -> None:
    save_split(tmp_path, "train", [_episode(1)], {"1": _gt()})
    save_split(tmp_path, "train", [_episode(1)], None)
    assert not (tmp_path / "train" / "train_gt.json.gz").exists()
    assert load_split(tmp_path / "train")[1] == {}


def test_read_r2r_ce_preprocessed_sample(tmp_path: Path) -> None:
    words = ["<PAD>", "<UNK>", ".", ",", "stop", "go", "up", "the"]
    vocab = {"word_list": words, "word2idx_dict": {w: i for i, w in enumerate(words)}, "itos": words,
             "stoi": {w: i for i, w in enumerate(words)}, "num_vocab": len(words), "UNK_INDEX": 1, "PAD_INDEX": 0}
    rec = _r2r_record()
    rec["instruction"]["instruction_tokens"] = [5, 6, 7, 1, 3, 4, 2, 0, 0, 0]  # "stairs" is UNK; padded with PAD
    _write(tmp_path / "val_unseen" / "val_unseen.json.gz", {"episodes": [rec], "instruction_vocab": vocab})
    _write(tmp_path / "val_unseen" / "val_unseen_gt.json.gz",
           {"7": {"locations": [[-1.5, 0.17, 2.25], [3.0, 0.17, -4.0]], "actions": [1, 3, 0], "forward_steps": 1}})

    (ep,), gt = load_split(tmp_path, "val_unseen")
    assert ep.episode_id == 7 and ep.trajectory_id == 3 and ep.scene_id.endswith("zsNo4HB9uLZ.glb")
    assert ep.geodesic_distance == 9.75 and ep.info == {}
    assert ep.goals == [Goal([3.0, 0.17, -4.0], 3.0)] and len(ep.reference_path) == 3
    assert ep.instruction_tokens == [5, 6, 7, 1, 3, 4, 2, 0, 0, 0]
    assert tokenize(ep.instruction_text, load_vocab(tmp_path / "val_unseen"), max_length=10) == ep.instruction_tokens
    assert gt["7"].actions == [1, 3, 0] and gt["7"].forward_steps == 1
    assert load_vocab(tmp_path, "val_unseen")["num_vocab"] == len(words)


def test_read_rxr_style_sample(tmp_path: Path) -> None:
    rec = _r2r_record()
    rec["episode_id"] = "12"
    rec["info"] = {"geodesic_distance": 9.75, "role": "guide"}
    rec["instruction"] = {"instruction_id": "33", "instruction_text": "Gehen Sie die Treppe hinauf.",
                          "language": "de-DE", "annotator_id": "9", "edit_distance": 0.12,
                          "timed_instruction": [{"word": "Gehen", "start_time": 0.5, "end_time": 0.9}]}
    f = _write(tmp_path / "val_seen" / "val_seen_guide.json.gz", {"episodes": [rec]})
    _write(tmp_path / "val_seen" / "val_seen_guide_gt.json.gz", {"12": {"locations": [[0, 0, 0]], "actions": [0]}})
    (ep,), gt = load_split(f)
    assert ep.episode_id == "12" and ep.instruction_tokens is None
    assert ep.info["role"] == "guide" and ep.info["language"] == "de-DE" and ep.info["instruction_id"] == "33"
    assert ep.info["timed_instruction"][0]["word"] == "Gehen" and "geodesic_distance" not in ep.info
    assert gt["12"].forward_steps is None


def _expect_error(path: Path, *fragments: str) -> None:
    with pytest.raises(EpisodeFormatError) as info:
        load_split(path)
    msg = str(info.value)
    for frag in (path.name, *fragments):
        assert frag in msg, f"{frag!r} not in {msg!r}"


def test_corrupt_gzip_and_bad_json(tmp_path: Path) -> None:
    f = tmp_path / "a" / "a.json.gz"
    f.parent.mkdir()
    f.write_bytes(b"this is not gzip at all")
    _expect_error(f, "gzip")
    full = gzip.compress(json.dumps({"episodes": [_r2r_record()]}).encode())
    f.write_bytes(full[: len(full) // 2])  # truncated stream
    _expect_error(f, "gzip")
    f.write_bytes(gzip.compress(b"{not json"))
    _expect_error(f, "invalid JSON")
    _write(f, [1, 2])
    _expect_error(f, "top level")


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (lambda r: r.pop("goals"), ("episode 1", "missing field 'goals'")),
        (lambda r: r["info"].pop("geodesic_distance"), ("missing field 'info.geodesic_distance'",)),
        (lambda r: r.__setitem__("start_position", "here"), ("start_position",)),
        (lambda r: r.__setitem__("start_rotation", [0, 0, 0, 0.5]), ("episode_id=8", "unit quaternion")),
        (lambda r: r["instruction"].__setitem__("instruction_text", "  "), ("instruction_text",)),
        (lambda r: r.__setitem__("goals", []), ("goals",)),
        (lambda r: r["reference_path"].__setitem__(1, [0.0, None, 1.0]), ("reference_path[1][1]",)),
        (lambda r: r.__setitem__("episode_id", 7), ("duplicate episode_id",)),
    ],
)
def test_wrong_schema(tmp_path: Path, mutate: Any, fragments: tuple[str, ...]) -> None:
    bad = _r2r_record(8)
    mutate(bad)
    f = _write(tmp_path / "s" / "s.json.gz", {"episodes": [_r2r_record(7), bad]})
    _expect_error(f, *fragments)


def test_gt_mismatch_and_bad_gt(tmp_path: Path) -> None:
    f = _write(tmp_path / "s" / "s.json.gz", {"episodes": [_r2r_record(7), _r2r_record(8)]})
    g = tmp_path / "s" / "s_gt.json.gz"
    ok = {"locations": [[0, 0, 0]], "actions": [0]}
    _write(g, {"7": ok, "9": ok})
    with pytest.raises(EpisodeFormatError, match=r"s_gt\.json\.gz.*do not match.*\['8'\].*\['9'\]"):
        load_split(f)
    _write(g, {"7": ok, "8": {"locations": [[0, 0, 0]], "actions": [1, 5]}})
    with pytest.raises(EpisodeFormatError, match=r"s_gt\.json\.gz: gt '8'.*outside 0\.\.3"):
        load_split(f)
    _write(g, {"7": ok, "8": {"actions": [0]}})
    with pytest.raises(EpisodeFormatError, match="missing field 'locations'"):
        load_split(f)


def test_constructor_and_save_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unit quaternion"):
        _episode(start_rotation=[0.0, 0.0, 0.0, 1.01])
    _episode(start_rotation=[0.0, 0.0, 0.0, 1.0005])  # within 1e-3 tolerance
    with pytest.raises(ValueError, match="goals"):
        _episode(goals=[])
    with pytest.raises(ValueError, match="actions outside"):
        GroundTruth([[0.0, 0.0, 0.0]], [4])
    with pytest.raises(EpisodeFormatError, match="do not match"):
        save_split(tmp_path, "x", [_episode(1), _episode(2)], {"1": _gt()})
    assert not (tmp_path / "x" / "x.json.gz").exists()  # nothing written on a bad call
    with pytest.raises(FileNotFoundError, match="no episodes file"):
        load_split(tmp_path, "missing")


def test_dataset_root_with_one_split_or_several(tmp_path):
    save_split(tmp_path, "val", [_episode(1)], {"1": _gt()})
    eps, gts = load_split(tmp_path)  # the root holds one split: it is found
    assert [e.episode_id for e in eps] == [1] and set(gts) == {"1"}
    save_split(tmp_path, "train", [_episode(2)], {"2": _gt()})
    with pytest.raises(EpisodeFormatError, match="several splits"):
        load_split(tmp_path)
    assert load_split(tmp_path, "train")[0][0].episode_id == 2
