"""Encoding text into the binary DATA_DIR format: `<split>.<lang>.ids` and `.idx` (read by nmt.dirs.data).

Train is encoded in worker processes over byte ranges of the cleaned files, each returning compact
numpy arrays, and filtered by length and length ratio; valid/test splits keep every line.
"""

from __future__ import annotations

import array
import collections
import dataclasses
import functools
import itertools
import multiprocessing
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from nmt.data.cleaning import Chunk, read_pairs
from nmt.data.model_tokenizer import imported_tokenizers, unknown_lines
from nmt.data.vocab import Tokenizer
from nmt.errors import NmtError
from nmt.textio import decode_line

# (source ids, target ids, source lengths, target lengths, drop counts) of one chunk
Encoded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, int]]


@dataclass(frozen=True)
class ChunkJob:
    """One worker's task: a chunk of the cleaned train files, the models and the length filter."""

    clean: tuple[Path, Path]
    chunk: Chunk
    models: tuple[str, str]
    dtype: str
    max_len: int
    max_ratio: float
    threads: int = 1  # SentencePiece's encoding threads (its default is every core, not --threads)
    imported: tuple[str, str] | None = None  # --tokenizer-from an imported model: (folder, files)


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


def flatten(seqs: Sequence[Sequence[int]], lengths: np.ndarray, dtype: npt.DTypeLike) -> np.ndarray:
    """Concatenate id lists into one compact array without building intermediate arrays."""
    return np.fromiter(itertools.chain.from_iterable(seqs), dtype=dtype, count=int(lengths.sum()))


def seq_lengths(seqs: Sequence[Sequence[int]]) -> np.ndarray:
    """Per-sentence lengths as int64."""
    return np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))


def job_tokenizers(job: ChunkJob) -> tuple[Tokenizer, Tokenizer]:
    """The (source, target) tokenizers a job encodes with (loaded once per process)."""
    if job.imported is not None:
        return imported_tokenizers(*job.imported)
    return _tokenizer(job.models[0]), _tokenizer(job.models[1])


def encode_chunk(job: ChunkJob) -> Encoded:
    """Encode one chunk of cleaned train pairs and apply the length and ratio filters (in a
    worker); an imported model's tokenizer also counts the kept lines with unknown pieces."""
    toks = job_tokenizers(job)
    texts = _read_range(job.clean[0], job.chunk.src), _read_range(job.clean[1], job.chunk.tgt)
    s_ids = toks[0].encode_batch(texts[0], threads=job.threads)
    t_ids = toks[1].encode_batch(texts[1], threads=job.threads)
    ls, lt = seq_lengths(s_ids), seq_lengths(t_ids)
    empty = (ls == 0) | (lt == 0)
    too_long = ~empty & ((ls > job.max_len) | (lt > job.max_len))
    ratio = ~empty & ~too_long & (np.maximum(ls, lt) > job.max_ratio * np.minimum(ls, lt))
    keep = ~(empty | too_long | ratio)
    counts = {"empty": int(empty.sum()), "too_long": int(too_long.sum()), "ratio": int(ratio.sum())}
    kept_s = list(itertools.compress(s_ids, keep))
    kept_t = list(itertools.compress(t_ids, keep))
    if job.imported is not None:
        for side, kept in (("src", kept_s), ("tgt", kept_t)):
            lines = list(itertools.compress(texts[side == "tgt"], keep))
            counts[f"unknown_{side}"] = unknown_lines(toks[side == "tgt"], lines, kept)
    return (
        flatten(kept_s, ls[keep], job.dtype),
        flatten(kept_t, lt[keep], job.dtype),
        ls[keep],
        lt[keep],
        counts,
    )


