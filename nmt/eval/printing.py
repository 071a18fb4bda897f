"""How `nmt score` / `nmt evaluate` print scores: sacrebleu's exact text lines when piped, a rich
table on a terminal, JSON on request; signatures always, since they make a score reproducible."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from nmt.errors import NmtError
from nmt.eval import scoring
from nmt.eval.scoring import DEFAULT_SAMPLES, Options, PairedResult, Result

Systems = Sequence[tuple[str, Sequence[str]]]  # (label, hypothesis lines) per system


def align_lines(lines: list[str]) -> list[str]:
    """Right-align the text before ' = ' across lines, exactly as `sacrebleu -f text` does."""
    if len(lines) < 2:
        return lines
    cuts = [line.index("=") - 1 for line in lines]
    w = max(cuts)
    return [f"{line[:c]:>{w}}{line[c:]}" for c, line in zip(cuts, lines, strict=True)]


def format_lines(results: list[Result], width: int = 1) -> list[str]:
    """Plain output for one system: sacrebleu's text lines, aligned on '='."""
    return align_lines([r.line(width) for r in results])


def format_paired_lines(table: list[list[PairedResult]], width: int = 1) -> list[str]:
    """Plain output of a paired test: one tab-separated line per system and metric, signatures."""
    lines = []
    for row in table:
        for r in row:
            label = f"Baseline: {r.system}" if r.baseline else r.system
            lines.append(f"{label}\t{r.name} = {r.text(width)}")
    for r in table[0]:
        lines.append(f"signature\t{r.name}|{r.signature}")
    return lines


def rich_table(rows: list[tuple[str, list[Result]]], width: int = 1) -> Any:
    """A rich Table for a terminal: one row per system and metric (signatures printed after)."""
    from rich.table import Table

    multi = len(rows) > 1
    table = Table()
    if multi:
        table.add_column("System", overflow="fold")
    table.add_column("Metric", no_wrap=True)
    table.add_column("Score", justify="right", no_wrap=True)
    table.add_column("Details")
    for system, results in rows:
        for r in results:
            details = r.raw._verbose if r.raw is not None else ""
            cells = [r.name, f"{r.score:.{width}f}", details]
            table.add_row(*([system] if multi else []), *cells)
    return table


def signature_lines(results: Iterable[Any]) -> list[str]:
    """`NAME|signature` once per metric, in order: what makes a score reproducible."""
    seen: dict[str, str] = {}
    for r in results:
        seen.setdefault(r.name, f"{r.name}|{r.signature}")
    return list(seen.values())


def rich_paired_table(
    table: list[list[PairedResult]], test: str, n_samples: int = 0, width: int = 1
) -> Any:
    """A rich Table for a paired test: one row per system and metric, narrow enough for 80 cols."""
    from rich.table import Table

    n = n_samples if n_samples > 0 else DEFAULT_SAMPLES[test]
    kind = "bootstrap resampling" if test == "bs" else "approximate randomization"
    t = Table(title=f"Paired {kind} test, {n} samples (* = p <= 0.05 against the baseline)")
    t.add_column("System", overflow="fold")
    t.add_column("Metric")
    t.add_column("Score", justify="right")
    t.add_column("μ ± 95% CI", justify="right")
    t.add_column("p-value", justify="right")
    for row in table:
        for r in row:
            label = f"Baseline: {r.system}" if r.baseline else r.system
            ci = "" if r.mean is None or r.ci is None else f"{r.mean:.{width}f} ± {r.ci:.{width}f}"
            p = "" if r.p_value is None else f"{r.p_value:.4f}" + ("*" if r.p_value <= 0.05 else "")
            t.add_row(label, r.name, f"{r.score:.{width}f}", ci, p)
    return t


def _print_rich(table: Any, results: Iterable[Any]) -> None:
    """A table, then its signature lines, on a terminal."""
    from rich.console import Console

    console = Console()
    console.print(table)
    for line in signature_lines(results):
        console.print(line, soft_wrap=True, highlight=False)


def print_scores(rows: list[tuple[str, list[Result]]], as_json: bool, width: int) -> None:
    """JSON list, a rich table on a terminal, else sacrebleu's own text lines (signature always)."""
    check_width(width)
    if as_json:
        objs = [{"system": name, **r.to_dict(width)} for name, results in rows for r in results]
        print(json.dumps(objs, indent=1, ensure_ascii=False))
    elif sys.stdout.isatty():
        _print_rich(rich_table(rows, width), (r for _, results in rows for r in results))
    elif len(rows) == 1:
        print("\n".join(format_lines(rows[0][1], width)))
    else:
        for name, results in rows:
            for r in results:
                print(f"{name}\t{r.line(width)}")


def print_sentence_scores(
    systems: Systems, refs: list[list[str]], metrics: list[str], opts: Options, width: int
) -> None:
    """JSONL on stdout, one object per line ({"line", metric: score}); signatures on stderr."""
    if len(systems) != 1:
        raise NmtError("--sentence scores one system at a time")
    per_line = scoring.sentence_scores(systems[0][1], refs, metrics, opts)
    for r in per_line[0] if per_line else []:
        sys.stderr.write(f"signature: {r.name}|{r.signature}\n")
    for i, results in enumerate(per_line, start=1):
        obj = {"line": i, **{r.name: scoring.round_score(r.score, width) for r in results}}
        sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


def print_paired(
    systems: Systems,
    refs: list[list[str]],
    metrics: list[str],
    opts: Options,
    test: str,
    n: int,
    as_json: bool,
    width: int,
) -> None:
    """Run sacrebleu's paired test (first system = baseline) and print it."""
    table = scoring.paired_test(systems, refs, metrics, test, n, opts)
    if as_json:
        n_used = n if n > 0 else DEFAULT_SAMPLES[test]
        objs = [
            {**r.to_dict(width), "test": test, "n_samples": n_used} for row in table for r in row
        ]
        print(json.dumps(objs, indent=1, ensure_ascii=False))
    elif sys.stdout.isatty():
        _print_rich(rich_paired_table(table, test, n, width), table[0])
    else:
        print("\n".join(format_paired_lines(table, width)))


def report_kind(paired_bs: bool, paired_ar: bool, sentence: bool, width: int) -> str | None:
    """The paired test asked for ("bs", "ar" or None), refusing flags that cannot go together."""
    if paired_bs and paired_ar:
        raise NmtError("--paired-bs and --paired-ar are mutually exclusive")
    paired = "bs" if paired_bs else "ar" if paired_ar else None
    if sentence and paired:
        raise NmtError("--sentence cannot be combined with a paired test")
    check_width(width)
    return paired


def check_width(width: int) -> None:
    """Refuse a negative number of decimals (`--width`) before anything is scored."""
    if width < 0:
        raise NmtError(f"--width must be >= 0, got {width}")
