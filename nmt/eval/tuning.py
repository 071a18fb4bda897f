"""Decoding defaults chosen on the validation set: a small grid of beam sizes and length penalties,
scored with sacreBLEU (nmt.eval.scoring), timed, and the winner written into MODEL_DIR's config.yaml.

Tuning on `valid` keeps the test sets honest: the test BLEU a README reports was never looked at
while choosing. `scripts/tune_decoding.py` is the command-line wrapper.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nmt.errors import NmtError

BEAMS = (1, 4, 5, 8)
PENALTIES = (0.6, 0.8, 1.0, 1.2, 1.4)
TIE = 0.05  # BLEU within this of the best counts as a tie: the faster setting wins


@dataclass
class TuneRow:
    """One grid point: its settings, corpus BLEU on the tuning set, and decoding speed."""

    beam_size: int
    length_penalty: float | None  # None: greedy, where the penalty plays no part
    bleu: float
    sent_s: float
    signature: str

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON (BLEU to two decimals, speed to one)."""
        d = asdict(self)
        d["bleu"], d["sent_s"] = round(self.bleu, 2), round(self.sent_s, 1)
        return d


def valid_files(model_dir: str | Path, data_dir: str | Path | None) -> tuple[Path, Path]:
    """DATA_DIR's raw valid source and references (DATA_DIR: given, else the one training used)."""
    from nmt.dirs.model import ModelDir

    meta = ModelDir(model_dir).meta
    data = Path(data_dir) if data_dir else training_data_dir(model_dir)
    paths = tuple(data / f"valid.{meta[k]}.txt" for k in ("src_lang", "tgt_lang"))
    for p in paths:
        if not p.exists():
            raise NmtError(
                f"{p}: not found (give --src and --ref, or a DATA_DIR with a valid split)"
            )
    return paths[0], paths[1]


def training_data_dir(model_dir: str | Path) -> Path:
    """The DATA_DIR recorded in MODEL_DIR's trainer state."""
    from nmt.dirs.model import ModelDir
    from nmt.dirs.state import read_state

    path = ModelDir.at(model_dir).state_path
    if not path.exists():
        raise NmtError(f"{path}: no trainer state to find the training DATA_DIR; give --data")
    data = read_state(path).settings.get("data_dir")
    if not data:
        raise NmtError(f"{path}: the trainer state does not record its DATA_DIR; give --data")
    return Path(data)


def grid(beams: Sequence[int], penalties: Sequence[float]) -> list[tuple[int, float | None]]:
    """(beam, length penalty) pairs; greedy (beam 1) once, without a penalty."""
    if not beams or not penalties:
        raise NmtError("the grid needs at least one beam size and one length penalty")
    pairs: list[tuple[int, float | None]] = []
    for k in sorted(set(beams)):
        if k < 1:
            raise NmtError(f"beam sizes must be >= 1, got {k}")
        pairs += [(1, None)] if k == 1 else [(k, lp) for lp in sorted(set(penalties))]
    return pairs


def tune(
    translator: Any,
    src: list[str],
    refs: list[str],
    pairs: list[tuple[int, float | None]],
    on_row: Callable[[TuneRow], None] | None = None,
) -> list[TuneRow]:
    """Translate `src` with each grid point and score it against `refs`."""
    from nmt.decode.lines import one_line
    from nmt.decode.options import DecodeOptions
    from nmt.eval import scoring

    if len(src) != len(refs):
        raise NmtError(f"{len(src)} source lines but {len(refs)} references")
    rows = []
    if pairs:
        translator.start_workers()  # forked before the first point's clock, not within it
    for k, lp in pairs:
        t0 = time.perf_counter()
        out = translator.translate(src, DecodeOptions(beam_size=k, length_penalty=lp))
        seconds = time.perf_counter() - t0
        hyps = [one_line(t.text) for t in out]  # as `nmt translate` writes them
        bleu = scoring.score(hyps, [refs], ["bleu"])[0]
        row = TuneRow(k, lp, bleu.score, len(src) / max(seconds, 1e-9), bleu.signature)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def best(rows: list[TuneRow]) -> TuneRow:
    """The highest BLEU; within TIE of it, the fastest setting."""
    if not rows:
        raise NmtError("nothing was tuned")
    top = max(r.bleu for r in rows)
    return max((r for r in rows if r.bleu >= top - TIE), key=lambda r: r.sent_s)


def write_decoding(model_dir: str | Path, row: TuneRow) -> Path:
    """Make `row` MODEL_DIR's decoding defaults (config.yaml rewritten atomically)."""
    from nmt.dirs.model import ModelDir

    cfg = ModelDir(model_dir).config
    cfg.decoding.beam_size = row.beam_size
    if row.length_penalty is not None:
        cfg.decoding.length_penalty = row.length_penalty
    path = Path(model_dir) / "config.yaml"
    cfg.save(path)
    return path


def table(rows: list[TuneRow], chosen: TuneRow | None = None) -> str:
    """A markdown table of the grid (the chosen row marked)."""
    lines = ["| beam | length penalty | BLEU | sent/s | |", "|---|---|---|---|---|"]
    for r in rows:
        lp = "-" if r.length_penalty is None else f"{r.length_penalty:g}"
        mark = "chosen" if r is chosen else ""
        lines.append(f"| {r.beam_size} | {lp} | {r.bleu:.2f} | {r.sent_s:.1f} | {mark} |")
    return "\n".join(lines)
