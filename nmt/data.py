"""Preprocessing (clean, learn SentencePiece, encode) and the memory-mapped binary format training reads.

DATA_DIR layout (see DESIGN.md): manifest.json, spm.model (or spm.<lang>.model), and per split and
language `<split>.<lang>.ids` (token ids, no bos/eos) and `<split>.<lang>.idx` (int64 offsets, n+1), so
sentence i is ids[idx[i]:idx[i+1]]. Valid and test splits also keep their raw lines in
`<split>.<lang>.txt`, because BLEU is computed against untokenized references.

Memory stays flat as the corpus grows: train is streamed line by line into cleaned text files,
SentencePiece samples a bounded number of sentences, and encoding runs in worker processes over byte
ranges of the cleaned files, each returning compact numpy arrays.
"""

from __future__ import annotations

import functools
import itertools
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nmt import __version__
from nmt.corpus import sha256_file
from nmt.errors import NmtError
from nmt.textio import decode_line, open_binary

if TYPE_CHECKING:
    from nmt.models.base import VocabInfo

from nmt.vocab import SPECIAL_IDS, Tokenizer, train_spm

FORMAT = "nmt-data/1"
MANIFEST = "manifest.json"
CHUNK_PAIRS = 20_000
DROP_REASONS = ("invalid_utf8", "empty", "duplicate", "too_long", "ratio")
PERCENTILES = (50, 90, 95, 99)

Progress = Callable[[str, int, "int | None"], None]


# ---- reading the binary format ---------------------------------------------------------------


class TokenArray:
    """Variable-length token sequences over one memory-mapped id file: arr[i] is a view, not a copy."""

    def __init__(self, ids_path: Path, idx_path: Path, dtype: str) -> None:
        self.ids_path = ids_path
        self.offsets = _memmap(idx_path, "<i8")
        self.ids = _memmap(ids_path, dtype)
        if len(self.offsets) == 0 or int(self.offsets[-1]) != len(self.ids):
            raise NmtError(f"{ids_path}: corrupt (offsets in {idx_path.name} do not match the ids)")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"sentence {i} out of range ({len(self)} sentences)")
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """Token count of every sentence (int64), for length bucketing without touching the ids."""
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        """Total tokens in the array."""
        return len(self.ids)


@dataclass
class Split:
    """One split of a data folder: aligned source and target token arrays."""

    name: str
    src: TokenArray
    tgt: TokenArray

    def __len__(self) -> int:
        return len(self.src)


