"""Reading text corpora (plain or gzip, strict UTF-8) and writing files and folders atomically."""

from __future__ import annotations

import contextlib
import errno
import functools
import gzip
import io
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from nmt.errors import NmtError

STDOUT_NAMES = ("-", "/dev/stdout")
DIRECT_PREFIXES = ("/dev/fd/", "/proc/self/fd/")
# why a write failed for lack of room, as the one-line error says it
DISK_FULL = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large",
}
ROOM = 1 << 20  # free bytes under which a library's failed write is taken for a full disk
OS_ERROR_IN_TEXT = re.compile(r"\(os error (\d+)\)")  # how Rust libraries cite errno
BOM = "\ufeff"  # U+FEFF opening a file: an encoding mark, not text


def _named_gzip_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a GzipFile read method so a damaged stream is an error naming the file."""

    @functools.wraps(method)
    def read(self: gzip.GzipFile, *args: Any) -> Any:
        try:
            return method(self, *args)
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise NmtError(f"{self.name}: truncated or corrupt gzip file ({e})") from None

    return read


class _GzipReader(gzip.GzipFile):
    """gzip input whose truncation (a cut download, a full disk) is a one-line error, not zlib's."""

    read = _named_gzip_errors(gzip.GzipFile.read)
    read1 = _named_gzip_errors(gzip.GzipFile.read1)
    readline = _named_gzip_errors(gzip.GzipFile.readline)
    peek = _named_gzip_errors(gzip.GzipFile.peek)


def open_binary(path: str | Path) -> io.BufferedIOBase:
    """Open a file for reading bytes, transparently decompressing `.gz`."""
    path = Path(path)
    if not path.exists():
        raise NmtError(f"{path}: file not found")
    if path.suffix == ".gz":
        return _GzipReader(path, "rb")
    return open(path, "rb")


def decode_line(raw: bytes, path: str | Path, lineno: int, errors: str = "strict") -> str:
    """Decode one line as UTF-8; a bad byte becomes an error naming the file and line, and the
    byte order mark some editors put before line 1 is dropped (it would join the first word)."""
    try:
        text = raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        raise NmtError(f"{path}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    return text.removeprefix(BOM) if lineno == 1 else text


def read_lines(path: str | Path, errors: str = "strict") -> Iterator[str]:
    """Yield the lines of a text file without their newline, streaming, strict UTF-8 by default."""
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, start=1):
            yield decode_line(raw, path, lineno, errors).rstrip("\r\n")


