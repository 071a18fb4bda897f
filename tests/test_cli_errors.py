"""Failures at the command line are one line on stderr, never a traceback: truncated .gz input,
a full disk, permission denied, a path under a file, and a catch-all for anything unexpected
(NMT_DEBUG=1 shows the traceback)."""

from __future__ import annotations

import errno
import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_translate import build_tiny_model_dir, without_limit_warning
from typer.testing import CliRunner

from nmt import textio
from nmt.cli.app import app

runner = CliRunner()
HINT = "(rerun with NMT_DEBUG=1 for the traceback)"
PREPROCESS = ["preprocess", "--src-lang", "en", "--tgt-lang", "de", "--train", "c", "-o", "out"]
# `python -m nmt` with the preprocessing library broken in an unexpected way
BROKEN = (
    "import sys, nmt.data.preprocess as p\n"
    "def boom(*a, **k): raise ValueError('boom')\n"
    "p.preprocess = boom\n"
    "from nmt.cli.app import app\n"
    "sys.argv[0] = 'nmt'\n"
    "app()\n"
)


def nmt(*args: str, env: dict[str, str] | None = None, code: str | None = None):
    """Run `python -m nmt ARGS` (or `python -c CODE ARGS`); the finished process."""
    head = ["-c", code] if code else ["-m", "nmt"]
    return subprocess.run(
        [sys.executable, *head, *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "NMT_DEBUG": "", **(env or {})},
    )  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("errors"))


def test_unexpected_exception_is_one_line_unless_debugging(tmp_path):
    r = nmt(*PREPROCESS, code=BROKEN)
    assert (r.returncode, r.stderr) == (1, f"error: ValueError: boom {HINT}\n")
    r = nmt(*PREPROCESS, code=BROKEN, env={"NMT_DEBUG": "1"})
    assert r.returncode == 1 and "Traceback (most recent call last)" in r.stderr
    assert r.stderr.endswith("ValueError: boom\n")


def test_interrupt_exits_130(monkeypatch):
    import nmt.data.preprocess

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(nmt.data.preprocess, "preprocess", interrupted)
    r = runner.invoke(app, PREPROCESS)
    assert (r.exit_code, r.stderr) == (130, "error: interrupted\n")


