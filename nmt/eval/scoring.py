"""BLEU, chrF(++) and TER through sacrebleu's own classes, so every number (and signature) is
exactly what the `sacrebleu` command prints for the same options; plus paired significance tests.
Needs sacrebleu alone (no torch): printing lives in nmt.eval.printing, translate-then-score in
nmt.eval.evaluate.

References follow sacrebleu's layout: `refs[k][i]` is the k-th reference of line i, i.e. a list of
reference *streams*, each as long as the hypotheses.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric, Score
from sacrebleu.metrics.bleu import BLEUScore
from sacrebleu.metrics.chrf import CHRFScore
from sacrebleu.metrics.ter import TERScore

from nmt.errors import NmtError
from nmt.textio import decode_line, read_lines

# name -> (sacrebleu class, fixed constructor arguments); "chrf++" is chrF with word bigrams.
METRICS: dict[str, tuple[type[BLEU] | type[CHRF] | type[TER], dict[str, Any]]] = {
    "bleu": (BLEU, {}),
    "chrf": (CHRF, {}),
    "chrf++": (CHRF, {"word_order": 2}),
    "ter": (TER, {}),
}
TOKENIZERS = ("13a", "intl", "zh", "char", "none")
PAIRED_TESTS = ("bs", "ar")
# sacrebleu's defaults: 1000 bootstrap resamples, 10000 approximate-randomization trials.
DEFAULT_SAMPLES = {"bs": 1000, "ar": 10000}
AR_CONFIDENCE_SAMPLES = 1000


@dataclass
class Options:
    """Metric options; None/defaults reproduce the `sacrebleu` command's defaults."""

    tokenize: str | None = None  # BLEU tokenizer (None = sacrebleu's default, 13a)
    lowercase: bool = False  # case-insensitive BLEU and chrF
    chrf_word_order: int | None = None  # 2 = chrF++ (overrides `chrf`)
    ter_case_sensitive: bool = False  # TER is case-insensitive by default, as in Tercom
    smooth_method: str = "exp"  # BLEU smoothing


@dataclass
class Result:
    """One metric's score on one system, with the sacrebleu signature and the verbose fields."""

    name: str
    score: float
    signature: str
    verbose: dict[str, Any] = field(default_factory=dict)
    raw: Score | None = field(default=None, repr=False, compare=False)

    def line(self, width: int = 1) -> str:
        """The exact line `sacrebleu -f text` prints for this score."""
        if self.raw is None:
            return f"{self.name}|{self.signature} = {self.score:.{width}f}"
        return self.raw.format(width, False, self.signature)

    def to_dict(self, width: int = 1) -> dict[str, Any]:
        """sacrebleu's JSON object (score rounded to `width`) plus the verbose fields."""
        if self.raw is not None:
            d = json.loads(self.raw.format(width, False, self.signature, is_json=True))
        else:
            d = {"name": self.name, "score": round_score(self.score, width)}
            d["signature"] = self.signature
        d.update(self.verbose)
        return d


@dataclass
class PairedResult:
    """One system's score in a paired test: mean and 95% CI from resampling, p-value vs baseline."""

    system: str
    name: str
    score: float
    mean: float | None
    ci: float | None
    p_value: float | None  # None for the baseline itself
    signature: str
    baseline: bool = False

    def text(self, width: int = 1) -> str:
        """sacrebleu's paired-test cell: `95.7 (95.7 ± 1.3) (p = 0.0310)*`."""
        s = f"{self.score:.{width}f}"
        if self.mean is not None and self.ci is not None:
            s += f" ({self.mean:.{width}f} ± {self.ci:.{width}f})"
        if self.p_value is not None:
            s += f" (p = {self.p_value:.4f})" + ("*" if self.p_value <= 0.05 else "")
        return s

    def to_dict(self, width: int = 1) -> dict[str, Any]:
        """JSON object: the score rounded like sacrebleu, the test's raw statistics unrounded."""
        return {
            "system": self.system,
            "baseline": self.baseline,
            "name": self.name,
            "score": round_score(self.score, width),
            "mean": self.mean,
            "ci": self.ci,
            "p_value": self.p_value,
            "signature": self.signature,
        }


def round_score(x: float, width: int) -> float:
    """Round the way sacrebleu's JSON does (via its printed string), so JSON equals the text."""
    return float(f"{x:.{width}f}")


def parse_metrics(names: Iterable[str]) -> list[str]:
    """Normalise `-m` values (repeated or comma-separated, any case); reject unknown names.
    Sorted by name, as the sacrebleu command prints them (`-m ter bleu` prints BLEU first)."""
    out: list[str] = []
    for item in names:
        for name in item.split(","):
            key = name.strip().lower()
            if not key:
                continue
            if key not in METRICS:
                valid = ", ".join(METRICS)
                raise NmtError(f"unknown metric {name.strip()!r} (choose from {valid})")
            if key not in out:
                out.append(key)
    return sorted(out) or ["bleu"]


