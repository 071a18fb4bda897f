"""Attention heatmaps: valid PNGs whose size follows the sentence lengths, the right matrix drawn
for each layer/head choice, clear errors, atomic writes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from nmt.errors import NmtError
from nmt.plots.heatmaps import DPI, display_tokens, figure_size, plot_attention

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SRC = ["▁A", "▁man", "▁star", "ing", "▁.", "</s>"]
TGT = ["▁Ein", "▁Mann", "▁st", "arrt", ".", "</s>"]


def _weights(layers: int, heads: int, t: int, s: int, seed: int = 0) -> np.ndarray:
    """Row-stochastic random attention, (layers, heads, T, S)."""
    x = np.random.default_rng(seed).random((layers, heads, t, s)) ** 4
    return x / x.sum(-1, keepdims=True)


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG"
        return im.size


def _expected_px(src, tgt, rows=1, cols=1) -> tuple[int, int]:
    w, h = figure_size(src, tgt, rows, cols)
    return round(w * DPI), round(h * DPI)


def test_seq2seq_png_has_the_expected_size(tmp_path):
    """A (1, 1, T, S) matrix gives a valid PNG of figure_size x DPI pixels."""
    out = plot_attention(_weights(1, 1, len(TGT), len(SRC)), SRC, TGT, tmp_path / "a.png")
    assert out == tmp_path / "a.png"
    assert _png_size(out) == _expected_px(SRC, TGT)
    assert not [p for p in tmp_path.iterdir() if p.name != "a.png"]  # no temp file left


def test_image_grows_with_sentence_length(tmp_path):
    """Long sentences get bigger pictures: 10 more source pieces add 10 cells of width exactly."""
    src_a = [f"▁w{i:02d}" for i in range(8)]
    src_b = [f"▁w{i:02d}" for i in range(18)]
    tgt = [f"▁v{i:02d}" for i in range(12)]
    a = _png_size(plot_attention(_weights(1, 1, 12, 8), src_a, tgt, tmp_path / "a.png"))
    b = _png_size(plot_attention(_weights(1, 1, 12, 18), src_b, tgt, tmp_path / "b.png"))
    assert a == _expected_px(src_a, tgt) and b == _expected_px(src_b, tgt)
    assert b[1] == a[1]  # same target length, same height
    assert abs((b[0] - a[0]) - 10 * 0.34 * DPI) <= 1  # 0.34 inch per token for short sentences
    # Very long sentences: cells shrink to no less than 0.2 inch, so the picture keeps growing.
    long = [f"▁t{i}" for i in range(120)]
    big = _expected_px(long, long)
    assert big[0] > 120 * 0.2 * DPI and big[1] > 120 * 0.2 * DPI


def test_grid_draws_every_layer_and_head(tmp_path):
    """layer='all' makes a layers x heads grid; with a head index, one column per layer."""
    w = _weights(2, 3, len(TGT), len(SRC))
    grid = _png_size(plot_attention(w, SRC, TGT, tmp_path / "g.png", layer="all"))
    assert grid == _expected_px(SRC, TGT, rows=2, cols=3)
    column = _png_size(plot_attention(w, SRC, TGT, tmp_path / "c.png", layer="all", head=1))
    assert column == _expected_px(SRC, TGT, rows=2, cols=1)
    one = _png_size(plot_attention(w, SRC, TGT, tmp_path / "o.png"))
    assert grid[0] > column[0] > 0 and grid[1] == column[1] > one[1]


def test_layer_and_head_select_the_right_matrix(tmp_path):
    """The picture for (layer, head) is the picture of exactly that T x S matrix."""
    w = _weights(3, 2, len(TGT), len(SRC))

    def png(weights, name, **kw) -> bytes:
        return plot_attention(weights, SRC, TGT, tmp_path / name, title="t", **kw).read_bytes()

    last_mean = png(w[2].mean(axis=0), "ref_mean.png")
    assert png(w, "a.png") == last_mean  # defaults: last layer, mean of heads
    assert png(w, "b.png", layer=-1, head="mean") == last_mean
    assert png(w, "c.png", layer="2") == last_mean  # the CLI passes strings
    assert png(w, "d.png", layer=0, head=1) == png(w[0, 1], "ref_01.png")
    assert png(w, "e.png", layer=0, head=1) != png(w, "f.png", layer=0, head=0)


def test_each_peak_cell_is_one_yellow_square(tmp_path):
    """A weight at the top of the scale fills one square cell with viridis' yellow."""

    def yellow_pixels(peaks: list[tuple[int, int]], name: str) -> int:
        w = np.full((len(TGT), len(SRC)), 0.05)
        for t, s in peaks:
            w[t, s] = 1.0
        with Image.open(plot_attention(w, SRC, TGT, tmp_path / name, title="t")) as im:
            rgb = np.asarray(im.convert("RGB")).astype(int)
        return int((np.abs(rgb - [253, 231, 37]).sum(-1) < 30).sum())

    one = yellow_pixels([(0, 0)], "one.png")
    two = yellow_pixels([(0, 0), (3, 4)], "two.png")
    three = yellow_pixels([(0, 0), (3, 4), (5, 1)], "three.png")
    cell = two - one
    assert cell >= (0.2 * DPI) ** 2  # a legible cell: at least 0.2 inch square
    assert abs((three - two) - cell) <= 0.05 * cell  # every peak is one cell of the same size
    assert one >= 0.9 * cell


