#!/usr/bin/env python3
"""Fetch a corpus, verify its checksums and decompress it: `fetch_corpus.py multi30k --dest DIR`.

Known corpora are the manifests in corpora/: multi30k, downloaded; wmt-news-de-en, built from
the public files its manifest names (downloaded by their URLs at a pinned commit, or read from a
local copy with --sources DIR), every source and every built file checked against its SHA-256;
and from a local mirror only tatoeba-de-en and justice-laws-en-fr. --mirror DIR copies any
corpus's .gz files from a local folder instead."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from nmt.cli.errors import os_error_message
from nmt.data.corpus import fetch, load_manifest
from nmt.errors import NmtError

TIMEOUT_S = 60
MIRROR_ENV = "NMT_CORPUS_MIRROR"  # a mirror folder for every corpus, as fetch() reads it


def read_source(path: str, expected: str, sources: Path | None, url: str) -> bytes:
    """One source file, from the local copy `sources` or downloaded from `url` (its `{path}`
    filled in), checked against its SHA-256."""
    if sources is not None:
        local = sources / path
        if not local.is_file():
            raise NmtError(f"{sources}: no {path}")
        where, data = str(local), local.read_bytes()
    else:
        where = url.format(path=path)
        try:
            with urllib.request.urlopen(where, timeout=TIMEOUT_S) as resp:
                data = resp.read()
        except urllib.error.HTTPError as e:
            raise NmtError(f"cannot download {where}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError) as e:
            raise NmtError(f"cannot download {where}: {getattr(e, 'reason', e)}") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise NmtError(f"{where}: checksum mismatch (expected sha256 {expected}, got {actual})")
    return data


def gzip_n9(data: bytes) -> bytes:
    """`data` compressed as GNU gzip -n -9 does (no name, no time stamp): the manifest's
    checksums are of those bytes, which Python's zlib does not reproduce."""
    gz = shutil.which("gzip")
    if gz is None:
        raise NmtError("building this corpus needs GNU gzip on PATH (its files are gzip -n -9)")
    return subprocess.run(
        [gz, "-n", "-9", "-c"], input=data, capture_output=True, check=True
    ).stdout


def stripped_lines(data: bytes) -> list[str]:
    """A source file's lines (split at "\\n" only), each stripped as Python's str.strip does."""
    text = data.decode("utf-8")
    if text.endswith("\n"):
        text = text[:-1]
    return [line.strip() for line in text.split("\n")]


def build(manifest: dict, out: Path, sources: Path | None = None, url: str | None = None) -> Path:
    """Write a corpus's .gz files into `out` from the public files its manifest's `build` names
    (a local copy `sources`, else downloaded from `url` or the manifest's address), as the
    manifest's `how` says; fetch() then verifies them against the manifest's checksums."""
    spec = manifest["build"]
    url = url or spec["url"]
    sums = spec["sources"]
    for file, path in spec["copy"].items():
        (out / file).write_bytes(gzip_n9(read_source(path, sums[path], sources, url)))
    langs = list(spec["train"])
    seen: set[tuple[str, ...]] = set()
    kept: list[tuple[str, ...]] = []
    for folder in spec["train_dirs"]:
        for name in spec["train_sets"]:
            sides = []
            for lang in langs:
                path = f"{folder}/{name}.{spec['suffixes'][lang]}"
                sides.append(stripped_lines(read_source(path, sums[path], sources, url)))
            if len({len(side) for side in sides}) != 1:
                raise NmtError(f"{folder}/{name}: its languages differ in line count")
            for pair in zip(*sides, strict=True):
                if pair not in seen:
                    seen.add(pair)
                    kept.append(pair)
    for i, lang in enumerate(langs):
        text = "".join(pair[i] + "\n" for pair in kept)
        (out / spec["train"][lang]).write_bytes(gzip_n9(text.encode("utf-8")))
    return out


def fetch_corpus(
    name: str,
    dest: Path,
    mirror: Path | None = None,
    sources: Path | None = None,
    url: str | None = None,
    quiet: bool = False,
) -> Path:
    """Fetch `name` into `dest`: from a mirror when one is given (or NMT_CORPUS_MIRROR is set and
    no sources are), else built from its public files when its manifest says how (`build`), else
    downloaded."""
    manifest = load_manifest(name)
    plain = sources is None and url is None
    if mirror is not None or (plain and ("build" not in manifest or os.environ.get(MIRROR_ENV))):
        return fetch(name, dest, mirror=mirror, quiet=quiet)
    if "build" not in manifest:
        raise NmtError(f"{name} is not built from sources: fetch it without --sources")
    with tempfile.TemporaryDirectory(prefix=f"{name}-build-") as tmp:
        if not quiet:
            where = sources or url or manifest["build"]["url"]
            print(f"fetch {name}: building from {where}", file=sys.stderr)
        built = build(manifest, Path(tmp), sources=sources, url=url)
        return fetch(name, dest, mirror=built, quiet=quiet)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and fetch; a bad checksum or unreachable source is one line and exit 2."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "name",
        help="corpus name (a manifest corpora/<name>.json): multi30k, wmt-news-de-en, tatoeba-de-en, "
        "justice-laws-en-fr",
    )
    p.add_argument("--dest", type=Path, required=True, help="folder for the plain-text files")
    p.add_argument("--mirror", type=Path, default=None, help="local folder holding the .gz files")
    p.add_argument(
        "--sources",
        type=Path,
        default=None,
        help="a corpus built from public files (wmt-news-de-en): a local copy of them, e.g. "
        "../shared/corpus-sources/OPUS-MT-testsets-ac0f19c, instead of downloading",
    )
    p.add_argument("--quiet", action="store_true", help="print only errors")
    args = p.parse_args(argv)
    try:
        fetch_corpus(
            args.name, args.dest, mirror=args.mirror, sources=args.sources, quiet=args.quiet
        )
    except NmtError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # --dest a file or read-only, an unreadable mirror, a full disk
        print(f"error: {os_error_message(e) or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