def _memmap(path: Path, dtype: str) -> np.ndarray:
    """Map a raw little-endian array read-only; numpy cannot map an empty file, so use an empty array."""
    if not path.is_file():
        raise NmtError(f"{path}: missing from the data folder")
    if path.stat().st_size == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def read_manifest(data_dir: str | Path) -> dict:
    """The manifest of a preprocessed data folder; a wrong folder is a user error."""
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise NmtError(
            f"{data_dir}: not a preprocessed data folder (no {MANIFEST}; run nmt preprocess)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise NmtError(f"{path}: invalid JSON ({e})") from None
    if manifest.get("format") != FORMAT:
        raise NmtError(
            f"{path}: unsupported data format {manifest.get('format')!r} (need {FORMAT})"
        )
    return manifest


def load(data_dir: str | Path, split: str) -> Split:
    """Memory-map one split (train, valid, or a test name) without reading the corpus into memory."""
    data_dir = Path(data_dir)
    m = read_manifest(data_dir)
    if split not in m["splits"]:
        raise NmtError(f"{data_dir}: no split {split!r} (have: {', '.join(m['splits'])})")
    files = m["splits"][split]["files"]
    dtype = np.dtype(m["dtype"]).newbyteorder("<")
    src, tgt = (
        TokenArray(data_dir / files[lang]["ids"], data_dir / files[lang]["idx"], dtype)
        for lang in (m["src_lang"], m["tgt_lang"])
    )
    if len(src) != len(tgt):
        raise NmtError(
            f"{data_dir}: split {split} has {len(src)} source but {len(tgt)} target lines"
        )
    return Split(split, src, tgt)


def tokenizers(data_dir: str | Path) -> tuple[Tokenizer, Tokenizer]:
    """(source, target) tokenizers of a data folder; the same object twice for a joint vocabulary."""
    data_dir = Path(data_dir)
    m = read_manifest(data_dir)
    src = Tokenizer.load(data_dir / m["spm"]["src"])
    tgt = src if m["spm"]["tgt"] == m["spm"]["src"] else Tokenizer.load(data_dir / m["spm"]["tgt"])
    return src, tgt


def vocab_info(data_dir: str | Path) -> VocabInfo:
    """What a model needs to know about the vocabulary of a data folder."""
    from nmt.models.base import VocabInfo  # torch: imported only by callers that build models

    m = read_manifest(data_dir)
    return VocabInfo(
        src_size=m["vocab_size"]["src"], tgt_size=m["vocab_size"]["tgt"], joint=m["joint"]
    )


# ---- preprocessing ---------------------------------------------------------------------------


def resolve_input(prefix: str | Path, lang: str) -> Path:
    """PREFIX.<lang>, else PREFIX.<lang>.gz; neither is a missing-file error naming both."""
    plain = Path(f"{prefix}.{lang}")
    gz = Path(f"{prefix}.{lang}.gz")
    if plain.is_file():
        return plain
    if gz.is_file():
        return gz
    raise NmtError(f"{plain}: file not found (nor {gz.name})")


def _pairs(src: Path, tgt: Path) -> Iterator[tuple[int, bytes, bytes]]:
    """Yield (line number, source bytes, target bytes) in lockstep; unequal line counts are an error."""
    with open_binary(src) as fs, open_binary(tgt) as ft:
        n = 0
        for a, b in itertools.zip_longest(fs, ft):
            if a is None or b is None:
                ns = n + (a is not None) + sum(1 for _ in fs)
                nt = n + (b is not None) + sum(1 for _ in ft)
                raise NmtError(f"line counts differ: {src} has {ns} lines, {tgt} has {nt} lines")
            n += 1
            yield n, a, b


@dataclass
class _Chunk:
    """A byte range of the cleaned train files holding `n` aligned lines, encoded by one worker."""

    src: tuple[int, int]
    tgt: tuple[int, int]
    n: int


def _clean_train(
    src: Path,
    tgt: Path,
    out_src: Path,
    out_tgt: Path,
    dedupe: bool,
    skip_invalid: bool,
    report: Callable[[int], None],
) -> tuple[dict, list[_Chunk]]:
    """Stream train once: check UTF-8, trim, drop empty sides and duplicates, write cleaned text.

    Returns the counts and the byte ranges of CHUNK_PAIRS-line chunks for parallel encoding.
    Duplicates are found by a 64-bit hash of the pair, so memory is ~70 bytes per unique pair.
    """
    counts = dict.fromkeys(DROP_REASONS, 0)
    seen: set[int] = set()
    chunks: list[_Chunk] = []
    pos_s = pos_t = start_s = start_t = 0
    in_chunk = read = 0
    with open(out_src, "wb") as ws, open(out_tgt, "wb") as wt:
        for read, a, b in _pairs(src, tgt):
            if read % 100_000 == 0:
                report(read)
            try:
                decode_line(a, src, read)
                decode_line(b, tgt, read)
            except NmtError as e:
                if not skip_invalid:
                    raise NmtError(f"{e}; --skip-invalid drops such pairs") from None
                counts["invalid_utf8"] += 1
                continue
            a = a.strip()
            b = b.strip()
            if not a or not b:
                counts["empty"] += 1
                continue
            if dedupe:
                key = hash((a, b))
                if key in seen:
                    counts["duplicate"] += 1
                    continue
                seen.add(key)
            ws.write(a + b"\n")
            wt.write(b + b"\n")
            pos_s += len(a) + 1
            pos_t += len(b) + 1
            in_chunk += 1
            if in_chunk == CHUNK_PAIRS:
                chunks.append(_Chunk((start_s, pos_s), (start_t, pos_t), in_chunk))
                start_s, start_t, in_chunk = pos_s, pos_t, 0
    if in_chunk:
        chunks.append(_Chunk((start_s, pos_s), (start_t, pos_t), in_chunk))
    report(read)
    counts["read"] = read
    return counts, chunks


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str) -> Tokenizer:
    """One loaded tokenizer per model file per process (worker processes load it on first use)."""
    return Tokenizer.load(path)


