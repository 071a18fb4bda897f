"""The lines of one `Translator.translate` call as jobs for the search: blank lines answered
without the model, the rest grouped (lines with constraints batched apart from the others) and
each batch packed with everything a worker process needs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nmt.data.vocab import EOS_PIECE
from nmt.decode.engine import TextHypothesis, Translation
from nmt.decode.options import ResolvedOptions

Constraints = list[list[list[int]]]  # per line, per phrase, target subword ids


@dataclass
class Job:
    """One batch to search, with everything a worker process needs (pickled to it)."""

    lines: list[str]
    ids: list[list[int]]  # subword ids per line, no eos
    options: ResolvedOptions
    keys: list[int] | None = None  # sampling keys per line
    constraints: Constraints | None = None  # target subword ids per phrase per line


def batch_job(
    batch: list[int],
    lines: list[str],
    encoded: list[list[int]],
    opts: ResolvedOptions,
    keys: Sequence[int],
    wanted: Constraints | None,
) -> Job:
    """The job of the lines `batch` (indices): with their sampling keys when `opts` sample, and
    with their constraints when they have some (a batch holds only lines with, or only without)."""
    sampled = [keys[i] for i in batch] if opts.sampling is not None else None
    constrained = [wanted[i] for i in batch] if wanted is not None and wanted[batch[0]] else None
    return Job([lines[i] for i in batch], [encoded[i] for i in batch], opts, sampled, constrained)


def constraint_groups(todo: list[int], wanted: Constraints | None) -> list[list[int]]:
    """The lines `todo` to batch separately: all of them, or (when some lines have constraints)
    those without constraints, then those with."""
    if wanted is None:
        return [todo]
    return [[i for i in todo if not wanted[i]], [i for i in todo if wanted[i]]]


def blank_translations(
    lines: list[str], encoded: list[list[int]]
) -> tuple[list[Translation | None], list[int]]:
    """Results with the empty translation of each blank line (no model run) in place, None for
    the others, and the indices of those others."""
    results: list[Translation | None] = [None] * len(lines)
    todo = []
    for i, (line, ids) in enumerate(zip(lines, encoded, strict=True)):
        if ids:
            todo.append(i)
        else:
            results[i] = Translation(line, [TextHypothesis("", [], 0.0, 0.0)], [EOS_PIECE])
    return results, todo