def check_options(metrics: Sequence[str], opts: Options, paired_n: int = 0) -> None:
    """Refuse option values sacrebleu would take silently: a negative chrF word order, a word
    order given with chrf++ (its own is 2: ignored, or a duplicate of chrf), negative --paired-n."""
    order = opts.chrf_word_order
    if order is not None and order < 0:
        raise NmtError(f"--chrf-word-order must be >= 0, got {order}")
    if order is not None and "chrf++" in metrics:
        raise NmtError(
            f"--chrf-word-order {order} goes with -m chrf; chrf++ is chrF with word order 2"
        )
    if paired_n < 0:
        raise NmtError(f"--paired-n must be >= 0 (0: sacrebleu's default), got {paired_n}")


def make_metric(
    name: str, opts: Options, refs: Sequence[Sequence[str]] | None = None, sentence: bool = False
) -> Metric:
    """Build a sacrebleu metric object with the CLI's options mapped to its arguments."""
    if name not in METRICS:
        raise NmtError(f"unknown metric {name!r} (choose from {', '.join(METRICS)})")
    check_options([name], opts)
    cls, fixed = METRICS[name]
    if cls is BLEU:
        if opts.tokenize is not None and opts.tokenize not in TOKENIZERS:
            raise NmtError(
                f"unknown tokenizer {opts.tokenize!r} (choose from {', '.join(TOKENIZERS)})"
            )
        # Sentence BLEU needs effective order, as `sacrebleu --sentence-level` enables it.
        kwargs: dict[str, Any] = dict(
            tokenize=opts.tokenize,
            lowercase=opts.lowercase,
            smooth_method=opts.smooth_method,
            effective_order=sentence,
        )
    elif cls is CHRF:
        kwargs = dict(lowercase=opts.lowercase)
        if opts.chrf_word_order is not None and name == "chrf":
            kwargs["word_order"] = opts.chrf_word_order
    else:
        kwargs = dict(case_sensitive=opts.ter_case_sensitive)
    kwargs.update(fixed)
    return cls(references=refs, **kwargs)


def check_lengths(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    hyp_name: str = "hypotheses",
    ref_names: Sequence[str] | None = None,
) -> None:
    """Refuse empty or misaligned inputs with a message naming both sides and both counts."""
    if not refs:
        raise NmtError("no reference given")
    if len(hyps) == 0:
        raise NmtError(f"{hyp_name}: empty hypothesis file")
    names = list(ref_names or [f"reference {k + 1}" for k in range(len(refs))])
    for name, stream in zip(names, refs, strict=True):
        if len(stream) != len(hyps):
            raise NmtError(
                f"line counts differ: {hyp_name} has {len(hyps)} lines, "
                f"{name} has {len(stream)} lines"
            )


def _verbose(s: Score) -> dict[str, Any]:
    """The metric-specific numbers behind a score (for JSON and tables)."""
    if isinstance(s, BLEUScore):
        return {
            "precisions": [float(p) for p in s.precisions],
            "bp": float(s.bp),
            "ratio": float(s.ratio),
            "hyp_len": int(s.sys_len),
            "ref_len": int(s.ref_len),
            "counts": [int(c) for c in s.counts],
            "totals": [int(t) for t in s.totals],
        }
    if isinstance(s, CHRFScore):
        return {"char_order": s.char_order, "word_order": s.word_order, "beta": s.beta}
    if isinstance(s, TERScore):
        return {"num_edits": int(s.num_edits), "ref_length": float(s.ref_length)}
    return {}


def _result(s: Score, metric: Metric) -> Result:
    """Wrap a sacrebleu Score with its signature."""
    sig = metric.get_signature().format()
    return Result(s.name, float(s.score), sig, _verbose(s), raw=s)


def _normalise(lines: Sequence[str]) -> list[str]:
    """Strip trailing whitespace as the `sacrebleu` command does, so scores match it exactly."""
    return [x.rstrip() for x in lines]


def score(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu",),
    tokenize: str | None = None,
    lowercase: bool = False,
    chrf_word_order: int | None = None,
    ter_case_sensitive: bool = False,
    options: Options | None = None,
) -> list[Result]:
    """Corpus-level scores for one system, one Result per metric, in sacrebleu's order (sorted by name)."""
    opts = options or Options(tokenize, lowercase, chrf_word_order, ter_case_sensitive)
    check_lengths(hyps, refs)
    hyps, refs = _normalise(hyps), [_normalise(r) for r in refs]
    out = []
    for name in parse_metrics(metrics):
        metric = make_metric(name, opts)
        out.append(_result(metric.corpus_score(hyps, refs), metric))
    return out


