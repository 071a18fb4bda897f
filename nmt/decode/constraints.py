"""Terminology: target phrases a translation must contain (lexical constraints), given per line
(`nmt translate --input-format jsonl`: {"text": ..., "constraints": [...]}) or found through a
glossary (`--glossary FILE`: source term TAB target term) in each line's source. Torch-free: the
checks run before a model loads; the search is nmt.decode.search.constrained."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.decode.options import ResolvedOptions
from nmt.errors import NmtError
from nmt.textio import decode_line, open_binary

INPUT_FORMATS = ("text", "jsonl")
CONSTRAINTS_REFUSED = (
    "constraints need a model directory: an `nmt export` decodes with CTranslate2, which "
    "cannot apply them"
)


@dataclass(frozen=True)
class Glossary:
    """Source terms and the target term each must become. A line's constraints are the target
    terms of the source terms found in it as whole words, leftmost first and, where two start at
    the same place, the longest ("New York City" over "New York"); an overlapped match is not
    taken. Case-sensitive, except for a lowercased model (`lowercase`)."""

    entries: tuple[tuple[str, str], ...]
    source: str = "glossary"  # how errors name it: its file

    @classmethod
    def load(cls, path: str | Path) -> Glossary:
        """A TSV file of `source term<TAB>target term` lines (blank lines skipped); a bad line
        is a one-line error naming it."""
        name = str(path)
        if not Path(path).is_file():
            raise NmtError(f"{name}: glossary file not found")
        entries: dict[str, str] = {}
        with open_binary(path) as f:
            for n, raw in enumerate(f, start=1):
                line = decode_line(raw, name, n, "strict").rstrip("\r\n")
                if not line.strip():
                    continue
                fields = line.split("\t")
                if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                    raise NmtError(
                        f"{name}: line {n}: expected 'source term<TAB>target term', "
                        f"got {len(fields)} field(s)"
                        + ("" if len(fields) != 2 else " with an empty term")
                    )
                src, tgt = fields[0].strip(), fields[1].strip()
                if entries.get(src, tgt) != tgt:
                    raise NmtError(
                        f"{name}: line {n}: {src!r} is already glossed as {entries[src]!r}"
                    )
                entries[src] = tgt
        return cls(tuple(entries.items()), name)

    def check(self, encode: Callable[[str], list[int]], unk: int) -> None:
        """Refuse, naming the file and the term, a target term the model cannot write: one with
        characters its vocabulary lacks (it could only be written as <unk>, the model's `unk`
        id)."""
        for _, target in self.entries:
            if unk in encode(target):
                raise NmtError(
                    f"{self.source}: the target term {target!r} holds characters the model's "
                    "target vocabulary lacks (it could only be written as <unk>)"
                )

    def constraints(self, line: str, lowercase: bool = False) -> list[str]:
        """The target terms of the source terms in `line` (see the class), in order, once each."""
        if not self.entries:
            return []
        targets = dict((s.lower(), t) if lowercase else (s, t) for s, t in self.entries)
        terms = sorted(targets, key=lambda s: -len(s))
        pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, terms)) + r")(?!\w)")
        text = line.lower() if lowercase else line
        return list(dict.fromkeys(targets[m.group(0)] for m in pattern.finditer(text)))


def parse_jsonl_line(raw: str, name: str, lineno: int) -> tuple[str, list[str]]:
    """One `--input-format jsonl` line: {"text": str, "constraints": [str, ...]} (constraints
    optional), as (text, constraints); anything else is a one-line error naming the line."""
    where = f"{name}: line {lineno}"
    try:
        record: Any = json.loads(raw)
    except json.JSONDecodeError as e:
        raise NmtError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise NmtError(f'{where}: expected an object with a "text" string')
    unknown = sorted(set(record) - {"text", "constraints"})
    if unknown:
        raise NmtError(f'{where}: unknown field {unknown[0]!r} (fields: "text", "constraints")')
    phrases = record.get("constraints", [])
    if not isinstance(phrases, list) or not all(isinstance(p, str) for p in phrases):
        raise NmtError(f'{where}: "constraints" must be a list of strings')
    if any(not p.strip() for p in phrases):
        raise NmtError(f'{where}: "constraints" holds an empty phrase')
    return record["text"], [p.strip() for p in phrases]


def check_input_format(input_format: str) -> None:
    """Refuse an input format other than text lines or {"text", "constraints"} records."""
    if input_format not in INPUT_FORMATS:
        raise NmtError(f"--input-format must be text or jsonl, got {input_format!r}")


def check_constraint_options(options: ResolvedOptions, flag: str = "") -> None:
    """Constraints steer a beam: refuse greedy search (or a beam of 1) and sampling (`flag`
    names where the constraints came from)."""
    where = f"{flag} " if flag else ""
    if options.sampling is not None:
        raise NmtError(f"{where}constraints need beam search, not sampling")
    if options.rows == 1:
        raise NmtError(f"{where}constraints need beam search with a beam of 2 or more")


def constraint_ids(
    phrases: Sequence[str], encode: Any, first_line: int, line: int, room: int, unk: int
) -> list[list[int]]:
    """A line's phrases as target subword ids; refused (naming the line) when empty after
    encoding, when a phrase holds characters the target vocabulary lacks (it could only be
    written as <unk>, the model's `unk` id), or when together longer than the `room` its
    translation has."""
    phrases = list(dict.fromkeys(phrases))
    ids = [encode(p) for p in phrases]
    if any(not i for i in ids):
        raise NmtError(f"line {first_line + line}: a constraint encodes to no subwords")
    for phrase, pieces in zip(phrases, ids, strict=True):
        if unk in pieces:
            raise NmtError(
                f"line {first_line + line}: the constraint {phrase!r} holds characters the "
                "model's target vocabulary lacks (it could only be written as <unk>)"
            )
    need = sum(len(i) for i in ids)
    if need > room:
        raise NmtError(
            f"line {first_line + line}: its constraints need {need} target subwords, more than "
            f"the {room} its translation may hold (--max-len-a / --max-len-b, max_positions)"
        )
    return ids


def warn_missing(
    results: Sequence[Any],
    constraints: Sequence[Sequence[str]],
    wanted: Sequence[Sequence[Sequence[int]]],
    piece: Callable[[int], str],
    first_line: int,
    warn: Callable[[str], None],
) -> None:
    """Warn, naming the line, where a best translation lacks a constraint (the maximum length
    forced its end first): `results` Translations, `wanted` each line's constraint ids."""
    for i, (tr, ids) in enumerate(zip(results, wanted, strict=True)):
        if not ids or tr is None:
            continue
        phrases = list(dict.fromkeys(constraints[i]))
        for j in missing(tr.hypotheses[0].tokens, [[piece(t) for t in p] for p in ids]):
            warn(
                f"line {first_line + i}: the translation lacks the constraint "
                f"{phrases[j]!r} (the maximum length came first)"
            )


def missing(tokens: Sequence[str], phrases: Sequence[Sequence[str]]) -> list[int]:
    """Indices of the phrases (as pieces) that `tokens` does not contain."""
    return [
        i
        for i, p in enumerate(phrases)
        if not any(list(tokens[j : j + len(p)]) == list(p) for j in range(len(tokens) - len(p) + 1))
    ]
