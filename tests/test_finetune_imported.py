"""Fine-tuning an imported OPUS-MT model: `nmt preprocess --tokenizer-from` encodes a corpus with
the model's own tokenizer and ids, `nmt train --init-from` (with the finetune-marian-cpu preset
laid over the model's config) continues from its weights with its special ids and fixed output
bias; validation loss falls, `--resume` is bitwise, the `<pad>` row stays zero, the result
translates, and the bad inputs are one line each with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from marian_fixtures import small_marian
from safetensors.torch import load_file

from nmt.data.marian_vocab import VocabTokenizer
from nmt.data.preprocess import PreprocessConfig, preprocess
from nmt.dirs import DataDir, ModelDir
from nmt.dirs.opening import open_initial
from nmt.errors import NmtError
from nmt.train.loop import train
from nmt.train.setup import run_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
PRESET = "finetune-marian-cpu"
RUN = [
    "training.max_tokens=400",
    "training.accumulate=1",
    "training.lr=0.002",
    "training.warmup=4",
    "training.valid_every=8",
    "training.log_every=4",
    "training.precision=fp32",
    "training.max_time=",
    "training.save_every_time=",
    "training.average_last=2",
    "decoding.max_len_a=1.0",
    "decoding.max_len_b=4",
]


def _text(multi30k: Path, out: Path) -> Path:
    """500 Multi30k en-de train pairs and 40 valid pairs in OUT/{train,valid}.{en,de}."""
    out.mkdir(parents=True)
    for split, name, n in (("train", "train", 500), ("valid", "val", 40)):
        for lang in ("en", "de"):
            with open(multi30k / f"{name}.{lang}", encoding="utf-8") as f:
                lines = [next(f) for _ in range(n)]
            (out / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def imported(pretrained_root, multi30k, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(MODEL_DIR, DATA_DIR, text) of a shrunk imported en-mg and Multi30k encoded with it."""
    from nmt.pretrained.importer import import_marian

    root = tmp_path_factory.mktemp("imported")
    model = root / "model"
    import_marian(str(small_marian(pretrained_root / "opus-mt-en-mg", root / "hf")), model)
    text = _text(multi30k, root / "text")
    cfg = PreprocessConfig(
        "en", "de", text / "train", valid=text / "valid", threads=1, tokenizer_from=ModelDir(model)
    )
    preprocess(cfg, root / "data", quiet=True)
    return model, root / "data", text


def _config(model: Path, *extra: str):
    return run_config(None, PRESET, [*RUN, *extra], {}, init=open_initial(model))


def _nmt(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "nmt", *args], cwd=REPO, env=env, capture_output=True, text=True
    )


def test_tokenizer_from_keeps_the_models_ids_and_counts_unknown_lines(imported):
    model, data, text = imported
    opened, d = ModelDir(model), DataDir(data)
    assert d.vocab_info == opened.vocab and d.vocab_info.pad_id == d.vocab_info.bos_id != 0
    assert all(isinstance(t, VocabTokenizer) for t in d.tokenizers)
    line = (text / "train.en").read_text(encoding="utf-8").splitlines()[0]
    assert d.split("train").src[0].tolist() == opened.tokenizers[0].encode(line)
    entry = d.manifest["tokenizer_from"]
    assert entry["model"] == str(model) and entry["kind"] == "imported"
    unknown = d.manifest["splits"]["train"]["unknown_lines"]
    lines = (text / "train.de").read_text(encoding="utf-8").splitlines()
    assert unknown["de"] == opened.tokenizers[1].unknown_lines(lines) > 0  # ä, ß ... in en-mg
    assert not (data / "spm.model").exists()  # no SentencePiece learnt


def test_fine_tuning_learns_resumes_bitwise_keeps_pad_zero_and_translates(imported, tmp_path):
    model, data, text = imported
    full, cut = tmp_path / "full", tmp_path / "cut"
    s_full = train(
        _config(model, "training.max_steps=24"),
        DataDir(data),
        ModelDir.at(full),
        "cpu",
        quiet=True,
        threads=1,
    )
    train(
        _config(model, "training.max_steps=12"),
        DataDir(data),
        ModelDir.at(cut),
        "cpu",
        quiet=True,
        threads=1,
    )
    s_cut = train(
        _config(model, "training.max_steps=24"),
        DataDir(data),
        ModelDir.at(cut),
        "cpu",
        resume=True,
        quiet=True,
        threads=1,
    )
    assert s_full.steps == s_cut.steps == 24
    a, b = (load_file(str(d / "checkpoints" / "last.safetensors")) for d in (full, cut))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    events = [json.loads(x) for x in (full / "metrics.jsonl").read_text().splitlines()]
    losses = [e["valid_loss"] for e in events if e["event"] == "valid"]
    assert len(losses) == 3 and losses[-1] < losses[0]
    pad = ModelDir(full).vocab.pad_id
    initial = load_file(str(model / "checkpoints" / "best.safetensors"))
    for name in ("last", "averaged"):
        w = load_file(str(full / "checkpoints" / f"{name}.safetensors"))
        rows = [k for k in ("src_embed.weight", "tgt_embed.weight", "output.weight") if k in w]
        assert rows and all(not w[k][pad].any() for k in rows)  # tied: stored once
        assert torch.equal(w["output_bias"], initial["output_bias"])  # fixed, not trained
    assert isinstance(ModelDir(full).tokenizers[0], VocabTokenizer)
    proc = _nmt("translate", "-m", str(full), "--quiet", str(text / "valid.en"))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 40


def test_tokenizer_from_a_folder_that_is_no_model_is_one_line(imported, tmp_path):
    _, data, text = imported
    out = tmp_path / "d"
    proc = _nmt(
        "preprocess",
        "--src-lang",
        "en",
        "--tgt-lang",
        "de",
        "--train",
        str(text / "train"),
        "-o",
        str(out),
        "--tokenizer-from",
        str(data),
        "--quiet",
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {data}: --tokenizer-from takes a model directory (no vocab.json; for a data "
        "directory's SentencePiece models use --spm-from)"
    ]
    assert not out.exists()


def test_data_of_another_models_tokenizer_is_one_line_naming_both(
    imported, pretrained_root, tmp_path
):
    from nmt.pretrained.importer import import_marian

    model, data, _ = imported
    other = tmp_path / "uk-en"
    import_marian(str(small_marian(pretrained_root / "opus-mt-uk-en", tmp_path / "hf")), other)
    out = tmp_path / "ft"
    with pytest.raises(NmtError) as err:
        train(
            _config(other, "training.max_steps=2"),
            DataDir(data),
            ModelDir.at(out),
            "cpu",
            quiet=True,
            threads=1,
        )
    msg = str(err.value)
    assert "\n" not in msg and str(model) in msg and str(other) in msg
    assert not (out / "checkpoints").exists()
