"""Line-oriented I/O for `nmt translate`: input lines in batches (full ones from files, what has
arrived from a pipe or terminal), line counts for progress totals, and the text / JSONL output of
one translation (never more lines than asked); and the checks of its inputs and outputs that run
before a model loads (without torch)."""

from __future__ import annotations

import itertools
import json
import os
import select
import stat
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt.errors import NmtError
from nmt.textio import decode_line, open_binary

if TYPE_CHECKING:
    from nmt.decode.engine import Engine, Translation
    from nmt.decode.options import DecodeOptions, ResolvedOptions

FORMATS = ("text", "jsonl")
ERROR_MODES = ("strict", "replace")
BATCH_LINES = 10_000  # lines read (and sorted by length) per batch when input is abundant
PAUSE_S = 0.005  # a pipe silent this long has paused: translate what has arrived
MAX_GATHER_S = 0.25  # a steady trickle of lines still gets answers this often

# Characters str.splitlines() breaks on: a translation must never add an output line.
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})
# The ones json.dumps(ensure_ascii=False) leaves raw (it escapes those below U+0020).
_JSON_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


def one_line(text: str) -> str:
    """The text with every line-break character turned into a space."""
    return text.translate(_LINE_BREAKS)


def jsonl_record(obj: Any) -> str:
    """One JSON object on one line, newline-terminated, even for readers splitting on U+2028."""
    return json.dumps(obj, ensure_ascii=False).translate(_JSON_BREAKS) + "\n"


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


def is_regular(path: str) -> bool:
    """True for a regular file: it can be counted for a progress total and then read again."""
    return path != "-" and os.path.isfile(path)


def read_batches(
    path: str, errors: str = "strict", limit: int = BATCH_LINES
) -> Iterator[list[str]]:
    """Lists of at most `limit` lines of a file (plain or .gz) or of stdin ('-'), in order.

    Files give full batches; a pipe, FIFO or terminal gives what has arrived when the input
    pauses, so a program that writes one line and waits for its translation gets it.
    """
    fd = _stream_fd(path)
    if fd is None:
        yield from _chunks(read_input(path, errors), limit)
        return
    name = "<stdin>" if path == "-" else path
    try:
        lines, first = PipeLines(fd), 1
        while batch := lines.batch(limit):
            numbered = enumerate(batch, start=first)
            yield [decode_line(raw, name, n, errors).rstrip("\r\n") for n, raw in numbered]
            first += len(batch)
    finally:
        if path != "-":
            os.close(fd)


def _stream_fd(path: str) -> int | None:
    """A raw descriptor to read `path` as it arrives; None where lazy line reading is right
    (regular and .gz files, a stdin that is a file or has no descriptor, Windows pipes)."""
    if path.endswith(".gz") or sys.platform == "win32":  # select() there takes sockets only
        return None
    if path != "-":
        return None if os.path.isfile(path) else os.open(path, os.O_RDONLY)
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a stream (tests, embedding)
        return None
    return None if stat.S_ISREG(os.fstat(fd).st_mode) else fd


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


