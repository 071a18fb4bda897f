"""`nmt export --format huggingface`: transformers loads the export (Pegasus for pre-norm, Marian
for post-norm), its MarianTokenizer gives nmt's ids, and `generate` gives what `nmt translate
--stop transformers` gives, greedy and beam 5; `nmt import` of the export translates
byte-identically; what no class expresses is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import require
from test_export import VARIANTS, build_model_dir, sentences
from typer.testing import CliRunner

from nmt.cli.app import app

pytestmark = pytest.mark.slow

LINES = sentences(120, seed=7)
MAX_NEW = 20
CLASSES = {"pre": "PegasusForConditionalGeneration", "post": "MarianMTModel"}


def _cli(*args: str) -> str:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def _translate(model: Path, src: Path, out: Path, beam: int, *extra: str) -> list[str]:
    """`nmt translate` with generate's rule and an absolute length limit of MAX_NEW tokens."""
    flags = ["--beam-size", str(beam), "--max-len-a", "0", "--max-len-b", str(MAX_NEW)]
    _cli("translate", "-m", str(model), str(src), "-o", str(out), *flags, *extra)
    return out.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module", params=["pre", "post"])
def exported(request, tmp_path_factory) -> tuple[str, Path, Path, Path]:
    """A tiny trained model of each norm placement (interleaved sinusoids), exported."""
    require("transformers")
    root = tmp_path_factory.mktemp(f"hf-{request.param}")
    model_dir = build_model_dir(root, (request.param, True, "sinusoidal", "gelu", True))
    out = root / "hf"
    _cli("export", "--format", "huggingface", "-q", "-m", str(model_dir), "-o", str(out))
    src = root / "src.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return request.param, model_dir, out, src


@pytest.mark.parametrize("beam", [1, 5])
def test_generate_equals_nmt_translate(exported, beam, tmp_path):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    norm, model_dir, out, src = exported
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    assert type(model).__name__ == CLASSES[norm]
    from nmt.dirs.model import ModelDir

    ours_tok, _ = ModelDir(model_dir).tokenizers
    assert [tok(x).input_ids for x in LINES] == [ours_tok.encode(x) + [3] for x in LINES]
    assert model.generation_config.num_beams == 5 and model.generation_config.bad_words_ids
    enc = tok(LINES, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = model.generate(**enc, num_beams=beam, length_penalty=1.0, max_new_tokens=MAX_NEW)
    theirs = tok.batch_decode(ids, skip_special_tokens=True)
    ours = _translate(model_dir, src, tmp_path / "ours.txt", beam, "--stop", "transformers")
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    assert same == len(LINES), f"{norm} beam {beam}: {same} of {len(LINES)} identical"
    assert len(set(ours)) > 20  # varied translations, not one repeated line


def test_import_back_is_identical(exported, tmp_path):
    norm, model_dir, out, src = exported
    back = tmp_path / "back"
    _cli("import", str(out), "-o", str(back), "-q")
    for beam in (1, 5):
        first = _translate(model_dir, src, tmp_path / "a.txt", beam, "--stop", "transformers")
        again = _translate(back, src, tmp_path / "b.txt", beam)  # its defaults: stop transformers
        assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes(), norm
        assert first == again


def test_inexpressible_is_one_line(tmp_path):
    model_dir = build_model_dir(tmp_path, VARIANTS["post-tied-learned-relu"])
    r = CliRunner().invoke(
        app, ["export", "--format", "huggingface", "-m", str(model_dir), "-o", str(tmp_path / "o")]
    )
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "learned positions" in r.output, r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("beam", [1, 5])
def test_generate_bans_ngrams_as_nmt_translate_does(exported, beam, tmp_path):
    """`--no-repeat-ngram-size 2` is generate's `no_repeat_ngram_size=2`: the same lines."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    norm, model_dir, out, src = exported
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    enc = tok(LINES, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = model.generate(
            **enc,
            num_beams=beam,
            length_penalty=1.0,
            max_new_tokens=MAX_NEW,
            no_repeat_ngram_size=2,
        )
    theirs = tok.batch_decode(ids, skip_special_tokens=True)
    flags = ("--stop", "transformers", "--no-repeat-ngram-size", "2")
    ours = _translate(model_dir, src, tmp_path / "ours.txt", beam, *flags)
    plain = _translate(model_dir, src, tmp_path / "plain.txt", beam, "--stop", "transformers")
    assert ours == theirs, f"{norm} beam {beam}"
    assert sum(a != b for a, b in zip(ours, plain, strict=True)) >= 5  # the ban changed lines


def test_an_ngram_ban_travels_through_export_and_import(tmp_path):
    """A model's `decoding.no_repeat_ngram_size` is its export's generation config's, and an
    import of that export gets it back."""
    import json

    import yaml

    model_dir = build_model_dir(tmp_path, ("post", True, "sinusoidal", "gelu", True))
    config = model_dir / "config.yaml"
    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    cfg["decoding"]["no_repeat_ngram_size"] = 3
    config.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    out, back = tmp_path / "hf", tmp_path / "back"
    _cli("export", "--format", "huggingface", "-q", "-m", str(model_dir), "-o", str(out))
    generation = json.loads((out / "generation_config.json").read_text(encoding="utf-8"))
    assert generation["no_repeat_ngram_size"] == 3
    _cli("import", str(out), "-o", str(back), "-q")
    imported = yaml.safe_load((back / "config.yaml").read_text(encoding="utf-8"))
    assert imported["decoding"]["no_repeat_ngram_size"] == 3
