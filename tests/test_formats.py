"""Each directory kind as an earlier `nmt` wrote it still opens (tests/fixtures/format-N: written
once, never regenerated); the trainer state's older format is tested where it resumes
(tests/test_training_loop.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.config import DecodingConfig
from nmt.data.vocab import VocabInfo
from nmt.decode.options import DecodeOptions, check_search
from nmt.dirs.data import DataDir
from nmt.dirs.export import ExportDir
from nmt.dirs.model import ModelDir
from nmt.dirs.opening import open_dir

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("version", ["format-1"])
def test_a_data_dir_of_an_earlier_format_opens(version):
    data = DataDir(FIXTURES / version / "data")
    assert data.languages == ("en", "de") and not data.lowercase
    assert data.vocab_info == VocabInfo(24, 24, joint=True)
    train, valid = data.split("train"), data.split("valid")
    assert (len(train), len(valid)) == (60, 8)
    assert (
        all(len(ids) > 0 for ids in train.src) and train.src.lengths.sum() == train.src.num_tokens
    )
    assert data.text("valid", "de").read_text(encoding="utf-8").count("\n") == 8


@pytest.mark.parametrize("version", ["format-1"])
def test_a_model_dir_and_an_export_of_an_earlier_format_open(version):
    model = open_dir(FIXTURES / version / "model")
    assert isinstance(model, ModelDir)
    assert model.languages == ("en", "de") and model.vocab == VocabInfo(24, 24, joint=True)
    assert model.config.model.type == "transformer"
    assert model.decoding == DecodingConfig(beam_size=4, max_len_b=10, batch_tokens=2000)
    export = open_dir(FIXTURES / version / "export")
    assert isinstance(export, ExportDir)
    assert (export.checkpoint, export.languages) == ("best", ("en", "de"))
    assert check_search(export, DecodeOptions(beam_size=4)).beam_size == 4
