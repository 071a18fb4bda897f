#!/usr/bin/env python3
"""Fetch a corpus, verify its checksums and decompress it: `fetch_corpus.py multi30k --dest DIR`.

Known corpora are the manifests in corpora/: multi30k, and from a local mirror only wmt-news-de-en,
tatoeba-de-en and justice-laws-en-fr."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nmt.cli.errors import os_error_message
from nmt.data.corpus import fetch
from nmt.errors import NmtError


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
    p.add_argument("--quiet", action="store_true", help="print only errors")
    args = p.parse_args(argv)
    try:
        fetch(args.name, args.dest, mirror=args.mirror, quiet=args.quiet)
    except NmtError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # --dest a file or read-only, an unreadable mirror, a full disk
        print(f"error: {os_error_message(e) or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
