"""Streaming input for `nmt translate`: a pipe gets each answer before it sends the next line (no
flag needed), full batches when input is abundant, FIFOs and /dev/fd paths as inputs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from test_translate import (
    build_tiny_model_dir,
    run_cli,
    start_translate,
    synthetic_lines,
    without_limit_warning,
)

from nmt.decode.lines import PipeLines, one_line, read_batches
from nmt.dirs import ModelDir
from nmt.engines.translator import Translator
from nmt.errors import NmtError


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("stream"))


def writer(fd: int, *chunks: bytes, pause: float = 0.0) -> threading.Thread:
    """A thread writing `chunks` to `fd` (pausing between them), then closing it."""

    def run() -> None:
        for chunk in chunks:
            os.write(fd, chunk)
            time.sleep(pause)
        os.close(fd)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_pipe_answers_each_line_before_the_next(model_dir):
    """A program writing one line and waiting for its translation is answered, without flags."""
    proc, answers = start_translate("-m", str(model_dir))  # no --buffer-size
    sent = synthetic_lines(2, seed=7) + [""] + synthetic_lines(2, seed=8)
    try:
        got = []
        for line in sent:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
            got.append(answers.get(timeout=60).decode())  # waits for this line's translation
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        assert answers.empty() and without_limit_warning(proc.stderr.read()) == ""
    finally:
        proc.kill()
    expected = Translator.from_dir(ModelDir(model_dir), device="cpu").translate(sent)
    assert got == [one_line(t.text) + "\n" for t in expected] and got[2] == "\n"


def test_abundant_input_gives_full_batches():
    r, w = os.pipe()
    lines = [f"line {i}".encode() for i in range(25)]
    writer(w, b"\n".join(lines)).join()  # no final newline: the last line still counts
    pipe = PipeLines(r)
    batches = list(iter(lambda: pipe.batch(10), []))
    os.close(r)
    assert [len(b) for b in batches] == [10, 10, 5] and sum(batches, []) == lines


def test_a_pause_gives_what_has_arrived():
    r, w = os.pipe()
    thread = writer(w, b"a\nb\nc", b"\nd\n", pause=0.3)  # a partial line waits for its newline
    pipe = PipeLines(r)
    assert pipe.batch(100) == [b"a", b"b"]
    assert pipe.batch(100) == [b"c", b"d"] and pipe.batch(100) == []
    thread.join()
    os.close(r)


def test_fifo_lines_and_invalid_utf8_name_the_line(tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    thread = threading.Thread(target=lambda: fifo.write_bytes(b"ok\r\n\nbad \xff\n"), daemon=True)
    thread.start()
    batches = read_batches(str(fifo), limit=2)
    assert next(batches) == ["ok", ""]
    with pytest.raises(NmtError, match=rf"^{fifo}:3: invalid UTF-8"):
        next(batches)
    thread.join()


def test_cli_reads_a_fifo_like_a_file(model_dir, tmp_path):
    """`nmt translate <(cmd)`: a pipe path is read once (no line count for a progress bar)."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    sent = synthetic_lines(4, seed=9)
    data = "".join(x + "\n" for x in sent).encode()
    thread = threading.Thread(target=lambda: fifo.write_bytes(data), daemon=True)
    thread.start()
    r = run_cli("translate", "-m", str(model_dir), str(fifo))
    thread.join(timeout=5)
    assert r.exit_code == 0, r.output
    expected = Translator.from_dir(ModelDir(model_dir), device="cpu").translate(sent)
    assert r.stdout.splitlines() == [one_line(t.text) for t in expected]
    r = run_cli("translate", "-m", str(model_dir), str(tmp_path), input=b"")
    assert r.exit_code == 2 and f"error: {tmp_path}: is a directory, not a text file" in r.output
