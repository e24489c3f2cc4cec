"""``allday quantize`` / ``allday export-onnx`` on a tiny random BERT and a saved torch module."""

from __future__ import annotations

import json

import pytest
import torch

from tests.quant.conftest import make_mlp, tiny_bert
from training.cli import main


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("cmd", ["quantize", "export-onnx"])
def test_help(cmd: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    assert "usage: allday" in capsys.readouterr().out


def test_quantize_bert_then_export_onnx(tmp_path, capsys) -> None:
    src = tmp_path / "bert"
    tiny_bert(layers=1).save_pretrained(str(src))
    calib = tmp_path / "calib.txt"
    calib.write_text("pick up the red block\nwalk to the kitchen and stop near the fridge\n")
    out = tmp_path / "q"
    # a tiny BERT without a tokenizer: random calibration token ids (--calib needs a tokenizer in MODEL)
    assert main(["quantize", "--method", "serq", "--wbits", "4", "--abits", "4", "--seq-len", "32",
                 "--calib-batches", "2", str(src), str(out)]) == 0
    res = _last_json(capsys)
    assert res["layers"] == 7 and res["method"] == "serq"
    assert (out / "quant_config.json").is_file() and (out / "config.json").is_file()
    assert main(["export-onnx", str(out), str(tmp_path / "bert.onnx"), "--mode", "qdq"]) == 0
    res = _last_json(capsys)
    # W4A4: a few activation codes may flip between ORT and torch float kernels; SQNR bound (see check_onnx)
    assert res["ok"] and res["sqnr_db"] > 30 and (tmp_path / "bert.onnx").is_file()


def test_quantize_torch_module_and_errors(tmp_path, capsys) -> None:
    path = tmp_path / "mlp.pt"
    torch.save(make_mlp(), path)
    out = tmp_path / "q"
    assert main(["quantize", "--method", "stamp", "--stamp-k", "8", "--input-shape", "2,32,64",
                 "--weight-quantizer", "gptq", str(path), str(out)]) == 0
    assert _last_json(capsys)["layers"] == 3
    assert json.loads((out / "quant_config.json").read_text())["config"]["weight_quantizer"] == "gptq"
    from training.commands.quantize import load_cli_quantized

    model, src = load_cli_quantized(out)
    assert src["kind"] == "torch" and type(model[0]).__name__ == "QuantLinear"
    assert main(["quantize", str(path), str(tmp_path / "q2")]) == 2  # no --input-shape
    assert "--input-shape is required" in capsys.readouterr().err
    assert main(["quantize", "--wbits", "0", "--input-shape", "2,8,64", str(path), str(tmp_path / "q3")]) == 2
    assert "wbits" in capsys.readouterr().err
    assert main(["quantize", str(tmp_path / "missing"), str(tmp_path / "q4")]) == 2
    assert main(["export-onnx", str(tmp_path), str(tmp_path / "x.onnx")]) == 2
    skeleton = out / "float_module.pt"
    skeleton.write_bytes(skeleton.read_bytes()[:200])  # a truncated skeleton: a clear error, not a traceback
    assert main(["export-onnx", str(out), str(tmp_path / "y.onnx")]) == 2
    assert "corrupt torch.save-d module" in capsys.readouterr().err and not (tmp_path / "y.onnx").exists()
    (out / "source.json").write_text("[1, 2")
    assert main(["export-onnx", str(out), str(tmp_path / "y.onnx")]) == 2
    assert "source.json: unreadable JSON" in capsys.readouterr().err
