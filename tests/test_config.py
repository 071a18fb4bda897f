"""Typed config: presets load, overrides apply and type-check, misspelt keys suggest the right one,
bad values name the key and what it accepts, and `nmt train` reports them in one line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing
from importlib import resources
from pathlib import Path

import pytest
import yaml

from nmt.config import (
    MODEL_CONFIGS,
    Config,
    DecodingConfig,
    Seq2SeqConfig,
    TrainingConfig,
    TransformerConfig,
    config_from_dict,
    load_config,
    load_preset,
    parse_duration,
    parse_override,
    preset_names,
    resolve_train_config,
)
from nmt.errors import NmtError

# The keys of a seq2seq model section, as error messages list them.
S2S_KEYS = (
    "attention, decoder_layers, dropout, embed_dim, encoder_layers, hidden_size, "
    "max_positions, rnn_type, tie_embeddings, type"
)


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
            "training.precision: expected one of auto, fp32, bf16, fp16, got 'fp8'",
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


@pytest.mark.parametrize(
    ("preset", "override", "stderr"),
    [
        ("transformer-tiny", "model.d_modle=3",
         "error: --set: unknown key 'model.d_modle'; did you mean model.d_model?\n"),
        ("seq2seq-tiny", "model.heads=8",
         f"error: --set: model.heads: not a seq2seq key (valid: {S2S_KEYS})\n"),
        ("transformer-tiny", "training.lr=0", "error: --set: training.lr: must be > 0, got 0.0\n"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_cli_reports_a_bad_key_in_one_line(tmp_path, preset, override, stderr):
    proc = subprocess.run(
        [sys.executable, "-m", "nmt", "train", "--data", str(tmp_path), "-o", str(tmp_path / "m"),
         "--preset", preset, "--set", override],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == stderr
    assert not (tmp_path / "m").exists()


# ---- the model section is typed per architecture --------------------------------------------


def test_model_registry_agrees_with_config_registry():
    from nmt.models import MODELS

    assert set(MODEL_CONFIGS) == set(MODELS)
    with pytest.raises(
        NmtError, match="model.type: expected one of transformer, seq2seq, got 'rnn'"
    ):
        load_config(overrides=["model.type=rnn"])


@pytest.mark.parametrize(
    ("preset", "override", "message"),
    [
        ("seq2seq-tiny", "model.heads=8", f"model.heads: not a seq2seq key (valid: {S2S_KEYS})"),
        ("seq2seq-tiny", "model.d_model=256", "model.d_model: not a seq2seq key"),
        ("transformer-tiny", "model.hidden_size=32", "model.hidden_size: not a transformer key"),
        ("seq2seq-tiny", "model.hiden_size=3", "did you mean model.hidden_size?"),
        ("transformer-tiny", "model.type=", "model.type: expected one of transformer, seq2seq"),
    ],
)
def test_keys_of_another_architecture_are_errors(preset, override, message):
    with pytest.raises(NmtError) as e:
        load_config(preset=preset, overrides=[override])
    assert message in str(e.value)


def test_type_switch_changes_the_section_class():
    cfg = load_config(preset="transformer-tiny", overrides=["model.type=seq2seq"])
    assert isinstance(cfg.model, Seq2SeqConfig)
    assert (cfg.model.encoder_layers, cfg.model.max_positions) == (1, 256)  # shared keys kept
    assert cfg.model.hidden_size == Seq2SeqConfig().hidden_size
    # model.type applies first, so the order of --set does not matter
    cfg = load_config(
        preset="transformer-tiny", overrides=["model.hidden_size=32", "model.type=seq2seq"]
    )
    assert cfg.model.hidden_size == 32
    cfg = load_config(preset="seq2seq-tiny", overrides=["model.type=transformer", "model.heads=8"])
    assert isinstance(cfg.model, TransformerConfig) and cfg.model.heads == 8
    with pytest.raises(NmtError, match="model.d_model 30 is not divisible by model.heads 4"):
        load_config(overrides=["model.d_model=30"])  # checked once every layer is applied
    assert load_config(overrides=["model.d_model=30", "model.heads=6"]).model.d_model == 30


@pytest.mark.parametrize("name", preset_names())
def test_saved_config_has_only_its_architecture_keys(name, tmp_path):
    cfg = load_config(preset=name)
    cfg.save(tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    expected = {f.name for f in dataclasses.fields(MODEL_CONFIGS[cfg.model.type])}
    assert set(saved["model"]) == expected
    assert config_from_dict(saved) == cfg
    raw = yaml.safe_load((resources.files("nmt") / "presets" / f"{name}.yaml").read_text())
    assert set(raw["model"]) <= expected  # presets set only their architecture's keys


# The flat model section that config.yaml files written before the split carry (every key of
# both architectures, the other one's at its defaults).
OLD_FLAT = {
    "seq2seq": dict(
        type="seq2seq", d_model=256, heads=4, ff_dim=1024, encoder_layers=1, decoder_layers=1,
        norm="pre", positions="sinusoidal", activation="relu", max_positions=256,
        tie_embeddings=True, rnn_type="gru", embed_dim=64, hidden_size=64, attention="bahdanau",
        dropout=0.1, attention_dropout=0.0,
    ),
    "transformer": dict(
        type="transformer", d_model=64, heads=4, ff_dim=128, encoder_layers=1, decoder_layers=1,
        norm="pre", positions="sinusoidal", activation="relu", max_positions=256,
        tie_embeddings=True, rnn_type="gru", embed_dim=256, hidden_size=256, attention="bahdanau",
        dropout=0.1, attention_dropout=0.0,
    ),
}  # fmt: skip


@pytest.mark.parametrize("arch", ["seq2seq", "transformer"])
def test_old_flat_saved_config_loads(arch, tmp_path):
    cfg = load_config(preset=f"{arch}-tiny")
    old = {**cfg.to_dict(), "model": OLD_FLAT[arch]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    assert config_from_dict(yaml.safe_load((tmp_path / "config.yaml").read_text())) == cfg
    assert load_config(tmp_path / "config.yaml") == cfg
    # a foreign key that is not at its default was meant for something: still an error
    other = "heads" if arch == "seq2seq" else "hidden_size"
    bad = {**old, "model": {**OLD_FLAT[arch], other: 8}}
    with pytest.raises(NmtError, match=f"saved: model.{other}: not a {arch} key"):
        config_from_dict(bad, "saved")


# ---- ranges live with the types ------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.d_model=0", "model.d_model: must be >= 1, got 0"),
        ("model.heads=0", "model.heads: must be >= 1, got 0"),
        ("model.ff_dim=0", "model.ff_dim: must be >= 1, got 0"),
        ("model.encoder_layers=0", "model.encoder_layers: must be >= 1, got 0"),
        ("model.decoder_layers=-1", "model.decoder_layers: must be >= 1, got -1"),
        ("model.max_positions=1", "model.max_positions: must be >= 2, got 1"),
        ("model.dropout=1", "model.dropout: must be in [0, 1), got 1.0"),
        ("model.dropout=-0.1", "model.dropout: must be in [0, 1), got -0.1"),
        ("model.attention_dropout=1.5", "model.attention_dropout: must be in [0, 1), got 1.5"),
        ("model.embed_dim=0", "model.embed_dim: must be >= 1, got 0"),
        ("model.hidden_size=0", "model.hidden_size: must be >= 1, got 0"),
        ("training.max_tokens=0", "training.max_tokens: must be >= 1, got 0"),
        ("training.accumulate=0", "training.accumulate: must be >= 1, got 0"),
        ("training.lr=0", "training.lr: must be > 0, got 0.0"),
        ("training.lr=-1e-3", "training.lr: must be > 0, got -0.001"),
        ("training.betas=[0.9, 1.0]", "training.betas: must be in [0, 1), got 1.0"),
        ("training.betas=[-0.1, 0.9]", "training.betas: must be in [0, 1), got -0.1"),
        ("training.weight_decay=-0.1", "training.weight_decay: must be >= 0, got -0.1"),
        ("training.warmup=-1", "training.warmup: must be >= 0, got -1"),
        ("training.min_lr=-1", "training.min_lr: must be >= 0, got -1.0"),
        ("training.label_smoothing=1", "training.label_smoothing: must be in [0, 1), got 1.0"),
        ("training.subword_alpha=-0.1", "training.subword_alpha: must be in [0, 1), got -0.1"),
        ("training.ema_decay=1", "training.ema_decay: must be in [0, 1), got 1.0"),
        ("training.clip_norm=-1", "training.clip_norm: must be >= 0, got -1.0"),
        ("training.valid_every=-1", "training.valid_every: must be >= 0, got -1"),
        ("training.log_every=0", "training.log_every: must be >= 1, got 0"),
        ("training.patience=-1", "training.patience: must be >= 0, got -1"),
        ("training.keep_best=0", "training.keep_best: must be >= 1, got 0"),
        ("training.keep_last=-1", "training.keep_last: must be >= 0, got -1"),
        ("training.average_last=-1", "training.average_last: must be >= 0, got -1"),
        ("training.valid_max_sentences=-1", "training.valid_max_sentences: must be >= 0, got -1"),
        ("training.max_steps=-5", "training.max_steps: must be >= 0, got -5"),
        ("training.max_epochs=-1", "training.max_epochs: must be >= 0, got -1"),
        ("training.seed=-1", "training.seed: must be in [0, 4294967295], got -1"),
        ("training.save_every=-1", "training.save_every: must be >= 0, got -1"),
        (
            "training.save_every_time=5 minutes",
            "training.save_every_time: bad duration '5 minutes': expected e.g. 90s, 25m, 1h30m",
        ),
        (
            "training.max_time=1x",
            "training.max_time: bad duration '1x': expected e.g. 90s, 25m, 1h30m",
        ),
        (
            "training.reset_data_position=1",
            "training.reset_data_position: expected true or false, got 1",
        ),
        ("decoding.beam_size=0", "decoding.beam_size: must be in [1, 200], got 0"),
        ("decoding.beam_size=201", "decoding.beam_size: must be in [1, 200], got 201"),
        ("decoding.length_penalty=-0.5", "decoding.length_penalty: must be in [0, 10], got -0.5"),
        ("decoding.max_len_a=-1", "decoding.max_len_a: must be >= 0, got -1.0"),
        ("decoding.max_len_b=-1", "decoding.max_len_b: must be >= 0, got -1"),
        ("decoding.min_len=-1", "decoding.min_len: must be >= 0, got -1"),
        ("decoding.batch_tokens=0", "decoding.batch_tokens: must be >= 1, got 0"),
        # not finite: inf passed every lower bound (max_len_a=.inf cut translations to 1 token)
        ("training.lr=.inf", "training.lr: must be a finite number > 0, got inf"),
        ("decoding.max_len_a=.inf", "decoding.max_len_a: must be a finite number >= 0, got inf"),
        ("decoding.max_len_a=.nan", "decoding.max_len_a: must be a finite number >= 0, got nan"),
        ("training.clip_norm=.inf", "training.clip_norm: must be a finite number >= 0, got inf"),
        # Adam takes exactly two betas (one crashed building the optimizer)
        ("training.betas=[0.9]", "training.betas: expected 2 values, got 1: [0.9]"),
        ("training.betas=[0.9, 0.98, 0.99]", "training.betas: expected 2 values, got 3: [0.9, 0.98, 0.99]"),
        ("training.betas=[]", "training.betas: expected 2 values, got 0: []"),
    ],
)  # fmt: skip
def test_out_of_range_values_name_key_value_and_range(override, message):
    s2s = override.split("=")[0] in ("model.embed_dim", "model.hidden_size")
    with pytest.raises(NmtError) as e:
        load_config(overrides=[*(["model.type=seq2seq"] if s2s else []), override])
    assert str(e.value) == f"--set: {message}"  # named as --set, as an unknown key is


def test_bad_values_name_their_file_or_preset(tmp_path):
    """A value error names where the value came from, as an unknown key does."""
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  lr: 0\n")
    with pytest.raises(NmtError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: training.lr: must be > 0, got 0.0"
    path.write_text("decoding:\n  max_len_a: .inf\n")
    with pytest.raises(NmtError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: decoding.max_len_a: must be a finite number >= 0, got inf"
    with pytest.raises(NmtError) as e:
        config_from_dict({"model": {"type": "rnn"}}, "m/config.yaml")
    assert (
        str(e.value) == "m/config.yaml: model.type: expected one of transformer, seq2seq, got 'rnn'"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # YAML types 010 as the int 8, a date as a date: a text field no longer takes str() of it
        ("training.init_from=010", "--set: training.init_from: expected text, got int 8 (quote the value)"),
        ("training.init_checkpoint=[best]",
         "--set: training.init_checkpoint: expected text, got list ['best'] (quote the value)"),
        ("training.init_from=2024-05-01",
         "--set: training.init_from: expected text, got date 2024-05-01 (quote the value)"),
        ("training.max_time=true", "--set: training.max_time: expected text, got bool True (quote the value)"),
        ("training.schedule=1",
         "--set: training.schedule: expected one of inverse_sqrt, cosine, linear, constant, got 1"),
        # base-60: 1:30 was 90 seconds (YAML 1.1); it stays the text it looks like
        ("training.max_time=1:30",
         "--set: training.max_time: bad duration '1:30': expected e.g. 90s, 25m, 1h30m"),
    ],
)  # fmt: skip
def test_text_fields_take_text_only(override, message):
    with pytest.raises(NmtError) as e:
        load_config(overrides=[override])
    assert str(e.value) == message


def test_text_fields_keep_quoted_values_and_durations_take_numbers(tmp_path):
    tc = load_config(overrides=['training.init_from="010"', "training.max_time=90"]).training
    assert (tc.init_from, tc.max_time, parse_duration(tc.max_time)) == ("010", "90", 90)
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  max_time: 1.5\n  save_every_time: 0\n  init_from:\n")
    tc = load_config(path).training
    assert (tc.max_time, tc.save_every_time, tc.init_from) == ("1.5", "0", "")
    path.write_text("training:\n  max_time: 1:30\n")
    with pytest.raises(NmtError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: training.max_time: bad duration '1:30'")


def test_every_numeric_field_has_a_range():
    classes = [*MODEL_CONFIGS.values(), TrainingConfig, DecodingConfig]
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if hints[f.name] in (int, float, list[float]) and f.name != "seed":
                assert "range" in f.metadata, f"{cls.__name__}.{f.name}"


def test_range_edges_are_accepted_and_files_are_checked(tmp_path):
    cfg = load_config(
        overrides=["model.dropout=0", "model.max_positions=2", "decoding.beam_size=200",
                   "training.max_steps=0", "training.betas=[0, 0.999]", "training.lr=1e-9"],
    )  # fmt: skip
    assert cfg.decoding.beam_size == 200 and cfg.model.max_positions == 2
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  max_steps: -5\n")
    with pytest.raises(NmtError, match="training.max_steps: must be >= 0, got -5"):
        load_config(path)


# ---- resolution of `nmt train`'s config (fresh run or --resume) ------------------------------


def test_resolve_train_config_fresh_and_resume(tmp_path):
    flags = {"max_steps": 7, "max_epochs": None, "max_time": None, "seed": 3}
    cfg = resolve_train_config(None, "seq2seq-tiny", ["training.lr=0.005"], flags)
    assert (cfg.training.max_steps, cfg.training.seed, cfg.training.lr) == (7, 3, 0.005)
    none = dict.fromkeys(flags)
    again = resolve_train_config(None, None, ["training.warmup=5"], none, base=cfg)
    assert again.training.lr == 0.005 and again.training.warmup == 5  # the base config's own
    assert isinstance(again.model, Seq2SeqConfig) and cfg.training.warmup != 5  # base untouched
    fresh = resolve_train_config(None, "transformer-tiny", [], none, base=cfg)
    assert isinstance(fresh.model, TransformerConfig)  # a preset beats the base config
    with pytest.raises(NmtError, match="training.max_steps: must be >= 0, got -5"):
        resolve_train_config(None, None, [], {**none, "max_steps": -5}, base=cfg)
    with pytest.raises(NmtError, match="training.max_time: bad duration '25 minutes'"):
        resolve_train_config(None, None, [], {**none, "max_time": "25 minutes"}, base=cfg)


def test_save_every_defaults_and_off_values():
    tc = load_config().training
    assert (tc.save_every, tc.save_every_time, tc.reset_data_position) == (0, "10m", False)
    for off in ("0", '""'):
        cfg = load_config(overrides=[f"training.save_every_time={off}", "training.save_every=50"])
        assert not parse_duration(cfg.training.save_every_time) and cfg.training.save_every == 50
    for name in preset_names():
        assert "save_every_time" in load_preset(name)["training"], name


def test_seq2seq_keys_without_a_type_are_refused(tmp_path):
    # Keys of another architecture at their defaults were skipped for any file, so this built a
    # Transformer without a word; only saved configs (which name their type) need that pass.
    path = tmp_path / "c.yaml"
    path.write_text("model: {rnn_type: gru, hidden_size: 256, attention: bahdanau}\n")
    with pytest.raises(NmtError, match=r"model.rnn_type: not a transformer key"):
        load_config(path)
    path.write_text("model: {type: seq2seq, rnn_type: gru, hidden_size: 256}\n")
    assert load_config(path).model.type == "seq2seq"


def test_config_reference_is_current_and_every_key_has_a_meaning():
    """docs/config.md is generated from the schema: a new or changed key must regenerate it."""
    import dataclasses

    from nmt.config.reference import reference_markdown
    from nmt.config.schema import MODEL_CONFIGS, DecodingConfig, TrainingConfig

    for cls in (*MODEL_CONFIGS.values(), TrainingConfig, DecodingConfig):
        for f in dataclasses.fields(cls):  # model.type: documented once, for every architecture
            assert f.metadata.get("doc") or f.name == "type", f"{cls.__name__}.{f.name} has no doc"
    page = Path(__file__).resolve().parent.parent / "docs" / "config.md"
    assert page.read_text(encoding="utf-8") == reference_markdown(), (
        "docs/config.md is stale: python -m nmt.config.reference > docs/config.md"
    )


def test_every_key_a_preset_sets_has_a_comment():
    """Presets comment each key they set (the reference holds the keys they leave out)."""
    presets = Path(__file__).resolve().parent.parent / "nmt" / "presets"
    for preset in sorted(presets.glob("*.yaml")):
        for n, line in enumerate(preset.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                assert " # " in line or line.rstrip().endswith(":"), f"{preset.name}:{n}: {line}"
