"""Scores per source-length bucket (`nmt score --by-length`): the numbers behind Bahdanau et al.
(2015, Fig. 2), where a fixed-length encoding loses BLEU as sentences get longer.

Each line goes into exactly one bucket by the length of its *source* sentence (words, or subword
pieces of a SentencePiece model); every bucket is scored as a corpus of its own through
nmt.eval.scoring (sacrebleu), so a bucket's BLEU is sacrebleu's corpus BLEU of those lines. Buckets are
half-open: `10-20` holds lengths 10 <= n < 20; `50+` holds 50 and more. Torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.errors import NmtError
from nmt.eval import scoring
from nmt.eval.scoring import Options, Result

DEFAULT_BUCKETS = "0-10,10-20,20-30,30-40,40-50,50+"
UNITS = ("word", "subword")
_RANGE = re.compile(r"^(\d+)-(\d+)$")
_OPEN = re.compile(r"^(\d+)\+$")


@dataclass(frozen=True)
class Bucket:
    """Source lengths lo <= n < hi (hi None: no upper end)."""

    lo: int
    hi: int | None

    @property
    def label(self) -> str:
        """How the user wrote it: `10-20` or `50+`."""
        return f"{self.lo}+" if self.hi is None else f"{self.lo}-{self.hi}"

    def holds(self, n: int) -> bool:
        """Whether a sentence of length n falls in this bucket."""
        return n >= self.lo and (self.hi is None or n < self.hi)


@dataclass
class BucketScores:
    """One bucket: its lines, their mean source length, and per system one Result per metric
    (an empty list for every system when the bucket has no line)."""

    bucket: Bucket
    lines: list[int]  # 0-based line numbers
    mean_length: float | None
    scores: list[list[Result]]  # [system][metric]

    def summary(self) -> dict[str, Any]:
        """The bucket's label and bounds, its line count and mean length (the scores aside)."""
        span = {"bucket": self.bucket.label, "lo": self.bucket.lo, "hi": self.bucket.hi}
        return {**span, "lines": len(self.lines), "mean_length": self.mean_length}


@dataclass
class ByLength:
    """The whole report: unit, systems, buckets, and lines no bucket covers."""

    unit: str
    systems: list[str]
    metrics: list[str]
    buckets: list[BucketScores]
    outside: int  # lines whose length no bucket covers

    def to_json(self, width: int = 1) -> list[dict[str, Any]]:
        """One flat object per system, bucket and metric (score None for an empty bucket)."""
        out: list[dict[str, Any]] = []
        scored = next((b for b in self.buckets if b.lines), None)
        for s, system in enumerate(self.systems):
            if scored:
                empty = [_unscored(r, width) for r in scored.scores[s]]
            else:
                empty = [{"name": m, "score": None} for m in self.metric_names()]
            for b in self.buckets:
                base = {"system": system, "unit": self.unit, **b.summary()}
                rows = [r.to_dict(width) for r in b.scores[s]] if b.lines else empty
                out.extend({**base, **r} for r in rows)
        return out

    def metric_names(self) -> list[str]:
        """sacrebleu's display names (BLEU, chrF2, ...) of the metrics, from any scored bucket."""
        for b in self.buckets:
            if b.lines:
                return [r.name for r in b.scores[0]]
        return [m.upper() for m in self.metrics]

    def series(self, metric: int = 0) -> list[list[float | None]]:
        """Per system, the metric's score per bucket (None where the bucket is empty)."""
        return [
            [b.scores[s][metric].score if b.lines else None for b in self.buckets]
            for s in range(len(self.systems))
        ]


def _unscored(result: Result, width: int) -> dict[str, Any]:
    """An empty bucket's row: a scored row's keys, None but the metric's name and signature."""
    row = result.to_dict(width)
    return {**dict.fromkeys(row), "name": result.name, "signature": row.get("signature")}


