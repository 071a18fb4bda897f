"""Tab-separated corpora: one `SRC<TAB>TGT` pair a line, in a `.tsv` or `.tsv.gz` file.

Many users hold parallel data this way (Tatoeba, exports of translation memories). The file is read
as bytes and split on b"\\n" only, so other Unicode line breaks (U+2028, U+0085) stay inside their
sentence, as they do in line-aligned files.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from nmt.data.cleaning import read_pairs
from nmt.errors import NmtError
from nmt.textio import open_binary

TSV_SUFFIXES = (".tsv", ".tsv.gz")
BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark before line 1: not part of the first column


def is_tsv(path: str | Path) -> bool:
    """Whether --train names a tab-separated file rather than a PREFIX of two line files."""
    return str(path).endswith(TSV_SUFFIXES)


def parse_columns(text: str) -> tuple[str, ...]:
    """`--columns en,de` as its language names."""
    return tuple(name.strip() for name in text.split(","))


def column_order(columns: Sequence[str] | None, langs: tuple[str, str]) -> tuple[int, int]:
    """(source column, target column) of a TSV file whose columns are the languages `columns`
    (None: the file's order is source, target)."""
    if columns is None:
        return 0, 1
    if len(columns) != 2 or set(columns) != set(langs):
        raise NmtError(
            f"--columns must name --src-lang and --tgt-lang once each in the file's order "
            f"(e.g. {langs[0]},{langs[1]}), got {','.join(columns)}"
        )
    return columns.index(langs[0]), columns.index(langs[1])


def _malformed(path: Path, n: int, fields: int) -> str:
    """The one-line error of a line that is not exactly two tab-separated columns."""
    found = "no tab" if fields == 1 else f"{fields} columns"
    return f"{path}:{n}: {found}, expected 2 tab-separated columns; --skip-invalid drops such lines"


def read_tsv_pairs(
    path: Path, order: tuple[int, int], skip_invalid: bool, counts: dict[str, int]
) -> Iterator[tuple[int, bytes, bytes]]:
    """Yield (line number, source bytes, target bytes) of a TSV file. A line that is not two columns
    is an error naming it, or with `skip_invalid` counted under `malformed` and left out; a blank
    line is an empty pair (the cleaning rules count it). At the end `counts["read"]` is the number
    of lines."""
    n = 0
    with open_binary(path) as f:
        for n, line in enumerate(f, start=1):
            if n == 1:
                line = line.removeprefix(BOM)
            fields = line.rstrip(b"\r\n").split(b"\t")
            if len(fields) != 2:
                if not line.strip():
                    yield n, b"", b""
                    continue
                if not skip_invalid:
                    raise NmtError(_malformed(path, n, len(fields)))
                counts["malformed"] = counts.get("malformed", 0) + 1
                continue
            yield n, fields[order[0]], fields[order[1]]
    counts["read"] = n  # lines left out at the end count as read too


def train_pairs(
    inputs: tuple[Path, Path],
    order: tuple[int, int] | None,
    skip_invalid: bool,
    counts: dict[str, int],
) -> Iterator[tuple[int, bytes, bytes]]:
    """Train's raw pairs: a TSV file's columns in `order`, else two line-aligned files."""
    if order is None:
        return read_pairs(*inputs)
    return read_tsv_pairs(inputs[0], order, skip_invalid, counts)
