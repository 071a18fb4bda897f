#!/usr/bin/env python3
"""Write an N-pair German-English corpus shaped like WMT news: real pairs resampled, words noised.

    python scripts/make_scale_corpus.py --pairs 10M --out work/scale/10M/corpus

writes PREFIX.de and PREFIX.en: plain UTF-8, one sentence a line, words separated by one space
(with --gzip, PREFIX.de.gz and PREFIX.en.gz at compression level 1, no time stamp). Each pair is a
pair of wmt-news-de-en train drawn with replacement, then each word of each side is, with
probability --noise, dropped, doubled, swapped with the next word or replaced by a word drawn from
that side's text (by frequency). Lengths therefore follow the real corpus, SentencePiece sees real
words, and pairs are mostly unique. The output is a pure function of (--pairs, --seed, --noise).

Memory does not grow with N: the ~31k source pairs are held as word-id arrays and the corpus is
drawn, noised and written CHUNK pairs at a time with vectorised numpy draws. Each file is written
beside its name and renamed into place when complete, so a corpus of that name is a whole one.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import gzip
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import numpy as np

from nmt.errors import NmtError

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "corpora/wmt-news-de-en"
MIRROR = REPO.parent / "shared/corpora"
LANGS = ("de", "en")
CHUNK = 10_000  # pairs drawn, noised and written at a time (part of what the seed reproduces)
OPS = 4  # drop, double, swap with the next word, replace
SUFFIXES = {"": 1, "k": 1_000, "m": 1_000_000}


def parse_count(text: str) -> int:
    """A pair count as people write it: 20000, 20k, 1M, 1.5M (argparse's type for --pairs)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text.replace("_", ""))
    if m is None:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (examples: 20000, 20k, 1M)")
    value = round(float(m.group(1)) * SUFFIXES[m.group(2).lower()])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


@dataclass(frozen=True)
class Side:
    """One language of the source pairs as arrays, so a chunk's draws are numpy operations.

    Word i is spelled twice in `text`: variant 2 i ends in a space, variant 2 i + 1 in a newline
    (the last word of a line); a line block is then one gather of bytes, not a Python join.
    """

    text: np.ndarray  # uint8: every variant's UTF-8 bytes, concatenated
    offsets: np.ndarray  # int64: where each variant begins in `text`
    sizes: np.ndarray  # int64: each variant's size in bytes
    tokens: np.ndarray  # int64 word ids of every sentence, concatenated
    starts: np.ndarray  # int64: where each sentence begins in `tokens`
    lengths: np.ndarray  # int64: words per sentence

    @classmethod
    def build(
        cls, ids: dict[str, int], tokens: array.array[int], lengths: array.array[int]
    ) -> Side:
        """The arrays of numbered words (`ids`), their sentences' ids and lengths."""
        variants = [w.encode("utf-8") + end for w in ids for end in (b" ", b"\n")]
        sizes = np.fromiter(map(len, variants), dtype=np.int64, count=len(variants))
        text = np.frombuffer(b"".join(variants), dtype=np.uint8)
        lens = np.frombuffer(lengths, dtype=np.int64)
        starts = np.cumsum(lens) - lens
        return cls(text, np.cumsum(sizes) - sizes, sizes, np.array(tokens), starts, lens.copy())

    def render(self, variants: np.ndarray) -> bytes:
        """The bytes of a sequence of word variants."""
        sizes = self.sizes[variants]
        ends = np.cumsum(sizes)
        where = np.repeat((self.offsets[variants] - (ends - sizes)).astype(np.int32), sizes)
        where += np.arange(len(where), dtype=np.int32)
        return self.text[where].tobytes()


def _lines(path: Path) -> list[str]:
    """The lines of a text file split at newlines only (as nmt preprocess reads them)."""
    text = path.read_text("utf-8")
    return text.removesuffix("\n").split("\n") if text else []


def load_sources(corpus: Path) -> tuple[Side, Side]:
    """The train pairs of wmt-news-de-en with a word on both sides (fetched if missing)."""
    if not all((corpus / f"train.{lang}").is_file() for lang in LANGS):
        from nmt.data.corpus import fetch

        fetch("wmt-news-de-en", corpus, mirror=MIRROR if MIRROR.is_dir() else None, quiet=True)
    de, en = (_lines(corpus / f"train.{lang}") for lang in LANGS)
    if len(de) != len(en):
        raise NmtError(f"{corpus}: train.de has {len(de)} lines, train.en {len(en)}")
    ids: tuple[dict[str, int], dict[str, int]] = ({}, {})
    tokens = (array.array("q"), array.array("q"))
    lengths = (array.array("q"), array.array("q"))
    for pair in zip(de, en, strict=True):
        words = pair[0].split(), pair[1].split()
        if not (words[0] and words[1]):
            continue
        for side in (0, 1):
            tokens[side].extend(ids[side].setdefault(w, len(ids[side])) for w in words[side])
            lengths[side].append(len(words[side]))
    de_side, en_side = (Side.build(ids[i], tokens[i], lengths[i]) for i in (0, 1))
    return de_side, en_side


def noised(side: Side, idx: np.ndarray, rng: np.random.Generator, p: float) -> bytes:
    """Sentences `idx` of `side` as lines, each word noised with probability `p` (no line empty)."""
    lens = side.lengths[idx]
    total = int(lens.sum())
    sent = np.repeat(np.arange(len(idx)), lens)  # the sentence of each word
    pos = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)  # its place in the sentence
    tok = side.tokens[np.repeat(side.starts[idx], lens) + pos]
    u = rng.random(total)
    op = np.where(u < p, (u * (OPS / p)).astype(np.int64), -1) if p > 0 else np.full(total, -1)
    swap = (op == 2) & (pos < lens[sent] - 1)
    swap[1:] &= ~swap[:-1]  # no word takes part in two swaps
    j = np.flatnonzero(swap)
    tok[j], tok[j + 1] = tok[j + 1], tok[j].copy()
    replace = np.flatnonzero(op == 3)
    tok[replace] = side.tokens[rng.integers(0, len(side.tokens), len(replace))]
    rep = 1 + (op == 1).astype(np.int64) - (op == 0)
    emptied = np.bincount(sent, weights=rep, minlength=len(idx)) == 0
    rep[(op == 0) & emptied[sent]] = 1  # a sentence keeps its words rather than lose them all
    variants = 2 * np.repeat(tok, rep)
    new_lens = np.bincount(sent, weights=rep, minlength=len(idx)).astype(np.int64)
    variants[np.cumsum(new_lens) - 1] += 1  # the last word of each line ends it
    return side.render(variants)


