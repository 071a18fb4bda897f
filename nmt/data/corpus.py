"""Fetching public corpora: download (or copy from a local mirror), verify SHA-256, decompress.

The file list, download address and checksums of each corpus live in `corpora/<name>.json` at the
repository root, so a changed upstream file is caught instead of silently trained on. A corpus no
public address serves byte for byte has `"url": null` and a `no_url` reason: it comes from a mirror.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import json
import os
import sys
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import IO

from nmt.errors import NmtError
from nmt.textio import atomic_write

CORPORA_DIR = Path(__file__).resolve().parents[2] / "corpora"
STAMP = ".nmt-fetch.json"
TIMEOUT_S = 60
_BLOCK = 1 << 20


def load_manifest(name: str, corpora_dir: Path = CORPORA_DIR) -> dict:
    """The committed manifest (files, address pattern, checksums) of corpus `name`."""
    path = corpora_dir / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in corpora_dir.glob("*.json")) if corpora_dir.is_dir() else []
        raise NmtError(f"unknown corpus {name!r} (known: {', '.join(known) or 'none'}; no {path})")
    return json.loads(path.read_text(encoding="utf-8"))


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in blocks so size does not matter."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def _copy_hashing(src: IO[bytes], dst: IO[bytes]) -> str:
    """Copy a byte stream and return its SHA-256, so a download is hashed as it arrives."""
    h = hashlib.sha256()
    while block := src.read(_BLOCK):
        h.update(block)
        dst.write(block)
    return h.hexdigest()


def _obtain(file: str, url: str, mirror: Path | None, out: IO[bytes]) -> tuple[str, str]:
    """Write the compressed file into `out` from the mirror or the network; return (sha256, source)."""
    if mirror is not None:
        src = mirror / file
        if not src.is_file():
            raise NmtError(f"mirror {mirror} has no {file}")
        with open(src, "rb") as f:
            return _copy_hashing(f, out), str(src)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            return _copy_hashing(resp, out), url
    except urllib.error.HTTPError as e:
        raise NmtError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise NmtError(f"cannot download {url}: {e.reason}") from None
    except (OSError, TimeoutError) as e:
        raise NmtError(f"cannot download {url}: {e}") from None
    except http.client.HTTPException as e:  # not an OSError: a body cut short, a garbled reply
        raise NmtError(f"cannot download {url}: broken HTTP response ({e!r})") from None


def _is_fresh(target: Path, entry: dict | None, expected_gz: str) -> bool:
    """A target is up to date when the stamp says it came from the expected archive and it is intact."""
    if not entry or entry.get("gz_sha256") != expected_gz or not target.is_file():
        return False
    return target.stat().st_size == entry.get("size") and sha256_file(target) == entry.get("sha256")


def _fetch_one(file: str, expected: str, url: str, mirror: Path | None, dest: Path) -> dict:
    """Obtain, verify and decompress one archive; nothing is written to `dest` unless it verifies."""
    target = dest / file.removesuffix(".gz")
    with tempfile.TemporaryFile(dir=dest) as tmp:
        actual, source = _obtain(file, url, mirror, tmp)
        if actual != expected:
            raise NmtError(
                f"{source}: checksum mismatch for {file} (expected sha256 {expected}, got {actual})"
            )
        tmp.seek(0)
        sha256, size = _decompress(tmp, target, f"{source}: cannot decompress {file}")
    return {"gz_sha256": expected, "sha256": sha256, "size": size, "source": source}


def _decompress(gz_file: IO[bytes], target: Path, failure: str) -> tuple[str, int]:
    """Write the decompressed stream to `target` atomically; return its (sha256, size). A bad
    stream is NmtError(`failure`); a write error (a full disk) is an NmtError naming `target`."""
    h = hashlib.sha256()
    size = 0
    with gzip.GzipFile(fileobj=gz_file) as gz, atomic_write(target, "wb") as out:
        while True:
            try:
                block = gz.read(_BLOCK)
            except (gzip.BadGzipFile, EOFError, zlib.error) as e:
                raise NmtError(f"{failure} ({e})") from None
            if not block:
                return h.hexdigest(), size
            h.update(block)
            size += len(block)
            out.write(block)


def _mirror_for(name: str, manifest: dict, mirror: Path | None) -> Path | None:
    """The folder to copy from (None: download), so a corpus without a public address fails at
    once rather than after a lookup of a URL it has not got."""
    if mirror is None and os.environ.get("NMT_CORPUS_MIRROR"):
        mirror = Path(os.environ["NMT_CORPUS_MIRROR"])
    if mirror is None:
        if manifest.get("url") is None:
            raise NmtError(
                f"{name} has no public download address ({manifest.get('no_url', 'none known')}): "
                "give --mirror DIR or set NMT_CORPUS_MIRROR"
            )
        return None
    mirror = Path(mirror)
    if (mirror / name).is_dir():  # a folder of mirrors, one per corpus
        mirror = mirror / name
    if not mirror.is_dir():
        raise NmtError(f"mirror {mirror}: no such folder")
    return mirror


def fetch(name: str, dest: Path, mirror: Path | None = None, quiet: bool = False) -> Path:
    """Fetch corpus `name` into `dest` as plain text files (each `.gz` decompressed), verified and
    idempotent.

    Files come from `mirror` (else the NMT_CORPUS_MIRROR folder, if set; either the corpus's own
    folder or one holding `<name>/`) or the public address in the manifest (a corpus without one
    needs a mirror). Files already fetched and unchanged since (per the stamp file) are skipped.
    """
    manifest = load_manifest(name)
    dest = Path(dest)
    mirror = _mirror_for(name, manifest, mirror)
    if dest.exists() and not dest.is_dir():
        raise NmtError(f"{dest}: not a folder (--dest names where the corpus goes)")
    dest.mkdir(parents=True, exist_ok=True)
    stamp_path = dest / STAMP
    stamp: dict = {}
    if stamp_path.is_file():
        with contextlib.suppress(ValueError):
            stamp = json.loads(stamp_path.read_text(encoding="utf-8"))
        if not isinstance(stamp, dict):
            stamp = {}  # not ours: every file is verified again
    for file, expected in manifest["files"].items():
        target = dest / file.removesuffix(".gz")
        if _is_fresh(target, stamp.get(file), expected):
            continue
        url = manifest["url"].format(file=file) if manifest.get("url") else ""
        if not quiet:
            print(f"fetch {name}: {file} <- {mirror / file if mirror else url}", file=sys.stderr)
        stamp[file] = _fetch_one(file, expected, url, mirror, dest)
        with atomic_write(stamp_path) as f:
            json.dump(stamp, f, indent=2, sort_keys=True)
    if not quiet:
        print(f"fetch {name}: {len(manifest['files'])} files verified in {dest}", file=sys.stderr)
    return dest
