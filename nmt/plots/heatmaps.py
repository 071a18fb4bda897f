"""Attention heatmaps: the source-target attention of one sentence (or a Transformer's encoder or
decoder self-attention) as a PNG, readable at any length.

Uses matplotlib's object API with the Agg canvas directly (no pyplot, no global backend switch), so
importing this module changes nothing for the rest of the program. The image size is a function of
the token counts only (`figure_size`), so long sentences get bigger pictures, not smaller letters.
"""

from __future__ import annotations

import io
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nmt.errors import NmtError
from nmt.textio import atomic_write

DPI = 100
SP_SPACE = "\u2581"  # SentencePiece's word-start marker
SPECIAL = {"<s>", "</s>", "<unk>", "<pad>", "<bos>", "<eos>"}
_CHAR_W = 0.6 / 72  # inches per character per point of font size (DejaVu Sans average)
# Per attention kind: the column axis, the row axis and the colour bar's labels
LABELS = {
    "cross": ("source", "target", "attention weight"),
    "self": ("source", "source", "encoder self-attention weight"),
    "decoder": (
        "target (decoder input)",
        "target (decoder input)",
        "decoder self-attention weight",
    ),
}


def _plain(text: str) -> str:
    """Escape '$' so matplotlib never reads a token as math."""
    return text.replace("$", r"\$")


TITLE_POINTS = 12.0  # matplotlib's suptitle size ("large")


def wrap_title(title: str, width_inches: float, points: float = TITLE_POINTS) -> str:
    """Each line of `title` folded at words to fit `width_inches` (about 0.55 em a character):
    a long sentence and its translation as the title otherwise ran off both edges."""
    chars = max(20, int(width_inches * 72 / (points * 0.55)))
    return "\n".join(textwrap.fill(line, chars) for line in title.split("\n"))


def display_tokens(tokens: Sequence[str]) -> list[str]:
    """SentencePiece pieces as people read them: 'word' for ▁word, '##iece' for a continuation."""
    if not any(SP_SPACE in str(t) for t in tokens):
        return [_plain(str(t)) for t in tokens]
    out = []
    for i, t in enumerate(tokens):
        t = str(t)
        if t in SPECIAL:
            out.append(t)
        elif t.startswith(SP_SPACE):
            out.append(t[1:] or SP_SPACE)  # a lone ▁ (a space piece) stays visible
        elif i == 0 or tokens[i - 1] in SPECIAL or not any(c.isalnum() for c in t):
            out.append(t)  # sentence-initial piece or punctuation glued to a word
        else:
            out.append("##" + t)
    return [_plain(t) for t in out]


def _cell_and_font(n: int) -> tuple[float, float]:
    """Cell side (inches) and tick font size (points) for an axis of n tokens."""
    cell = float(np.clip(0.34 - 0.0015 * max(n - 20, 0), 0.2, 0.34))
    return cell, min(10.0, cell * 72 * 0.5)


def _layout(src: Sequence[str], tgt: Sequence[str], rows: int, cols: int) -> dict[str, float]:
    """Every length that decides the figure size, from the labels and the grid shape."""
    cell, font = _cell_and_font(max(len(src), len(tgt)))
    scale = 1.0 if rows * cols == 1 else 0.75  # grid panels are smaller; ticks only on edges
    cell, font = cell * scale, max(5.0, font * scale)
    longest_src = max((len(t) for t in src), default=1)
    longest_tgt = max((len(t) for t in tgt), default=1)
    return {
        "cell": cell,
        "font": font,
        "left": 0.5 + longest_tgt * font * _CHAR_W,  # target labels + "target" axis label
        "bottom": 0.5 + longest_src * font * _CHAR_W * 0.87,  # labels rotated by 60 degrees
        "top": 0.6 + (0.3 if rows * cols > 1 else 0.0),  # title (+ panel titles)
        "right": 1.1,  # colour bar
        "gap": 0.0 if rows * cols == 1 else 0.45,
    }


def figure_size(
    src_tokens: Sequence[str], tgt_tokens: Sequence[str], rows: int = 1, cols: int = 1
) -> tuple[float, float]:
    """Width and height in inches of the heatmap of these tokens (PNG pixels = inches x DPI)."""
    return _size(display_tokens(src_tokens), display_tokens(tgt_tokens), rows, cols)


def _size(src: list[str], tgt: list[str], rows: int, cols: int) -> tuple[float, float]:
    """figure_size for tokens already in display form."""
    g = _layout(src, tgt, rows, cols)
    width = g["left"] + cols * (len(src) * g["cell"] + g["gap"]) + g["right"]
    height = g["top"] + rows * (len(tgt) * g["cell"] + g["gap"]) + g["bottom"]
    return round(max(width, 3.0), 2), round(max(height, 2.5), 2)


def _check_weights(weights: Any, n_src: int, n_tgt: int, kind: str = "cross") -> np.ndarray:
    """Return weights as (layers, heads, T, S) float array, or say what is wrong with them."""
    if kind not in LABELS:
        raise NmtError(f"attention kind must be cross, self or decoder, got {kind!r}")
    cols, rows = LABELS[kind][0].split()[0], LABELS[kind][1].split()[0]
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 2:
        w = w[None, None]
    if w.ndim != 4:
        raise NmtError(
            f"attention weights must have shape (layers, heads, {rows}, {cols}) or "
            f"({rows}, {cols}), got shape {tuple(w.shape)}"
        )
    if w.shape[2:] != (n_tgt, n_src):
        raise NmtError(
            f"attention weights are {w.shape[2]} x {w.shape[3]} ({rows} x {cols}) but there are "
            f"{n_tgt} {rows} and {n_src} {cols} tokens"
        )
    if n_src == 0 or n_tgt == 0:
        raise NmtError("cannot draw attention for an empty source or target")
    if not np.isfinite(w).all():
        raise NmtError("attention weights contain NaN or infinity")
    return w


