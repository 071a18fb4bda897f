"""Tab-separated corpora and held-out splits: TSV parsing and column order, malformed lines,
split determinism, test sources kept out of train, and line breaks other than "\\n" inside lines."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nmt.data import corpus
from nmt.data import preprocess as pp
from nmt.data.cleaning import PairFilter, clean_train, read_pairs
from nmt.data.preprocess import PreprocessConfig
from nmt.data.summary import summary_notes, summary_table
from nmt.data.tsv import column_order, read_tsv_pairs
from nmt.dirs import data as dataset
from nmt.errors import NmtError

WORDS = "dog cat man woman child ball park street water red blue big small runs jumps sits".split()
WMT_MIRROR = Path(__file__).resolve().parents[2] / "shared/corpora/wmt-news-de-en"


def _tsv(path: Path, rows: list[str | bytes]) -> Path:
    """Write a TSV file (gzipped for a .gz name); str rows are UTF-8, bytes rows as they are."""
    raw = b"".join((r if isinstance(r, bytes) else r.encode()) + b"\n" for r in rows)
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return path


def _rows(n: int, seed: int = 0, repeat: int = 1) -> list[str]:
    """n synthetic `en<TAB>de` rows (the German side reverses each word); each English sentence
    `repeat` times with different German, as in Tatoeba."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n // repeat):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 7))]
        for k in range(repeat):
            de = " ".join(w[::-1] for w in words) + " x" * k
            rows.append(f"{' '.join(words)}\t{de}")
    return rows


def _preprocess(train: Path, out: Path, **kw: Any) -> dict:
    """Preprocess en->de quietly with a small vocabulary."""
    kw.setdefault("vocab_size", 60)
    cfg = PreprocessConfig("en", "de", train, threads=1, **kw)
    return pp.preprocess(cfg, out, quiet=True)


def _texts(data: Path, split: str) -> tuple[list[str], list[str]]:
    """A DATA_DIR split's raw (en, de) text lines."""
    return tuple(  # type: ignore[return-value]
        (data / f"{split}.{lang}.txt").read_text(encoding="utf-8").split("\n")[:-1]
        for lang in ("en", "de")
    )


def _train_sources(data: Path) -> list[str]:
    """Train's source sentences, decoded from their ids."""
    split = dataset.DataDir(data).split("train")
    src_tok, _ = dataset.DataDir(data).tokenizers
    return [src_tok.decode(x) for x in split.src]


def test_tsv_columns_in_file_order_or_named(tmp_path):
    path = _tsv(tmp_path / "c.tsv", ["\ufeffHi.\tHallo!", "  \t ", "Run!\tLauf!", ""])
    assert list(read_tsv_pairs(path, (0, 1), False, {})) == [
        (1, b"Hi.", b"Hallo!"), (2, b"  ", b" "), (3, b"Run!", b"Lauf!"), (4, b"", b"")
    ]  # fmt: skip
    assert column_order(None, ("en", "de")) == (0, 1)
    assert column_order(("de", "en"), ("en", "de")) == (1, 0)
    with pytest.raises(NmtError, match=r"^--columns must name --src-lang and --tgt-lang once"):
        column_order(("en", "fr"), ("en", "de"))

    rows = _rows(300)
    m = _preprocess(_tsv(tmp_path / "c.tsv.gz", rows), tmp_path / "d")
    t = m["splits"]["train"]
    assert (t["lines_read"], t["kept"], t["columns"]) == (300, 300, ["en", "de"])
    assert t["dropped"]["malformed"] == 0 and "test_source" not in t["dropped"]
    assert t["files"]["en"]["input"] == str(tmp_path / "c.tsv.gz")
    assert _train_sources(tmp_path / "d") == [r.split("\t")[0] for r in rows]

    swapped = _tsv(tmp_path / "s.tsv", ["\t".join(r.split("\t")[::-1]) for r in rows])
    _preprocess(swapped, tmp_path / "e", columns=["de", "en"])
    assert _train_sources(tmp_path / "e") == [r.split("\t")[0] for r in rows]


