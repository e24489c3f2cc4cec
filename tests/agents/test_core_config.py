"""Config files: ``extends:`` starts from another file and merges mappings key by key; bad chains are clear
errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.core.config import merge_mappings, read_yaml_mapping


def test_merge_mappings_merges_nested_mappings_and_replaces_the_rest() -> None:
    base = {"tiny": {"patch_size": 16, "hidden_size": 128}, "conditions": ["normal", "fog"], "grounding": {"a": 1}}
    top = {"tiny": {"patch_size": 8}, "conditions": ["normal"], "grounding": None, "seed": 3}
    assert merge_mappings(base, top) == {"tiny": {"patch_size": 8, "hidden_size": 128}, "conditions": ["normal"],
                                         "grounding": None, "seed": 3}
    assert base["tiny"]["patch_size"] == 16  # the inputs are not changed


def test_extends_chains_files_relative_to_each_other(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "root.yaml").write_text("lr: 0.001\ntiny: {patch_size: 16, hidden_size: 128}\nsteps: 10\n")
    (tmp_path / "sub" / "mid.yaml").write_text("extends: ../root.yaml\nsteps: 20\n")
    (tmp_path / "leaf.yaml").write_text("extends: sub/mid.yaml\ntiny: {patch_size: 8}\n")
    assert read_yaml_mapping(tmp_path / "leaf.yaml") == {"lr": 0.001, "steps": 20,
                                                         "tiny": {"patch_size": 8, "hidden_size": 128}}
    assert read_yaml_mapping(tmp_path / "sub" / "mid.yaml")["tiny"]["patch_size"] == 16


@pytest.mark.parametrize("text,err,match", [
    ("extends: missing.yaml\n", FileNotFoundError, "extended by"),
    ("extends: 3\n", ValueError, "extends must be the path"),
    ("extends: ''\n", ValueError, "extends must be the path"),
    ("extends: b.yaml\n", ValueError, "cycle"),
])
def test_bad_extends_is_a_clear_error(tmp_path: Path, text: str, err: type, match: str) -> None:
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(err, match=match):
        read_yaml_mapping(tmp_path / "a.yaml")
