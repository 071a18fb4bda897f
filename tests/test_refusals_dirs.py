"""Every refusal of `nmt train`, `nmt average`, `nmt plot` and `nmt export` is the library's: the
command line prints it as one line and exits non-zero, and the library function the command calls
raises the same message."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.dirs import DataDir, ModelDir
from nmt.errors import NmtError

runner = CliRunner()


@dataclass(frozen=True)
class Refusal:
    """A command line (its paths under `tmp`) and the library call it makes, refused alike."""

    name: str
    args: Callable[[Path], list[str]]
    call: Callable[[Path], object]


def _train(tmp: Path) -> object:
    from nmt.config import load_config
    from nmt.train.loop import train

    cfg = load_config(preset="transformer-tiny")
    return train(cfg, DataDir.at(tmp), ModelDir.at(tmp / "m"), "cpu", resume=True, force=True)


def _average(tmp: Path) -> object:
    from nmt.train.selection import average

    return average(ModelDir.at(tmp / "m"))


def _plot(output: str | None, x: str = "minutes") -> Callable[[Path], object]:
    def call(tmp: Path) -> object:
        from nmt.plots.curves import plot_runs

        return plot_runs([str(tmp / "m")], x, "bleu", output and str(tmp / output))

    return call


def _export(fmt: str, quantization: str) -> Callable[[Path], object]:
    def call(tmp: Path) -> object:
        from nmt.export import export

        return export(ModelDir.at(tmp / "m"), tmp / "out", fmt, quantization)

    return call


REFUSALS = [
    Refusal(
        "train --resume --force",
        lambda t: (
            ["train", "-p", "transformer-tiny", "-d", str(t), "-o", str(t / "m")]
            + ["--device", "cpu", "--resume", "--force"]
        ),
        _train,
    ),
    Refusal("average without --last/--best", lambda t: ["average", "-m", str(t / "m")], _average),
    Refusal("plot with nothing to do", lambda t: ["plot", str(t / "m")], _plot(None)),
    Refusal(
        "plot on an unknown axis",
        lambda t: ["plot", str(t / "m"), "--x", "hours", "-o", str(t / "c.png")],
        _plot("c.png", x="hours"),
    ),
    Refusal(
        "export to an unknown format",
        lambda t: ["export", "-m", str(t / "m"), "-o", str(t / "out"), "--format", "onnx"],
        _export("onnx", "float32"),
    ),
    Refusal(
        "export with an unknown quantization",
        lambda t: ["export", "-m", str(t / "m"), "-o", str(t / "out"), "--quantization", "int4"],
        _export("ctranslate2", "int4"),
    ),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.name for r in REFUSALS])
def test_the_command_line_and_the_library_refuse_alike(refusal: Refusal, tmp_path: Path) -> None:
    with pytest.raises(NmtError) as e:
        refusal.call(tmp_path)
    r = runner.invoke(app, refusal.args(tmp_path))
    assert r.exit_code != 0
    assert r.stderr == f"error: {e.value}\n"
