"""The deployment path never imports torch: `nmt translate`, `rescore`, `evaluate` and `serve` on
an `nmt export` directory decode through CTranslate2 alone, so they start in a fraction of a
second and run where torch is not installed (nor safetensors and matplotlib, the rest of the
`torch` extra). Each command runs in its own process under `python -X importtime`, which names
every module the process imports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_translate import build_tiny_model_dir

pytest.importorskip("ctranslate2")

from nmt.dirs import ModelDir
from nmt.export.ctranslate2 import export_ctranslate2  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NMT = [sys.executable, "-X", "importtime", "-m", "nmt"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("torch_free"))


@pytest.fixture(scope="module")
def export(model_dir) -> Path:
    return export_ctranslate2(ModelDir(model_dir), model_dir.parent / "export", quiet=True)


def imported(importtime: str) -> set[str]:
    """The modules named by `-X importtime` lines ("import time: self | cumulative | name")."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def torch_modules(modules: set[str]) -> set[str]:
    """The modules of the `torch` extra's packages (torch, safetensors, matplotlib)."""
    return {m for m in modules if m.partition(".")[0] in ("torch", "safetensors", "matplotlib")}


def run_nmt(args: list[str], stdin: str = "") -> tuple[str, set[str]]:
    """(stdout, modules imported) of `python -m nmt ARGS`, which must succeed."""
    out = subprocess.run([*NMT, *args], input=stdin, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, imported(out.stderr)


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--format", "jsonl", "--with-attention", "--nbest", "2", "--beam-size", "3"],
        ["--split-sentences", "--format", "jsonl"],
    ],
    ids=["text", "jsonl-attention", "split-sentences"],
)
def test_translate_an_export_without_torch(export, options):
    out, modules = run_nmt(["translate", "-m", str(export), "--device", "cpu", *options],
                           stdin="a man in a blue shirt .\n\ntwo dogs play\n")  # fmt: skip
    assert len(out.splitlines()) == 3  # one line per input line
    assert "nmt.engines.ct2" in modules and "ctranslate2" in modules
    assert not torch_modules(modules)


@pytest.mark.slow
def test_the_check_sees_torch_where_it_is_used(model_dir):
    """A model directory decodes with PyTorch: the same check finds torch there."""
    _, modules = run_nmt(["translate", "-m", str(model_dir), "--device", "cpu"], stdin="a man\n")
    assert "torch" in modules


def test_rescore_an_export_without_torch(export, tmp_path):
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("a man in a blue shirt .\ntwo dogs play\n")
    tgt.write_text("ein mann\nzwei hunde\n")
    out, modules = run_nmt(["rescore", str(src), str(tgt), "-m", str(export), "-q",
                            "--device", "cpu", "--format", "jsonl"])  # fmt: skip
    assert len(out.splitlines()) == 2
    assert "nmt.decode.rescore" in modules and "nmt.engines.ct2" in modules
    assert not torch_modules(modules)


def test_evaluate_an_export_without_torch(export, tmp_path):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("a man in a blue shirt .\ntwo dogs play\n")
    ref.write_text("ein mann\nzwei hunde\n")
    args = ["evaluate", "-m", str(export), "--src", str(src), "-r", str(ref), "--device", "cpu",
            "-q", "--json", "-o", str(tmp_path / "hyp.txt")]  # fmt: skip
    out, modules = run_nmt(args)
    assert [r["name"] for r in json.loads(out)] == ["BLEU"]
    hyps, _ = run_nmt(["translate", "-m", str(export), "--device", "cpu", "-q", str(src)])
    assert (tmp_path / "hyp.txt").read_text() == hyps  # what translate writes is what is scored
    assert "nmt.eval.evaluate" in modules and "nmt.engines.ct2" in modules
    assert not torch_modules(modules)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    """Until GET /health answers 200 (bounded); a server that exits fails with its log."""
    import httpx

    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"server exited: {log.read_text()[-2000:]}"
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "server not ready within 60 s"
        time.sleep(0.1)


def test_serve_an_export_without_torch(export, tmp_path):
    pytest.importorskip("fastapi")
    import httpx

    port, log = free_port(), tmp_path / "serve.log"
    cmd = [*NMT, "serve", "-m", str(export), "--port", str(port), "--device", "cpu", "--quiet"]
    with log.open("w") as err:  # a file: the import log may outgrow a pipe nobody reads
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        r = httpx.post(url + "/translate", json={"text": ["a man in a blue shirt ."]}, timeout=30)
        assert r.status_code == 200 and len(r.json()["translations"]) == 1
        r = httpx.post(
            url + "/score", json={"source": ["a man"], "target": ["ein mann"]}, timeout=30
        )
        assert r.status_code == 200 and len(r.json()["scores"]) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    modules = imported(log.read_text())
    assert "nmt.serve.app" in modules and "nmt.engines.ct2" in modules
    assert not torch_modules(modules)
