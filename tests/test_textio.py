"""nmt.textio: plain and gzip corpora, strict UTF-8 with file:line errors, atomic writes."""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from nmt import textio
from nmt.errors import NmtError
from nmt.textio import atomic_write, decode_line, open_binary, read_lines

RAW = "ein Hund\r\nzwei Käfer\n\nlast line without newline".encode()
LINES = ["ein Hund", "zwei Käfer", "", "last line without newline"]


@pytest.mark.parametrize("name", ["c.de", "c.de.gz"])
def test_read_lines_plain_and_gzip(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(gzip.compress(RAW) if name.endswith(".gz") else RAW)
    assert list(read_lines(path)) == LINES
    with open_binary(str(path)) as f:
        assert f.read() == RAW


def test_strict_utf8_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.en"
    path.write_bytes(b"fine\nalso fine\nkaputt \xc3\x28 text\n")
    lines = read_lines(path)
    assert next(lines) == "fine"
    with pytest.raises(NmtError) as e:
        list(lines)
    assert str(e.value) == f"{path}:3: invalid UTF-8 (invalid continuation byte at byte 7)"
    assert list(read_lines(path, errors="replace"))[2] == "kaputt \ufffd( text"


def test_decode_line_replace_mode():
    assert decode_line(b"a\xffb\n", "x.txt", 5, errors="replace") == "a\ufffdb\n"
    assert decode_line("Käse".encode(), "x.txt", 1) == "Käse"
    with pytest.raises(
        NmtError, match=r"^x.txt:5: invalid UTF-8 \(invalid start byte at byte 1\)$"
    ):
        decode_line(b"a\xffb", "x.txt", 5)


@pytest.mark.parametrize("name", ["ref.de", "ref.de.gz"])
def test_a_byte_order_mark_is_not_text(tmp_path, name):
    # Windows editors start a file with U+FEFF; kept, it joined the first word of a reference.
    from nmt.eval.scoring import read_text, score

    text = "ein Hund läuft über die Wiese\nzwei Kinder spielen im Park\n"
    path = tmp_path / name
    raw = ("\ufeff" + text).encode()
    path.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    (tmp_path / "plain.de").write_text(text, encoding="utf-8")
    assert list(read_lines(path)) == text.splitlines()
    hyps = ["ein Hund läuft über die Wiese", "zwei Kinder spielen im Garten"]
    with_bom = score(hyps, [read_text(path)], metrics=("bleu", "chrf"))
    without = score(hyps, [read_text(tmp_path / "plain.de")], metrics=("bleu", "chrf"))
    assert [r.score for r in with_bom] == [r.score for r in without]
    assert decode_line(b"\xef\xbb\xbfa", "x", 1) == "a"
    assert decode_line(b"\xef\xbb\xbfa", "x", 2) == "\ufeffa"  # only a mark opening the file


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(NmtError, match=r"nope.txt: file not found$"):
        list(read_lines(tmp_path / "nope.txt"))


def test_atomic_write_text_and_binary_with_normal_permissions(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    with atomic_write(target) as f:
        f.write("Grüße\n")
        assert not target.exists()  # nothing visible until the block succeeds
    assert target.read_text(encoding="utf-8") == "Grüße\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    with atomic_write(target, "wb") as f:
        f.write(b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_atomic_write_leaves_nothing_on_exception(tmp_path):
    new = tmp_path / "new.txt"
    with pytest.raises(RuntimeError), atomic_write(new) as f:
        f.write("half")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
    old = tmp_path / "old.txt"
    old.write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_write(old) as f:
        f.write("new")
        raise KeyboardInterrupt
    assert old.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["old.txt"]


def _null_device(tmp_path):
    """A private character device like /dev/null (mknod needs root), else skip."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        pytest.skip("cannot create a device node here")
    return node


def test_atomic_write_writes_devices_directly(tmp_path):
    node = _null_device(tmp_path)
    with atomic_write(node) as f:
        f.write("gone\n")
    assert stat.S_ISCHR(node.lstat().st_mode)  # as root a rename would turn it into a file
    link = tmp_path / "to-null"
    link.symlink_to("/dev/null")
    with atomic_write(link, "wb") as f:
        f.write(b"gone\n")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "to-null"]


def test_atomic_write_writes_through_symlinks_keeping_mode(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    real.chmod(0o600)
    link = tmp_path / "link.txt"
    link.symlink_to(real.name)
    with atomic_write(link) as f:
        f.write("new")
    assert link.is_symlink() and real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600  # an existing file keeps its mode
    dangling = tmp_path / "dangling"
    dangling.symlink_to("sub/made.txt")
    with atomic_write(dangling) as f:
        f.write("x")
    assert dangling.is_symlink() and (tmp_path / "sub" / "made.txt").read_text() == "x"
    with pytest.raises(NmtError, match=r"sub: is a folder$"):
        with atomic_write(tmp_path / "sub") as f:
            f.write("x")


def test_atomic_write_writes_fifos_directly(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    with atomic_write(fifo) as f:
        f.write("through the pipe\n")
    reader.join(timeout=10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_atomic_write_dash_is_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("-", "/dev/stdout"):
        with atomic_write(name) as f:
            f.write(f"to {name}\n")
    assert capsys.readouterr().out == "to -\nto /dev/stdout\n"
    assert list(tmp_path.iterdir()) == []


def test_publish_fsyncs_file_and_folder(tmp_path, monkeypatch):
    synced: list[str] = []
    monkeypatch.setattr(textio, "fsync_dir", lambda p: synced.append(f"dir {Path(p).name}"))
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append("file") or real_fsync(fd))
    with atomic_write(tmp_path / "a.txt") as f:
        f.write("a")
    assert "file" in synced and synced[-1] == f"dir {tmp_path.name}"


def _full(monkeypatch, free: int = 0) -> None:
    """Make every file system look like it has `free` bytes left."""
    monkeypatch.setattr(textio.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, free))


def test_disk_full_names_the_path_the_cause_and_the_size(tmp_path, monkeypatch):
    out = tmp_path / "m.pt"
    enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(textio.disk_full(out, enospc)) == f"{out}: no space left on device"
    quota = OSError(errno.EDQUOT, "quota", str(tmp_path / ".m.pt.x1.tmp"))
    assert (
        str(textio.disk_full(out, quota, 3 << 20)) == f"{out}: disk quota exceeded (3.0 MB needed)"
    )
    rust = RuntimeError("I/O error: No space left on device (os error 28)")
    assert (
        str(textio.disk_full(out, rust, 300 << 20))
        == f"{out}: no space left on device (300 MB needed)"
    )
    torn = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    assert textio.disk_full(out, torn, 1000) is None  # plenty of room: another failure
    assert textio.disk_full(out, OSError(errno.ENOSPC, "x", "/elsewhere")) is None
    assert textio.disk_full(out, NmtError("no")) is None
    _full(monkeypatch)
    assert (
        str(textio.disk_full(out, torn, 1000)) == f"{out}: no space left on device (0.1 MB needed)"
    )
    assert textio.disk_full(out, OSError(errno.EACCES, "denied")) is None


def test_a_library_failing_on_a_full_disk_leaves_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "w.bin"
    out.write_bytes(b"old")
    _full(monkeypatch)
    with pytest.raises(NmtError) as e:
        with textio.publishing(out, needed=5 << 20) as tmp:
            Path(tmp).write_bytes(b"half")
            raise RuntimeError("unexpected pos 4 vs 0")
    assert str(e.value) == f"{out}: no space left on device (5.0 MB needed)"
    assert [p.name for p in tmp_path.iterdir()] == ["w.bin"] and out.read_bytes() == b"old"
    with pytest.raises(KeyError):  # not a write's failure: left as it is
        with textio.publishing(out):
            raise KeyError("x")


def test_building_dir_moves_into_place_or_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "data"
    with textio.building_dir(out, force=False) as tmp:
        (tmp / "a").write_text("a")
    assert [p.name for p in tmp_path.iterdir()] == ["data"] and (out / "a").read_text() == "a"
    with pytest.raises(NmtError, match="exists and is not empty"):
        with textio.building_dir(out, force=False) as tmp:
            pass
    _full(monkeypatch)
    with pytest.raises(NmtError) as e:
        with textio.building_dir(out, force=True) as tmp:
            raise RuntimeError("a library's write failed")
    assert str(e.value) == f"{out}: no space left on device"
    assert [p.name for p in tmp_path.iterdir()] == ["data"] and (out / "a").read_text() == "a"
