"""scripts/bench_length.py: a row per model and length with real rates, decoding held to exactly
`length` steps, the two-panel plot, the Transformer / RNN ratios, bad input as one line."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "bench_length.py"


def _bench(*args: str) -> subprocess.CompletedProcess:
    """The script in its own process (it sets threads and the allocator for itself)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True
    )


def _module():
    """scripts/bench_length.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_length", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_quick_run_times_every_model_at_every_length(tmp_path):
    out, png = tmp_path / "len.json", tmp_path / "len.png"
    proc = _bench(
        "--quick", "--lengths", "10,20", "--presets", "seq2seq-tiny,transformer-tiny",
        "--threads", "1", "--tokens", "1000", "--device", "cpu", "--json", str(out),
        "--plot", str(png),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text(encoding="utf-8"))
    rows = result["rows"]
    assert [(r["preset"], r["length"]) for r in rows] == [
        ("seq2seq-tiny", 10), ("seq2seq-tiny", 20), ("transformer-tiny", 10),
        ("transformer-tiny", 20),
    ]  # fmt: skip
    for r in rows:
        n = r["length"]
        assert r["precision"] == "fp32" and r["repeats"] == 2
        assert r["batch_size"] == 1000 // n and r["train_tokens"] == (1000 // n) * n
        assert r["decode_steps"] == n and r["decode_tokens"] == n  # no early eos, no extra step
        for key in ("train_tok_s", "train_ms", "decode_tok_s", "decode_ms"):
            assert r[key] > 0, key
        assert abs(r["train_tok_s"] * r["train_ms"] / 1000 / r["train_tokens"] - 1) < 0.01
        assert abs(r["decode_tok_s"] * r["decode_ms"] / 1000 / n - 1) < 0.01
    assert (
        result["threads"] == 1 and result["device"] == "cpu" and result["gemm_gflops"]["fp32"] > 0
    )
    assert result["denormals"] == "flushed"  # as nmt train runs
    assert [(q["preset"], q["baseline"], q["length"]) for q in result["ratios"]] == [
        ("transformer-tiny", "seq2seq-tiny", 10), ("transformer-tiny", "seq2seq-tiny", 20),
    ]  # fmt: skip
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("; threads 1") and lines[1].endswith("; threads 1; device cpu")
    assert lines[2].startswith("GEMM 4096x1024x1024 now: fp32 ")
    table = [line.split()[:4] for line in lines if line.startswith(("seq2seq-", "transformer-"))]
    assert (
        table
        == [[r["preset"], "fp32", str(r["length"]), str(r["batch_size"])] for r in rows]
        + [["transformer-tiny", "/", "seq2seq-tiny", "fp32"]] * 2
    )
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    assert width > height > 0  # two panels side by side


def _row(preset: str, kind: str, length: int, train: float, decode: float) -> dict:
    return {
        "preset": preset, "type": kind, "precision": "fp32", "length": length, "batch_size": 4,
        "train_tok_s": train, "train_ms": 1.0, "decode_tok_s": decode, "decode_ms": 2.0,
    }  # fmt: skip


def test_ratios_are_each_transformer_over_the_first_rnn_at_the_same_length():
    bench = _module()
    rows = [
        _row("rnn", "seq2seq", 10, 1000.0, 400.0), _row("rnn", "seq2seq", 20, 500.0, 400.0),
        _row("rnn2", "seq2seq", 10, 10.0, 10.0),  # not the baseline: the first RNN is
        _row("tf", "transformer", 10, 3000.0, 200.0), _row("tf", "transformer", 20, 2500.0, 100.0),
        _row("tf", "transformer", 40, 2000.0, 50.0),  # no RNN at 40: no ratio
    ]  # fmt: skip
    got = [(q["preset"], q["baseline"], q["length"], q["train"], q["decode"])
           for q in bench.ratios(rows)]  # fmt: skip
    assert got == [("tf", "rnn", 10, 3.0, 0.5), ("tf", "rnn", 20, 5.0, 0.25)]
    lines = bench.table(rows[:1], bench.ratios(rows)[:1])
    assert lines[1].split() == ["rnn", "fp32", "10", "4", "1,000", "1.0", "400", "2.00"]
    assert lines[-1].split() == ["tf", "/", "rnn", "fp32", "10", "3.00x", "0.50x"]


@pytest.mark.slow
def test_bad_lengths_are_one_line_errors():
    proc = _bench("--lengths", "10,x")
    assert (proc.returncode, proc.stderr) == (
        2, "error: --lengths '10,x': expected integers separated by commas\n"
    )  # fmt: skip
    proc = _bench("--lengths", "20,300", "--presets", "transformer-tiny")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "error: --lengths: transformer-tiny takes at most 256 tokens, got 300\n"
