"""nmt.dirs.data: the binary format reloading to exactly the ids the tokenizer produces, token
arrays read by sentence (threads, pickling, memory that does not grow), and clear errors on a wrong or
corrupt data folder."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from nmt.data.preprocess import PreprocessConfig, preprocess
from nmt.dirs import data as dataset
from nmt.errors import NmtError


def test_binary_format_reloads_to_encoded_ids(multi30k, tmp_path):
    n = 500
    for lang in ("en", "de"):
        lines = itertools.islice(open(multi30k / f"train.{lang}", encoding="utf-8"), n)
        (tmp_path / f"tr.{lang}").write_text("".join(lines), encoding="utf-8")
    cfg = PreprocessConfig(
        "en", "de", tmp_path / "tr", valid=multi30k / "val",
        tests=[multi30k / "test_2016_flickr"], vocab_size=400, threads=1,
    )  # fmt: skip
    m = preprocess(cfg, tmp_path / "d", quiet=True)
    assert set(m["splits"]) == {"train", "valid", "test_2016_flickr"}
    assert (
        m["dtype"] == "uint16"
        and m["joint"]
        and m["spm"] == {"src": "spm.model", "tgt": "spm.model"}
    )
    src_tok, tgt_tok = dataset.DataDir(tmp_path / "d").tokenizers
    assert src_tok is tgt_tok
    for split, prefix in (("valid", multi30k / "val"), ("test_2016_flickr", None)):
        prefix = prefix or multi30k / split
        loaded = dataset.DataDir(tmp_path / "d").split(split)
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
    train = dataset.DataDir(tmp_path / "d").split("train")
    assert len(train) == m["splits"]["train"]["kept"]
    assert isinstance(train.src.ids, np.memmap)  # bulk reads still map the file
    assert train.src.lengths.dtype == np.int32
    got = [g.tolist() for g in train.src.rows([3, 0, 3])]
    assert got == [train.src[3].tolist(), train.src[0].tolist(), train.src[3].tolist()]
    info = dataset.DataDir(tmp_path / "d").vocab_info
    assert (info.src_size, info.tgt_size, info.joint) == (400, 400, True)
    sha = hashlib.sha256((tmp_path / "tr.en").read_bytes()).hexdigest()
    assert m["splits"]["train"]["files"]["en"]["sha256"] == sha
    assert dataset.DataDir(tmp_path / "d").manifest == json.loads(json.dumps(m))
    with pytest.raises(NmtError, match=r"no split 'test' \(have: train, valid, test_2016_flickr\)"):
        dataset.DataDir(tmp_path / "d").split("test")


def test_token_array_int32_and_corruption(tmp_path):
    ids = np.array([5, 70000, 3, 9], dtype="<i4")
    ids.tofile(tmp_path / "a.ids")
    np.array([0, 2, 2, 4], dtype="<i8").tofile(tmp_path / "a.idx")
    arr = dataset.TokenArray(tmp_path / "a.ids", tmp_path / "a.idx", "<i4")
    assert len(arr) == 3 and arr[0].tolist() == [5, 70000] and arr[1].tolist() == []
    assert arr[-1].tolist() == [3, 9] and arr.lengths.tolist() == [2, 0, 2]
    with pytest.raises(IndexError):
        arr[3]
    np.array([0, 2, 5], dtype="<i8").tofile(tmp_path / "a.idx")
    with pytest.raises(NmtError, match="corrupt"):
        dataset.TokenArray(tmp_path / "a.ids", tmp_path / "a.idx", "<i4")


@pytest.mark.parametrize("cut", ["ids", "idx"])
def test_a_truncated_file_is_named(tmp_path, cut):
    # numpy's "Size of available data is not a multiple of the data-type size" named no file
    np.array([5, 6, 7], dtype="<u2").tofile(tmp_path / "a.ids")
    np.array([0, 1, 3], dtype="<i8").tofile(tmp_path / "a.idx")
    path = tmp_path / f"a.{cut}"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(NmtError) as e:
        dataset.TokenArray(tmp_path / "a.ids", tmp_path / "a.idx", "<u2")
    size, itemsize = (5, 2) if cut == "ids" else (23, 8)
    assert str(e.value) == (
        f"{path}: corrupt ({size} bytes is not a whole number of {itemsize}-byte values; "
        "run nmt preprocess again)"
    )


def test_token_array_empty_and_missing_files(tmp_path):
    (tmp_path / "e.ids").write_bytes(b"")
    np.array([0, 0], dtype="<i8").tofile(tmp_path / "e.idx")
    arr = dataset.TokenArray(tmp_path / "e.ids", tmp_path / "e.idx", "<u2")
    assert len(arr) == 1 and arr[0].tolist() == [] and arr.num_tokens == 0
    with pytest.raises(NmtError, match=r"nope.idx: missing from the data folder"):
        dataset.TokenArray(tmp_path / "e.ids", tmp_path / "nope.idx", "<u2")


def test_read_manifest_of_wrong_folder(tmp_path):
    with pytest.raises(NmtError, match=r"not a preprocessed data folder \(no manifest.json"):
        dataset.DataDir(tmp_path)


def test_read_manifest_invalid_json_and_format(tmp_path):
    (tmp_path / "manifest.json").write_text("{", encoding="utf-8")
    with pytest.raises(NmtError, match=r"manifest.json: invalid JSON"):
        dataset.DataDir(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "nmt-data/0"}', encoding="utf-8")
    with pytest.raises(NmtError, match=r"unsupported data format 'nmt-data/0' \(need nmt-data/1\)"):
        dataset.DataDir(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "nmt-data/2"}', encoding="utf-8")
    with pytest.raises(NmtError) as e:
        dataset.DataDir(tmp_path)
    assert str(e.value) == (
        f"{tmp_path / 'manifest.json'}: data format 2; this nmt reads formats 1 to 1 (a newer nmt "
        "wrote it)"
    )


def _random_array(
    tmp_path: Path, n: int, seed: int = 0
) -> tuple[dataset.TokenArray, list[list[int]]]:
    """A TokenArray of n random sentences (uint16 ids) and the sentences as lists."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 60, n)
    ids = rng.integers(0, 8000, int(lengths.sum())).astype("<u2")
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype("<i8")
    ids.tofile(tmp_path / "r.ids")
    offsets.tofile(tmp_path / "r.idx")
    sents = [ids[a:b].tolist() for a, b in itertools.pairwise(offsets.tolist())]
    return dataset.TokenArray(tmp_path / "r.ids", tmp_path / "r.idx", "<u2"), sents


