"""Line charts for reports (BLEU by length, training curves): matplotlib's object API on the Agg
canvas (no pyplot, no global backend), one look for every chart, PNGs written atomically."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

from nmt.errors import NmtError
from nmt.textio import atomic_write

DPI = 100
# Colour-blind-safe (Okabe-Ito) colours and distinct markers, so lines read even in grey print.
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def new_figure(width: float = 7.0, height: float = 4.5) -> tuple[Any, Any]:
    """A figure with one axes on the Agg canvas, light grid, no top/right spines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def style(i: int) -> dict[str, Any]:
    """Colour and marker of the i-th series."""
    return {"color": COLORS[i % len(COLORS)], "marker": MARKERS[i % len(MARKERS)]}


def png_path(path: str | Path) -> Path:
    """The output path, refused unless it names a PNG: checked before any work is done."""
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise NmtError(f"{out}: the plot is written as PNG; name the file *.png")
    return out


def save_png(fig: Any, path: str | Path) -> Path:
    """Render to PNG bytes first, then write them atomically: a failed draw leaves no file."""
    out = png_path(path)
    buf = io.BytesIO()
    with warnings.catch_warnings():  # glyphs missing from the font are drawn as boxes
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.savefig(buf, format="png", dpi=DPI)
    with atomic_write(out, "wb") as f:
        f.write(buf.getvalue())
    return out
