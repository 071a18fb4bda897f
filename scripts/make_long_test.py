#!/usr/bin/env python3
"""Make a SYNTHETIC long-sentence test set from a parallel test set (Multi30k test_2016_flickr by
default) by joining consecutive sentences, so sources reach 60+ words.

Scheme (deterministic, no randomness): walk the file in order with k cycling 1, 2, 3, 4, 1, 2, ...
The first line stays alone, the next 2 lines are joined into one, the next 3 into one, the next 4
into one, and so on; a last group shorter than its k keeps what is left. Both sides get exactly
the same joins (sentences joined with one space), so line i of every output is the same group.
Multi30k's 1,000 test lines become 400 lines, 100 of each k. These are not natural long
sentences (each is a few image captions in a row), which is what makes them a clean probe of how
a fixed-length encoding copes with length: the content per sentence stays the same.

    python scripts/make_long_test.py corpora/multi30k/test_2016_flickr -o work/long/test_long
    # writes work/long/test_long.en and work/long/test_long.de, prints a length summary
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from nmt.errors import NmtError
from nmt.textio import atomic_write, read_lines


def groups(n: int, max_k: int = 4) -> list[range]:
    """Line-number ranges of the joined lines: sizes cycle 1..max_k over n lines."""
    out, start, k = [], 0, 1
    while start < n:
        out.append(range(start, min(start + k, n)))
        start += k
        k = k % max_k + 1
    return out


def join(lines: Sequence[str], spans: Sequence[range]) -> list[str]:
    """One output line per span: its lines stripped and joined with one space."""
    return [" ".join(lines[i].strip() for i in span) for span in spans]


def _input(prefix: str, lang: str) -> Path:
    """PREFIX.LANG, or PREFIX.LANG.gz when only the compressed file exists."""
    for p in (Path(f"{prefix}.{lang}"), Path(f"{prefix}.{lang}.gz")):
        if p.is_file():
            return p
    raise NmtError(f"{prefix}.{lang}: file not found (nor {prefix}.{lang}.gz)")


def summary(src: Sequence[str], spans: Sequence[range]) -> list[str]:
    """Lines per k and source word lengths (min / mean / max, per 10-word bucket)."""
    lengths = [len(line.split()) for line in src]
    per_k = Counter(len(s) for s in spans)
    buckets = Counter(min(n // 10, 6) for n in lengths)
    out = [
        f"{len(src)} lines; per k: " + ", ".join(f"k={k}: {per_k[k]}" for k in sorted(per_k)),
        f"source words: min {min(lengths)}, mean {sum(lengths) / len(lengths):.1f}, "
        f"max {max(lengths)}; {sum(n >= 60 for n in lengths)} lines of 60+ words",
        "per bucket: "
        + ", ".join(
            f"{10 * b}{'+' if b == 6 else f'-{10 * b + 10}'}: {buckets[b]}" for b in range(7)
        ),
    ]
    return out


def make_long_test(prefix: str, out: str, langs: Sequence[str], max_k: int = 4) -> list[str]:
    """Write OUT.LANG for every language; return the summary lines."""
    if max_k < 1:
        raise NmtError(f"--max-k must be >= 1, got {max_k}")
    sides = {lang: list(read_lines(_input(prefix, lang))) for lang in langs}
    counts = {lang: len(lines) for lang, lines in sides.items()}
    if len(set(counts.values())) != 1:
        raise NmtError(f"line counts differ: {counts}")
    n = next(iter(counts.values()))
    if n == 0:
        raise NmtError(f"{prefix}: empty test set")
    spans = groups(n, max_k)
    joined = {lang: join(lines, spans) for lang, lines in sides.items()}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    for lang, lines in joined.items():
        with atomic_write(f"{out}.{lang}") as f:
            f.writelines(line + "\n" for line in lines)
    return summary(joined[langs[0]], spans)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, write the files, print the summary; user errors are one line, exit 2."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("prefix", help="input prefix: PREFIX.<lang> (plain or .gz)")
    p.add_argument("-o", "--out", required=True, help="output prefix: writes OUT.<lang>")
    p.add_argument("--langs", default="en,de", help="comma-separated languages (first = source)")
    p.add_argument("--max-k", type=int, default=4, help="k cycles 1..MAX_K (default 4)")
    p.add_argument("--quiet", action="store_true", help="print only errors")
    args = p.parse_args(argv)
    langs = [x.strip() for x in args.langs.split(",") if x.strip()]
    try:
        lines = make_long_test(args.prefix, args.out, langs, args.max_k)
    except NmtError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    if not args.quiet:
        print(
            f"wrote {', '.join(f'{args.out}.{lang}' for lang in langs)} (synthetic: joined lines)"
        )
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
