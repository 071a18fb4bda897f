"""Figure pieces for the experiment scripts: a headless pyplot, scores with their intervals as
error bars, the validation curves, and saving.

Not run on its own: the experiment scripts import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot drawing to files only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> Path:
    """Write the figure as PNG and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def errorbars(
    ax: Any, xs: Sequence[float], cells: Sequence[dict[str, float]], **style: Any
) -> None:
    """Scores with their 95% intervals ({"score", "lo", "hi"} each) against `xs`."""
    y = [c["score"] for c in cells]
    err = [[c["score"] - c["lo"] for c in cells], [c["hi"] - c["score"] for c in cells]]
    ax.errorbar(xs, y, yerr=err, marker="o", capsize=3, **style)


def finish(ax: Any, legend: dict[str, Any] | None = None, **labels: Any) -> None:
    """Axis labels and ticks, a light grid and the legend."""
    ax.set(**labels)
    ax.grid(alpha=0.3)
    ax.legend(**(legend or {}))


def curves(
    results: Sequence[dict[str, Any]],
    path: Path,
    label: Callable[[dict[str, Any]], str] = lambda r: r["name"],
    title: str = "",
) -> Path:
    """Every system's validation BLEU against updates, the legend outside (no curve hidden)."""
    fig, ax = pyplot().subplots(figsize=(9, 4.5))
    for r in results:
        steps, vals = zip(*r["run"]["curve"], strict=True)
        ax.plot(steps, vals, label=label(r))
    legend = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 9}
    finish(ax, legend, xlabel="updates", ylabel="validation BLEU (greedy)", title=title)
    return save(fig, path)