def test_token_array_threads_and_pickling_read_the_same_sentences(tmp_path):
    """Validation reads batches on several threads; a pickled array opens its own files on first
    use, and threads racing to open them must not close a descriptor another one reads from."""
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    arr, sents = _random_array(tmp_path, 2000)
    for _ in range(5):
        fresh = pickle.loads(pickle.dumps(arr))  # no open files yet
        assert fresh._files == {}
        chunks = [list(range(k, 2000, 8)) for k in range(8)]
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(fresh.rows, chunks))
        for chunk, rows in zip(chunks, results, strict=True):
            assert [r.tolist() for r in rows] == [sents[i] for i in chunk]
        fresh.close()
    assert arr.lengths.tolist() == [len(x) for x in sents]
    with pytest.raises(NmtError, match=r"r.idx: no sentence 2000"):
        arr.rows([2000])


def _rss_file_kb() -> int:
    """File-backed resident memory of this process (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc only")
@pytest.mark.slow
def test_random_reads_do_not_grow_resident_memory(tmp_path):
    """Training reads random sentences all run long; a memory map would keep every page it
    touched resident and counted in RSS (here nearly all 27 MB of the two files)."""
    arr, sents = _random_array(tmp_path, 400_000, seed=1)  # ~24 MB of ids, 3 MB of offsets
    before = _rss_file_kb()
    rng = np.random.default_rng(2)
    picks = rng.integers(0, len(arr), 20_000).tolist()
    rows = arr.rows(picks)
    assert [r.tolist() for r in rows[:100]] == [sents[i] for i in picks[:100]]
    assert _rss_file_kb() - before < 2_000  # kB: nothing of the files stays mapped
