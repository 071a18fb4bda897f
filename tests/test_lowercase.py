"""`nmt preprocess --lowercase` (the setting of most Multi30k papers): every split lowercased, beyond
ASCII; the flag travels from the manifest into the model directory, so translation lowercases its
input and validation and `nmt evaluate` score case-insensitively; mixing cased and lowercased
SentencePiece models or weights is a one-line error."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.config import load_config
from nmt.data.preprocess import PreprocessConfig, preprocess
from nmt.data.summary import summary_notes
from nmt.data.vocab import Tokenizer, train_spm
from nmt.dirs import DataDir, ModelDir
from nmt.dirs import data as dataset
from nmt.dirs.opening import open_vocabulary
from nmt.engines.translator import Translator
from nmt.errors import NmtError
from nmt.eval.evaluate import evaluate
from nmt.train.loop import train

WORDS = "Alpha bravo Charlie delta Echo foxtrot Golf hotel Ärger straße Überall".split()


def _case(rng: random.Random, word: str) -> str:
    """The word as it is, capitalised or shouted: three spellings of one lowercased word."""
    return rng.choice((word, word.capitalize(), word.upper()))


def _corpus(root: Path, seed: int = 0, n: int = 600) -> Path:
    """A copy task with random casing in ROOT/{train,valid}.{en,de}."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", n), ("valid", 40)):
        src = [
            [_case(rng, w) for w in rng.choices(WORDS, k=rng.randint(3, 6))] for _ in range(count)
        ]
        for lang in ("en", "de"):
            text = "\n".join(" ".join(_case(rng, w) for w in words) for words in src) + "\n"
            (root / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return root


def _preprocess(text: Path, out: Path, **kw) -> Path:
    if kw.get("spm_from") is not None:  # a directory, opened as `nmt preprocess` opens it
        kw["spm_from"] = open_vocabulary(kw["spm_from"])
    cfg = PreprocessConfig("en", "de", text / "train", valid=text / "valid", threads=1, **kw)
    preprocess(cfg, out, quiet=True)
    return out


def _lowered_copy(text: Path, out: Path) -> Path:
    """The corpus lowercased by hand, as a user would before --lowercase existed."""
    out.mkdir()
    for f in text.iterdir():
        (out / f.name).write_text(f.read_text(encoding="utf-8").lower(), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return _corpus(tmp_path_factory.mktemp("text"))


@pytest.fixture(scope="module")
def lc_model(corpus, tmp_path_factory) -> tuple[Path, Path]:
    """(DATA_DIR, MODEL_DIR): the corpus preprocessed with --lowercase and a tiny model on it."""
    root = tmp_path_factory.mktemp("lc")
    data = _preprocess(corpus, root / "data", vocab_size=60, lowercase=True)
    cfg = load_config(
        preset="transformer-tiny",
        overrides=["training.max_steps=30", "training.valid_every=15", "training.warmup=10",
                   "training.max_tokens=600", "training.log_every=5"],
    )  # fmt: skip
    train(cfg, DataDir(data), ModelDir.at(root / "model"), "cpu", quiet=True, threads=1)
    return data, root / "model"


def test_lowercase_equals_preprocessing_a_lowercased_copy(corpus, tmp_path):
    data = _preprocess(corpus, tmp_path / "lc", vocab_size=60, lowercase=True)
    by_hand = _preprocess(_lowered_copy(corpus, tmp_path / "low"), tmp_path / "hand", vocab_size=60)
    for name in ("train.en.ids", "train.de.ids", "valid.en.ids", "valid.de.ids", "valid.de.txt"):
        assert (data / name).read_bytes() == (by_hand / name).read_bytes(), name
    assert Tokenizer.load(data / "spm.model").same_pieces(Tokenizer.load(by_hand / "spm.model"))
    refs = (data / "valid.de.txt").read_text(encoding="utf-8")
    assert refs == (corpus / "valid.de").read_text(encoding="utf-8").lower()
    assert "straße" in refs and "ärger" in refs  # beyond ASCII, as str.lower does it
    manifest = dataset.DataDir(data).manifest
    assert manifest["options"]["lowercase"] is True and dataset.lowercased(manifest)
    assert "every split lowercased (--lowercase): the model reads and writes lowercase" in (
        summary_notes(manifest)
    )
    assert dataset.DataDir(data).vocab_info.lowercase is True
    cased = _preprocess(corpus, tmp_path / "cased", vocab_size=60)
    assert dataset.lowercased(dataset.DataDir(cased).manifest) is False
    assert (cased / "train.en.ids").read_bytes() != (data / "train.en.ids").read_bytes()


def test_dedupe_merges_pairs_that_differ_only_in_case(tmp_path):
    text = tmp_path / "t"
    text.mkdir()
    (text / "train.en").write_text("A Dog\na dog\nÄrger\nÄRGER\nCat\n", encoding="utf-8")
    (text / "train.de").write_text("Ein Hund\nein hund\nÄrger\närger\nKatze\n", encoding="utf-8")
    cfg = PreprocessConfig("en", "de", text / "train", vocab_size=20, dedupe=True, lowercase=True)
    m = preprocess(cfg, tmp_path / "d", quiet=True)
    assert m["splits"]["train"]["kept"] == 3 and m["splits"]["train"]["dropped"]["duplicate"] == 2


def test_a_lowercase_tokenizer_encodes_any_casing_alike(tmp_path):
    text = ["a dog runs über the straße", "two dogs ärgern a cat"] * 20
    model = train_spm(text, tmp_path / "spm", vocab_size=30)
    lc, cased = Tokenizer.load(model, lowercase=True), Tokenizer.load(model)
    shout = (
        "A DOG RUNS ÜBER THE STRASSE"  # str.lower keeps "strasse": only what is there is lowered
    )
    assert (
        lc.encode("A Dog Runs Über")
        == lc.encode("a dog runs über")
        == cased.encode("a dog runs über")
    )
    assert cased.encode("A Dog Runs Über") != cased.encode("a dog runs über")
    assert lc.encode_batch([shout, "Two Dogs"]) == cased.encode_batch([shout.lower(), "two dogs"])
    assert lc.pieces("DOG") == cased.pieces("dog") and lc.normalize("Two DOGS") == "two dogs"
    assert "lowercase=True" in repr(lc)


def test_the_flag_reaches_the_model_and_translation_lowercases_input(lc_model):
    data, model = lc_model
    meta = json.loads((model / "vocab.json").read_text(encoding="utf-8"))
    assert meta["lowercase"] is True
    with Translator.from_dir(ModelDir(model), device="cpu") as t:
        assert t.src_tok.lowercase and t.tgt_tok.lowercase and t.describe()["lowercase"] is True
        lines = ["ALPHA Bravo ÄRGER", "Golf STRASSE hotel", ""]
        shouted = [h.text for h in t.translate(lines, beam_size=2)]
        assert shouted == [h.text for h in t.translate([x.lower() for x in lines], beam_size=2)]
        assert len(shouted) == 3 and shouted[2] == "" and all(x == x.lower() for x in shouted)
    events = [json.loads(x) for x in (model / "metrics.jsonl").read_text().splitlines()]
    signatures = {e["bleu_signature"] for e in events if "bleu_signature" in e}
    assert signatures and all("case:lc" in s for s in signatures)


def test_evaluate_scores_a_lowercased_model_case_insensitively(lc_model, corpus, tmp_path):
    _, model = lc_model
    hyp = tmp_path / "hyp.de"
    got = evaluate(model, corpus / "valid.en", [corpus / "valid.de"], hyp_out=hyp, device="cpu")
    assert "case:lc" in got[0].signature
    from nmt.eval.scoring import score

    lines = hyp.read_text(encoding="utf-8").splitlines()
    refs = (corpus / "valid.de").read_text(encoding="utf-8").splitlines()
    assert got[0].score == score(lines, [refs], lowercase=True)[0].score
    assert got[0].score > score(lines, [refs])[0].score  # cased refs would punish lowercase output


def test_cased_and_lowercased_pieces_or_weights_do_not_mix(lc_model, corpus, tmp_path):
    data, model = lc_model
    with pytest.raises(NmtError) as e:
        _preprocess(corpus, tmp_path / "a", spm_from=model)
    assert str(e.value) == f"--spm-from {model} was preprocessed with --lowercase: add --lowercase"
    cased = _preprocess(corpus, tmp_path / "cased", vocab_size=60)
    with pytest.raises(NmtError) as e:
        _preprocess(corpus, tmp_path / "b", spm_from=cased, lowercase=True)
    assert str(e.value) == (
        f"--spm-from {cased} was preprocessed without --lowercase: drop --lowercase"
    )
    again = _preprocess(corpus, tmp_path / "again", spm_from=data, lowercase=True)
    assert (again / "train.en.ids").read_bytes() == (data / "train.en.ids").read_bytes()
    # --init-from a lowercased model onto the same pieces encoded from cased text
    recased = tmp_path / "recased"
    shutil.copytree(data, recased)
    manifest = json.loads((recased / "manifest.json").read_text(encoding="utf-8"))
    manifest["options"]["lowercase"] = False
    (recased / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    cfg = load_config(preset="transformer-tiny", overrides=[f"training.init_from={model}",
                                                            "training.max_steps=1"])  # fmt: skip
    with pytest.raises(NmtError) as e:
        train(cfg, DataDir(recased), ModelDir.at(tmp_path / "m"), "cpu", quiet=True, threads=1)
    assert str(e.value) == (
        f"{recased}: {model} was trained on text preprocessed with --lowercase (preprocess the "
        f"corpus with --spm-from {model} --lowercase)"
    )


def test_an_ensemble_of_cased_and_lowercased_models_is_refused(lc_model, tmp_path):
    _, model = lc_model
    other = tmp_path / "cased"
    shutil.copytree(model, other)
    meta = json.loads((other / "vocab.json").read_text(encoding="utf-8"))
    meta["lowercase"] = False
    (other / "vocab.json").write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(NmtError) as e:
        Translator.from_dir([ModelDir(model), ModelDir(other)], device="cpu")
    assert str(e.value) == (
        f"{other}: trained on cased text, {model} on lowercased (an ensemble's models must see "
        "the same input)"
    )


def test_cli_flag(corpus, tmp_path):
    out = tmp_path / "d"
    proc = subprocess.run(
        [sys.executable, "-m", "nmt", "preprocess", "--src-lang", "en", "--tgt-lang", "de",
         "--train", str(corpus / "train"), "--valid", str(corpus / "valid"), "--vocab-size", "60",
         "--lowercase", "--quiet", "-o", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert dataset.DataDir(out).manifest["options"]["lowercase"] is True
    assert (out / "valid.en.txt").read_text(encoding="utf-8") == (
        (corpus / "valid.en").read_text(encoding="utf-8").lower()
    )


def test_lengths_by_subword_count_the_pieces_the_model_saw(lc_model, tmp_path):
    from nmt.eval.bylength import source_lengths, source_spm

    data, model = lc_model
    assert source_spm(data) == (data / "spm.model", True)
    assert source_spm(model) == (model / "spm.model", True)
    assert source_spm(data / "spm.model") == (data / "spm.model", False)  # a bare file says nothing
    shouted = source_lengths(["ALPHA BRAVO ÄRGER", ""], "subword", model)
    assert shouted == source_lengths(["alpha bravo ärger", ""], "subword", model)
    assert shouted != source_lengths(["ALPHA BRAVO ÄRGER", ""], "subword", data / "spm.model")
