"""Scoring hypothesis files: the one entry point behind `nmt score`, which picks the report
(corpus scores, per-sentence scores, a paired significance test, or scores by source length)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nmt.errors import NmtError
from nmt.eval import printing, scoring
from nmt.plots.figures import png_path


@dataclass(frozen=True)
class ScoreRequest:
    """What to score and how to report it; `hyps` of '-' (or none) reads standard input."""

    refs: Sequence[str]
    hyps: Sequence[str] = ("-",)
    metrics: Sequence[str] = ("bleu",)
    options: scoring.Options = field(default_factory=scoring.Options)
    sentence: bool = False  # per-line scores as JSONL
    paired_bs: bool = False  # paired bootstrap resampling against the first system
    paired_ar: bool = False  # paired approximate randomization against the first system
    paired_n: int = 0  # resamples (bs) or trials (ar); 0: sacrebleu's default
    by_length: str | None = None  # a source file: scores per bucket of its line lengths
    buckets: str | None = None
    length_unit: str = "word"
    spm: str | None = None
    plot: str | None = None  # --by-length: a PNG of the first metric by length
    plot_relative: str | None = None  # --by-length: the same, relative to the shortest bucket
    labels: Sequence[str] | None = None
    as_json: bool = False
    width: int = 1


def score_files(req: ScoreRequest) -> None:
    """Check every option before any file is read, then print the report asked for."""
    paired = printing.report_kind(req.paired_bs, req.paired_ar, req.sentence, req.width)
    metrics = scoring.parse_metrics(req.metrics)
    scoring.make_metric("bleu", req.options)  # validates --tokenize before any file is read
    scoring.check_options(metrics, req.options, req.paired_n)
    if req.by_length is None and (
        req.plot or req.plot_relative or req.labels or req.buckets or req.spm
    ):
        raise NmtError(
            "--buckets, --spm, --plot, --plot-relative and --label go with --by-length SRC_FILE"
        )
    for png in (req.plot, req.plot_relative):
        if png:
            png_path(png)
    if req.by_length is not None and (paired or req.sentence):
        raise NmtError("--by-length cannot be combined with --sentence or --paired-bs/--paired-ar")
    hyps = list(req.hyps or ["-"])
    systems, refs = scoring.read_systems(hyps, list(req.refs))
    if req.by_length is not None:
        _by_length(req, hyps, systems, refs, metrics)
    elif req.sentence:
        printing.print_sentence_scores(systems, refs, metrics, req.options, req.width)
    elif paired:
        printing.print_paired(
            systems, refs, metrics, req.options, paired, req.paired_n, req.as_json, req.width
        )
    else:
        results = scoring.score_systems([s for _, s in systems], refs, metrics, req.options)
        rows = [(name, r) for (name, _), r in zip(systems, results, strict=True)]
        printing.print_scores(rows, req.as_json, req.width)


def _by_length(
    req: ScoreRequest,
    hyps: list[str],
    systems: list[tuple[str, list[str]]],
    refs: list[list[str]],
    metrics: list[str],
) -> None:
    """Scores per bucket of source length, printed, and drawn where --plot asks."""
    from nmt.eval import bylength

    assert req.by_length is not None
    names = bylength.system_labels(hyps, list(req.labels) if req.labels else None)
    result = bylength.score_by_length(
        scoring.read_text(req.by_length),
        [(n, s) for n, (_, s) in zip(names, systems, strict=True)],
        refs,
        bylength.parse_buckets(req.buckets),
        metrics,
        req.options,
        req.length_unit,
        req.spm,
        req.by_length,
    )
    bylength.print_report(result, req.as_json, req.width)
    if req.plot:
        bylength.plot_by_length(result, req.plot)
    if req.plot_relative:
        bylength.plot_by_length(result, req.plot_relative, relative=True)
