"""Batch-composition invariance: at the defaults (precision auto, which decodes in fp32 even on a
CPU with native bf16) a line translates exactly the same alone as in a batch, whatever
`--batch-tokens`, `--workers` or `--buffer-size`, from a file or a pipe; explicit bf16 is the faster
choice that does not promise it, and the check still runs on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_translate import build_tiny_model_dir, synthetic_lines
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.decode.options import Sampling
from nmt.dirs import ModelDir
from nmt.engines.translator import Translator
from nmt.eval.invariance import check


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("inv"))


@pytest.fixture(scope="module")
def translator(model_dir) -> Translator:
    """The defaults on a CPU that multiplies bf16 natively (forced, whatever this CPU is)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NMT_CPU_BF16", "1")
        tr = Translator.from_dir(ModelDir(model_dir), device="cpu")
    assert tr.precision == "fp32"
    return tr


@pytest.mark.parametrize("beam", [1, 5])
@pytest.mark.slow
def test_alone_equals_batched_at_the_defaults(translator, beam):
    lines = synthetic_lines(120, seed=11)
    report = check(translator, lines, beam_size=beam, batch_tokens=2048)
    assert report.differences == []
    assert (report.lines, report.identical) == (120, 120)


@pytest.mark.filterwarnings("ignore:this CPU has no native bf16")
@pytest.mark.slow
def test_the_check_runs_on_explicit_bf16(model_dir, monkeypatch):
    """bf16 may translate a line differently in a batch (no difference is asserted either way);
    the check counts every line once and reports each difference with both scores."""
    monkeypatch.setenv("NMT_CPU_BF16", "1")
    tr = Translator.from_dir(ModelDir(model_dir), device="cpu", precision="bf16")
    assert tr.precision == "bf16"
    assert {p.dtype for p in tr.model.parameters()} == {torch.bfloat16}
    lines = synthetic_lines(60, seed=11)
    report = check(tr, lines, beam_size=5, batch_tokens=2048)
    assert report.lines == 60 and report.identical + len(report.differences) == 60
    for d in report.differences:
        assert d.alone != d.batched and 1 <= d.line <= 60
        assert d.score_alone == d.score_alone and d.score_batched == d.score_batched  # not NaN


@pytest.mark.slow
def test_cli_output_does_not_depend_on_batching(model_dir, tmp_path, monkeypatch):
    """`nmt translate` at the defaults: the same output byte for byte for a file or a pipe, one
    line at a time, tiny batches, several workers or small chunks."""
    monkeypatch.setenv("NMT_CPU_BF16", "1")
    lines = synthetic_lines(48, seed=21) + [""] + synthetic_lines(12, seed=22)
    src = tmp_path / "in.txt"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    runner = CliRunner()

    def translate(*args: str, pipe: bool = False) -> str:
        cmd = ["translate", "-m", str(model_dir), "-q", *args]
        text = src.read_text(encoding="utf-8") if pipe else None
        r = runner.invoke(app, cmd if pipe else [*cmd, str(src)], input=text)
        assert r.exit_code == 0, r.output
        return r.stdout

    want = translate()
    assert len(want.splitlines()) == len(lines)
    variants = {
        "pipe": translate(pipe=True),
        "--buffer-size 1": translate("--buffer-size", "1"),
        "--buffer-size 7": translate("--buffer-size", "7"),
        "--batch-tokens 16": translate("--batch-tokens", "16"),
        "--workers 2": translate("--workers", "2", "--batch-tokens", "64"),
    }
    assert {k: v for k, v in variants.items() if v != want} == {}


def test_report_counts_a_real_difference(translator, monkeypatch):
    lines = synthetic_lines(5, seed=2)
    real = translator.translate

    def skewed(batch, **kw):  # a batch-dependent bug: batched line 3 comes back changed
        out = real(batch, **kw)
        if len(batch) > 1:
            out[2].hypotheses[0].text += " x"
        return out

    monkeypatch.setattr(translator, "translate", skewed)
    report = check(translator, lines, beam_size=1)
    assert (report.identical, [d.line for d in report.differences]) == (4, [3])
    assert report.to_json()["fraction"] == 0.8


def test_lines_alone_keep_their_numbers(translator):
    """Alone, line i is still line i: its samples (keyed by line number) and its warnings."""
    lines = synthetic_lines(6, seed=4)
    report = check(translator, lines, sampling=Sampling(seed=3), on_warning=print)
    assert report.identical == 6, report.differences
    long = " ".join(synthetic_lines(30, seed=5))  # beyond max_positions: truncated, warned
    warned: list[str] = []
    check(translator, ["a man .", long], beam_size=1, on_warning=warned.append)
    assert [w.split(":")[0] for w in warned] == ["line 2", "line 2"]  # batched, then alone
