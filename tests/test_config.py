"""Typed config: presets load, overrides apply and type-check, misspelt keys suggest the right one,
bad values name the key and what it accepts, and `nmt train` reports them in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from nmt.config import (
    Config,
    config_from_dict,
    load_config,
    parse_duration,
    parse_override,
    preset_names,
)
from nmt.errors import NmtError


def test_every_preset_loads_and_differs_from_defaults():
    names = preset_names()
    for required in ("transformer-tiny", "transformer-small", "transformer-base",
                     "seq2seq-tiny", "seq2seq-bahdanau"):  # fmt: skip
        assert required in names
    for name in names:
        cfg = load_config(preset=name)
        assert cfg != Config(), name
    assert load_config(preset="seq2seq-bahdanau").model.type == "seq2seq"
    assert load_config(preset="transformer-base").model.d_model == 512


def test_overrides_apply_with_types():
    cfg = load_config(
        preset="transformer-tiny",
        overrides=[
            "model.d_model=32",
            "training.lr=1e-3",
            "training.lr=3e-4",  # later wins
            "training.betas=[0.9, 0.997]",
            "model.tie_embeddings=false",
            "training.max_time=25m",
            "training.seed=7",
            "training.warmup=0",
        ],
    )
    assert cfg.model.d_model == 32
    assert cfg.training.lr == 3e-4 and isinstance(cfg.training.lr, float)
    assert cfg.training.betas == [0.9, 0.997]
    assert cfg.model.tie_embeddings is False
    assert cfg.training.max_time == "25m"
    assert cfg.training.seed == 7
    assert cfg.training.warmup == 0
    # An integer is accepted for a float field and converted.
    assert load_config(overrides=["training.lr=1"]).training.lr == 1.0


def test_layering_defaults_preset_file_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 48\ntraining:\n  lr: 0.01\n  warmup: 7\n")
    cfg = load_config(path, preset="transformer-tiny", overrides=["training.warmup=9"])
    assert cfg.model.d_model == 48  # file beats preset
    assert cfg.model.heads == load_config(preset="transformer-tiny").model.heads  # preset kept
    assert cfg.training.lr == 0.01
    assert cfg.training.warmup == 9  # --set beats the file


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.d_modle=3", "unknown key 'model.d_modle'; did you mean model.d_model?"),
        ("training.warmpu=3", "did you mean training.warmup?"),
        ("trainig.lr=3", "did you mean training.lr?"),
        ("model.d_model=big", "model.d_model: expected an integer, got 'big'"),
        ("model.d_model=2.5", "model.d_model: expected an integer, got 2.5"),
        ("training.lr=fast", "training.lr: expected a number, got 'fast'"),
        ("model.tie_embeddings=maybe", "model.tie_embeddings: expected true or false"),
        (
            "training.precision=fp8",
            "training.precision: expected one of fp32, bf16, fp16, got 'fp8'",
        ),
        ("training.betas=0.9", "training.betas: expected a list of float"),
        ("nonsense", "expected section.key=value"),
    ],
)
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(NmtError) as e:
        load_config(overrides=[override])
    assert message in str(e.value)


def test_bad_yaml_files_name_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_modle: 3\n")
    with pytest.raises(NmtError, match=r"c\.yaml: unknown key 'model.d_modle'; did you mean"):
        load_config(path)
    path.write_text("model: [1, 2\n")
    with pytest.raises(NmtError, match=r"c\.yaml: invalid YAML"):
        load_config(path)
    with pytest.raises(NmtError, match="missing.yaml: file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(NmtError, match="unknown preset 'transformer-smal'; did you mean"):
        load_config(preset="transformer-smal")


def test_saved_config_round_trips(tmp_path):
    cfg = load_config(preset="transformer-small", overrides=["training.lr=0.0005"])
    cfg.save(tmp_path / "config.yaml")
    again = config_from_dict(yaml.safe_load((tmp_path / "config.yaml").read_text()))
    assert again == cfg


def test_durations():
    assert parse_duration("25m") == 1500
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90") == 90
    assert parse_duration("") is None
    with pytest.raises(NmtError, match="bad duration '25 minutes'"):
        parse_duration("25 minutes")


def test_scientific_notation_without_a_dot_is_a_number(tmp_path):
    # YAML 1.1 (PyYAML) reads 1e-3 as a string; float fields accept it anyway.
    assert load_config(overrides=["training.lr=1e-3"]).training.lr == 1e-3
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  lr: 5e-4\n  betas: [0.9, 98e-2]\n")
    cfg = load_config(path)
    assert cfg.training.lr == 5e-4 and cfg.training.betas == [0.9, 0.98]
    assert parse_override("training.max_time=") == ("training.max_time", "")


def test_cli_reports_a_misspelt_key_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "nmt", "train", "--data", str(tmp_path), "-o", str(tmp_path / "m"),
         "--preset", "transformer-tiny", "--set", "model.d_modle=3"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == "error: --set: unknown key 'model.d_modle'; did you mean model.d_model?\n"
    assert not (tmp_path / "m").exists()