def parse_buckets(spec: str | None) -> list[Bucket]:
    """`0-10,10-20,...,60+` -> contiguous, increasing buckets; anything else is a user error."""
    text = DEFAULT_BUCKETS if spec is None or not spec.strip() else spec
    buckets: list[Bucket] = []
    for item in (x.strip() for x in text.split(",")):
        m, o = _RANGE.match(item), _OPEN.match(item)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi <= lo:
                raise NmtError(f"--buckets: {item!r} is empty (the end must exceed the start)")
            bucket = Bucket(lo, hi)
        elif o:
            bucket = Bucket(int(o.group(1)), None)
        else:
            raise NmtError(f"--buckets: {item!r} is not LO-HI or LO+ (e.g. {DEFAULT_BUCKETS})")
        if buckets:
            prev = buckets[-1]
            if prev.hi is None:
                raise NmtError(f"--buckets: {prev.label} is open-ended, so it must come last")
            if bucket.lo != prev.hi:
                raise NmtError(
                    f"--buckets: {prev.label} and {bucket.label} must meet (gap or overlap)"
                )
        buckets.append(bucket)
    return buckets


def source_lengths(lines: Sequence[str], unit: str, spm: str | Path | None = None) -> list[int]:
    """Length of each source line in words (whitespace-separated) or SentencePiece pieces."""
    if unit not in UNITS:
        raise NmtError(f"--length-unit: expected one of {', '.join(UNITS)}, got {unit!r}")
    if unit == "word":
        if spm is not None:
            raise NmtError("--spm is used only with --length-unit subword")
        return [len(line.split()) for line in lines]
    if spm is None:
        raise NmtError(
            "--length-unit subword needs --spm (a SentencePiece .model, a DATA_DIR or a MODEL_DIR)"
        )
    from nmt.data.vocab import Tokenizer

    tok = Tokenizer.load(*source_spm(spm))
    return [len(tok.encode(line)) if line.strip() else 0 for line in lines]


def source_spm(path: str | Path) -> tuple[Path, bool]:
    """The source-side SentencePiece model of a .model file, a DATA_DIR or a MODEL_DIR, and
    whether it was learnt on lowercased text (so lengths count the pieces the model saw)."""
    from nmt.data.spm_source import spm_source
    from nmt.dirs.opening import open_vocabulary

    p = Path(path)
    if p.is_file():
        return p, False
    if not p.is_dir():
        raise NmtError(f"{p}: not a SentencePiece model, DATA_DIR or MODEL_DIR")
    source = spm_source(open_vocabulary(p))  # opened by what it holds
    return source.src, source.lowercase


def assign(lengths: Sequence[int], buckets: Sequence[Bucket]) -> tuple[list[list[int]], int]:
    """Line numbers per bucket (each line in at most one) and how many lines fit none."""
    groups: list[list[int]] = [[] for _ in buckets]
    outside = 0
    for i, n in enumerate(lengths):
        k = next((k for k, b in enumerate(buckets) if b.holds(n)), None)
        if k is None:
            outside += 1
        else:
            groups[k].append(i)
    return groups, outside


def score_by_length(
    sources: Sequence[str],
    systems: Sequence[tuple[str, Sequence[str]]],
    refs: Sequence[Sequence[str]],
    buckets: Sequence[Bucket],
    metrics: Sequence[str] = ("bleu",),
    options: Options | None = None,
    unit: str = "word",
    spm: str | Path | None = None,
    source_name: str = "source",
) -> ByLength:
    """Score every system on the lines of each bucket (sacrebleu corpus scores per bucket)."""
    if refs and len(sources) != len(refs[0]):
        raise NmtError(
            f"line counts differ: {source_name} has {len(sources)} lines, "
            f"the references have {len(refs[0])} lines"
        )
    lengths = source_lengths(sources, unit, spm)
    groups, outside = assign(lengths, buckets)
    names = scoring.parse_metrics(metrics)
    rows = []
    for bucket, idx in zip(buckets, groups, strict=True):
        scores: list[list[Result]] = [[] for _ in systems]
        mean = sum(lengths[i] for i in idx) / len(idx) if idx else None
        if idx:
            subsets = [[hyps[i] for i in idx] for _, hyps in systems]
            sub_refs = [[r[i] for i in idx] for r in refs]
            scores = scoring.score_systems(subsets, sub_refs, names, options)
        rows.append(BucketScores(bucket, idx, mean, scores))
    return ByLength(unit, [label for label, _ in systems], names, rows, outside)