def score_systems(
    systems: Sequence[Sequence[str]],
    refs: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu",),
    options: Options | None = None,
) -> list[list[Result]]:
    """Score several systems on the same references (reference n-grams extracted once)."""
    opts = options or Options()
    refs = [_normalise(r) for r in refs]
    objs = [make_metric(name, opts, refs=refs) for name in parse_metrics(metrics)]
    out = []
    for hyps in systems:
        check_lengths(hyps, refs)
        out.append([_result(m.corpus_score(_normalise(hyps), None), m) for m in objs])
    return out


def sentence_scores(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu",),
    options: Options | None = None,
) -> list[list[Result]]:
    """Per-line scores for error analysis (sentence BLEU uses effective order, like sacrebleu)."""
    opts = options or Options()
    check_lengths(hyps, refs)
    hyps, refs = _normalise(hyps), [_normalise(r) for r in refs]
    objs = [make_metric(name, opts, sentence=True) for name in parse_metrics(metrics)]
    out = []
    for i, hyp in enumerate(hyps):
        line_refs = [stream[i] for stream in refs]
        out.append([_result(m.sentence_score(hyp, line_refs), m) for m in objs])
    return out


def paired_test(
    systems: Sequence[tuple[str, Sequence[str]]],
    refs: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu",),
    test: str = "bs",
    n_samples: int = 0,
    options: Options | None = None,
) -> list[list[PairedResult]]:
    """Paired bootstrap resampling or approximate randomization with sacrebleu's PairedTest.

    The first system is the baseline. Scores and p-values are those of `sacrebleu --paired-bs`
    / `--paired-ar` (same seed: SACREBLEU_SEED, default 12345); for `ar` the mean and 95% CI
    come from sacrebleu's bootstrap estimate (`n_ar_confidence`), which its command leaves off.
    Returns one list per system (baseline first), one PairedResult per metric.
    """
    from sacrebleu.significance import PairedTest
    from sacrebleu.significance import Result as TestResult

    if test not in PAIRED_TESTS:
        raise NmtError(f"unknown paired test {test!r} (choose from bs, ar)")
    if len(systems) < 2:
        raise NmtError("a paired test needs at least two systems (the first is the baseline)")
    opts = options or Options()
    refs = [_normalise(r) for r in refs]
    named: list[tuple[str, Sequence[str]]] = []
    for name, hyps in systems:
        check_lengths(hyps, refs, hyp_name=name)
        named.append((name, _normalise(hyps)))
    check_options(parse_metrics(metrics), opts, n_samples)
    objs = {name: make_metric(name, opts, refs=refs) for name in parse_metrics(metrics)}
    n = n_samples if n_samples > 0 else DEFAULT_SAMPLES[test]
    ar_ci = AR_CONFIDENCE_SAMPLES if test == "ar" else -1
    ps = PairedTest(named, objs, None, test_type=test, n_samples=n, n_ar_confidence=ar_ci)
    sigs, table = ps()
    out: list[list[PairedResult]] = [[] for _ in named]
    for metric_name, cells in table.items():
        if metric_name == "System":
            continue
        sig = sigs[metric_name].format()
        for i, r in enumerate(cells):
            if not isinstance(r, TestResult):  # only the "System" column holds names
                continue
            out[i].append(
                PairedResult(
                    system=named[i][0],
                    name=metric_name,
                    score=float(r.score),
                    mean=None if r.mean is None else float(r.mean),
                    ci=None if r.ci is None else float(r.ci),
                    p_value=None if r.p_value is None else float(r.p_value),
                    signature=sig,
                    baseline=i == 0,
                )
            )
    return out


# ---- reading inputs ---------------------------------------------------------------------------


def read_text(path: str | Path) -> list[str]:
    """All lines of a hypothesis/reference file; missing files and bad UTF-8 become NmtError."""
    p = Path(path)
    if p.is_dir():
        raise NmtError(f"{p}: is a directory, not a text file")
    try:
        return list(read_lines(p))
    except OSError as e:
        raise NmtError(f"{p}: cannot read ({e.strerror or e})") from None


def read_stream(stream: Any, name: str = "<stdin>") -> list[str]:
    """All lines of a binary stream (stdin), strict UTF-8 with errors naming the line."""
    return [
        decode_line(raw, name, lineno).rstrip("\r\n") for lineno, raw in enumerate(stream, start=1)
    ]


def read_systems(
    hyp_paths: Sequence[str], ref_paths: Sequence[str]
) -> tuple[list[tuple[str, list[str]]], list[list[str]]]:
    """(label, lines) per hypothesis file ('-' is stdin, once at most) and the reference streams,
    every system checked against the references."""
    if list(hyp_paths).count("-") > 1:
        raise NmtError("stdin ('-') can be given only once")
    refs = [read_text(p) for p in ref_paths]
    systems = []
    for path in hyp_paths:
        lines = read_stream(sys.stdin.buffer) if path == "-" else read_text(path)
        label = "<stdin>" if path == "-" else path
        check_lengths(lines, refs, hyp_name=label, ref_names=ref_paths)
        systems.append((label, lines))
    return systems, refs