class SplitWriter:
    """Appends encoded sentences of one split and language to `.ids` and their end offsets to
    `.idx` as they come, keeping only the lengths (4 bytes a sentence) in memory."""

    def __init__(self, out_dir: Path, split: str, lang: str, dtype: str) -> None:
        self.ids_name, self.idx_name = f"{split}.{lang}.ids", f"{split}.{lang}.idx"
        self.out_dir, self.dtype = out_dir, dtype
        self.f: BinaryIO = open(out_dir / self.ids_name, "wb")
        self.idx: BinaryIO = open(out_dir / self.idx_name, "wb")
        np.zeros(1, dtype="<i8").tofile(self.idx)  # n+1 offsets: sentence i is ids[idx[i]:idx[i+1]]
        self.end = 0
        self.lengths = array.array("I")  # C unsigned int: numpy's uintc

    def append(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Add a block of already-flattened ids with their per-sentence lengths."""
        flat.astype(self.dtype, copy=False).tofile(self.f)
        ends = np.cumsum(lengths, dtype="<i8")
        ends += self.end
        ends.tofile(self.idx)
        self.end = int(ends[-1]) if len(ends) else self.end
        self.lengths.frombytes(np.asarray(lengths, dtype=np.uintc).tobytes())

    def close(self) -> tuple[int, np.ndarray]:
        """Finish the files; return (sentences, lengths as uintc, a view of the kept array)."""
        self.f.close()
        self.idx.close()
        lengths = np.frombuffer(self.lengths, dtype=np.uintc)
        return len(lengths), lengths


def _run_jobs(
    jobs: list[ChunkJob],
    threads: int,
    consume: Callable[[Encoded], None],
    work: Callable[[ChunkJob], Encoded] = encode_chunk,
) -> None:
    """Encode the jobs in order, on `threads` spawned processes of one encoding thread each when
    there is more than one job, else here on `threads` threads (so --threads bounds the cores).
    A worker that dies (the OOM killer, kill -9) is an error, not a wait forever (Pool's)."""
    if threads <= 1 or len(jobs) <= 1:
        for result in map(work, (dataclasses.replace(j, threads=threads) for j in jobs)):
            consume(result)
        return
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    workers = min(threads, len(jobs))
    ahead: collections.deque[Future[Encoded]] = collections.deque()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        try:
            for job in jobs:
                ahead.append(pool.submit(work, dataclasses.replace(job, threads=1)))
                if len(ahead) > 2 * workers:  # results wait in order, a bounded number of them
                    consume(ahead.popleft().result())
            while ahead:
                consume(ahead.popleft().result())
        except BrokenProcessPool:
            raise NmtError(
                "an encoding worker process died (killed, or out of memory?); rerun with fewer "
                "--threads"
            ) from None
        finally:
            for future in ahead:
                future.cancel()


def encode_train(
    tmp: Path,
    langs: tuple[str, str],
    jobs: list[ChunkJob],
    dtype: str,
    threads: int,
    report: Callable[[int], None],
) -> tuple[dict[str, int], tuple[np.ndarray, np.ndarray]]:
    """Encode the cleaned train text chunk by chunk on `threads` processes, in corpus order."""
    writers = [SplitWriter(tmp, "train", lang, dtype) for lang in langs]
    counts = {"empty": 0, "too_long": 0, "ratio": 0}
    done = iter(itertools.accumulate(job.chunk.n for job in jobs))

    def consume(result: Encoded) -> None:
        fs, ft, ls, lt, c = result
        writers[0].append(fs, ls)
        writers[1].append(ft, lt)
        for k, v in c.items():
            counts[k] = counts.get(k, 0) + v
        report(next(done))

    _run_jobs(jobs, threads, consume)
    (_, ls), (_, lt) = (w.close() for w in writers)
    return counts, (ls, lt)


def _blocks(
    paths: tuple[Path, Path], size: int, keep: Collection[int] | None = None
) -> Iterator[tuple[list[int], list[bytes], list[bytes]]]:
    """Line numbers, source lines and target lines of an aligned pair of files, `size` at a time
    (only the lines numbered in `keep`, when given)."""
    pairs: Iterator[tuple[int, bytes, bytes]] = read_pairs(*paths)
    if keep is not None:
        pairs = (p for p in pairs if p[0] in keep)
    while block := list(itertools.islice(pairs, size)):
        nums, src, tgt = zip(*block, strict=True)
        yield list(nums), list(src), list(tgt)


def _decode_all(raws: Iterable[bytes], nums: list[int], path: Path) -> list[str]:
    """Strict UTF-8 lines without their newline; an error names the file and line."""
    return [decode_line(r, path, n).rstrip("\r\n") for r, n in zip(raws, nums, strict=True)]


def check_eval(paths: tuple[Path, Path], block: int) -> int:
    """Raise the input errors encode_eval would (invalid UTF-8, line counts differ) before the
    long steps run: valid and test files are small, train is not. Returns the line count."""
    n = 0
    for nums, *sides in _blocks(paths, block):
        for side, raws in enumerate(sides):
            _decode_all(raws, nums, paths[side])
        n += len(nums)
    return n


def encode_eval(
    tmp: Path,
    split: str,
    langs: tuple[str, str],
    paths: tuple[Path, Path],
    toks: tuple[Tokenizer, Tokenizer],
    dtype: str,
    threads: int,
    block: int,
    lowercase: bool = False,
    keep: Collection[int] | None = None,
    unknown: list[int] | None = None,
) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
    """Encode a valid/test split without dropping lines (or only the lines numbered in `keep`,
    a sample), keeping its raw lines for scoring (lowercased with `lowercase`, so validation
    BLEU compares like with like); `unknown` [source, target] counts the lines with pieces an
    imported model's vocabulary lacks."""
    writers = [SplitWriter(tmp, split, lang, dtype) for lang in langs]
    texts = [open(tmp / f"{split}.{lang}.txt", "w", encoding="utf-8") for lang in langs]
    try:
        for nums, *sides in _blocks(paths, block, keep):
            for side, raws in enumerate(sides):
                raw = _decode_all(raws, nums, paths[side])
                if lowercase:
                    raw = [line.lower() for line in raw]
                texts[side].write("".join(line + "\n" for line in raw))
                stripped = [line.strip() for line in raw]
                ids = toks[side].encode_batch(stripped, threads=threads)
                if unknown is not None:
                    unknown[side] += unknown_lines(toks[side], stripped, ids)
                lengths = seq_lengths(ids)
                writers[side].append(flatten(ids, lengths, dtype), lengths)
    finally:
        for f in texts:
            f.close()
    (n, ls), (_, lt) = (w.close() for w in writers)
    return n, (ls, lt)
