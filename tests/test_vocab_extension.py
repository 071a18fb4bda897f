"""Vocabulary extension (`nmt preprocess --spm-from DIR --extend-vocab N`): pieces for the
characters a reused SentencePiece model cannot encode are appended after its own, so every old id
keeps its piece and text without new characters encodes exactly as before; `nmt train
--init-from` copies the trained rows and starts the new ones at their mean."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from test_finetune import WORDS, _corpus, _preprocess, _tiny, base  # noqa: F401 (a fixture)

from nmt.data.preprocess import PreprocessConfig, preprocess
from nmt.data.summary import summary_notes
from nmt.data.vocab import UNK_ID, Tokenizer, train_spm
from nmt.data.vocab_extension import extend_for, model_type, unknown_characters
from nmt.dirs import DataDir, ModelDir
from nmt.dirs.loaded import load_model
from nmt.errors import NmtError
from nmt.train import distributed
from nmt.train.finetune import VOCAB_ROWS
from nmt.train.loop import Trainer, train

NEW_WORDS = ["řeka", "dům", "město", "čaj", "růže", "žena", "ěř", "pomalu", "kolem"]
NEW_CHARS = set("".join(NEW_WORDS)) - set("".join(WORDS))  # ř ů ě č ž s


def _new_language(root: Path, seed: int, n: int = 800) -> Path:
    """Sources in the old words, targets mixing in words with letters the old model never saw."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", n), ("valid", 40)):
        src = [rng.choices(WORDS, k=rng.randint(3, 6)) for _ in range(count)]
        tgt = [[rng.choice(NEW_WORDS) if rng.random() < 0.4 else w for w in s] for s in src]
        for lang, lines in (("en", src), ("de", tgt)):
            text = "\n".join(" ".join(w) for w in lines) + "\n"
            (root / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_extension_appends_pieces_and_keeps_old_text_encoded_as_before(tmp_path, kind):
    old_text = _corpus(tmp_path / "old", 0, n=600)
    model = train_spm([old_text / "train.en"], tmp_path / "spm", 60, kind, threads=1)
    assert model_type(model) == kind
    before = Tokenizer.load(model)
    new = _new_language(tmp_path / "new", 1)
    lines = (new / "train.de").read_text(encoding="utf-8").splitlines()
    unknown = unknown_characters(before, lines)
    assert set(unknown) == NEW_CHARS
    assert sum(before.encode(line).count(UNK_ID) for line in lines) > 100

    ext = extend_for(model, [new / "train.en", new / "train.de"], 40, kind, threads=1)
    after = Tokenizer.load(model)
    assert (ext.added, ext.parent_size) == (after.vocab_size - before.vocab_size, before.vocab_size)
    assert 5 <= ext.added <= 40 and after.extends(before)
    added = [after.id_to_piece(i) for i in range(before.vocab_size, after.vocab_size)]
    assert NEW_CHARS <= set(added) and all(set(p) & NEW_CHARS for p in added)
    assert all(UNK_ID not in after.encode(line) for line in lines)
    assert all(after.sp.decode(after.encode(line)) == line for line in lines)
    old_lines = (old_text / "train.en").read_text(encoding="utf-8").splitlines()
    old_lines += [
        "golf kilo",
        "a b c xyz 123",
        "Alpha!",
        "dum reka meto",
    ]  # text the new pieces cannot touch
    assert all(after.encode(line) == before.encode(line) for line in old_lines)
    listing = model.with_suffix(".vocab").read_text(encoding="utf-8").splitlines()
    assert len(listing) == after.vocab_size and listing[-1].split("\t")[0] == added[-1]


def test_decomposed_text_gets_its_composed_letters(tmp_path):
    # Text typed in NFD (ř as r + U+030C, as macOS writes it) is NFKC-normalised before pieces
    # match: the new pieces must be the composed letters, not the combining marks.
    import unicodedata

    old_text = _corpus(tmp_path / "old", 0, n=600)
    model = train_spm([old_text / "train.en"], tmp_path / "spm", 60, threads=1)
    before = Tokenizer.load(model)
    new = _new_language(tmp_path / "new", 1)
    nfd = unicodedata.normalize("NFD", (new / "train.de").read_text(encoding="utf-8"))
    (new / "train.de").write_text(nfd, encoding="utf-8")
    lines = nfd.splitlines()
    assert set(unknown_characters(before, lines)) == NEW_CHARS
    extend_for(model, [new / "train.en", new / "train.de"], 40, "unigram", threads=1)
    after = Tokenizer.load(model)
    assert all(UNK_ID not in after.encode(line) for line in lines)


def test_extension_with_nothing_new_leaves_the_model_alone(tmp_path):
    text = _corpus(tmp_path / "t", 2, n=300)
    model = train_spm([text / "train.en"], tmp_path / "spm", 50, threads=1)
    data = model.read_bytes()
    ext = extend_for(model, [text / "train.de"], 100, "unigram", threads=1)
    assert (ext.added, ext.characters) == (0, []) and model.read_bytes() == data


@pytest.fixture(scope="module")
def extended(base, tmp_path_factory) -> Path:  # noqa: F811 (base is test_finetune's fixture)
    """The new language encoded with the base model's SentencePiece model, extended."""
    root = tmp_path_factory.mktemp("ext")
    text = _new_language(root / "text", 3)
    return _preprocess(text, root / "data", spm_from=base[1], extend_vocab=30)


def test_preprocess_records_the_extension(base, extended):  # noqa: F811
    manifest = json.loads((extended / "manifest.json").read_text(encoding="utf-8"))
    ext = manifest["vocab_extension"]
    n = Tokenizer.load(base[0] / "spm.model").vocab_size
    assert ext["src"] == ext["tgt"] and ext["src"]["from_size"] == n
    assert set(ext["src"]["characters"]) == NEW_CHARS
    assert manifest["vocab_size"]["tgt"] == n + ext["src"]["added"]
    note = (
        f"vocabulary extended: {ext['src']['added']} pieces after its {n} (pieces holding new "
        "characters; 6 new characters: "
    )
    assert any(n.startswith(note) for n in summary_notes(manifest))
    tok = Tokenizer.load(extended / "spm.model")
    assert tok.extends(Tokenizer.load(base[0] / "spm.model"))
    valid = (extended / "valid.de.txt").read_text(encoding="utf-8").splitlines()
    assert all(UNK_ID not in tok.encode(line) for line in valid)


def test_init_from_copies_trained_rows_and_starts_new_ones_at_their_mean(base, extended, tmp_path):  # noqa: F811
    _, model = base
    cfg = _tiny(f"training.init_from={model}")
    trainer = Trainer(
        cfg,
        DataDir(extended),
        ModelDir.at(tmp_path / "ft"),
        torch.device("cpu"),
        distributed.from_env(),
        False,
        True,
    )
    trained = load_model(ModelDir(model))[0].state_dict()
    ours = trainer.model.state_dict()
    size = Tokenizer.load(extended / "spm.model").vocab_size
    n = Tokenizer.load(base[0] / "spm.model").vocab_size
    for key in ours:
        if key in VOCAB_ROWS:
            assert ours[key].shape[0] == size > n
            assert torch.equal(ours[key][:n], trained[key])
            mean = trained[key].mean(0)
            assert all(torch.allclose(row, mean) for row in ours[key][n:])
        else:
            assert torch.equal(ours[key], trained[key])
    assert trainer.init is not None and trainer.init["new_rows"]["tgt_embed.weight"] == size - n
    summary = train(
        _tiny(f"training.init_from={model}", "training.max_steps=6"),
        DataDir(extended),
        ModelDir.at(tmp_path / "run"),
        "cpu",
        quiet=True,
        threads=1,
    )
    assert summary.steps == 6


def test_extend_all_adds_words_of_old_letters_and_keeps_the_old_language(tmp_path):
    old_text = _corpus(tmp_path / "old", 0, n=600)
    model = train_spm([old_text / "train.en", old_text / "train.de"], tmp_path / "spm", 60,
                      threads=1)  # fmt: skip
    before = Tokenizer.load(model)
    plain = tmp_path / "plain.model"
    shutil.copyfile(model, plain)  # to extend with pieces holding new letters only
    new = _new_language(tmp_path / "new", 6)
    en = (new / "train.en").read_text(encoding="utf-8").splitlines()
    ext = extend_for(model, [new / "train.en", new / "train.de"], 200, "unigram", threads=1,
                     keep=[new / "train.en"])  # fmt: skip
    after = Tokenizer.load(model)
    added = [after.id_to_piece(i) for i in range(before.vocab_size, after.vocab_size)]
    assert ext.added == len(added) and NEW_CHARS <= set(added)
    assert any(not set(p) & NEW_CHARS for p in added)  # pieces of old letters only, too
    assert all(after.encode(line) == before.encode(line) for line in en)
    de = (new / "train.de").read_text(encoding="utf-8").splitlines()
    plain_ext = extend_for(plain, [new / "train.en", new / "train.de"], 200, "unigram", threads=1)
    assert plain_ext.added < ext.added
    shorter = sum(map(len, after.encode_batch(de))) < sum(
        map(len, Tokenizer.load(plain).encode_batch(de))
    )
    assert shorter  # the new language takes fewer subwords than with new letters alone


def test_preprocess_extend_all_checks_the_reused_models_languages(base, tmp_path):  # noqa: F811
    text = _new_language(tmp_path / "t", 7, n=300)
    for lang in ("en", "de"):  # a corpus in English and Czech: en is one of the model's own
        (text / f"train.{lang.replace('de', 'cs')}").write_text(
            (text / f"train.{lang}").read_text(encoding="utf-8"), encoding="utf-8"
        )
        (text / f"valid.{lang.replace('de', 'cs')}").write_text(
            (text / f"valid.{lang}").read_text(encoding="utf-8"), encoding="utf-8"
        )
    cfg = PreprocessConfig("en", "cs", text / "train", valid=text / "valid", threads=1,
                           spm_from=ModelDir(base[1]), extend_vocab=40, extend_all=True)  # fmt: skip
    manifest = preprocess(cfg, tmp_path / "data", quiet=True)
    ext = manifest["vocab_extension"]["src"]
    assert ext["all_pieces"] is True and ext["checked_languages"] == ["en"]
    assert "leaves en encoded as before" in summary_notes(manifest)[1]
    tok, old = (
        Tokenizer.load(tmp_path / "data" / "spm.model"),
        Tokenizer.load(base[0] / "spm.model"),
    )
    en = (text / "train.en").read_text(encoding="utf-8").splitlines()
    assert all(tok.encode(line) == old.encode(line) for line in en)


def test_extension_errors_are_one_line(base, tmp_path):  # noqa: F811
    text = _new_language(tmp_path / "t", 4, n=100)
    with pytest.raises(NmtError) as e:
        _preprocess(text, tmp_path / "out", extend_vocab=10)
    assert str(e.value) == (
        "--extend-vocab extends reused SentencePiece models: it needs --spm-from (a new model "
        "learns every character of the corpus already)"
    )
    with pytest.raises(NmtError, match=r"^--extend-all needs --extend-vocab N \(how many"):
        _preprocess(text, tmp_path / "out", spm_from=base[1], extend_all=True)
    with pytest.raises(NmtError, match=r"^--extend-vocab must be >= 0, got -1$"):
        _preprocess(text, tmp_path / "out", spm_from=base[1], extend_vocab=-1)
    own = _preprocess(_corpus(tmp_path / "t3", 5, n=300), tmp_path / "own", vocab_size=40)
    data = _preprocess(_new_language(tmp_path / "t2", 5, n=200), tmp_path / "d", spm_from=own,
                       extend_vocab=10)  # fmt: skip
    model = base[1]  # another model's pieces, extended, are still not this model's
    with pytest.raises(NmtError) as e:
        train(
            _tiny(f"training.init_from={model}", "training.max_steps=2"),
            DataDir(data),
            ModelDir.at(tmp_path / "m"),
            "cpu",
            quiet=True,
            threads=1,
        )
    assert str(e.value) == (
        f"{data}: its source vocabulary differs from {model}'s (preprocess the corpus with "
        f"--spm-from {model})"
    )
