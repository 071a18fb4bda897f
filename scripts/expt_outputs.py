"""A finished system's outputs without its weights: kept in a folder small enough to commit, and
put back into an experiment's work folder, so that its report is drawn again without training.

Kept for each system: config.yaml and vocab.json (the report counts parameters and reads the
length limit from them), metrics.jsonl (the curves), flat.json (where training stopped, and under
which rule) and its translations, gzipped. Not run on its own: the experiment scripts use it.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KEPT = ("config.yaml", "vocab.json", "metrics.jsonl")
OUTCOME = "flat.json"  # copied last: a folder with it is whole


def _replace(src: Path, dest: Path, unzip: bool = False, gzip_it: bool = False) -> None:
    """Copy `src` to `dest` through a temporary file, (un)compressing on the way."""
    tmp = dest.with_name(dest.name + ".tmp")
    with open(src, "rb") as fin, open(tmp, "wb") as raw:
        if gzip_it:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
                shutil.copyfileobj(fin, out)
        elif unzip:
            with gzip.open(fin) as zin:
                shutil.copyfileobj(zin, raw)
        else:
            shutil.copyfileobj(fin, raw)
    tmp.replace(dest)


def keep(model: Path, dest: Path, translations: Sequence[str]) -> None:
    """Copy MODEL's outputs (no weights) to DEST, each of `translations` as NAME.gz."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        _replace(model / name, dest / name)
    for name in translations:
        _replace(model / name, dest / f"{name}.gz", gzip_it=True)
    _replace(model / OUTCOME, dest / OUTCOME)


def restore(kept: Path, model: Path, rule: dict[str, Any]) -> bool:
    """Put KEPT's outputs into MODEL when they were made under `rule` and MODEL holds no run of
    its own (no metrics.jsonl); True when they were put there."""
    outcome = kept / OUTCOME
    if not outcome.is_file() or (model / "metrics.jsonl").exists():
        return False
    if json.loads(outcome.read_text(encoding="utf-8")).get("rule") != rule:
        return False
    model.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        _replace(kept / name, model / name)
    for packed in sorted(kept.glob("*.gz")):
        _replace(packed, model / packed.stem, unzip=True)
    _replace(outcome, model / OUTCOME)
    return True