def test_truncated_gzip_input_names_the_file(tmp_path):
    data = gzip.compress(("ein hund rennt im park\n" * 2000).encode())
    hyp = tmp_path / "hyp.gz"
    hyp.write_bytes(data[: len(data) // 2])
    ref = tmp_path / "ref.txt"
    ref.write_text("ein hund rennt im park\n" * 2000)
    r = nmt("score", str(hyp), "-r", str(ref))
    reason = "Compressed file ended before the end-of-stream marker was reached"
    assert (r.returncode, r.stderr) == (
        2,
        f"error: {hyp}: truncated or corrupt gzip file ({reason})\n",
    )
    for lang in ("en", "de"):
        (tmp_path / f"c.{lang}.gz").write_bytes(data[:-20])  # the trailer (CRC, size) is cut
    out = tmp_path / "out"
    r = runner.invoke(app, [*PREPROCESS[:-4], "--train", str(tmp_path / "c"), "-o", str(out), "-q"])
    assert r.exit_code == 2 and r.stderr.startswith(f"error: {tmp_path}/c.en.gz: truncated or")
    assert r.stderr.count("\n") == 1 and not out.exists()


@pytest.mark.slow
def test_disk_full_names_the_output(model_dir, tmp_path, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("a man .\n")
    r = nmt("translate", "-m", str(model_dir), str(src), "-o", "/dev/full", "-q")
    assert (r.returncode, r.stderr) == (2, "error: /dev/full: no space left on device\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(textio.os, "fsync", full)
    out = tmp_path / "out.txt"
    r = runner.invoke(app, ["translate", "-m", str(model_dir), str(src), "-o", str(out), "-q"])
    assert (r.exit_code, r.stderr) == (2, f"error: {out}: no space left on device\n")
    assert list(tmp_path.iterdir()) == [src]  # no temporary file left behind


def test_permission_denied_and_bad_parents_name_the_output(model_dir, tmp_path, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("a man .\n")
    args = ["translate", "-m", str(model_dir), str(src), "-q", "-o"]
    r = runner.invoke(app, [*args, "/proc/version/x"])
    assert (r.exit_code, r.stderr) == (2, "error: /proc/version/x: a parent is not a folder\n")

    def denied(prefix: str, suffix: str, dir: str) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/{prefix}x1y2{suffix}")

    monkeypatch.setattr(textio.tempfile, "mkstemp", denied)  # root ignores chmod: pretend
    out = tmp_path / "out.txt"
    r = runner.invoke(app, [*args, str(out)])
    assert (r.exit_code, r.stderr) == (2, f"error: {out}: permission denied\n")


def nmt_closed(redirect: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m nmt ARGS` started by a shell with `redirect` (`>&-`: no stdout, `<&-`: no stdin)."""
    script = f'"$0" -m nmt "$@" {redirect}'
    return subprocess.run(
        ["sh", "-c", script, sys.executable, *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "NMT_DEBUG": ""},
    )  # fmt: skip


@pytest.mark.slow
def test_a_closed_stdout_or_stdin_is_one_line_and_output_files_still_work(model_dir, tmp_path):
    # A closed stdout made sys.stdout None: translating to it failed after the work was done, and
    # the quick exit's flush turned even a successful run into a traceback with exit 1.
    src = tmp_path / "in.txt"
    src.write_text("a man .\ntwo dogs .\n")
    r = nmt_closed(">&-", "translate", "-m", str(model_dir), str(src), "-q")
    message = "error: <stdout>: standard output is closed; give -o FILE or redirect it\n"
    assert (r.returncode, r.stderr) == (2, message)
    out = tmp_path / "out.txt"
    r = nmt_closed(">&-", "translate", "-m", str(model_dir), str(src), "-q", "-o", str(out))
    assert (r.returncode, without_limit_warning(r.stderr)) == (0, "")
    assert len(out.read_text().splitlines()) == 2
    r = nmt_closed("<&-", "translate", "-m", str(model_dir), "-q", "-o", str(out))
    message = "error: <stdin>: standard input is closed; give input files or redirect it\n"
    assert (r.returncode, r.stderr) == (2, message)


def test_score_to_a_closed_stdout_is_one_line(tmp_path):
    # print_scores asked sys.stdout (None) whether it was a terminal: an AttributeError, exit 1.
    hyp = tmp_path / "hyp"
    hyp.write_text("a b\n", encoding="utf-8")
    r = nmt_closed(">&-", "score", str(hyp), "-r", str(hyp))
    message = "error: <stdout>: standard output is closed; give -o FILE or redirect it\n"
    assert (r.returncode, r.stderr) == (2, message)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["score", "h"], "error: nmt score: Missing option '--ref' / '-r'. (see nmt score --help)\n"),
        (["score", "--no-such", "h"],
         "error: nmt score: No such option: --no-such (see nmt score --help)\n"),
        (["nosuch"], "error: nmt: No such command 'nosuch'. (see nmt --help)\n"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line(args, expected):
    # Typer drew a usage line, a hint and a five-line box for these; every other error is one line.
    r = subprocess.run(
        [str(Path(sys.executable).parent / "nmt"), *args], capture_output=True, text=True,
        timeout=120, env={**os.environ, "COLUMNS": "60"},
    )  # fmt: skip
    assert (r.returncode, r.stderr, r.stdout) == (2, expected, "")


def test_nmt_alone_prints_the_help_and_nothing_on_stderr():
    r = subprocess.run([str(Path(sys.executable).parent / "nmt")], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 2 and "preprocess" in r.stdout and r.stderr == ""