def system_labels(paths: Sequence[str], labels: Sequence[str] | None) -> list[str]:
    """--label values (one per file), else file names, else the paths when names repeat."""
    if labels:
        if len(labels) != len(paths):
            raise NmtError(f"--label given {len(labels)} times for {len(paths)} hypothesis file(s)")
        return list(labels)
    names = ["<stdin>" if p == "-" else Path(p).name for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


def relative_series(report: ByLength, metric: int = 0) -> list[list[float | None]]:
    """Per system, each bucket's score as a percentage of its first scored bucket's: a system
    that is weaker everywhere stays flat, one that fails on long input falls."""
    out = []
    for ys in report.series(metric):
        base = next((y for y in ys if y is not None), None)
        out.append([None if y is None or not base else 100.0 * y / base for y in ys])
    return out


def plot_by_length(
    report: ByLength, path: str | Path, metric: int = 0, relative: bool = False
) -> Path:
    """BLEU (or the chosen metric) against source length, one line per system, sentence counts
    under each bucket: Bahdanau et al. (2015), Fig. 2, as a PNG; `relative` draws each system
    as a percentage of its score on the shortest bucket."""
    from nmt.plots.figures import new_figure, save_png, style

    name = report.metric_names()[metric]
    fig, ax = new_figure(7.0, 4.5)
    xs = list(range(len(report.buckets)))
    nan = float("nan")
    series = relative_series(report, metric) if relative else report.series(metric)
    for i, (system, ys) in enumerate(zip(report.systems, series, strict=True)):
        vals = [nan if y is None else y for y in ys]
        ax.plot(xs, vals, label=system, linewidth=2, markersize=6, **style(i))
    ticks = [f"{b.bucket.label}\nn={len(b.lines)}" for b in report.buckets]
    ax.set_xticks(xs, ticks, fontsize=9)
    ax.set_xlim(-0.4, len(xs) - 0.6)
    unit = "words" if report.unit == "word" else "subword pieces"
    ax.set_xlabel(f"source sentence length ({unit}); n = sentences per bucket")
    first = next((b.bucket.label for b in report.buckets if b.lines), "")
    ax.set_ylabel(f"{name}, % of the system's {name} on {first}" if relative else name)
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"{name} by source sentence length" + (f", relative to {first}" if relative else "")
    )
    ax.legend(frameon=False)
    return save_png(fig, path)


def table_rows(report: ByLength, width: int = 1) -> tuple[list[str], list[list[str]]]:
    """Header and cells: bucket, lines, mean length, then one column per system and metric."""
    names = report.metric_names()
    multi = len(report.systems) > 1
    header = ["bucket", "lines", "mean len"] + [
        f"{s} {m}" if multi else m for s in report.systems for m in names
    ]
    rows = []
    for b in report.buckets:
        mean = "" if b.mean_length is None else f"{b.mean_length:.1f}"
        cells = [b.bucket.label, str(len(b.lines)), mean]
        for s in range(len(report.systems)):
            cells += (
                [f"{r.score:.{width}f}" for r in b.scores[s]] if b.lines else ["-"] * len(names)
            )
        rows.append(cells)
    return header, rows


def _signatures(report: ByLength) -> list[str]:
    """`NAME|signature` per metric (the same in every bucket)."""
    from nmt.eval.printing import signature_lines

    return signature_lines(r for b in report.buckets if b.lines for r in b.scores[0])


def print_report(report: ByLength, as_json: bool, width: int = 1) -> None:
    """JSON list, a rich table on a terminal, else tab-separated lines; signatures after."""
    import json
    import sys

    if as_json:
        print(json.dumps(report.to_json(width), indent=1, ensure_ascii=False))
        return
    header, rows = table_rows(report, width)
    notes = [f"lengths in {report.unit}s of the source; bucket LO-HI holds LO <= n < HI"]
    if report.outside:
        notes.append(f"{report.outside} line(s) fall in no bucket and are not scored")
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table()
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
        for cells in rows:
            table.add_row(*cells)
        console = Console()
        console.print(table)
        for line in notes + _signatures(report):
            console.print(line, soft_wrap=True, highlight=False)
        return
    print("\t".join(header))
    for cells in rows:
        print("\t".join(cells))
    for line in notes + _signatures(report):
        print(f"# {line}")
