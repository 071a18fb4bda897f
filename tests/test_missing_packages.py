"""A command that needs an optional package which is not installed (PyTorch, matplotlib, the
server's) ends with one line naming the extra that brings it, exit 1, no traceback. Each
command runs as `python -c` with an import hook that makes the named packages unimportable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_translate import build_tiny_model_dir

REPO = Path(__file__).resolve().parents[1]
# `python -c BLOCK PACKAGES ARGS`: `nmt ARGS` where PACKAGES (comma-separated) cannot be imported
BLOCK = """
import sys
blocked = set(sys.argv.pop(1).split(","))
class Block:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block)
sys.argv[0] = "nmt"
from nmt.cli.app import run
run()
"""
NO_TORCH = (
    "error: nmt {} needs PyTorch, which is not installed: pip install -e '.[torch]' in nmt's source folder "
    "(an export from nmt export translates without it)\n"
)


def nmt_without(blocked: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """`nmt ARGS` with the BLOCKED packages missing; the finished process."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK, blocked, *args], input=stdin, capture_output=True,
        text=True, cwd=REPO, timeout=120, env={**os.environ, "NMT_DEBUG": ""},
    )  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("missing"))


def test_train_without_torch(tmp_path):
    r = nmt_without("torch", "train", "--preset", "transformer-tiny", "-d", str(tmp_path / "data"),
                    "-o", str(tmp_path / "model"))  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr) == (1, "", NO_TORCH.format("train"))


@pytest.mark.parametrize("command", ["translate", "export", "average"])
def test_a_model_directory_without_torch(model_dir, tmp_path, command):
    args = {"translate": [], "export": ["-o", str(tmp_path / "out")], "average": ["--last", "2"]}
    r = nmt_without("torch", command, "-m", str(model_dir), *args[command], stdin="a man\n")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", NO_TORCH.format(command))


def test_serve_a_model_directory_without_torch_fails_before_listening(model_dir):
    pytest.importorskip("fastapi")
    r = nmt_without("torch", "serve", "-m", str(model_dir), "--port", "0", "--quiet")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", NO_TORCH.format("serve"))


def test_serve_without_fastapi(model_dir):
    r = nmt_without("fastapi", "serve", "-m", str(model_dir), "--port", "0", "--quiet")
    line = "error: nmt serve needs fastapi, which is not installed: pip install -e '.[serve]' in nmt's source folder\n"
    assert (r.returncode, r.stderr) == (1, line)


def test_plot_without_matplotlib(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    event = {"event": "train", "step": 1, "epoch": 1, "elapsed": 6.0, "loss": 3.0}
    (run / "metrics.jsonl").write_text(json.dumps(event) + "\n")
    r = nmt_without("matplotlib", "plot", str(run), "--y", "loss", "-o", str(tmp_path / "c.png"))
    line = "error: plots need matplotlib, which is not installed: pip install -e '.[torch]' in nmt's source folder\n"
    assert (r.returncode, r.stderr) == (1, line)
    assert not (tmp_path / "c.png").exists()
    r = nmt_without("matplotlib", "plot", str(run), "--y", "loss", "--json")  # no figure: fine
    assert r.returncode == 0 and json.loads(r.stdout)[0]["model"] == "run"


def test_a_required_package_missing_is_the_usual_line(tmp_path):
    """Only optional packages are named with an extra; any other missing module is unexpected."""
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a man\n")
    r = nmt_without("sacrebleu", "score", str(hyp), "-r", str(hyp))
    assert (r.returncode, r.stderr) == (
        1,
        "error: ModuleNotFoundError: No module named 'sacrebleu' "
        "(rerun with NMT_DEBUG=1 for the traceback)\n",
    )


def test_serve_checks_for_torch_without_importing_it(model_dir, monkeypatch):
    """A real install without torch: find_spec says so, the server does not start."""
    pytest.importorskip("fastapi")
    import importlib.util

    from nmt.serve.server import translator_factory

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))  # fmt: skip
    with pytest.raises(ModuleNotFoundError) as err:
        translator_factory(str(model_dir), device="cpu")
    assert err.value.name == "torch"
