"""The joined-caption experiment's figures (scripts/joined_report.py writes them): BLEU against k
with each system's split oracle dashed, BLEU as % of each system's k1, the output/reference length
ratio against k, the validation curves and, once K=4 systems are scored, BLEU as % of the split
oracle for K=4 beside K=6 (past the training caption count).

Not run on its own: joined_report.py draws them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from expt_figures import curves, errorbars, finish, pyplot, save

CORPUS_LABEL = {"k6": "K=6", "k4": "K=4", "k1": "plain"}


@dataclass
class Axes:
    """The k axis every figure but the curves shares, and the K=6 systems it draws."""

    ks: list[int]
    ticks: list[str]
    core: list[dict[str, Any]]
    colours: list[str]

    def new(self) -> tuple[Any, Any]:
        """A figure and its axes, at the size every figure against k has."""
        return pyplot().subplots(figsize=(7, 4.5))

    def label(self, ax: Any, ylabel: str, title: str = "", legend: int = 10) -> None:
        """Label a plot against k, with its grid and legend."""
        xlabel = "captions joined per line, k (mean source words)"
        finish(ax, {"fontsize": legend}, xlabel=xlabel, ylabel=ylabel, title=title)
        ax.set(xticks=self.ks, xticklabels=self.ticks)

    def each(self) -> Any:
        """The K=6 systems with their colours."""
        return zip(self.core, self.colours, strict=False)


def bleu_figure(a: Axes, path: Path) -> Path:
    """BLEU against k with intervals, each system's split oracle dashed."""
    fig, ax = a.new()
    for r, col in a.each():
        errorbars(ax, a.ks, [c["bleu"] for c in r["by_k"]], color=col, label=r["name"])
        ax.plot(a.ks, [c["oracle_bleu"]["score"] for c in r["by_k"]], "--", color=col, alpha=0.6)
    title = "BLEU against input length, same sentences (dashed: split oracle)"
    a.label(ax, "BLEU (test_2016_flickr)", title)
    return save(fig, path)


def line_figure(a: Axes, path: Path, value: Any, ylabel: str, level: float) -> Path:
    """One value per system and k (`value(cell, result)`), a grey line at `level`."""
    fig, ax = a.new()
    for r, col in a.each():
        y = [value(c, r) for c in r["by_k"]]
        ax.plot(a.ks, y, marker="o", color=col, label=r["name"])
    ax.axhline(level, color="grey", lw=0.8)
    a.label(ax, ylabel)
    return save(fig, path)


def share(part: float, whole: float) -> float:
    """`part` as % of `whole` (0 of a zero whole: an untrained system scores 0 everywhere)."""
    return 100 * part / max(whole, 1e-9)


def of_oracle(cell: dict[str, Any]) -> float:
    """BLEU as % of the split oracle."""
    return share(cell["bleu"]["score"], cell["oracle_bleu"]["score"])


def extrapolation_figure(a: Axes, k4: dict[str, dict[str, Any]], path: Path) -> Path:
    """BLEU as % of the split oracle, K=4-trained beside K=6-trained."""
    fig, ax = a.new()
    for r, col in a.each():
        if r["name"] not in k4:
            continue
        for run, style, label in ((r, ":", "K=6"), (k4[r["name"]], "-", "K=4")):
            y = [of_oracle(c) for c in run["by_k"]]
            ax.plot(a.ks, y, style, marker="o", color=col, label=f"{r['name']} ({label})")
    ax.axvline(4, color="grey", lw=0.8)
    ax.axhline(100, color="grey", lw=0.8)
    title = "Past the training caption count (K=4: right of the grey line)"
    a.label(ax, "BLEU, % of the split oracle", title, legend=8)
    return save(fig, path)


def figures(results: Sequence[dict[str, Any]], docs: Path) -> list[Path]:
    """BLEU against k (oracle dashed), relative BLEU, length ratio and validation curves."""
    first = results[0]["by_k"]
    ks = [c["k"] for c in first]
    ticks = [f"{c['k']}\n({c['mean_words']:.0f})" for c in first]
    core = [r for r in results if r["corpus"] == "k6"] or list(results)
    colours = pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    a = Axes(ks, ticks, core, colours)
    out = [
        bleu_figure(a, docs / "joined_bleu.png"),
        line_figure(
            a,
            docs / "joined_relative.png",
            lambda c, r: share(c["bleu"]["score"], r["by_k"][0]["bleu"]["score"]),
            "BLEU, % of the system's k1",
            100,
        ),
        line_figure(
            a,
            docs / "joined_length.png",
            lambda c, r: c["bleu"]["ratio"],
            "output / reference length",
            1.0,
        ),
        curves(
            results,
            docs / "joined_curves.png",
            lambda r: f"{r['name']} ({CORPUS_LABEL.get(r['corpus'], r['corpus'])} val)",
            "Each system on its own corpus's validation set",
        ),
    ]
    k4 = {r["name"].removesuffix("-K4"): r for r in results if r["corpus"] == "k4"}
    if k4:
        out.append(extrapolation_figure(a, k4, docs / "joined_extrapolation.png"))
    return out
