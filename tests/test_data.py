"""nmt.vocab and nmt.data: SentencePiece round trips, cleaning counts on a crafted corpus, and the
binary format reloading to exactly the ids the tokenizer produces."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from nmt import data
from nmt.errors import NmtError
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_spm

WORDS = "dog cat man woman child ball park street water red blue big small runs jumps sits".split()


def _pair(rng: random.Random, n: int) -> tuple[str, str]:
    """A synthetic pair: target words are reversed source words, so lengths stay comparable."""
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words), " ".join(w[::-1] for w in words)


def _write(prefix: Path, src: list, tgt: list, src_lang: str = "en", tgt_lang: str = "de") -> Path:
    """Write PREFIX.en / PREFIX.de; str lines are encoded as UTF-8, bytes lines written as is."""
    for lang, lines in ((src_lang, src), (tgt_lang, tgt)):
        raw = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
        Path(f"{prefix}.{lang}").write_bytes(raw)
    return prefix


def _synthetic(tmp_path: Path, n: int = 300, seed: int = 0) -> Path:
    """A clean synthetic corpus of n distinct-ish pairs of 3-8 words."""
    rng = random.Random(seed)
    pairs = [_pair(rng, rng.randint(3, 8)) for _ in range(n)]
    return _write(tmp_path / "syn", [p[0] for p in pairs], [p[1] for p in pairs])


def test_special_ids_match_model_contract():
    from nmt.models import base

    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (base.PAD_ID, base.UNK_ID, base.BOS_ID, base.EOS_ID)


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


def test_tokenizer_load_errors(tmp_path):
    with pytest.raises(NmtError, match="SentencePiece model not found"):
        Tokenizer.load(tmp_path / "nope.model")
    (tmp_path / "bad.model").write_bytes(b"not a model")
    with pytest.raises(NmtError, match="not a SentencePiece model"):
        Tokenizer.load(tmp_path / "bad.model")


def test_cleaning_counts_on_crafted_corpus(tmp_path):
    rng = random.Random(1)
    good = list({_pair(rng, rng.randint(3, 6)) for _ in range(200)})
    src = [s for s, _ in good]
    tgt = [t for _, t in good]
    long_pair = _pair(rng, 80)
    crafted = [
        (b"  ", b"x y z"),  # empty source after trimming
        (b"dog cat", b"\t "),  # empty target
        (good[0][0].encode(), good[0][1].encode()),  # duplicate
        (b"  " + good[1][0].encode() + b" ", good[1][1].encode()),  # duplicate after trimming
        (long_pair[0].encode(), long_pair[1].encode()),  # too long (both sides)
        (b"dog", " ".join(["god"] * 15).encode()),  # ratio >= 15/4
        (b"bad \xff byte", b"gut"),  # invalid UTF-8
    ]
    src += [c[0] for c in crafted]
    tgt += [c[1] for c in crafted]
    prefix = _write(tmp_path / "c", src, tgt)
    m = data.preprocess(
        "en", "de", prefix, tmp_path / "out", vocab_size=120, max_len=40, dedupe=True,
        skip_invalid=True, quiet=True, threads=1,
    )  # fmt: skip
    t = m["splits"]["train"]
    assert t["lines_read"] == len(good) + 7
    assert t["dropped"] == {
        "invalid_utf8": 1, "empty": 2, "duplicate": 2, "too_long": 1, "ratio": 1
    }  # fmt: skip
    assert t["kept"] == len(good)
    split = data.load(tmp_path / "out", "train")
    src_tok, _ = data.tokenizers(tmp_path / "out")
    assert [src_tok.decode(x) for x in split.src] == [s for s, _ in good]

    m = data.preprocess(
        "en", "de", prefix, tmp_path / "out2", vocab_size=120, max_len=40, max_ratio=100.0,
        skip_invalid=True, quiet=True, threads=1,
    )  # fmt: skip
    assert m["splits"]["train"]["dropped"] == {
        "invalid_utf8": 1, "empty": 2, "duplicate": 0, "too_long": 1, "ratio": 0
    }  # fmt: skip
    assert m["splits"]["train"]["kept"] == len(good) + 3


def test_binary_format_reloads_to_encoded_ids(multi30k, tmp_path):
    n = 500
    for lang in ("en", "de"):
        lines = itertools.islice(open(multi30k / f"train.{lang}", encoding="utf-8"), n)
        (tmp_path / f"tr.{lang}").write_text("".join(lines), encoding="utf-8")
    m = data.preprocess(
        "en", "de", tmp_path / "tr", tmp_path / "d", valid=multi30k / "val",
        tests=[multi30k / "test_2016_flickr"], vocab_size=400, quiet=True, threads=1,
    )  # fmt: skip
    assert set(m["splits"]) == {"train", "valid", "test_2016_flickr"}
    assert (
        m["dtype"] == "uint16"
        and m["joint"]
        and m["spm"] == {"src": "spm.model", "tgt": "spm.model"}
    )
    src_tok, tgt_tok = data.tokenizers(tmp_path / "d")
    assert src_tok is tgt_tok
    for split, prefix in (("valid", multi30k / "val"), ("test_2016_flickr", None)):
        prefix = prefix or multi30k / split
        loaded = data.load(tmp_path / "d", split)
        for lang, arr in (("en", loaded.src), ("de", loaded.tgt)):
            raw = Path(f"{prefix}.{lang}").read_text(encoding="utf-8").splitlines()
            assert len(arr) == len(raw) == len(loaded) == m["splits"][split]["kept"]
            assert (tmp_path / "d" / f"{split}.{lang}.txt").read_text(encoding="utf-8") == (
                "".join(r + "\n" for r in raw)
            )
            expected = src_tok.encode_batch([r.strip() for r in raw])
            assert arr.ids.dtype == np.dtype("<u2")
            assert [a.tolist() for a in arr] == expected
            assert arr.lengths.tolist() == [len(e) for e in expected]
            assert arr.num_tokens == m["splits"][split]["tokens"][lang]
    train = data.load(tmp_path / "d", "train")
    assert len(train) == m["splits"]["train"]["kept"]
    assert isinstance(train.src.ids, np.memmap)
    assert train.src[3].base is not None  # a view into the mapped file, not a copy
    info = data.vocab_info(tmp_path / "d")
    assert (info.src_size, info.tgt_size, info.joint) == (400, 400, True)
    sha = hashlib.sha256((tmp_path / "tr.en").read_bytes()).hexdigest()
    assert m["splits"]["train"]["files"]["en"]["sha256"] == sha
    assert data.read_manifest(tmp_path / "d") == json.loads(json.dumps(m))
    with pytest.raises(NmtError, match=r"no split 'test' \(have: train, valid, test_2016_flickr\)"):
        data.load(tmp_path / "d", "test")


def test_valid_keeps_every_line_and_raw_text(tmp_path):
    train = _synthetic(tmp_path)
    valid = _write(tmp_path / "v", ["  dog  runs ", "", "cat"], ["god", "  ", "tac\t"])
    data.preprocess("en", "de", train, tmp_path / "d", valid=valid, vocab_size=100, quiet=True)
    v = data.load(tmp_path / "d", "valid")
    assert len(v) == 3 and v.src.lengths[1] == 0 and v.tgt.lengths[1] == 0
    assert (tmp_path / "d/valid.en.txt").read_text() == "  dog  runs \n\ncat\n"
    assert (tmp_path / "d/valid.de.txt").read_text() == "god\n  \ntac\t\n"
    src_tok, _ = data.tokenizers(tmp_path / "d")
    assert src_tok.decode(v.src[0]) == "dog runs"


def test_separate_vocabularies(tmp_path):
    prefix = _synthetic(tmp_path)
    m = data.preprocess("en", "de", prefix, tmp_path / "d", vocab_size=60, joint=False, quiet=True)
    assert m["spm"] == {"src": "spm.en.model", "tgt": "spm.de.model"}
    src_tok, tgt_tok = data.tokenizers(tmp_path / "d")
    assert src_tok is not tgt_tok and src_tok.path.name == "spm.en.model"
    info = data.vocab_info(tmp_path / "d")
    assert not info.joint and info.src_size == src_tok.vocab_size == m["vocab_size"]["src"]
    train = data.load(tmp_path / "d", "train")
    assert tgt_tok.decode(train.tgt[0]) == Path(f"{prefix}.de").read_text().splitlines()[0]


def test_parallel_encoding_matches_serial(tmp_path, monkeypatch):
    prefix = _synthetic(tmp_path, n=400)
    monkeypatch.setattr(data, "CHUNK_PAIRS", 60)  # 7 chunks, encoded by 2 worker processes
    kw = dict(vocab_size=80, spm_type="bpe", quiet=True)
    data.preprocess("en", "de", prefix, tmp_path / "one", threads=1, **kw)
    data.preprocess("en", "de", prefix, tmp_path / "two", threads=2, **kw)
    for name in ("train.en.ids", "train.en.idx", "train.de.ids", "train.de.idx"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert len(data.load(tmp_path / "two", "train")) == 400


def test_gzip_input_and_force_replaces(tmp_path):
    import gzip

    prefix = _synthetic(tmp_path)
    for lang in ("en", "de"):
        plain = Path(f"{prefix}.{lang}")
        Path(f"{plain}.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    out = tmp_path / "d"
    data.preprocess("en", "de", prefix, out, vocab_size=50, quiet=True)
    with pytest.raises(NmtError, match="exists and is not empty"):
        data.preprocess("en", "de", prefix, out, vocab_size=45, quiet=True)
    assert data.read_manifest(out)["vocab_size"]["src"] == 50
    m = data.preprocess("en", "de", prefix, out, vocab_size=45, quiet=True, force=True)
    assert data.read_manifest(out)["vocab_size"]["src"] == m["vocab_size"]["src"] == 45
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_token_array_int32_and_corruption(tmp_path):
    ids = np.array([5, 70000, 3, 9], dtype="<i4")
    ids.tofile(tmp_path / "a.ids")
    np.array([0, 2, 2, 4], dtype="<i8").tofile(tmp_path / "a.idx")
    arr = data.TokenArray(tmp_path / "a.ids", tmp_path / "a.idx", "<i4")
    assert len(arr) == 3 and arr[0].tolist() == [5, 70000] and arr[1].tolist() == []
    assert arr[-1].tolist() == [3, 9] and arr.lengths.tolist() == [2, 0, 2]
    with pytest.raises(IndexError):
        arr[3]
    np.array([0, 2, 5], dtype="<i8").tofile(tmp_path / "a.idx")
    with pytest.raises(NmtError, match="corrupt"):
        data.TokenArray(tmp_path / "a.ids", tmp_path / "a.idx", "<i4")


def test_read_manifest_of_wrong_folder(tmp_path):
    with pytest.raises(NmtError, match=r"not a preprocessed data folder \(no manifest.json"):
        data.read_manifest(tmp_path)