def read_json_object(path: str | Path) -> dict[str, Any]:
    """A JSON object file (vocab.json, a manifest); broken JSON is a one-line error naming it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise NmtError(f"{path}: invalid JSON ({e})") from None
    if not isinstance(data, dict):
        raise NmtError(f"{path}: invalid JSON (expected an object)")
    return data


def _file_mode() -> int:
    """Permissions a plain open() would give a new file (0o666 less the umask)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def fsync_file(path: str | Path) -> None:
    """Force a written file's data to disk before it is renamed into place."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: str | Path) -> None:
    """Make renames inside folder `path` durable (a power loss must not undo a publish)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:  # some file systems cannot fsync a folder; nothing more to do there
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file and folder below `root`, so a folder renamed into place arrives whole."""
    for folder, _, files in os.walk(root):
        for name in files:
            fsync_file(Path(folder) / name)
        fsync_dir(folder)


def publish(
    tmp: str | Path, path: str | Path, mode: int | None = None, owner: tuple[int, int] | None = None
) -> None:
    """Give a finished temporary file its permissions (default: normal ones) and owner, make it
    durable and rename it over `path` atomically."""
    os.chmod(tmp, _file_mode() if mode is None else mode)
    if owner is not None and owner != (os.geteuid(), os.getegid()):
        with contextlib.suppress(OSError):  # root writing a user's file keeps it theirs
            os.chown(tmp, *owner)
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def check_out_dir(out_dir: Path, force: bool) -> None:
    """Refuse to overwrite results unless asked to."""
    if out_dir.exists() and not out_dir.is_dir():
        raise NmtError(f"{out_dir}: exists and is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise NmtError(f"{out_dir}: exists and is not empty (use --force to replace it)")


def replace_dir(tmp: Path, out_dir: Path) -> None:
    """Move the finished temporary folder into place, replacing an old one only at the very end."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it private; the result should look like any folder
    fsync_tree(tmp)  # a power loss after the rename must not leave empty files
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, old / "d")
    os.replace(tmp, out_dir)
    fsync_dir(out_dir.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def publishing(
    path: str | Path,
    mode: int | None = None,
    owner: tuple[int, int] | None = None,
    needed: int | None = None,
) -> Iterator[str]:
    """A temporary name beside `path`, published over it on success (see `publish`) and removed
    on failure: readers never see half a file. A full disk is an NmtError naming `path` and the
    `needed` bytes (the size of what is written, when the caller knows it)."""
    path = Path(path)
    with naming_output(path, needed):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    try:
        with naming_output(path, needed):  # judged while the temporary still takes its room
            yield tmp
            publish(tmp, path, mode, owner)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def building_dir(out_dir: Path, force: bool) -> Iterator[Path]:
    """A temporary folder beside `out_dir` to build a result in, moved into place when the block
    ends (see `replace_dir`; an `out_dir` that appeared meanwhile is still refused unless
    `force`) and removed on failure; a full disk is an NmtError naming `out_dir`."""
    with naming_output(out_dir):
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        with naming_output(out_dir):  # judged while the temporary folder still takes its room
            yield tmp
            check_out_dir(out_dir, force)
            replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _writes_directly(path: str | Path) -> bool:
    """True for outputs that must not be replaced by a rename: devices, FIFOs, sockets, and the
    /dev/fd-style names of open descriptors (bash's >(cmd), /dev/stderr)."""
    name = str(path)
    if name.startswith(DIRECT_PREFIXES) or name in ("/dev/stderr", "/dev/tty"):
        return True
    try:
        st = os.stat(path)  # follows symlinks: a link to /dev/null is written through
    except (FileNotFoundError, NotADirectoryError):
        return False
    return not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open an output so a reader never sees half a file and nothing special gets replaced.

    `-` and /dev/stdout are stdout; devices, FIFOs and /dev/fd/N are written directly; a regular
    file (or a symlink's target) is written to a temporary file beside it and renamed into place
    on success only, keeping the old file's mode, fsynced with its folder. A full disk names `path`.
    """
    with naming_output(path), _open_output(path, mode, None if "b" in mode else encoding) as f:
        yield f


@contextlib.contextmanager
def naming_output(path: str | Path, needed: int | None = None) -> Iterator[None]:
    """Make errors while writing `path` name it: a full disk becomes one NmtError (see
    `disk_full`), and other errors about its temporary stand-ins (`.NAME.*` beside it)
    `OSError(path)`."""
    try:
        yield
    except Exception as e:
        full = disk_full(path, e, needed)
        if full is not None:
            raise full from e
        if isinstance(e, OSError) and e.errno is not None and _about_stand_in(path, e):
            raise OSError(e.errno, os.strerror(e.errno), str(path)) from e
        raise


def disk_full(path: str | Path, error: Exception, needed: int | None = None) -> NmtError | None:
    """`PATH: no space left on device (N MB needed)` when writing `path` failed for lack of room;
    None for any other failure. `needed`: the size of what was written, when known.

    Python's writes say so with an OSError (naming no file, or a temporary); libraries that write
    themselves raise their own errors: safetensors a SafetensorError ending "(os error 28)",
    torch's zip writer (like other C++ code) a RuntimeError saying nothing of the cause, taken
    for a full disk when the folder of `path` has not `needed` bytes (and `ROOM` more) free."""
    if isinstance(error, NmtError):
        return None
    if isinstance(error, OSError):
        ours = error.filename is None or _about_stand_in(path, error)
        code = error.errno if ours else None
    else:
        said = OS_ERROR_IN_TEXT.search(str(error))
        code = int(said.group(1)) if said else None
        if code is None and isinstance(error, RuntimeError) and _no_room(Path(path), needed):
            code = errno.ENOSPC
    if code not in DISK_FULL:
        return None
    size = "" if needed is None else f" ({_megabytes(needed)} MB needed)"
    return NmtError(f"{path}: {DISK_FULL[code]}{size}")


def _megabytes(size: int) -> str:
    """A size in MB (MiB) as a person reads it: 0.3, 4.2, 485."""
    mb = size / 2**20
    return f"{mb:.0f}" if mb >= 10 else f"{max(mb, 0.1):.1f}"


def _no_room(path: Path, needed: int | None) -> bool:
    """Whether the file system of `path`'s folder lacks room for `needed` bytes (and `ROOM`)."""
    try:
        return shutil.disk_usage(path.parent).free < (needed or 0) + ROOM
    except OSError:
        return False


def _about_stand_in(path: str | Path, error: OSError) -> bool:
    """Whether `error` names a temporary stand-in of `path` (`.NAME.*` beside it, or below)."""
    stand_in = f".{Path(path).name}."
    return error.filename is not None and any(
        part.startswith(stand_in) for part in Path(os.fsdecode(error.filename)).parts
    )


@contextlib.contextmanager
def _open_output(path: str | Path, mode: str, encoding: str | None) -> Iterator[IO]:
    """The three ways of writing an output (see atomic_write)."""
    if str(path) in STDOUT_NAMES:
        out = sys.stdout.buffer if "b" in mode else sys.stdout
        yield out
        out.flush()
    elif _writes_directly(path):
        with open(path, mode.replace("w", "a"), encoding=encoding) as f:  # never truncate a log
            yield f
    else:
        target = Path(os.path.realpath(path))
        with naming_output(target), _replace_file(target, path, mode, encoding) as f:
            yield f


@contextlib.contextmanager
def _replace_file(target: Path, name: str | Path, mode: str, encoding: str | None) -> Iterator[IO]:
    """Temporary file beside `target`, renamed over it on success (old mode and owner kept)."""
    if target.is_dir():
        raise NmtError(f"{name}: is a folder")
    old = target.stat() if target.exists() else None
    keep_mode = None if old is None else stat.S_IMODE(old.st_mode)
    owner = None if old is None else (old.st_uid, old.st_gid)
    with contextlib.ExitStack() as stack:
        try:
            tmp = stack.enter_context(publishing(target, keep_mode, owner))
        except (FileExistsError, NotADirectoryError):
            raise NmtError(f"{name}: a parent is not a folder") from None
        with open(tmp, mode, encoding=encoding) as f:
            yield f
