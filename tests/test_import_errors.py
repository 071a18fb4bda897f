"""`nmt import` and translation on imported models refuse bad input in one line on stderr, exit 2,
without a traceback and without writing anything: a missing file, a config key nmt cannot
express, damaged weights, a pickle that would run code (never run), a vocabulary that does not
fit the embeddings, a hub id offline, a multilingual model without its target language.

The Marian directories here hold the real OPUS-MT tokenizer files and a shrunk config.json; their
weights are never read before the refusal, so they are a stand-in (no transformers needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import require
from marian_fixtures import TOKENIZER_FILES, shrunk_config, small_marian
from safetensors.torch import save_file
from typer.testing import CliRunner

from nmt.cli.app import app

REPO = Path(__file__).resolve().parent.parent
HUB_ID = "Helsinki-NLP/opus-mt-en-mg"


@pytest.fixture
def marian(pretrained_root: Path, tmp_path: Path) -> Path:
    """A Marian directory: opus-mt-en-mg's tokenizer files and shrunk config, stand-in weights."""
    real, hf = pretrained_root / "opus-mt-en-mg", tmp_path / "hf"
    hf.mkdir()
    for name in TOKENIZER_FILES:
        if (real / name).is_file():
            shutil.copy(real / name, hf / name)
    (hf / "config.json").write_text(json.dumps(shrunk_config(real)), encoding="utf-8")
    save_file({"model.shared.weight": torch.zeros(4, 64)}, hf / "model.safetensors")
    return hf


def _import(source: str | Path, out: Path) -> tuple[int, str]:
    """`nmt import SOURCE -o OUT` in this process: (exit code, stderr)."""
    r = CliRunner().invoke(app, ["import", str(source), "-o", str(out)])
    return r.exit_code, r.stderr


def _refused(source: str | Path, out: Path) -> str:
    """The one error line of an import that must fail, checked to have written nothing."""
    code, err = _import(source, out)
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))
    return err


def _edit_config(hf: Path, **changes: object) -> None:
    config = json.loads((hf / "config.json").read_text(encoding="utf-8"))
    (hf / "config.json").write_text(json.dumps(config | changes), encoding="utf-8")


def test_a_missing_file_is_named(marian, tmp_path):
    (marian / "target.spm").unlink()
    err = _refused(marian, tmp_path / "model")
    assert err == (
        f"error: {marian}/target.spm: file not found (a Marian directory holds target.spm)\n"
    )


def test_normalize_before_is_refused(marian, tmp_path):
    _edit_config(marian, normalize_before=True)
    assert _refused(marian, tmp_path / "model") == (
        f"error: {marian}/config.json: normalize_before = true is not supported (Marian models "
        "are post-norm with fixed sinusoidal positions and no extra norms)\n"
    )


def test_an_unknown_activation_is_refused(marian, tmp_path):
    _edit_config(marian, activation_function="gelu_fast")
    assert _refused(marian, tmp_path / "model") == (
        f'error: {marian}/config.json: activation_function = "gelu_fast" is not one of '
        "['gelu', 'relu', 'silu', 'swish']\n"
    )


def test_truncated_safetensors_are_named(marian, tmp_path):
    weights = marian / "model.safetensors"
    save_file({"model.shared.weight": torch.randn(1000, 64)}, weights)
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    err = _refused(marian, tmp_path / "model")
    assert err.startswith(f"error: {weights}: damaged, truncated or not a safetensors file (")
    assert err.endswith(")\n")


class _RunsCode:
    """Unpickling this calls `open(marker, "w")`: code a weights file must never run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickle_carrying_code_is_refused_unrun(marian, tmp_path):
    marker = tmp_path / "ran"
    weights = marian / "pytorch_model.bin"
    (marian / "model.safetensors").unlink()
    torch.save({"model.shared.weight": torch.zeros(2, 2), "x": _RunsCode(marker)}, weights)
    torch.load(weights, weights_only=False)  # the file does run code when loaded unsafely
    assert marker.exists()
    marker.unlink()
    err = _refused(marian, tmp_path / "model")
    assert not marker.exists()
    assert err == (
        f"error: {weights}: refused, not loaded: unpickling it would run code (it would call "
        "io.open); convert it to model.safetensors where it came from\n"
    )


def test_a_vocabulary_that_does_not_fit_the_embeddings(marian, tmp_path):
    vocab = json.loads((marian / "vocab.json").read_text(encoding="utf-8"))
    rows = len(vocab)
    save_file({"model.shared.weight": torch.zeros(rows, 64)}, marian / "model.safetensors")
    vocab["\u2581not-a-piece-of-this-model"] = len(vocab)
    (marian / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    assert _refused(marian, tmp_path / "model") == (
        f"error: {marian}/vocab.json: {len(vocab)} pieces, but the model's embeddings have "
        f"{len(vocab) - 1} rows\n"
    )


def test_a_hub_id_offline_with_an_empty_cache(tmp_path):
    require("huggingface_hub")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "model"
    r = subprocess.run(
        [sys.executable, "-m", "nmt", "import", HUB_ID, "-o", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert (r.returncode, r.stderr) == (
        2,
        f"error: {HUB_ID}: cannot fetch this hub id: offline (HF_HUB_OFFLINE) and not in the "
        f"cache {tmp_path / 'cache'}; pass a local "
        "directory holding config.json, the weights and the tokenizer files\n",
    )
    assert not out.exists()


@pytest.mark.slow
def test_a_multilingual_model_needs_its_target_language(pretrained_root, tmp_path):
    require("transformers")
    from nmt.pretrained.importer import import_marian

    hf = small_marian(pretrained_root / "opus-mt-en-mg", tmp_path / "hf")
    vocab = json.loads((hf / "vocab.json").read_text(encoding="utf-8"))
    rare = sorted(vocab, key=vocab.__getitem__)[-3:-1]  # the last pieces before <pad>
    for piece, code in zip(rare, (">>deu<<", ">>fra<<"), strict=True):
        vocab[code] = vocab.pop(piece)
    (hf / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    model = import_marian(str(hf), tmp_path / "model").path
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("A dog runs.\n", encoding="utf-8")
    base = ["translate", str(src), "-m", str(model), "-o", str(out)]
    r = CliRunner().invoke(app, base)
    assert (r.exit_code, r.stderr) == (
        2,
        f"error: {model} is multilingual: choose the target language with --target-lang "
        "(one of: deu, fra)\n",
    )
    r = CliRunner().invoke(app, [*base, "--target-lang", "spa"])
    assert (r.exit_code, r.stderr) == (
        2,
        f"error: --target-lang 'spa': {model} has no such target language (one of: deu, fra)\n",
    )
    assert not out.exists()
