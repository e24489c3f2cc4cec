"""QuantConfig validation, quantize_ targeting/errors, save_quantized / load_quantized round trip."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from quant_kernels.api import QuantConfig, load_quantized, quantize_, quantized_layers, save_quantized
from tests.quant.conftest import bert_inputs, make_mlp, outlier_inputs, tiny_bert


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        (dict(wbits=0), "wbits"),
        (dict(abits=0), "abits"),
        (dict(wbits=17), "wbits"),
        (dict(abits=32), "abits"),
        (dict(wbits=4.0), "wbits"),
        (dict(method="gptq"), "method must be one of"),
        (dict(group_size=0), "group_size"),
        (dict(serq_rank=0), "serq_rank"),
        (dict(lowrank_rank=-2), "lowrank_rank"),
        (dict(method="stamp", stamp_k=128, seq_len=64), "stamp_k=128 exceeds the number of tokens"),
        (dict(method="stamp", stamp_transform="dwt2d", stamp_grid=(4, 4), stamp_k=32), "stamp_k=32 exceeds"),
        (dict(stamp_transform="fft"), "stamp_transform"),
        (dict(stamp_transform="dwt2d"), "stamp_grid"),
        (dict(stamp_k=0), "stamp_k"),
        (dict(smoothquant_alpha=1.5), "smoothquant_alpha"),
        (dict(clip_ratio=0.0), "clip_ratio"),
        (dict(stamp_pad="edge"), "stamp_pad"),
    ],
)
def test_bad_config_raises_naming_the_field(kwargs: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        QuantConfig(**kwargs)


def test_config_dict_round_trip_and_unknown_keys() -> None:
    cfg = QuantConfig(method="serq", wbits=4, abits=4, include=("0",), stamp_grid=(8, 8))
    assert QuantConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown QuantConfig fields"):
        QuantConfig.from_dict({"method": "rtn", "bitz": 4})


def test_non_linear_target_and_empty_selection_raise() -> None:
    model = make_mlp()
    x = torch.randn(2, 8, 64)
    with pytest.raises(ValueError, match=r"matches no nn.Linear.*ReLU"):
        quantize_(model, QuantConfig(include=("1",)), [x])
    with pytest.raises(ValueError, match="no nn.Linear layers"):
        quantize_(model, QuantConfig(include=("nothing*",)), [x])
    with pytest.raises(TypeError, match="nn.Module"):
        quantize_("model", QuantConfig(), [x])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs calib_inputs"):
        quantize_(model, QuantConfig(method="serq"))
    with pytest.raises(ValueError, match="needs calib_inputs"):
        quantize_(model, QuantConfig(method="serq"), [])
    assert not quantized_layers(model), "a failed quantize_ must leave the model untouched"


def test_include_exclude_filters() -> None:
    model = tiny_bert()
    quantize_(model, QuantConfig(include=("encoder.*",), exclude=("*.attention.self.*",)), [bert_inputs()])
    names = set(quantized_layers(model))
    assert "encoder.layer.0.intermediate.dense" in names and "pooler.dense" not in names
    assert not any("attention.self" in n for n in names)
    assert isinstance(model.encoder.layer[0].attention.self.query, nn.Linear)


def test_rtn_needs_no_calibration() -> None:
    model = make_mlp()
    quantize_(model, QuantConfig(method="rtn", wbits=4, abits=8))
    assert len(quantized_layers(model)) == 3


@pytest.mark.parametrize("method", ["rtn", "smoothquant", "quarot", "stamp", "serq", "l2qer"])
def test_save_load_round_trip(method: str, tmp_path) -> None:
    x = outlier_inputs((2, 64, 64))
    model = make_mlp()
    quantize_(model, QuantConfig(method=method, wbits=4, abits=4, serq_rank=16, stamp_k=16), [x])
    out = model(x)
    save_quantized(model, tmp_path / "q")
    loaded = load_quantized(tmp_path / "q", make_mlp(seed=123))  # different float weights: all come from disk
    assert torch.equal(loaded(x), out)
    assert loaded._quant_config.method == method
    meta = json.loads((tmp_path / "q" / "quant_config.json").read_text())
    assert meta["layers"]["0"]["wbits"] == 4


def test_save_load_transformer(tmp_path) -> None:
    model = tiny_bert()
    inp = bert_inputs()
    quantize_(model, QuantConfig(method="serq", wbits=4, abits=8), [inp])
    out = model(**inp).last_hidden_state
    save_quantized(model, tmp_path)
    loaded = load_quantized(tmp_path, tiny_bert(seed=5))
    assert torch.equal(loaded(**inp).last_hidden_state, out)


def test_corrupt_or_mismatched_checkpoint_raises(tmp_path) -> None:
    x = torch.randn(1, 8, 64)
    model = make_mlp()
    quantize_(model, QuantConfig(method="rtn"), [x])
    save_quantized(model, tmp_path)
    weights = tmp_path / "quantized.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="corrupt"):
        load_quantized(tmp_path, make_mlp())
    weights.write_bytes(good)
    (tmp_path / "quant_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_quantized(tmp_path, make_mlp())
    with pytest.raises(FileNotFoundError):
        load_quantized(tmp_path / "missing", make_mlp())
    save_quantized(model, tmp_path)
    with pytest.raises(ValueError, match="does not match"):
        load_quantized(tmp_path, make_mlp(d_in=32))
    with pytest.raises(ValueError, match="no QuantLinear"):
        save_quantized(make_mlp(), tmp_path / "plain")
