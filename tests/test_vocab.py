"""nmt.data.vocab: SentencePiece training with the fixed special ids, round trips, and clear errors."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
import unicodedata

import pytest
import sentencepiece as spm

from nmt.data.vocab import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_IDS,
    SPECIAL_PIECES,
    UNK_ID,
    Tokenizer,
    train_spm,
)
from nmt.errors import NmtError

WORDS = "dog cat man woman child ball park street water red blue big small runs jumps sits".split()


def _sentences(n: int = 200, seed: int = 0) -> list[str]:
    """Generated sentences of 3-8 words over a small vocabulary."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 8))) for _ in range(n)]


def test_special_ids_match_model_contract():
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert SPECIAL_IDS == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}


def test_tokenizer_round_trip_and_special_ids(multi30k, tmp_path):
    lines = list(itertools.islice(open(multi30k / "train.de", encoding="utf-8"), 400))
    model = train_spm(lines, tmp_path / "m", vocab_size=300)
    tok = Tokenizer.load(model)
    assert tok.vocab_size == 300 and tok.path == model
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    texts = [line.strip() for line in lines]
    batch = tok.encode_batch(texts)
    assert batch == [tok.encode(t) for t in texts]
    for text, ids in zip(texts, batch, strict=True):
        assert BOS_ID not in ids and EOS_ID not in ids and UNK_ID not in ids
        assert tok.decode(ids) == unicodedata.normalize("NFKC", " ".join(text.split()))
        assert "".join(tok.pieces(text)).replace("\u2581", " ").strip() == " ".join(text.split())
    ids = tok.encode(texts[0])
    assert tok.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == tok.decode(ids)


def test_generated_text_from_files_and_sentences(tmp_path):
    texts = _sentences()
    (tmp_path / "a.txt").write_text("\n".join(texts[:100]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n".join(texts[100:]) + "\n", encoding="utf-8")
    from_files = Tokenizer.load(
        train_spm([tmp_path / "a.txt", tmp_path / "b.txt"], tmp_path / "f", 60, threads=1)
    )
    from_lines = Tokenizer.load(train_spm(iter(texts), tmp_path / "s", 60, model_type="bpe"))
    assert not list(tmp_path.glob(".spm-input.*"))  # the temporary sentence file is removed
    for tok in (from_files, from_lines):
        pieces = [tok.id_to_piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)]
        assert pieces == [SPECIAL_PIECES[k] for k in ("pad", "unk", "bos", "eos")]
        batch = tok.encode_batch(texts, threads=1)
        assert batch == [tok.encode(t) for t in texts]
        assert tok.decode_batch(batch) == texts
        assert tok.normalize("  dog\u3000runs ") == "dog runs"
        assert tok.encode("dog ~")[-1] == UNK_ID  # a character never seen in training
        assert repr(tok).startswith("Tokenizer(") and str(tok.vocab_size) in repr(tok)


def test_a_comma_in_a_path_is_part_of_the_name(tmp_path):
    # SentencePiece's `input` is a comma-separated list: paths must reach it quoted
    # (`nmt preprocess -o data/en,de` trains in a temporary folder named after its output).
    texts = _sentences()
    folder = tmp_path / "en,de"
    folder.mkdir()
    (folder / "a,b.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    one = Tokenizer.load(train_spm(folder / "a,b.txt", folder / "one", 60, threads=1))
    two = Tokenizer.load(train_spm([folder / "a,b.txt"] * 2, folder / "two", 60, threads=1))
    lines = Tokenizer.load(train_spm(iter(texts), folder / "lines", 60, threads=1))
    for tok in (one, two, lines):
        assert tok.decode(tok.encode(texts[0])) == texts[0]


TRAIN_SAMPLED = """
import sys
from pathlib import Path
from nmt.data.vocab import train_spm
files, out = [Path(sys.argv[1]), Path(sys.argv[2])], Path(sys.argv[3])
for kind in ("unigram", "bpe"):
    train_spm(files, out / kind, 200, model_type=kind, input_sentence_size=300, threads=1)
lines = files[0].read_text(encoding="utf-8").splitlines()
train_spm(iter(lines), out / "lines", 200, input_sentence_size=300, threads=1)
"""


def test_a_sample_of_a_larger_corpus_gives_the_same_vocabulary_every_run(tmp_path, repo_root):
    # SentencePiece's own sentence sampler is seeded anew in every process: a corpus over
    # input_sentence_size lines gave another vocabulary every run. The sample is drawn seeded now.
    rng = random.Random(1)
    words = [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 8))) for _ in range(500)
    ]
    lines = [" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(3000)]
    (tmp_path / "a.txt").write_text("\n".join(lines[:2000]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n".join(lines[2000:]), encoding="utf-8")  # no last newline
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        out.mkdir()
        args = [tmp_path / "a.txt", tmp_path / "b.txt", out]
        subprocess.run(
            [sys.executable, "-c", TRAIN_SAMPLED, *map(str, args)], check=True, cwd=repo_root
        )
        runs.append({p.name: p.read_bytes() for p in out.glob("*.vocab")})
        assert sorted(p.name for p in out.iterdir()) == [
            "bpe.model", "bpe.vocab", "lines.model", "lines.vocab", "unigram.model", "unigram.vocab"
        ]  # fmt: skip
    assert len(runs[0]) == 3 and runs[0] == runs[1]


def test_train_spm_vocab_too_large_shrinks_too_small_is_clear(tmp_path):
    lines = ["a b c", "b c a", "c a b"] * 20
    tok = Tokenizer.load(train_spm(lines, tmp_path / "big", vocab_size=5000))
    assert 7 <= tok.vocab_size < 5000
    with pytest.raises(NmtError) as e:
        train_spm(["abcdefghijklmnopqrstuvwxyz"], tmp_path / "small", vocab_size=8)
    assert str(e.value) == (
        "vocabulary size 8 is too small: the training text needs 31 pieces (its characters, "
        "the word boundary and 4 special pieces); use --vocab-size 31 or more"
    )


def test_train_spm_bad_arguments(tmp_path):
    with pytest.raises(NmtError, match=r"unknown SentencePiece model type 'word'"):
        train_spm(["a b"], tmp_path / "m", 50, model_type="word")
    with pytest.raises(NmtError, match="vocabulary size must be at least 8, got 7"):
        train_spm(["a b"], tmp_path / "m", 7)


def test_tokenizer_load_errors(tmp_path):
    with pytest.raises(NmtError, match="SentencePiece model not found"):
        Tokenizer.load(tmp_path / "nope.model")
    (tmp_path / "bad.model").write_bytes(b"not a model")
    with pytest.raises(NmtError, match="not a SentencePiece model"):
        Tokenizer.load(tmp_path / "bad.model")


def test_model_with_other_special_ids_is_rejected(tmp_path):
    (tmp_path / "t.txt").write_text("\n".join(_sentences(50)) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "t.txt"), model_prefix=str(tmp_path / "m"), vocab_size=30,
        hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    with pytest.raises(NmtError, match=r"special ids pad=-1 bos=1 eos=2, expected pad=0 bos=2"):
        Tokenizer.load(tmp_path / "m.model")
