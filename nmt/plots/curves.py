"""Training curves from MODEL_DIR/metrics.jsonl (`nmt plot`): validation BLEU, or training loss /
perplexity, against wall-clock minutes, steps or epochs, for one or several models in one figure.

Reads the events nmt.train.log writes: "train" (step, epoch, loss, ppl, tok_s, rss_mb, elapsed)
and "valid" (step, epoch, valid_loss, valid_ppl, bleu, elapsed); other events and torn lines are
skipped.
Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmt.dirs.model import ModelDir
from nmt.errors import NmtError

X_AXES = {"minutes": "elapsed", "steps": "step", "epochs": "epoch"}
Y_AXES = ("bleu", "loss", "ppl", "tok_s", "rss")
Y_KEYS = {"rss": "rss_mb"}  # --y name -> metrics.jsonl key where they differ
X_LABELS = {"minutes": "wall-clock minutes", "steps": "training steps", "epochs": "epoch"}
_Y_TEXT = {  # --y name -> (axis label, what the axis label adds to it)
    "bleu": ("validation BLEU", ""),
    "loss": ("loss", " (solid: training, dashed: validation)"),
    "ppl": ("perplexity", " (log scale)"),
    "tok_s": ("training target tokens/s", ""),
    "rss": ("resident memory (MB)", ""),
}
Y_LABELS = {y: label for y, (label, _) in _Y_TEXT.items()}
Y_NOTES = {y: note for y, (_, note) in _Y_TEXT.items()}


@dataclass
class Series:
    """One line of the figure: a model's values of one quantity."""

    model: str
    kind: str  # "valid" or "train"
    y: str  # metrics.jsonl key: bleu, loss, ppl, valid_loss, valid_ppl, tok_s, rss_mb
    x: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The series as plain lists."""
        names = {"model": self.model, "event": self.kind, "y": self.y}
        return {**names, "x": self.x, "values": self.values}


def read_events(model_dir: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of MODEL_DIR/metrics.jsonl (blank or torn lines skipped)."""
    path = ModelDir.at(model_dir).metrics_path
    if not path.is_file():
        raise NmtError(f"{path}: file not found (is {model_dir} a model directory of nmt train?)")
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            events.append(row)
    return events


def _x_value(row: dict[str, Any], x: str) -> float | None:
    """The x coordinate of an event (minutes from `elapsed` seconds)."""
    v = row.get(X_AXES[x])
    if not isinstance(v, (int, float)):
        return None
    return v / 60.0 if x == "minutes" else float(v)


def _series(label: str, events: list[dict], kind: str, key: str, x: str) -> Series:
    """The (x, value) points of one key of one event kind, in file order."""
    s = Series(label, kind, key)
    for row in events:
        if row.get("event") != kind:
            continue
        xv, yv = _x_value(row, x), row.get(key)
        if xv is not None and isinstance(yv, (int, float)):
            s.x.append(xv)
            s.values.append(float(yv))
    return s


def check_axes(x: str, y: str) -> None:
    """Refuse unknown --x / --y values in one line."""
    if x not in X_AXES:
        raise NmtError(f"--x: expected one of {', '.join(X_AXES)}, got {x!r}")
    if y not in Y_AXES:
        raise NmtError(f"--y: expected one of {', '.join(Y_AXES)}, got {y!r}")


def model_labels(model_dirs: list[str]) -> list[str]:
    """The directory names, or the paths as given when two names are the same."""
    names = [Path(d).resolve().name or str(d) for d in model_dirs]
    return names if len(set(names)) == len(names) else list(model_dirs)


def curves(model_dirs: list[str], x: str = "minutes", y: str = "bleu") -> list[Series]:
    """Per model: validation BLEU, or train loss/ppl plus validation loss/ppl where recorded, or
    the training speed or memory of each log interval."""
    check_axes(x, y)
    if not model_dirs:
        raise NmtError("give at least one MODEL_DIR")
    out = []
    for label, d in zip(model_labels(model_dirs), model_dirs, strict=True):
        events = read_events(d)
        if y == "bleu":
            out.append(_series(label, events, "valid", "bleu", x))
        else:
            out.append(_series(label, events, "train", Y_KEYS.get(y, y), x))
            valid = _series(label, events, "valid", f"valid_{y}", x)
            if valid.x:
                out.append(valid)
    if not any(s.x for s in out):
        kind = "validation" if y == "bleu" else "training"
        raise NmtError(f"no {kind} events with {y} in the metrics.jsonl of {', '.join(model_dirs)}")
    return out


def plot_curves(series: list[Series], path: str | Path, x: str, y: str) -> Path:
    """One colour per model; training solid, validation dashed (loss / ppl); PNG."""
    from nmt.plots.figures import new_figure, save_png, style

    fig, ax = new_figure(7.0, 4.5)
    models = list(dict.fromkeys(s.model for s in series))
    for s in series:
        st = style(models.index(s.model))
        if not s.x:
            continue
        valid_of_train = y != "bleu" and s.kind == "valid"
        look = {"color": st["color"], "linewidth": 1.8, "markersize": 4}
        linestyle = "--" if valid_of_train else "-"
        marker = None if len(s.x) > 30 else st["marker"]  # a dense curve: the line alone
        label = f"{s.model} (valid)" if valid_of_train else s.model
        ax.plot(s.x, s.values, **look, linestyle=linestyle, marker=marker, label=label)
    if y == "ppl":
        ax.set_yscale("log")
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel(Y_LABELS[y] + Y_NOTES[y])
    ax.set_title(f"{Y_LABELS[y]} by {X_LABELS[x]}")
    ax.legend(frameon=False)
    return save_png(fig, path)


def plot_runs(
    model_dirs: list[str], x: str, y: str, output: str | Path | None, series: bool = False
) -> tuple[list[Series], Path | None]:
    """`nmt plot`: the curves of `model_dirs`, drawn into the PNG `output` when one is given;
    returns them (for `series`, the plotted data) and the PNG written. Asking for neither is
    refused."""
    check_axes(x, y)
    if output is None and not series:
        raise NmtError("nothing to do: give -o FILE.png and/or --json")
    found = curves(model_dirs, x, y)
    return found, None if output is None else plot_curves(found, output, x, y)
