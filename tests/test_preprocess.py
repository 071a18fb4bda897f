"""nmt.data.preprocess: cleaning counts on a crafted corpus, valid/test kept line for line, separate
vocabularies, parallel encoding equal to serial, gzip input, --force, and the config's checks."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from nmt import textio
from nmt.data import preprocess as pp
from nmt.data.preprocess import PreprocessConfig
from nmt.data.summary import summary_notes
from nmt.dirs import ModelDir
from nmt.dirs import data as dataset
from nmt.errors import NmtError

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


def _preprocess(train: Path, out: Path, force: bool = False, **kw: Any) -> dict:
    """Preprocess en->de quietly with the given config settings."""
    return pp.preprocess(PreprocessConfig("en", "de", train, **kw), out, force=force, quiet=True)


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
    m = _preprocess(
        prefix, tmp_path / "out", vocab_size=120, max_len=40, dedupe=True, skip_invalid=True,
        threads=1,
    )  # fmt: skip
    t = m["splits"]["train"]
    assert t["lines_read"] == len(good) + 7
    assert t["dropped"] == {
        "invalid_utf8": 1, "empty": 2, "duplicate": 2, "too_long": 1, "ratio": 1
    }  # fmt: skip
    assert t["kept"] == len(good)
    split = dataset.DataDir(tmp_path / "out").split("train")
    src_tok, _ = dataset.DataDir(tmp_path / "out").tokenizers
    assert [src_tok.decode(x) for x in split.src] == [s for s, _ in good]

    m = _preprocess(
        prefix, tmp_path / "out2", vocab_size=120, max_len=40, max_ratio=100.0, skip_invalid=True,
        threads=1,
    )  # fmt: skip
    assert m["splits"]["train"]["dropped"] == {
        "invalid_utf8": 1, "empty": 2, "duplicate": 0, "too_long": 1, "ratio": 0
    }  # fmt: skip
    assert m["splits"]["train"]["kept"] == len(good) + 3


def test_valid_keeps_every_line_and_raw_text(tmp_path):
    train = _synthetic(tmp_path)
    valid = _write(tmp_path / "v", ["  dog  runs ", "", "cat"], ["god", "  ", "tac\t"])
    _preprocess(train, tmp_path / "d", valid=valid, vocab_size=100)
    v = dataset.DataDir(tmp_path / "d").split("valid")
    assert len(v) == 3 and v.src.lengths[1] == 0 and v.tgt.lengths[1] == 0
    assert (tmp_path / "d/valid.en.txt").read_text() == "  dog  runs \n\ncat\n"
    assert (tmp_path / "d/valid.de.txt").read_text() == "god\n  \ntac\t\n"
    src_tok, _ = dataset.DataDir(tmp_path / "d").tokenizers
    assert src_tok.decode(v.src[0]) == "dog runs"


def test_a_byte_order_mark_does_not_reach_the_kept_text(tmp_path):
    # valid.de.txt is the reference BLEU is scored against: a kept U+FEFF spoilt its first word
    train = _synthetic(tmp_path)
    plain = _write(tmp_path / "v", ["dog runs", "cat"], ["god snur", "tac"])
    marked = _write(tmp_path / "b", ["\ufeffdog runs", "cat"], ["\ufeffgod snur", "tac"])
    _preprocess(train, tmp_path / "d", valid=marked, tests=[plain], vocab_size=100)
    for lang in ("en", "de"):
        text = (tmp_path / f"d/valid.{lang}.txt").read_bytes()
        assert text == (tmp_path / f"d/v.{lang}.txt").read_bytes() and not text.startswith(b"\xef")
        ids = (tmp_path / f"d/valid.{lang}.ids").read_bytes()
        assert ids == (tmp_path / f"d/v.{lang}.ids").read_bytes()


def test_long_eval_lines_are_counted_and_the_result_is_fsynced(tmp_path, monkeypatch):
    synced: list[str] = []
    monkeypatch.setattr(textio, "fsync_tree", lambda p: synced.append(Path(p).name[:3]))
    monkeypatch.setattr(textio, "fsync_dir", lambda p: synced.append(Path(p).name))
    train = _synthetic(tmp_path)
    sizes = (3, 200, 300, 600)  # words of one subword each: under, under, over 256, over both
    valid = _write(tmp_path / "v", [" ".join(["dog"] * n) for n in sizes], ["god"] * 4)
    m = _preprocess(train, tmp_path / "d", valid=valid, tests=[valid], vocab_size=100)
    lengths = dataset.DataDir(tmp_path / "d").split("valid").src.lengths
    assert list(lengths) == list(sizes)
    for split in ("valid", "v"):
        assert m["splits"][split]["over_limits"] == {"256": 2, "512": 1}
    assert "over_limits" not in m["splits"]["train"]
    assert dataset.DataDir(tmp_path / "d").manifest["splits"]["valid"]["over_limits"]["512"] == 1
    assert summary_notes(m)[0] == (
        "valid: lines longer than a model's max_positions (subwords + eos): 2 over 256, "
        "1 over 512; validation cuts them to the model's limit"
    )
    assert synced == [".d.", tmp_path.name]  # every file, then the renamed folder's parent


def test_separate_vocabularies(tmp_path):
    prefix = _synthetic(tmp_path)
    m = _preprocess(prefix, tmp_path / "d", vocab_size=60, joint=False)
    assert m["spm"] == {"src": "spm.en.model", "tgt": "spm.de.model"}
    src_tok, tgt_tok = dataset.DataDir(tmp_path / "d").tokenizers
    assert src_tok is not tgt_tok and src_tok.path.name == "spm.en.model"
    info = dataset.DataDir(tmp_path / "d").vocab_info
    assert not info.joint and info.src_size == src_tok.vocab_size == m["vocab_size"]["src"]
    train = dataset.DataDir(tmp_path / "d").split("train")
    assert tgt_tok.decode(train.tgt[0]) == Path(f"{prefix}.de").read_text().splitlines()[0]


def test_parallel_encoding_matches_serial(tmp_path, monkeypatch):
    prefix = _synthetic(tmp_path, n=400)
    monkeypatch.setattr(pp, "CHUNK_PAIRS", 60)  # 7 chunks, encoded by 2 worker processes
    kw = dict(vocab_size=80, spm_type="bpe")
    _preprocess(prefix, tmp_path / "one", threads=1, **kw)
    _preprocess(prefix, tmp_path / "two", threads=2, **kw)
    for name in ("train.en.ids", "train.en.idx", "train.de.ids", "train.de.idx"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert len(dataset.DataDir(tmp_path / "two").split("train")) == 400


class _InlineExecutor:
    """A stand-in for the spawned process pool that runs the jobs here, so a spy sees them."""

    def __init__(self, workers: int, mp_context: Any = None) -> None:
        self.workers = workers

    def __enter__(self) -> _InlineExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def submit(self, fn: Any, job: Any) -> Any:
        from concurrent.futures import Future

        future: Future[Any] = Future()
        future.set_result(fn(job))
        return future


def _die(job: Any) -> Any:
    """An encoding worker killed mid-chunk (as by the OOM killer)."""
    os._exit(9)


def test_a_killed_encoding_worker_is_an_error_not_a_hang(tmp_path):
    # multiprocessing.Pool replaced a killed worker and waited forever for its chunk's result.
    from nmt.data.cleaning import Chunk
    from nmt.data.encoding import ChunkJob, _run_jobs

    job = ChunkJob((tmp_path / "a", tmp_path / "b"), Chunk((0, 0), (0, 0), 0), ("m", "m"),
                   "uint16", 10, 9.0)  # fmt: skip
    with pytest.raises(NmtError, match=r"^an encoding worker process died \(killed, or out of "):
        _run_jobs([job] * 3, 2, lambda _: None, work=_die)


@pytest.fixture
def encode_threads(monkeypatch) -> list[Any]:
    """The num_threads of every batch SentencePiece encodes in this process."""
    import sentencepiece as spm

    calls: list[Any] = []
    encode = spm.SentencePieceProcessor.encode

    def spy(self: Any, texts: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(texts, list):
            calls.append(kw.get("num_threads"))
        return encode(self, texts, *args, **kw)

    monkeypatch.setattr(spm.SentencePieceProcessor, "encode", spy)
    return calls


def test_threads_bound_sentencepiece_encoding_threads(tmp_path, monkeypatch, encode_threads):
    # SentencePiece encodes a list on every core unless told: --threads 2 used them all.
    calls = encode_threads
    prefix = _synthetic(tmp_path, n=200)
    valid = _write(tmp_path / "v", ["dog runs"] * 3, ["god snur"] * 3)
    kw = dict(valid=valid, vocab_size=60)
    _preprocess(prefix, tmp_path / "one", threads=3, **kw)  # one chunk: encoded here
    assert calls == [3, 3, 3, 3]  # train then valid, source then target
    calls.clear()
    monkeypatch.setattr(pp, "CHUNK_PAIRS", 60)  # 4 chunks for 2 worker processes
    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", _InlineExecutor)
    _preprocess(prefix, tmp_path / "two", threads=2, **kw)
    assert calls == [1] * 8 + [2, 2]  # a worker process encodes on one thread
    for name in ("train.en.ids", "train.de.idx", "valid.de.ids"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_default_threads_follow_omp_num_threads_then_affinity(
    tmp_path, monkeypatch, encode_threads
):
    # without --threads, preprocessing keeps busy the CPUs nmt.runtime.usable_cpus() names
    calls = encode_threads
    prefix = _synthetic(tmp_path, n=100)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    _preprocess(prefix, tmp_path / "omp", vocab_size=60)  # one chunk: encoded here
    assert calls == [3, 3]
    calls.clear()
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    _preprocess(prefix, tmp_path / "taskset", vocab_size=60)
    assert calls == [2, 2]


def test_gzip_input_and_force_replaces(tmp_path):
    import gzip

    prefix = _synthetic(tmp_path)
    for lang in ("en", "de"):
        plain = Path(f"{prefix}.{lang}")
        Path(f"{plain}.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    out = tmp_path / "d"
    _preprocess(prefix, out, vocab_size=50)
    with pytest.raises(NmtError, match="exists and is not empty"):
        _preprocess(prefix, out, vocab_size=45)
    assert dataset.DataDir(out).manifest["vocab_size"]["src"] == 50
    m = _preprocess(prefix, out, vocab_size=45, force=True)
    assert dataset.DataDir(out).manifest["vocab_size"]["src"] == m["vocab_size"]["src"] == 45
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_manifest_records_options_and_settings(tmp_path):
    prefix = _synthetic(tmp_path, n=100)
    m = _preprocess(prefix, tmp_path / "d", vocab_size=50, max_ratio=2.5, spm_sample=1000)
    assert m["options"] == {
        "max_len": 250, "max_ratio": 2.5, "dedupe": False, "skip_invalid": False,
        "character_coverage": 1.0, "spm_sample": 1000, "lowercase": False,
    }  # fmt: skip
    assert (m["spm_type"], m["requested_vocab_size"], m["src_lang"], m["tgt_lang"]) == (
        "unigram", 50, "en", "de"
    )  # fmt: skip
    assert m["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"threads": 0}, "--threads must be >= 1, got 0"),
        ({"spm_type": "word"}, "--spm-type must be unigram or bpe, got 'word'"),
        ({"tgt_lang": "en"}, "source and target language are both 'en'"),
        ({"max_len": 0}, "--max-len must be >= 1 and --max-ratio >= 1 (got 0, 3.0)"),
        ({"max_ratio": 0.5}, "--max-len must be >= 1 and --max-ratio >= 1 (got 250, 0.5)"),
        ({"vocab_size": 7}, "vocabulary size must be at least 8, got 7"),
        ({"character_coverage": 0.5}, "--character-coverage must be between 0.98 and 1.0, got 0.5"),
        ({"character_coverage": 1.5}, "--character-coverage must be between 0.98 and 1.0, got 1.5"),
    ],
)
def test_config_checks_settings_once(settings, message):
    kw = {"src_lang": "en", "tgt_lang": "de", "train": "corpus", **settings}
    with pytest.raises(NmtError) as e:
        PreprocessConfig(**kw)
    assert str(e.value) == message


def test_bad_valid_or_test_input_fails_before_train_is_cleaned(tmp_path, monkeypatch):
    # these errors came only after cleaning train and learning SentencePiece (hours on a corpus)
    def clean_train(*args: Any) -> None:
        raise AssertionError("train cleaned before the valid/test input was checked")

    monkeypatch.setattr(pp, "clean_train", clean_train)
    train = _synthetic(tmp_path, n=20)
    good = _write(tmp_path / "g", ["dog", "cat"], ["god", "tac"])
    bad = _write(tmp_path / "b", ["dog", b"bad \xff"], ["god", "dab"])
    uneven = _write(tmp_path / "u", ["dog", "cat"], ["god"])
    cases = [
        ({"valid": bad}, f"{bad}.en:2: invalid UTF-8 (invalid start byte at byte 4)"),
        (
            {"valid": good, "tests": [uneven]},
            f"line counts differ: {uneven}.en has 2 lines, {uneven}.de has 1 lines",
        ),
    ]
    for kw, message in cases:
        with pytest.raises(NmtError) as e:
            _preprocess(train, tmp_path / "d", vocab_size=50, **kw)
        assert str(e.value) == message
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".") or p.name == "d"]
    PreprocessConfig(
        "en", "de", train, vocab_size=7, spm_from=ModelDir.at(tmp_path)
    )  # --spm-from's size


def test_config_is_frozen_and_resolves_split_inputs(tmp_path):
    prefix = _synthetic(tmp_path, n=10)
    cfg = PreprocessConfig("en", "de", prefix, valid=prefix, tests=[tmp_path / "syn"])
    assert cfg.tests == (tmp_path / "syn",) and cfg.langs == ("en", "de")
    with pytest.raises(AttributeError):
        cfg.vocab_size = 10  # type: ignore[misc]
    with pytest.raises(NmtError, match="test prefix name 'syn' is ambiguous"):
        PreprocessConfig("en", "de", prefix, tests=[prefix, prefix]).split_inputs()
    assert cfg.split_inputs() == {
        name: (Path(f"{prefix}.en"), Path(f"{prefix}.de")) for name in ("train", "valid", "syn")
    }