def _read_range(path: Path, span: tuple[int, int]) -> list[str]:
    """The lines in a byte range of a cleaned (valid UTF-8, newline-terminated) file."""
    with open(path, "rb") as f:
        f.seek(span[0])
        data = f.read(span[1] - span[0])
    return data.decode("utf-8").split("\n")[:-1]


def _flatten(seqs: Sequence[list[int]], lengths: np.ndarray, dtype: str) -> np.ndarray:
    """Concatenate id lists into one compact array without building intermediate arrays."""
    return np.fromiter(itertools.chain.from_iterable(seqs), dtype=dtype, count=int(lengths.sum()))


def _encode_chunk(job: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """Encode one chunk of cleaned train pairs and apply the length and ratio filters (in a worker)."""
    src_file, tgt_file, chunk, src_model, tgt_model, dtype, max_len, max_ratio = job
    s_ids = _tokenizer(src_model).sp.encode(_read_range(src_file, chunk.src), out_type=int)
    t_ids = _tokenizer(tgt_model).sp.encode(_read_range(tgt_file, chunk.tgt), out_type=int)
    ls = np.fromiter(map(len, s_ids), dtype=np.int64, count=len(s_ids))
    lt = np.fromiter(map(len, t_ids), dtype=np.int64, count=len(t_ids))
    empty = (ls == 0) | (lt == 0)
    too_long = ~empty & ((ls > max_len) | (lt > max_len))
    ratio = ~empty & ~too_long & (np.maximum(ls, lt) > max_ratio * np.minimum(ls, lt))
    keep = ~(empty | too_long | ratio)
    counts = {"empty": int(empty.sum()), "too_long": int(too_long.sum()), "ratio": int(ratio.sum())}
    kept_s = list(itertools.compress(s_ids, keep))
    kept_t = list(itertools.compress(t_ids, keep))
    return (
        _flatten(kept_s, ls[keep], dtype),
        _flatten(kept_t, lt[keep], dtype),
        ls[keep],
        lt[keep],
        counts,
    )


def _lengths_stats(lengths: np.ndarray) -> dict:
    """Mean, percentiles and max of sentence lengths in tokens (for the manifest and summary)."""
    if len(lengths) == 0:
        return {"mean": 0.0, **{f"p{p}": 0 for p in PERCENTILES}, "max": 0}
    pct = np.percentile(lengths, PERCENTILES)
    return {
        "mean": round(float(lengths.mean()), 2),
        **{f"p{p}": int(round(v)) for p, v in zip(PERCENTILES, pct, strict=True)},
        "max": int(lengths.max()),
    }


def _write_offsets(path: Path, lengths: np.ndarray) -> None:
    """Write n+1 int64 offsets so sentence i is ids[idx[i]:idx[i+1]]."""
    offsets = np.zeros(len(lengths) + 1, dtype="<i8")
    np.cumsum(lengths, out=offsets[1:])
    offsets.tofile(path)


class _SplitWriter:
    """Appends encoded sentences of one split and language to `.ids`, collecting lengths for `.idx`."""

    def __init__(self, out_dir: Path, split: str, lang: str, dtype: str) -> None:
        self.ids_name, self.idx_name = f"{split}.{lang}.ids", f"{split}.{lang}.idx"
        self.out_dir, self.dtype = out_dir, dtype
        self.f = open(out_dir / self.ids_name, "wb")
        self.lengths: list[np.ndarray] = []

    def append(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Add a block of already-flattened ids with their per-sentence lengths."""
        flat.astype(self.dtype, copy=False).tofile(self.f)
        self.lengths.append(lengths)

    def close(self) -> tuple[int, np.ndarray]:
        """Finish the files; return (sentences, lengths)."""
        self.f.close()
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int64)
        _write_offsets(self.out_dir / self.idx_name, lengths)
        return len(lengths), lengths


def _encode_train(
    tmp: Path,
    langs: tuple[str, str],
    clean: tuple[Path, Path],
    chunks: list[_Chunk],
    models: tuple[Path, Path],
    dtype: str,
    max_len: int,
    max_ratio: float,
    threads: int,
    report: Callable[[int], None],
) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """Encode the cleaned train text chunk by chunk on `threads` processes, in corpus order."""
    writers = [_SplitWriter(tmp, "train", lang, dtype) for lang in langs]
    jobs = [(*clean, c, str(models[0]), str(models[1]), dtype, max_len, max_ratio) for c in chunks]
    counts = {"empty": 0, "too_long": 0, "ratio": 0}
    done = 0
    pool = None
    if threads > 1 and len(jobs) > 1:
        pool = multiprocessing.get_context("spawn").Pool(min(threads, len(jobs)))
        results = pool.imap(_encode_chunk, jobs)
    else:
        results = map(_encode_chunk, jobs)
    try:
        for job, (fs, ft, ls, lt, c) in zip(jobs, results, strict=True):
            writers[0].append(fs, ls)
            writers[1].append(ft, lt)
            for k, v in c.items():
                counts[k] += v
            done += job[2].n
            report(done)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    (_, ls), (_, lt) = (w.close() for w in writers)
    return counts, (ls, lt)


def _encode_eval(
    tmp: Path,
    split: str,
    langs: tuple[str, str],
    paths: tuple[Path, Path],
    toks: tuple[Tokenizer, Tokenizer],
    dtype: str,
    threads: int,
) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
    """Encode a valid/test split without dropping lines, keeping its raw lines for scoring."""
    writers = [_SplitWriter(tmp, split, lang, dtype) for lang in langs]
    texts = [open(tmp / f"{split}.{lang}.txt", "w", encoding="utf-8") for lang in langs]
    try:
        pairs = _pairs(*paths)
        while block := list(itertools.islice(pairs, CHUNK_PAIRS)):
            for side in (0, 1):
                raw = [decode_line(p[side + 1], paths[side], p[0]).rstrip("\r\n") for p in block]
                texts[side].write("".join(line + "\n" for line in raw))
                ids = toks[side].encode_batch([line.strip() for line in raw], threads=threads)
                lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
                writers[side].append(_flatten(ids, lengths, dtype), lengths)
    finally:
        for f in texts:
            f.close()
    (n, ls), (_, lt) = (w.close() for w in writers)
    return n, (ls, lt)


def _split_entry(
    langs: tuple[str, str],
    inputs: tuple[Path, Path],
    lengths: tuple[np.ndarray, np.ndarray],
    text: bool,
    split: str,
) -> dict:
    """The manifest record of one split: files, input checksums, token counts, length stats."""
    files = {}
    for lang, path in zip(langs, inputs, strict=True):
        files[lang] = {
            "input": str(path),
            "sha256": sha256_file(path),
            "ids": f"{split}.{lang}.ids",
            "idx": f"{split}.{lang}.idx",
        }
        if text:
            files[lang]["text"] = f"{split}.{lang}.txt"
    return {
        "files": files,
        "tokens": {lang: int(x.sum()) for lang, x in zip(langs, lengths, strict=True)},
        "lengths": {lang: _lengths_stats(x) for lang, x in zip(langs, lengths, strict=True)},
    }


def _check_out_dir(out_dir: Path, force: bool) -> None:
    """Refuse to overwrite results unless asked to."""
    if out_dir.exists() and not out_dir.is_dir():
        raise NmtError(f"{out_dir}: exists and is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise NmtError(f"{out_dir}: exists and is not empty (use --force to replace it)")


def _replace_dir(tmp: Path, out_dir: Path) -> None:
    """Move the finished temporary folder into place, replacing an old one only at the very end."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it private; the result should look like any folder
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, old / "d")
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _stderr_progress() -> Progress:
    """Plain one-line-per-step progress for library callers that pass neither progress nor quiet."""
    started: dict[str, float] = {}

    def report(step: str, done: int, total: int | None) -> None:
        started.setdefault(step, time.perf_counter())
        if total is not None and done >= total:
            secs = time.perf_counter() - started[step]
            print(f"preprocess: {step}: {done:,} in {secs:.1f}s", file=sys.stderr)

    return report


def available_cpus() -> int:
    """CPUs this process may use (affinity-aware where the OS tells us)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _test_names(tests: Sequence[str | Path]) -> list[str]:
    """Split names from test prefixes' basenames; they must be distinct and not train/valid."""
    names = [Path(t).name for t in tests]
    for name in names:
        if name in ("train", "valid") or names.count(name) > 1:
            raise NmtError(
                f"test prefix name {name!r} is ambiguous (test names must be distinct "
                "and not 'train' or 'valid')"
            )
    return names


def preprocess(
    src_lang: str,
    tgt_lang: str,
    train: str | Path,
    out_dir: str | Path,
    valid: str | Path | None = None,
    tests: Sequence[str | Path] = (),
    vocab_size: int = 8000,
    spm_type: str = "unigram",
    joint: bool = True,
    max_len: int = 250,
    max_ratio: float = 3.0,
    dedupe: bool = False,
    threads: int | None = None,
    force: bool = False,
    skip_invalid: bool = False,
    quiet: bool = False,
    progress: Progress | None = None,
    character_coverage: float = 1.0,
    spm_sample: int = 500_000,
) -> dict:
    """Clean train, learn SentencePiece, encode every split into DATA_DIR; return the manifest.

    Everything is built in a temporary folder beside `out_dir` and renamed into place at the end,
    so an error leaves nothing behind. `progress(step, done, total)` is called during long steps.
    """
    out_dir = Path(out_dir)
    langs = (src_lang, tgt_lang)
    if src_lang == tgt_lang:
        raise NmtError(f"source and target language are both {src_lang!r}")
    if max_len < 1 or max_ratio < 1.0:
        raise NmtError(f"--max-len must be >= 1 and --max-ratio >= 1 (got {max_len}, {max_ratio})")
    threads = threads or available_cpus()
    report: Progress = (lambda *_: None) if quiet else (progress or _stderr_progress())
    split_inputs = {"train": tuple(resolve_input(train, lang) for lang in langs)}
    if valid is not None:
        split_inputs["valid"] = tuple(resolve_input(valid, lang) for lang in langs)
    for name, prefix in zip(_test_names(tests), tests, strict=True):
        split_inputs[name] = tuple(resolve_input(prefix, lang) for lang in langs)
    _check_out_dir(out_dir, force)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        manifest = _build(
            tmp, langs, split_inputs, vocab_size, spm_type, joint, max_len, max_ratio, dedupe,
            threads, skip_invalid, report, character_coverage, spm_sample,
        )  # fmt: skip
        _check_out_dir(out_dir, force)
        _replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _build(
    tmp: Path,
    langs: tuple[str, str],
    split_inputs: dict[str, tuple[Path, Path]],
    vocab_size: int,
    spm_type: str,
    joint: bool,
    max_len: int,
    max_ratio: float,
    dedupe: bool,
    threads: int,
    skip_invalid: bool,
    report: Progress,
    character_coverage: float,
    spm_sample: int,
) -> dict:
    """All preprocessing steps inside the temporary folder `tmp`."""
    train_in = split_inputs["train"]
    clean = (tmp / f".clean.{langs[0]}", tmp / f".clean.{langs[1]}")
    step = "clean train"
    report(step, 0, None)
    counts, chunks = _clean_train(
        *train_in, *clean, dedupe, skip_invalid, lambda n: report(step, n, None)
    )
    remaining = sum(c.n for c in chunks)
    report(step, counts["read"], counts["read"])
    if remaining == 0:
        raise NmtError(_no_pairs_message(train_in, counts))

    step = "train sentencepiece"
    report(step, 0, 1)
    spm_args = dict(
        vocab_size=vocab_size, model_type=spm_type, character_coverage=character_coverage,
        input_sentence_size=spm_sample, threads=threads,
    )  # fmt: skip
    if joint:
        model = train_spm(list(clean), tmp / "spm", **spm_args)
        models = (model, model)
    else:
        models = tuple(
            train_spm(c, tmp / f"spm.{lang}", **spm_args)
            for c, lang in zip(clean, langs, strict=True)
        )
    report(step, 1, 1)
    toks = tuple(Tokenizer.load(m) for m in models)
    sizes = [t.vocab_size for t in toks]
    dtype = "<u2" if max(sizes) <= 65535 else "<i4"

    step = "encode train"
    report(step, 0, remaining)
    enc_counts, train_lengths = _encode_train(
        tmp, langs, clean, chunks, models, dtype, max_len, max_ratio, threads,
        lambda n: report(step, n, remaining),
    )  # fmt: skip
    for k, v in enc_counts.items():
        counts[k] += v
    for c in clean:
        c.unlink()
    kept = len(train_lengths[0])
    if kept == 0:
        raise NmtError(_no_pairs_message(train_in, counts))
    splits = {"train": _split_entry(langs, train_in, train_lengths, False, "train")}
    splits["train"].update(
        lines_read=counts["read"],
        kept=kept,
        dropped={k: counts[k] for k in DROP_REASONS},
    )
    for split, paths in split_inputs.items():
        if split == "train":
            continue
        step = f"encode {split}"
        report(step, 0, None)
        n, lengths = _encode_eval(tmp, split, langs, paths, toks, dtype, threads)
        report(step, n, n)
        splits[split] = _split_entry(langs, paths, lengths, True, split)
        splits[split].update(lines_read=n, kept=n, dropped={})

    manifest = {
        "format": FORMAT,
        "nmt_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "src_lang": langs[0],
        "tgt_lang": langs[1],
        "joint": joint,
        "spm_type": spm_type,
        "spm": {"src": models[0].name, "tgt": models[1].name},
        "vocab_size": {"src": sizes[0], "tgt": sizes[1]},
        "requested_vocab_size": vocab_size,
        "special_ids": dict(SPECIAL_IDS),
        "dtype": np.dtype(dtype).name,
        "options": {
            "max_len": max_len,
            "max_ratio": max_ratio,
            "dedupe": dedupe,
            "skip_invalid": skip_invalid,
            "character_coverage": character_coverage,
            "spm_sample": spm_sample,
        },
        "splits": splits,
    }
    with open(tmp / MANIFEST, "w", encoding="utf-8") as f:  # tmp is renamed into place as a whole
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return manifest


def _no_pairs_message(train_in: tuple[Path, Path], counts: dict) -> str:
    """Explain an empty training set by the drop reasons that emptied it."""
    reasons = ", ".join(f"{k} {counts[k]}" for k in DROP_REASONS if counts[k])
    return (
        f"no training pairs left after cleaning {train_in[0]} / {train_in[1]} "
        f"({counts['read']} read; dropped: {reasons or 'none'})"
    )
