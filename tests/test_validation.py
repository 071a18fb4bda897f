"""Validation never crashes a run: valid pairs longer than the model's positions are cut for the
loss and the decode (counted, warned about once), while BLEU keeps the raw references."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nmt.config import load_config
from nmt.data import batching
from nmt.dirs import DataDir, ModelDir
from nmt.train.loop import train

VOCAB = "red green blue cyan pink gray gold jade ruby teal".split()


@pytest.fixture(scope="module")
def long_valid_data(tmp_path_factory) -> Path:
    """A copy task whose valid split holds one line far longer than a tiny max_positions."""
    from nmt.data.preprocess import PreprocessConfig, preprocess

    root = tmp_path_factory.mktemp("longvalid")
    rng = np.random.default_rng(3)
    train_lines = [" ".join(rng.choice(VOCAB, size=rng.integers(2, 5))) for _ in range(400)]
    valid_lines = [" ".join(rng.choice(VOCAB, size=3)) for _ in range(5)]
    valid_lines.insert(2, " ".join(VOCAB * 8))  # 80 words: well over 24 positions
    for split, lines in (("train", train_lines), ("valid", valid_lines)):
        for lang in ("en", "de"):
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = PreprocessConfig(
        "en", "de", root / "train", valid=root / "valid", vocab_size=32, threads=1
    )
    preprocess(cfg, root / "data", quiet=True)
    return root / "data"


def test_long_valid_line_is_truncated_and_reported_once(long_valid_data, tmp_path, capsys):
    cfg = load_config(
        preset="transformer-tiny",
        overrides=[
            "model.max_positions=24",
            "training.max_steps=4",
            "training.valid_every=2",
            "training.max_tokens=400",
            "training.warmup=2",
        ],
    )
    out = tmp_path / "m"
    s = train(cfg, DataDir(long_valid_data), ModelDir.at(out), "cpu", threads=1)
    assert s.steps == 4
    err = capsys.readouterr().err
    line = "warning: valid: 1 sentences over model.max_positions 24 truncated for validation"
    assert err.count(line) == 1, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["event"] == "valid"] == [2, 4]
    assert (out / "checkpoints" / "best.safetensors").exists()


def test_collate_cuts_both_sides_to_max_positions():
    src = [np.arange(4, 40), np.arange(4, 8)]
    tgt = [np.arange(4, 9), np.arange(4, 50)]
    b = batching.collate(src, tgt, [0, 1], max_positions=10)
    assert b.src.shape == (2, 10) and b.tgt_in.shape == (2, 10) and b.tgt_out.shape == (2, 10)
    assert b.src_lengths.tolist() == [10, 5]
    assert b.tgt_out[1, -1].item() == 3  # eos kept after the cut
    full = batching.collate(src, tgt, [0, 1])
    assert full.src.shape == (2, 37) and full.tgt_in.shape == (2, 47)


def test_seq2seq_has_no_position_limit(long_valid_data, tmp_path, capsys, recwarn):
    """An RNN trains on pairs over model.max_positions and translates long sources uncut."""
    from nmt.engines.translator import Translator

    cfg = load_config(
        preset="seq2seq-tiny",
        overrides=["model.max_positions=4", "training.max_steps=2", "training.max_tokens=400"],
    )
    out = tmp_path / "s2s"
    train(cfg, DataDir(long_valid_data), ModelDir.at(out), "cpu", threads=1)
    err = capsys.readouterr().err
    assert "training pairs are longer" not in err and "truncated for validation" not in err, err
    assert "400 training pairs" in err  # none dropped (400 lines of 2-4 words)
    translator = Translator.from_dir(ModelDir(out), device="cpu", checkpoint="last")
    (result,) = translator.translate([" ".join(VOCAB * 2)], greedy=True)
    assert result.source_tokens[-2:] == ["▁teal", "</s>"]  # the whole 20-word source, uncut
    assert len(result.source_tokens) > 20
    assert not [w for w in recwarn if "truncated" in str(w.message)]


def test_validation_on_workers_equals_one_thread(long_valid_data):
    """Valid batches on two worker threads: the same loss (summed in batch order), BLEU and
    signature; the model's train mode is back afterwards; an interrupt still returns None."""
    import contextlib

    import torch

    from nmt.models import build
    from nmt.train.validation import load_data, validate

    data = load_data(DataDir(long_valid_data))
    assert data.valid is not None
    cfg = load_config(preset="transformer-tiny", overrides=["model.max_positions=24"])
    torch.manual_seed(0)
    model = build(cfg.model, data.vocab)
    batches = list(batching.source_batches(np.asarray(data.valid.split.src.lengths), 8))
    assert len(batches) >= 3
    args = (model, data.valid, torch.device("cpu"), contextlib.nullcontext, 8, 1.2, 5.0)
    one = validate(*args, workers=1)
    assert one is not None and validate(*args, workers=2) == one and model.training
    assert validate(*args, should_stop=lambda: True, workers=2) is None and model.training


