"""Reading text corpora (plain or gzip, strict UTF-8) and writing files atomically."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from nmt.errors import NmtError


def open_binary(path: str | Path) -> io.BufferedIOBase:
    """Open a file for reading bytes, transparently decompressing `.gz`."""
    path = Path(path)
    if not path.exists():
        raise NmtError(f"{path}: file not found")
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def decode_line(raw: bytes, path: str | Path, lineno: int, errors: str = "strict") -> str:
    """Decode one line as UTF-8; a bad byte becomes an error naming the file and line."""
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        raise NmtError(f"{path}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start})") from None


def read_lines(path: str | Path, errors: str = "strict") -> Iterator[str]:
    """Yield the lines of a text file without their newline, streaming, strict UTF-8 by default."""
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, start=1):
            yield decode_line(raw, path, lineno, errors).rstrip("\r\n")


def _file_mode() -> int:
    """Permissions a plain open() would give a new file (0o666 less the umask)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def publish(tmp: str | Path, path: str | Path) -> None:
    """Give a finished temporary file normal permissions and rename it over `path` atomically."""
    os.chmod(tmp, _file_mode())
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write to a temporary file beside `path` and rename it into place only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with open(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        publish(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