def _index(value: int | str, count: int, what: str, words: tuple[str, ...]) -> int | str:
    """Resolve a layer/head choice to an index (negative counts from the end) or a keyword."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in words:
            return v
        try:
            value = int(v)
        except ValueError:
            choices = " or ".join(f"'{x}'" for x in words)
            raise NmtError(f"{what} must be an integer or {choices}, got {value!r}") from None
    if not -count <= value < count:
        raise NmtError(
            f"{what} {value} is out of range: the model has {count} {what}s "
            f"(0 to {count - 1}, or negative from the end)"
        )
    return value % count


def _select(
    w: np.ndarray, layer: int | str, head: int | str
) -> tuple[list[tuple[str, np.ndarray]], int, int]:
    """The (panel title, T x S matrix) pairs to draw, and the grid's rows and columns."""
    n_layers, n_heads = w.shape[:2]
    li = _index(layer, n_layers, "layer", ("last", "all"))
    hi = _index(head, n_heads, "head", ("mean", "all"))
    if li == "all" and hi == "mean":  # the grid shows every layer x head
        hi = "all"
    layers = range(n_layers) if li == "all" else [n_layers - 1 if li == "last" else int(li)]
    heads = range(n_heads) if hi == "all" else [] if hi == "mean" else [int(hi)]
    panels = []
    for lay in layers:
        if hi == "mean":
            name = f"layer {lay}" + (f", mean of {n_heads} heads" if n_heads > 1 else "")
            name = "attention" if n_layers == n_heads == 1 else name  # Seq2Seq: one matrix
            panels.append((name, w[lay].mean(axis=0)))
        panels += [(f"layer {lay}, head {h}", w[lay, h]) for h in heads]
    return panels, len(layers), max(len(heads), 1)


def plot_attention(
    weights: Any,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    out_path: str | Path,
    layer: int | str = "last",
    head: int | str = "mean",
    title: str | None = None,
    kind: str = "cross",
) -> Path:
    """Draw attention as a heatmap (atomically written) and return its path: SVG or PDF when
    `out_path` ends so (vector, for papers), else PNG.

    `weights` is (layers, heads, target, source) (Seq2Seq: 1 x 1 x T x S) or (T, S): rows are
    `tgt_tokens`, columns `src_tokens`. `kind` (LABELS) names the axes: "cross" for
    source-target attention, "self" for the encoder's (source pieces on both axes), "decoder"
    for the decoder's masked self-attention (its input pieces, bos first, on both axes).
    `layer`: an index, "last" or "all"; `head`: an index, "mean" or "all". `layer="all"` draws a
    grid with one row per layer and one column per head (`head="mean"` there means every head;
    an index keeps that head only).
    """
    src, tgt = display_tokens(src_tokens), display_tokens(tgt_tokens)
    w = _check_weights(weights, len(src), len(tgt), kind)
    panels, rows, cols = _select(w, layer, head)
    out = Path(out_path)
    suffix = out.suffix.lower().lstrip(".")
    fmt = suffix if suffix in ("svg", "pdf") else "png"
    data = _render(panels, src, tgt, rows, cols, title, fmt, LABELS[kind])
    with atomic_write(out, "wb") as f:
        f.write(data)
    return out


def _render(
    panels: list[tuple[str, np.ndarray]],
    src: list[str],
    tgt: list[str],
    rows: int,
    cols: int,
    title: str | None,
    fmt: str = "png",
    labels: tuple[str, str, str] = LABELS["cross"],
) -> bytes:
    """The figure as `fmt` bytes (png, svg or pdf), `labels` on the axes and colour bar; fixed
    size, constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    g = _layout(src, tgt, rows, cols)
    fig = Figure(figsize=_size(src, tgt, rows, cols), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)
    vmax = max(float(m.max()) for _, m in panels) or 1.0
    image = None
    for ax, (name, matrix) in zip(axes.flat, panels, strict=True):
        image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=vmax, aspect="equal")
        ax.set_xticks(  # anchored rotation keeps long labels inside the figure
            range(len(src)),
            src,
            fontsize=g["font"],
            rotation=60,
            ha="right",
            rotation_mode="anchor",
        )
        ax.set_yticks(range(len(tgt)), labels=tgt, fontsize=g["font"])
        ax.tick_params(length=2, pad=1)
        if len(panels) > 1:
            ax.set_title(name, fontsize=g["font"] + 1)
            ax.label_outer()
    for ax in axes[-1]:
        ax.set_xlabel(labels[0], fontsize=g["font"] + 1)
    for ax in axes[:, 0]:
        ax.set_ylabel(labels[1], fontsize=g["font"] + 1)
    height = fig.get_size_inches()[1]
    assert image is not None  # panels are never empty (_select)
    fig.colorbar(image, ax=axes, label=labels[2], shrink=min(0.9, 6.0 / height))
    auto = panels[0][0] if len(panels) == 1 else f"attention: {rows} layer(s) x {cols} head(s)"
    width = fig.get_size_inches()[0]
    fig.suptitle(wrap_title(_plain(title) if title is not None else auto, width))
    buf = io.BytesIO()
    with warnings.catch_warnings():  # glyphs missing from the font are drawn as boxes
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.savefig(buf, format=fmt, dpi=DPI)
    return buf.getvalue()