def chunks(
    sources: tuple[Side, Side], pairs: int, seed: int, noise: float
) -> Iterator[tuple[bytes, bytes]]:
    """The corpus as (German lines, English lines) blocks of CHUNK pairs, from one seeded stream."""
    rng = np.random.default_rng(seed)
    n_sources = len(sources[0].lengths)
    for start in range(0, pairs, CHUNK):
        idx = rng.integers(0, n_sources, min(CHUNK, pairs - start))
        yield noised(sources[0], idx, rng, noise), noised(sources[1], idx, rng, noise)


def output_paths(prefix: Path, compress: bool) -> tuple[Path, Path]:
    """PREFIX.de and PREFIX.en, with .gz when compressed."""
    suffix = ".gz" if compress else ""
    return Path(f"{prefix}.de{suffix}"), Path(f"{prefix}.en{suffix}")


@contextlib.contextmanager
def _output(path: Path, compress: bool) -> Iterator[IO[bytes]]:
    """A binary output written beside `path` and renamed into place on success (gzip: level 1)."""
    from nmt.textio import atomic_write

    with atomic_write(path, "wb") as f:
        if not compress:
            yield f
            return
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1, mtime=0, filename="") as gz:
            yield cast(IO[bytes], gz)


def write_corpus(
    prefix: Path,
    pairs: int,
    seed: int = 1,
    noise: float = 0.1,
    compress: bool = False,
    corpus: Path = CORPUS,
) -> tuple[Path, Path]:
    """Write the corpus of `pairs` pairs to PREFIX.de / PREFIX.en; returns the two paths."""
    if not 0.0 <= noise <= 1.0:
        raise NmtError(f"--noise must be between 0 and 1, got {noise}")
    sources = load_sources(corpus)
    paths = output_paths(prefix, compress)
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    with _output(paths[0], compress) as fd, _output(paths[1], compress) as fe:
        for de, en in chunks(sources, pairs, seed, noise):
            fd.write(de)
            fe.write(en)
    return paths


def main(argv: list[str] | None = None) -> int:
    """Parse options, write the corpus, report its size and rate on stderr."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=parse_count, required=True, help="pairs to write: 20k, 1M, 10M")
    p.add_argument("--out", type=Path, required=True, help="PREFIX of PREFIX.de / PREFIX.en")
    p.add_argument("--seed", type=int, default=1, help="draws the pairs and the noise")
    p.add_argument("--noise", type=float, default=0.1, help="per-word noise probability")
    p.add_argument("--gzip", action="store_true", help="write PREFIX.de.gz / PREFIX.en.gz")
    p.add_argument("--corpus", type=Path, default=CORPUS, help="fetched wmt-news-de-en folder")
    args = p.parse_args(argv)
    if not 0.0 <= args.noise <= 1.0:
        p.error(f"--noise must be between 0 and 1, got {args.noise}")
    t0 = time.perf_counter()
    try:
        paths = write_corpus(args.out, args.pairs, args.seed, args.noise, args.gzip, args.corpus)
    except (OSError, NmtError) as e:  # a full disk; no corpus and no mirror to fetch it from
        print(f"error: {e}", file=sys.stderr)
        return 2
    secs = time.perf_counter() - t0
    size = sum(path.stat().st_size for path in paths) / 2**20
    print(
        f"{paths[0]}, {paths[1]}: {args.pairs:,} pairs, {size:,.0f} MB in {secs:.1f} s "
        f"({args.pairs / secs:,.0f} pairs/s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