def test_display_tokens():
    """▁ starts a word (dropped), continuations get ##, punctuation and specials stay as they are."""
    pieces = ["▁The", "▁Hund", "e", "s", ",", "▁", "$5", "</s>", "x"]
    shown = ["The", "Hund", "##e", "##s", ",", "▁", r"##\$5", "</s>", "x"]
    assert display_tokens(pieces) == shown
    assert display_tokens(["plain", "words"]) == ["plain", "words"]


def test_dollar_signs_and_non_latin_tokens_render(tmp_path):
    """Tokens are never parsed as math; scripts missing from the font do not crash."""
    src = ["▁$5", "▁a$b$c", "▁猫", "▁кот"]
    out = plot_attention(_weights(1, 1, 2, 4), src, ["▁x", "▁$y$"], tmp_path / "d.png")
    assert _png_size(out) == _expected_px(src, ["▁x", "▁$y$"])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"layer": 3}, "layer 3 is out of range: the model has 3 layers (0 to 2"),
        ({"layer": -4}, "layer -4 is out of range"),
        ({"head": 2}, "head 2 is out of range: the model has 2 heads (0 to 1"),
        ({"head": "max"}, "head must be an integer or 'mean' or 'all', got 'max'"),
        ({"layer": "first"}, "layer must be an integer or 'last' or 'all', got 'first'"),
        ({"layer": "all", "head": 5}, "head 5 is out of range"),
    ],
)
def test_bad_layer_or_head_is_a_clear_error(tmp_path, kwargs, message):
    """Bad indices raise NmtError naming the valid range; nothing is written."""
    out = tmp_path / "x.png"
    with pytest.raises(NmtError) as e:
        plot_attention(_weights(3, 2, len(TGT), len(SRC)), SRC, TGT, out, **kwargs)
    assert message in str(e.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "weights,message",
    [
        (np.ones((1, 1, 5, 6)), "attention weights are 5 x 6 (target x source) but there are 6"),
        (np.ones((2, 6, 6)), "must have shape (layers, heads, target, source)"),
        (np.full((6, 6), np.nan), "NaN or infinity"),
    ],
)
def test_bad_weights_are_a_clear_error(tmp_path, weights, message):
    """Shape mismatches and non-finite values are NmtError, not a matplotlib traceback."""
    with pytest.raises(NmtError) as e:
        plot_attention(weights, SRC, TGT, tmp_path / "x.png")
    assert message in str(e.value)


def test_a_failed_plot_leaves_the_old_file(tmp_path):
    """Atomic write: a bad call never clobbers or truncates an existing picture."""
    out = tmp_path / "keep.png"
    out.write_bytes(b"old")
    with pytest.raises(NmtError):
        plot_attention(_weights(1, 1, 6, 6), SRC, TGT, out, layer=9)
    assert out.read_bytes() == b"old"
    plot_attention(_weights(1, 1, 6, 6), SRC, TGT, out)
    assert out.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_self_attention_kinds_label_their_axes(tmp_path):
    """`kind` self / decoder: a square map of one sequence, the same size as cross attention
    of the same pieces, its axes and colour bar named after the kind (in an SVG's text)."""
    w = _weights(2, 2, len(SRC), len(SRC))
    for kind, words in (
        ("self", ["encoder self-attention weight"]),
        ("decoder", ["target (decoder input)", "decoder self-attention weight"]),
    ):
        png = plot_attention(w, SRC, SRC, tmp_path / f"{kind}.png", kind=kind)
        assert _png_size(png) == _expected_px(SRC, SRC)
        svg = plot_attention(w, SRC, SRC, tmp_path / f"{kind}.svg", kind=kind, layer="all")
        text = svg.read_text()
        assert all(f"<!-- {word} -->" in text for word in words), kind
    cross = plot_attention(w, SRC, SRC, tmp_path / "cross.svg").read_text()
    assert "<!-- attention weight -->" in cross and "self-attention" not in cross


@pytest.mark.parametrize(
    "kind,weights,message",
    [
        ("self", np.ones((1, 1, 5, 6)), "attention weights are 5 x 6 (source x source) but"),
        ("decoder", np.ones((2, 6, 6)), "must have shape (layers, heads, target, target)"),
        (
            "encoder",
            np.ones((6, 6)),
            "attention kind must be cross, self or decoder, got 'encoder'",
        ),
    ],
)
def test_bad_kind_or_self_attention_shape_is_a_clear_error(tmp_path, kind, weights, message):
    with pytest.raises(NmtError) as e:
        plot_attention(weights, SRC, SRC, tmp_path / "x.png", kind=kind)
    assert message in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_a_long_title_is_folded_to_the_figure_width():
    from nmt.plots.heatmaps import wrap_title

    sentence = " ".join(["provision"] * 40)  # 399 characters
    folded = wrap_title(f"{sentence}\n{sentence}", width_inches=8.0)
    lines = folded.split("\n")
    assert len(lines) > 4 and all(len(line) <= 8 * 72 / (12 * 0.55) for line in lines)
    assert folded.replace("\n", " ") == f"{sentence} {sentence}"  # every word kept, in order
    assert wrap_title("short\nlines", 8.0) == "short\nlines"