class PipeLines:
    """Complete lines (without newline) of a pipe or terminal as they arrive; a partial last
    line waits for its newline or for the end of input."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lines: deque[bytes] = deque()
        self.partial = bytearray()
        self.eof = False

    def batch(self, limit: int) -> list[bytes]:
        """Up to `limit` lines: waits for one, then takes what else comes before a pause."""
        while not self.lines and self.fill(None):
            pass
        start = time.monotonic()
        while len(self.lines) < limit and time.monotonic() - start < MAX_GATHER_S:
            if not self.fill(PAUSE_S):
                break
        return [self.lines.popleft() for _ in range(min(limit, len(self.lines)))]

    def fill(self, timeout: float | None) -> bool:
        """Read what is there, waiting up to `timeout` s (None: until something comes);
        False at the end of input or when nothing came."""
        if self.eof:
            return False
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        block = os.read(self.fd, 1 << 16)
        if not block:
            self.eof = True
            if self.partial:
                self.lines.append(bytes(self.partial))
            return False
        end = block.rfind(b"\n")
        if end < 0:
            self.partial += block
            return True
        self.partial += block[:end]
        self.lines.extend(bytes(self.partial).split(b"\n"))
        self.partial = bytearray(block[end + 1 :])
        return True


def format_translation(
    tr: Translation, fmt: str = "text", nbest: int = 1, with_attention: bool = False
) -> str:
    """Output for one input line: `nbest` text lines (best first, padded with empty lines when
    the search found fewer), or one JSON object; always newline-terminated."""
    if fmt == "jsonl":
        return jsonl_record(tr.to_json(with_attention))
    texts = [one_line(h.text) for h in tr.hypotheses[:nbest]]
    texts += [""] * (nbest - len(texts))
    return "".join(t + "\n" for t in texts)


def model_dirs(model_dir: str | Path | Sequence[str | Path]) -> list[str | Path]:
    """One model directory, or several (an ensemble), as a list: how `-m` may be given."""
    return [model_dir] if isinstance(model_dir, str | Path) else list(model_dir)


def check_model_dirs(model_dir: str | Path | Sequence[str | Path]) -> None:
    """Refuse a missing model directory before torch is imported (a mistyped -m fails in a
    fraction of a second, not after `import torch`)."""
    for path in model_dirs(model_dir):
        if not Path(path).is_dir():
            raise NmtError(f"{path}: model directory not found")


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
    if "-" in paths and sys.stdin is None:  # started with `<&-`
        raise NmtError("<stdin>: standard input is closed; give input files or redirect it")
    for path in paths:  # pipes and devices too: `nmt translate <(cmd)`
        if path != "-" and not os.path.exists(path):
            raise NmtError(f"{path}: file not found")
        if os.path.isdir(path):
            raise NmtError(f"{path}: is a directory, not a text file")
    return paths


def check_output(output: str | None) -> None:
    """Refuse to translate for a closed stdout (`>&-`: sys.stdout is None) before a model loads,
    rather than fail on the first write after all the work."""
    if output is None and sys.stdout is None:
        raise NmtError("<stdout>: standard output is closed; give -o FILE or redirect it")


def limit_warning(at_limit: Sequence[int], lines: int, limits: ResolvedOptions) -> str:
    """The line that names the translations the search stopped at the length limit (`limits`'
    max_len_a and max_len_b), not at their end: they may be cut short, and nothing else would
    say so."""
    a, b = limits.max_len_a, limits.max_len_b
    shown = ", ".join(f"{n:,}" for n in at_limit[:5])
    if len(at_limit) > 5:
        shown += f" and {len(at_limit) - 5:,} more"
    return (
        f"{len(at_limit):,} of {lines:,} translations stopped at the length limit ({a:g} x source "
        f"subwords + {b:g}) before their end and may be cut short: line{'s' * (len(at_limit) > 1)} "
        f"{shown} (--max-len-a and --max-len-b raise the limit)"
    )


def warn_cut_short(
    engine: Engine, options: DecodeOptions, name: str, translations: Sequence[Translation]
) -> None:
    """Name on stderr the translations of file `name` that stopped at the length limit."""
    at_limit = [n for n, tr in enumerate(translations, 1) if tr.at_limit]
    if at_limit:
        message = limit_warning(at_limit, len(translations), engine.resolve_options(options))
        warn_to_stderr(name)(message)


def numbered(numbers: Sequence[int], shown: int = 5) -> str:
    """Line numbers to read: `5, 17 and 40`; past `shown` of them, `1, 2, 3, 4, 5 and 7 more`."""
    head = [f"{n:,}" for n in numbers[:shown]]
    if len(numbers) > shown:
        return ", ".join(head) + f" and {len(numbers) - shown:,} more"
    return " and ".join([", ".join(head[:-1]), head[-1]] if len(head) > 1 else head)


def unknown_lines(engine: Engine, texts: Sequence[str], first: int = 1) -> list[int]:
    """The numbers (counted from `first`) of the lines holding pieces the model's source
    vocabulary lacks, which it reads as `<unk>`, where its tokenizer tells them apart (an
    imported model's: `VocabTokenizer.unknown_indices`); none for other tokenizers."""
    return [first + i for i in engine.src_tok.unknown_indices(list(texts))] if texts else []


def unknown_warning(unknown: Sequence[int], lines: int) -> str:
    """The line that names the input lines holding pieces the model's vocabulary lacks: their
    translations miss what those pieces said, and nothing else would say so."""
    n = len(unknown)
    return (
        f"{n:,} of {lines:,} lines hold{'s' * (n == 1)} pieces the model's vocabulary lacks "
        f"(written as <unk>): line{'s' * (n > 1)} {numbered(unknown)}"
    )


def warn_unknown(engine: Engine, name: str, texts: Sequence[str]) -> None:
    """Name on stderr the lines of file `name` holding pieces the model's vocabulary lacks."""
    unknown = unknown_lines(engine, texts)
    if unknown:
        warn_to_stderr(name)(unknown_warning(unknown, len(texts)))


def warn_to_stderr(name: str) -> Callable[[str], None]:
    """Warnings as `warning: FILE: line N: ...` lines on stderr."""

    def warn(message: str) -> None:
        sys.stderr.write(f"warning: {name}: {message}\n")
        sys.stderr.flush()

    return warn
