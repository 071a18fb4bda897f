"""The joined-caption experiment's figures (scripts/joined_report.py writes them): BLEU against k
with each system's split oracle dashed, BLEU as % of each system's k1, the output/reference length
ratio against k, the validation curves and, once K=4 systems are scored, BLEU as % of the split
oracle for K=4 beside K=6 (past the longest training line)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def figures(results: Sequence[dict[str, Any]], docs: Path) -> list[Path]:
    """BLEU against k (oracle dashed), relative BLEU, length ratio and validation curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs.mkdir(parents=True, exist_ok=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ks = [c["k"] for c in results[0]["by_k"]]
    words = [c["mean_words"] for c in results[0]["by_k"]]
    xlabel = "captions joined per line, k (mean source words)"
    ticks = [f"{k}\n({w:.0f})" for k, w in zip(ks, words, strict=True)]
    out = []
    core = [r for r in results if r["corpus"] == "k6"] or list(results)

    def save(fig: Any, name: str) -> None:
        path = docs / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)

    def by_k(ax: Any, ylabel: str, title: str = "", legend: int = 10) -> None:
        """Label a plot against k, with its grid and legend."""
        ax.set(xlabel=xlabel, ylabel=ylabel, xticks=ks, xticklabels=ticks, title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r, col in zip(core, colours, strict=False):
        y = [c["bleu"]["score"] for c in r["by_k"]]
        err = [
            [c["bleu"]["score"] - c["bleu"]["lo"] for c in r["by_k"]],
            [c["bleu"]["hi"] - c["bleu"]["score"] for c in r["by_k"]],
        ]
        ax.errorbar(ks, y, yerr=err, marker="o", color=col, label=r["name"], capsize=3)
        ax.plot(ks, [c["oracle_bleu"]["score"] for c in r["by_k"]], "--", color=col, alpha=0.6)
    by_k(
        ax,
        "BLEU (test_2016_flickr)",
        "BLEU against input length, same sentences (dashed: split oracle)",
    )
    save(fig, "joined_bleu.png")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r, col in zip(core, colours, strict=False):
        base = r["by_k"][0]["bleu"]["score"]
        ax.plot(
            ks,
            [100 * c["bleu"]["score"] / base for c in r["by_k"]],
            marker="o",
            color=col,
            label=r["name"],
        )
    ax.axhline(100, color="grey", lw=0.8)
    by_k(ax, "BLEU, % of the system's k1")
    save(fig, "joined_relative.png")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r, col in zip(core, colours, strict=False):
        ax.plot(ks, [c["bleu"]["ratio"] for c in r["by_k"]], marker="o", color=col, label=r["name"])
    ax.axhline(1.0, color="grey", lw=0.8)
    by_k(ax, "output / reference length")
    save(fig, "joined_length.png")

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r, col in zip(results, colours, strict=False):
        steps, vals = zip(*r["run"]["curve"], strict=True)
        val = {"k6": "K=6", "k4": "K=4", "k1": "plain"}.get(r["corpus"], r["corpus"])
        ax.plot(steps, vals, color=col, label=f"{r['name']} ({val} val)")
    ax.set(
        xlabel="updates",
        ylabel="validation BLEU (greedy)",
        title="Each system on its own corpus's validation set",
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)  # outside: no curve hidden
    save(fig, "joined_curves.png")
    k4 = {r["name"].removesuffix("-K4"): r for r in results if r["corpus"] == "k4"}
    if k4:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r, col in zip(core, colours, strict=False):
            if r["name"] not in k4:
                continue
            for run, style, label in ((r, ":", "K=6"), (k4[r["name"]], "-", "K=4")):
                y = [100 * c["bleu"]["score"] / c["oracle_bleu"]["score"] for c in run["by_k"]]
                ax.plot(ks, y, style, marker="o", color=col, label=f"{r['name']} ({label})")
        ax.axvline(4, color="grey", lw=0.8)
        ax.axhline(100, color="grey", lw=0.8)
        by_k(
            ax,
            "BLEU, % of the split oracle",
            "Past the longest training line (K=4: right of the grey line)",
            legend=8,
        )
        save(fig, "joined_extrapolation.png")
    return out