def test_malformed_line_is_one_line_error_or_counted(tmp_path):
    rows = _rows(200)
    bad = _tsv(tmp_path / "b.tsv", rows[:5] + ["no tab here"] + rows[5:] + ["a\tb\tc"])
    with pytest.raises(NmtError) as e:
        _preprocess(bad, tmp_path / "d")
    assert str(e.value) == (
        f"{bad}:6: no tab, expected 2 tab-separated columns; --skip-invalid drops such lines"
    )
    assert not (tmp_path / "d").exists() and not list(tmp_path.glob(".d.*"))

    proc = subprocess.run(
        [sys.executable, "-m", "nmt", "preprocess", "--src-lang", "en", "--tgt-lang", "de"]
        + ["--train", str(bad), "--vocab-size", "60", "-o", str(tmp_path / "d"), "-q"],
        capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert (proc.returncode, proc.stderr) == (2, f"error: {e.value}\n")
    assert not (tmp_path / "d").exists()

    m = _preprocess(bad, tmp_path / "d", skip_invalid=True)
    t = m["splits"]["train"]
    assert (t["lines_read"], t["kept"], t["dropped"]["malformed"]) == (202, 200, 2)
    assert "train dropped: malformed 2" in summary_notes(m)
    extra = _tsv(tmp_path / "x.tsv", rows + ["a\tb\tc"])
    with pytest.raises(NmtError, match=r":201: 3 columns, expected 2 tab-separated columns"):
        _preprocess(extra, tmp_path / "x")


def test_config_checks_tsv_and_split_settings(tmp_path):
    cases = [
        ({"train": "c.en", "columns": ["en", "de"]}, "--columns names the columns of a --train"),
        ({"train": "c.tsv", "columns": ["en", "en"]}, "--columns must name --src-lang"),
        ({"train": "c", "split_valid": 5, "valid": "v"}, "--split-valid holds valid out of train"),
        ({"train": "c", "split_test": 5, "tests": ["t"]}, "--split-test holds test out of train"),
        ({"train": "c", "split_test": -1}, "--split-valid and --split-test must be >= 0"),
    ]
    for kw, message in cases:
        with pytest.raises(NmtError, match=f"^{message}"):
            PreprocessConfig("en", "de", **kw)
    with pytest.raises(NmtError, match=r"missing\.tsv: file not found$"):
        _preprocess(tmp_path / "missing.tsv", tmp_path / "d")
    small = _tsv(tmp_path / "s.tsv", _rows(10))
    with pytest.raises(NmtError, match=r"leave no training pairs: .*s\.tsv has 10 usable pairs$"):
        _preprocess(small, tmp_path / "d", split_valid=5, split_test=5)


def test_held_out_splits_are_deterministic_and_test_sources_stay_out_of_train(tmp_path):
    rows = _rows(900, repeat=3)  # every English sentence three times, as in Tatoeba
    corpus_file = _tsv(tmp_path / "c.tsv", rows + ["", "\tleer"])  # 2 unusable lines: never drawn
    kw = {"split_valid": 40, "split_test": 50, "seed": 7}
    a = _preprocess(corpus_file, tmp_path / "a", **kw)
    _preprocess(corpus_file, tmp_path / "b", **kw)
    _preprocess(corpus_file, tmp_path / "c", **{**kw, "seed": 8})
    for split, n in (("valid", 40), ("test", 50)):
        assert _texts(tmp_path / "a", split) == _texts(tmp_path / "b", split)
        assert _texts(tmp_path / "a", split) != _texts(tmp_path / "c", split)
        src, tgt = _texts(tmp_path / "a", split)
        assert len(src) == n and all(f"{s}\t{t}" in rows for s, t in zip(src, tgt, strict=True))
        assert a["splits"][split]["held_out_of"] == "train"
        assert a["splits"][split]["files"]["en"]["input"] == str(corpus_file)

    test_src = set(_texts(tmp_path / "a", "test")[0])
    train_src = _train_sources(tmp_path / "a")
    assert not test_src & set(train_src)
    t = a["splits"]["train"]
    remaining = 900 - 90  # usable pairs not drawn
    overlap = sum(1 for r in rows if r.split("\t")[0] in test_src) - 50
    overlap -= sum(1 for s in _texts(tmp_path / "a", "valid")[0] if s in test_src)
    assert t["dropped"]["test_source"] == overlap > 0
    assert t["kept"] == len(train_src) == remaining - overlap
    assert t["held_out"] == {"valid": 40, "test": 50, "seed": 7}
    assert t["lines_read"] == 902 and t["dropped"]["empty"] == 2
    assert list(summary_table(a).columns[3].cells) == [f"{2 + overlap}", "0", "0"]
    assert any(
        n.startswith("train: 40 pairs held out as valid and 50 as test") for n in summary_notes(a)
    )
    ds = dataset.DataDir(tmp_path / "a").split("test")
    assert len(ds) == 50


def test_held_out_splits_from_line_files_and_only_valid(tmp_path):
    rows = _rows(300)
    for lang, col in (("en", 0), ("de", 1)):
        (tmp_path / f"c.{lang}").write_text("".join(r.split("\t")[col] + "\n" for r in rows))
    m = _preprocess(tmp_path / "c", tmp_path / "d", split_valid=30)
    assert list(m["splits"]) == ["train", "valid"]
    assert (
        m["splits"]["train"]["kept"] == 270 and "test_source" not in m["splits"]["train"]["dropped"]
    )
    assert any("30 pairs held out as valid (--seed 1)" in n for n in summary_notes(m))


def test_other_line_breaks_stay_inside_a_sentence(tmp_path):
    odd = "ein\u2028Satz mit\x85Umbruch\u2029und\x0bmehr"
    rows = _rows(200)
    rows[3] = f"a sentence\t{odd}"
    path = _tsv(tmp_path / "c.tsv", rows)
    assert list(read_tsv_pairs(path, (0, 1), False, {}))[3] == (4, b"a sentence", odd.encode())
    m = _preprocess(path, tmp_path / "d", split_valid=199)  # seed 1 holds the odd line out
    assert m["splits"]["train"]["kept"] == 1
    src, tgt = _texts(tmp_path / "d", "valid")
    assert len(src) == len(tgt) == 199 and odd in tgt

    for lang, col in (("en", 0), ("de", 1)):
        (tmp_path / f"f.{lang}").write_text("".join(r.split("\t")[col] + "\n" for r in rows))
    m = pp.preprocess(
        PreprocessConfig("en", "de", tmp_path / "f", valid=tmp_path / "f", vocab_size=60, threads=1),
        tmp_path / "e", quiet=True,
    )  # fmt: skip
    assert m["splits"]["train"]["kept"] == m["splits"]["valid"]["kept"] == 200
    assert _texts(tmp_path / "e", "valid")[1][3] == odd


def test_wmt_train_keeps_unicode_line_breaks_inside_sentences(tmp_path):
    if not (WMT_MIRROR / "train.de.gz").is_file():
        pytest.skip(f"no wmt-news-de-en mirror at {WMT_MIRROR}")
    dest = corpus.fetch("wmt-news-de-en", tmp_path / "w", mirror=WMT_MIRROR, quiet=True)
    pairs = list(read_pairs(dest / "train.en", dest / "train.de"))
    assert len(pairs) == 30935
    assert sum(de.count(b"\xc2\x85") for _, _, de in pairs) == 5  # U+0085 inside German lines
    paths = (dest / "train.en", dest / "train.de")
    clean = (tmp_path / "clean.en", tmp_path / "clean.de")
    keep = PairFilter(paths, False, False)
    counts, chunks = clean_train(read_pairs(*paths), keep, clean, 20_000, lambda n: None)
    kept = sum(c.n for c in chunks)
    assert counts["read"] == 30935 and kept == 30935 - counts["empty"]
    texts = [p.read_bytes().decode("utf-8").split("\n")[:-1] for p in clean]
    assert len(texts[0]) == len(texts[1]) == kept
    assert sum(line.count("\x85") for line in texts[1]) == 5
    assert json.loads((dest / corpus.STAMP).read_text())["train.de.gz"]["size"] > 0
