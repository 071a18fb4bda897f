"""The lock a training run holds on its MODEL_DIR (`MODEL_DIR/.lock`: host and PID), so a second
process cannot train into the same directory (`ModelDir.lock` takes it)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from nmt.errors import NmtError


@contextlib.contextmanager
def model_dir_lock(model_dir: Path) -> Iterator[None]:
    """Refuse a second process training into MODEL_DIR; the kernel drops the lock when we die."""
    model_dir.mkdir(parents=True, exist_ok=True)
    lock = model_dir / ".lock"
    fd = _take_lock(model_dir, lock)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # still held: a process that opened it re-checks the inode
        os.close(fd)


def _take_lock(model_dir: Path, lock: Path) -> int:
    """flock MODEL_DIR/.lock (the file's "host pid" line only informs the error message)."""
    for _ in range(10):
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = lock.read_text(encoding="utf-8", errors="replace").strip()
            raise NmtError(
                f"{model_dir}: another process is training into this directory "
                f"(lock {lock} held by {owner or 'unknown'})"
            ) from None
        if _same_file(fd, lock):
            os.ftruncate(fd, 0)
            os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
            return fd
        os.close(fd)  # its holder removed the file between our open and flock: retry
    raise NmtError(f"{lock}: cannot take the lock")


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open `fd` is still the file at `path` (not an unlinked predecessor)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)
