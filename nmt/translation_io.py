"""Line-oriented I/O for `nmt translate`: lazy input lines (files, .gz, stdin), line counts for
progress totals, and the text / JSONL output of one translation (never more lines than asked)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from nmt.errors import NmtError
from nmt.textio import decode_line, open_binary

if TYPE_CHECKING:
    from nmt.translate import Translation

FORMATS = ("text", "jsonl")
ERROR_MODES = ("strict", "replace")

# Characters str.splitlines() breaks on: a translation must never add an output line.
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def one_line(text: str) -> str:
    """The text with every line-break character turned into a space."""
    return text.translate(_LINE_BREAKS)


def read_input(path: str, errors: str = "strict") -> Iterator[str]:
    """Lines of a file (plain or .gz) or of stdin ('-'), lazily; bad UTF-8 names the line."""
    if path == "-":
        stream = sys.stdin.buffer
        name = "<stdin>"
        lineno = 0
        while True:
            raw = stream.readline()  # returns as soon as one line is there (interactive use)
            if not raw:
                return
            lineno += 1
            yield decode_line(raw, name, lineno, errors).rstrip("\r\n")
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, start=1):
            yield decode_line(raw, path, lineno, errors).rstrip("\r\n")


def count_lines(path: str) -> int:
    """Number of lines (a last line without newline counts) for progress totals."""
    n, last = 0, b"\n"
    with open_binary(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def format_translation(
    tr: Translation, fmt: str = "text", nbest: int = 1, with_attention: bool = False
) -> str:
    """Output for one input line: `nbest` text lines (best first, padded with empty lines when
    the search found fewer), or one JSON object; always newline-terminated."""
    if fmt == "jsonl":
        return json.dumps(tr.to_json(with_attention), ensure_ascii=False) + "\n"
    texts = [one_line(h.text) for h in tr.hypotheses[:nbest]]
    texts += [""] * (nbest - len(texts))
    return "".join(t + "\n" for t in texts)


def check_inputs(
    inputs: list[str] | None,
    fmt: str = "text",
    errors: str = "strict",
    with_attention: bool = False,
    nbest: int = 1,
    buffer_size: int | None = None,
) -> list[str]:
    """Refuse bad output options and missing files before a model is loaded; returns the paths
    ('-' for stdin when none is given)."""
    if fmt not in FORMATS:
        raise NmtError(f"--format must be text or jsonl, got {fmt!r}")
    if errors not in ERROR_MODES:
        raise NmtError(f"--errors must be strict or replace, got {errors!r}")
    if with_attention and fmt != "jsonl":
        raise NmtError("--with-attention needs --format jsonl")
    if nbest < 1:
        raise NmtError(f"--nbest must be at least 1, got {nbest}")
    if buffer_size is not None and buffer_size < 1:
        raise NmtError(f"--buffer-size must be at least 1, got {buffer_size}")
    paths = list(inputs or ["-"])
    for path in paths:
        if path != "-" and not os.path.isfile(path):
            raise NmtError(f"{path}: file not found")
    return paths


def warn_to_stderr(name: str) -> Callable[[str], None]:
    """Warnings as `warning: FILE: line N: ...` lines on stderr."""

    def warn(message: str) -> None:
        sys.stderr.write(f"warning: {name}: {message}\n")
        sys.stderr.flush()

    return warn
