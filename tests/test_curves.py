"""`nmt plot`: training curves from metrics.jsonl; the JSON series are exactly the recorded values,
unknown events and torn lines are skipped, several models share one PNG, errors are one line."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.errors import NmtError
from nmt.plots.curves import curves


def fake_run(model_dir: Path, steps: int, seed: float) -> list[dict]:
    """A metrics.jsonl as nmt train writes it (start, train, epoch, valid, end), plus noise."""
    model_dir.mkdir(parents=True)
    events: list[dict] = [{"event": "start", "step": 0, "device": "cpu", "precision": "fp32"}]
    for step in range(10, steps + 1, 10):
        events.append({"event": "train", "step": step, "epoch": 1 + step // 40,
                       "loss": round(seed + 5 - step / 20, 4), "ppl": round(2.0 ** (6 - step / 20), 2),
                       "tok_s": 1000.0 + step, "rss_mb": 900 + step, "elapsed": step * 1.5})  # fmt: skip
        if step % 20 == 0:
            events.append({"event": "valid", "step": step, "epoch": 1 + step // 40,
                           "valid_loss": seed + 4 - step / 25, "valid_ppl": 50 - step / 10,
                           "bleu": seed + step / 4, "elapsed": step * 1.5 + 2})  # fmt: skip
        if step % 40 == 0:
            events.append({"event": "epoch", "step": step, "epoch": step // 40, "batches": 4})
    events.append({"event": "end", "step": steps, "seconds": steps * 1.5})
    text = "".join(json.dumps(e) + "\n" for e in events) + '{"event": "train", "step": 9'  # torn
    (model_dir / "metrics.jsonl").write_text(text, encoding="utf-8")
    return events


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_json_series_match_metrics_jsonl(tmp_path):
    a, b = tmp_path / "noattn", tmp_path / "bahdanau"
    ev_a, ev_b = fake_run(a, 80, 0.0), fake_run(b, 60, 1.0)
    r = run("plot", str(a), str(b), "--json", "--x", "steps", "--y", "bleu")
    assert r.exit_code == 0, r.output
    series = json.loads(r.stdout)
    assert [(s["model"], s["event"], s["y"]) for s in series] == [
        ("noattn", "valid", "bleu"), ("bahdanau", "valid", "bleu")
    ]  # fmt: skip
    for s, events in zip(series, (ev_a, ev_b), strict=True):
        valid = [e for e in events if e["event"] == "valid"]
        assert s["x"] == [e["step"] for e in valid] and s["values"] == [e["bleu"] for e in valid]
    r = run("plot", str(a), "--json", "--x", "minutes", "--y", "loss")
    train, valid = json.loads(r.stdout)
    rows = [e for e in ev_a if e["event"] == "train"]
    assert (train["event"], valid["event"], valid["y"]) == ("train", "valid", "valid_loss")
    assert train["x"] == pytest.approx([e["elapsed"] / 60 for e in rows])
    assert train["values"] == [e["loss"] for e in rows]
    (epochs,) = [s for s in curves([str(a)], "epochs", "ppl") if s.kind == "train"][:1]
    assert epochs.x == [float(e["epoch"]) for e in rows]


def test_png_written_for_several_models(tmp_path):
    a, b = tmp_path / "m1", tmp_path / "m2"
    fake_run(a, 80, 0.0)
    fake_run(b, 40, 2.0)
    for y in ("bleu", "loss", "ppl"):
        out = tmp_path / f"curves-{y}.png"
        r = run("plot", str(a), str(b), "-o", str(out), "--y", y, "-q")
        assert r.exit_code == 0, r.output
        data = out.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", data[16:24]) == (700, 450)


def test_speed_and_memory_are_training_series(tmp_path):
    a = tmp_path / "m"
    rows = [e for e in fake_run(a, 40, 0.0) if e["event"] == "train"]
    for y, key in (("tok_s", "tok_s"), ("rss", "rss_mb")):
        r = run("plot", str(a), "--json", "--x", "steps", "--y", y)
        assert r.exit_code == 0, r.output
        (series,) = json.loads(r.stdout)  # no validation series for these
        assert (series["event"], series["y"]) == ("train", key)
        assert series["values"] == [e[key] for e in rows] and series["x"] == [10, 20, 30, 40]
    png = tmp_path / "rss.png"
    assert run("plot", str(a), "-o", str(png), "--y", "rss", "-q").exit_code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_errors_are_one_line(tmp_path):
    a = tmp_path / "m"
    fake_run(a, 20, 0.0)
    r = run("plot", str(a), "--x", "hours", "--json")
    assert (
        r.exit_code == 2 and "--x: expected one of minutes, steps, epochs, got 'hours'" in r.output
    )
    r = run("plot", str(a))
    assert r.exit_code == 2 and "nothing to do: give -o FILE.png and/or --json" in r.output
    missing = tmp_path / "nope"
    r = run("plot", str(missing), "--json")
    assert r.exit_code == 2 and f"{missing}/metrics.jsonl: file not found" in r.output
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text('{"event": "start", "step": 0}\n', encoding="utf-8")
    with pytest.raises(NmtError, match="^no validation events with bleu in the metrics.jsonl of "):
        curves([str(empty)])
