"""A deploy-only install: `pip install '.[ct2]'` into a fresh virtual environment, without
PyTorch or matplotlib, preprocesses a corpus and translates with an `nmt export` exactly as the
full install does, and a command that needs PyTorch says so in one line.

The package is installed from a copy of its sources (not editable, so its package data and
install_requires are what is tested), with `constraints.txt`, through pip's usual index and
cache; without an index the test is skipped."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_translate import build_tiny_model_dir, synthetic_lines

pytest.importorskip("ctranslate2")

from nmt.dirs import ModelDir
from nmt.export.ctranslate2 import export_ctranslate2  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "LICENSE", "nmt")
# what pip says when it cannot reach an index (its connection errors, not a resolver failure)
OFFLINE = (
    "Failed to establish a new connection", "Temporary failure in name resolution",
    "Network is unreachable", "ConnectTimeoutError", "ReadTimeoutError", "ProxyError",
)  # fmt: skip
LINES = "a man in a blue shirt .\n\ntwo dogs play in the snow\neine frau sitzt auf der bank\n"
TRAIN_ERROR = (
    "error: nmt train needs PyTorch, which is not installed: pip install -e '.[torch]' in nmt's source folder "
    "(an export from nmt export translates without it)\n"
)
# run by the deploy venv's python: where nmt comes from, its package data, what is missing
PROBE = """
import importlib.resources, importlib.util, nmt
root = importlib.resources.files("nmt")
print(nmt.__file__)
print((root / "presets" / "transformer-tiny.yaml").is_file(), (root / "serve/static/index.html").is_file())
print([m for m in ("torch", "matplotlib") if importlib.util.find_spec(m) is not None])
"""


def copy_sources(dest: Path) -> Path:
    """The files a wheel is built from, without caches (so no build output lands in the repo)."""
    dest.mkdir()
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def deploy_venv(tmp_path_factory) -> Path:
    """A fresh venv holding nmt with its `ct2` extra and its dependencies alone."""
    root = tmp_path_factory.mktemp("deploy")
    src = copy_sources(root / "src")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
           "--disable-pip-version-check", "-q", "--retries", "1",
           "-c", str(REPO / "constraints.txt"), f"{src}[ct2]"]  # fmt: skip
    out = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    if out.returncode != 0 and any(s in out.stderr for s in OFFLINE):
        pytest.skip(f"pip cannot reach a package index: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, out.stderr[-3000:]
    return venv


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    model_dir = build_tiny_model_dir(tmp_path_factory.mktemp("deploy_model"))
    return export_ctranslate2(ModelDir(model_dir), model_dir.parent / "export", quiet=True)


def nmt(venv: Path, args: list[str], stdin: str = "", cwd: Path | None = None):
    """`nmt ARGS` as the deploy venv's console script; the finished process."""
    return subprocess.run([str(venv / "bin" / "nmt"), *args], input=stdin, capture_output=True,
                          text=True, cwd=cwd, timeout=300)  # fmt: skip


def test_the_install_holds_no_torch_nor_matplotlib(deploy_venv, tmp_path):
    out = subprocess.run([str(deploy_venv / "bin" / "python"), "-c", PROBE], capture_output=True,
                         text=True, cwd=tmp_path, check=True)  # fmt: skip
    where, data, present = out.stdout.splitlines()
    assert Path(where).is_relative_to(deploy_venv)  # the installed copy, not the repository's
    assert (data, present) == ("True True", "[]")


def test_an_export_translates_as_with_the_full_install(deploy_venv, export, tmp_path):
    args = ["translate", "-m", str(export), "--device", "cpu", "-q"]
    full = subprocess.run([sys.executable, "-m", "nmt", *args], input=LINES, capture_output=True,
                          text=True, cwd=REPO, check=True)  # fmt: skip
    assert len(full.stdout.splitlines()) == 4  # one line per input line, the empty one too
    from_stdin = nmt(deploy_venv, args, stdin=LINES)
    assert (from_stdin.returncode, from_stdin.stdout) == (0, full.stdout), from_stdin.stderr
    src = tmp_path / "src.en"
    src.write_text(LINES)
    from_file = nmt(deploy_venv, [*args, str(src)])
    assert (from_file.returncode, from_file.stdout) == (0, full.stdout), from_file.stderr


def test_preprocess_runs_and_train_asks_for_torch(deploy_venv, tmp_path):
    for lang, seed in (("en", 0), ("de", 1)):
        (tmp_path / f"train.{lang}").write_text("\n".join(synthetic_lines(200, seed)) + "\n")
    data = tmp_path / "data"
    out = nmt(deploy_venv, ["preprocess", "--src-lang", "en", "--tgt-lang", "de", "--train",
                            str(tmp_path / "train"), "--split-valid", "20", "--vocab-size", "60",
                            "-o", str(data), "-q"])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (data / "manifest.json").is_file() and (data / "valid.en.txt").is_file()
    out = nmt(deploy_venv, ["train", "--preset", "transformer-tiny", "-d", str(data),
                            "-o", str(tmp_path / "model")])  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (1, "", TRAIN_ERROR)
    assert not (tmp_path / "model").exists()
