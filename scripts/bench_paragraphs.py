#!/usr/bin/env python3
"""Translating paragraphs: the same 1,000 test_2016_flickr captions translated as lines of k
captions (k = 1..6, scripts/make_joined_corpus.py), whole, or split into sentences by each
segmenter (nmt's, sentencex alone, pysbd and Moses' rules where installed) and joined back, or
as the oracle (each caption alone, joined in groups of k). BLEU and chrF per k, and the seconds
each way took.

    python scripts/bench_paragraphs.py -m work/demo/model
    pip install pysbd sentence-splitter && python scripts/bench_paragraphs.py -m work/demo/model

Reads the fetched Multi30k (benchlib.multi30k); the model decodes at its defaults (beam 5)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import machine_line, multi30k  # noqa: E402
from make_joined_corpus import fixed_groups, join, make  # noqa: E402

from nmt.data.sentences import Pieces, Segmenter  # noqa: E402
from nmt.dirs import ModelDir  # noqa: E402

KS = (1, 2, 3, 4, 5, 6)


class Splitter:
    """A segmenter in the shape `nmt.decode.paragraphs.translate_lines` takes."""

    def __init__(self, sentences: Callable[[str], list[str]]) -> None:
        self.sentences = sentences

    def split(self, line: str) -> Pieces:
        """A line's sentences (whitespace kept aside as nmt's own splitter does)."""
        body = line.strip()
        if not body:
            return Pieces(line, [], "")
        start = line.index(body[0])
        parts = [p.strip() for p in self.sentences(body) if p.strip()]
        return Pieces(line[:start], parts, line[start + len(body) :])


def splitters(lang: str) -> dict[str, Splitter | Segmenter | None]:
    """No splitting, nmt's, and each other segmenter that is installed."""
    from sentencex import segment

    out: dict[str, Splitter | Segmenter | None] = {
        "no splitting": None,
        "nmt --split-sentences": Segmenter(lang),
        "sentencex alone": Splitter(lambda t: list(segment(lang, t))),
    }
    try:
        import pysbd

        out["pysbd"] = Splitter(pysbd.Segmenter(language=lang, clean=False).segment)
    except ImportError:
        pass
    try:
        from sentence_splitter import SentenceSplitter

        out["Moses rules"] = Splitter(SentenceSplitter(language=lang).split)
    except ImportError:
        pass
    return out


def score(hyps: Sequence[str], refs: Sequence[str]) -> tuple[float, float]:
    """sacreBLEU and chrF (13a, cased)."""
    return BLEU().corpus_score(hyps, [refs]).score, CHRF().corpus_score(hyps, [refs]).score


def first(path: Path, lines: int) -> list[str]:
    """The first `lines` lines of `path` (0: all of them)."""
    found = path.read_text(encoding="utf-8").splitlines()
    return found[:lines] if lines else found


def main(argv: list[str] | None = None) -> int:
    """Translate the joined test sets every way and print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-m", "--model", type=Path, default=ROOT / "work/demo/model")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--corpus", type=Path, default=None, help="Multi30k folder (default: corpora/)")
    p.add_argument(
        "--captions", type=int, default=0, help="the first N captions only, N a multiple of 60"
    )
    args = p.parse_args(argv)
    if args.captions % 60:
        p.error(f"--captions must be a multiple of 60 (every k divides it), got {args.captions}")
    from nmt.decode.options import DecodeOptions
    from nmt.decode.paragraphs import translate_lines
    from nmt.engines.translator import Translator

    with tempfile.TemporaryDirectory() as tmp:
        make(multi30k(args.corpus), Path(tmp), (args.src, args.tgt), 1, max(KS), seed=1)
        sets = {
            k: [
                first(Path(tmp) / f"test.k{k}.{lang}", args.captions // k)
                for lang in (args.src, args.tgt)
            ]
            for k in KS
        }
    print(machine_line(0))
    rows = []
    with Translator.from_dir(ModelDir(args.model)) as tr:
        tr.translate(sets[1][0][:50])  # warm up the workers and kernels
        t0 = time.perf_counter()
        k1 = [t.text for t in tr.translate(sets[1][0])]
        oracle_s = time.perf_counter() - t0
        oracle = [score(join(k1, fixed_groups(len(k1), k)), sets[k][1]) for k in KS]
        rows.append(("oracle: each caption alone, joined", oracle, oracle_s))
        for name, seg in splitters(args.src).items():
            t0, cells = time.perf_counter(), []
            for k in KS:
                src, ref = sets[k]
                out = translate_lines(tr, src, DecodeOptions(), segmenter=seg, tgt_lang=args.tgt)
                cells.append(score([t.text for t in out], ref))
            rows.append((name, cells, (time.perf_counter() - t0) / len(KS)))
    base = next(s for n, _, s in rows if n == "no splitting")
    print("| translated | " + " | ".join(f"k{k} BLEU / chrF" for k in KS) + " | seconds a set |")
    print("|---|" + "---|" * (len(KS) + 1))
    for name, cells, seconds in rows:
        body = " | ".join(f"{b:.1f} / {c:.1f}" for b, c in cells)
        print(f"| {name} | {body} | {seconds:.2f} ({seconds / base:.2f}x) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