def test_a_damaged_valid_split_is_an_error_and_a_missing_one_means_no_validation(
    long_valid_data, tmp_path
):
    # Only "no valid split" turns validation off; a corrupt one must not silently train a run
    # without validation, early stopping or a best checkpoint.
    import shutil

    from nmt.errors import NmtError
    from nmt.train.validation import load_valid

    data = tmp_path / "data"
    shutil.copytree(long_valid_data, data)
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    assert load_valid(DataDir(data)) is not None
    ids = data / manifest["splits"]["valid"]["files"]["de"]["ids"]
    ids.write_bytes(ids.read_bytes()[:-2])  # one id short of what the offsets say
    with pytest.raises(NmtError, match=f"^{ids}: corrupt"):
        load_valid(DataDir(data))
    del manifest["splits"]["valid"]
    (data / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert load_valid(DataDir(data)) is None


def test_validation_batches_stay_within_max_tokens_on_the_target_side(tmp_path, monkeypatch):
    # Short sources with one long target: batches sized by the source alone padded that
    # target across every row of a big batch (many times max_tokens of logits).
    import contextlib

    import torch

    from nmt.data.preprocess import PreprocessConfig, preprocess
    from nmt.models import build
    from nmt.train.validation import load_data, validate

    rng = np.random.default_rng(5)
    train = [" ".join(rng.choice(VOCAB, size=3)) for _ in range(300)]
    valid_src = [" ".join(rng.choice(VOCAB, size=2)) for _ in range(40)]
    valid_tgt = list(valid_src)
    valid_tgt[7] = " ".join(VOCAB * 3)  # 30 words
    for name, lines in (("train.en", train), ("train.de", train), ("valid.en", valid_src),
                        ("valid.de", valid_tgt)):  # fmt: skip
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg_p = PreprocessConfig(
        "en", "de", tmp_path / "train", valid=tmp_path / "valid", vocab_size=32, threads=1
    )
    preprocess(cfg_p, tmp_path / "data", quiet=True)
    data = load_data(DataDir(tmp_path / "data"))
    assert data.valid is not None
    cfg = load_config(preset="transformer-tiny")
    model = build(cfg.model, data.vocab)
    shapes: list[tuple[int, int]] = []
    real = batching.collate

    def spy(src, tgt, idx, limit=0):
        batch = real(src, tgt, idx, limit)
        shapes.append(tuple(batch.tgt_out.shape))
        return batch

    monkeypatch.setattr(batching, "collate", spy)
    max_tokens = 64
    validate(model, data.valid, torch.device("cpu"), contextlib.nullcontext, max_tokens, 1.2, 5.0)
    assert sum(rows for rows, _ in shapes) == 40
    assert max(rows * cols for rows, cols in shapes) <= max_tokens


def test_validation_batches_do_not_depend_on_the_workers(long_valid_data, monkeypatch):
    """The batches (and so the summed loss a resumed run compares) are the same on one thread
    and on two workers: translation's even split for the workers is not used here."""
    import contextlib

    import torch

    import nmt.train.validation
    from nmt.models import build
    from nmt.train.validation import load_data, validate

    data = load_data(DataDir(long_valid_data))
    cfg = load_config(preset="transformer-tiny", overrides=["model.max_positions=24"])
    torch.manual_seed(0)
    model = build(cfg.model, data.vocab)
    seen: list[list[int]] = []
    real = nmt.train.validation.batching.collate

    def spy(src, tgt, idx, *rest):
        seen.append(sorted(int(i) for i in idx))
        return real(src, tgt, idx, *rest)

    monkeypatch.setattr(nmt.train.validation.batching, "collate", spy)
    args = (model, data.valid, torch.device("cpu"), contextlib.nullcontext, 16, 1.2, 5.0)
    validate(*args, workers=1)
    one, seen[:] = sorted(seen), []
    validate(*args, workers=2)
    assert len(one) >= 3 and sorted(seen) == one
