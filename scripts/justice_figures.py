"""The Canadian-law experiment's figures (scripts/justice_report.py writes them): BLEU against
source length with intervals from the bootstrap by document, in the manner of Bahdanau et al.'s
Fig. 2, BLEU relative to one bin, and the validation curves.

Not run on its own: justice_report.py draws them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from expt_figures import curves, errorbars, finish, pyplot, save


def ticks(results: Sequence[dict[str, Any]]) -> list[str]:
    """Each bin's label with its lines and documents."""
    return [f"{b['bucket']}\n{b['lines']:,} l\n{b['documents']} d" for b in results[0]["by_length"]]


def bleu_figure(results: Sequence[dict[str, Any]], path: Path) -> Path:
    """BLEU per source-length bin, each system with its 95% interval."""
    fig, ax = pyplot().subplots(figsize=(8, 4.8))
    xs = list(range(len(results[0]["by_length"])))
    for r in results:
        errorbars(ax, xs, [b["bleu"] for b in r["by_length"]], label=r["name"])
    labels = {"xticks": xs, "xticklabels": ticks(results), "xlabel": "source length (words)"}
    finish(ax, ylabel="BLEU (test, en->fr) [95%, bootstrap by document]", **labels)
    return save(fig, path)


def relative_figure(results: Sequence[dict[str, Any]], path: Path, base: str) -> Path:
    """BLEU per bin as % of bin `base`'s."""
    fig, ax = pyplot().subplots(figsize=(8, 4.8))
    xs = list(range(len(results[0]["by_length"])))
    for r in results:
        cells = r["by_length"]
        ref = next((b for b in cells if b["bucket"] == base), cells[0])["bleu"]["score"] or 1e-9
        ax.plot(xs, [100 * b["bleu"]["score"] / ref for b in cells], marker="o", label=r["name"])
    ax.axhline(100, color="grey", lw=0.8)
    labels = {"xticks": xs, "xticklabels": ticks(results), "xlabel": "source length (words)"}
    finish(ax, ylabel=f"BLEU, % of the {base} bin", **labels)
    return save(fig, path)


def figures(results: Sequence[dict[str, Any]], docs: Path, base: str) -> list[Path]:
    """BLEU by length with intervals, relative BLEU, validation curves."""
    return [
        bleu_figure(results, docs / "justice_bleu.png"),
        relative_figure(results, docs / "justice_relative.png", base),
        curves(results, docs / "justice_curves.png"),
    ]
