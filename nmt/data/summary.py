"""What `nmt preprocess` prints: the per-split table users check before training, and notes."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from nmt.dirs.data import lowercased


def print_summary(manifest: dict[str, Any]) -> None:
    """The table (kept, dropped, token counts and lengths per split), then one note per issue."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # a log file should not wrap the table at 80 columns
    console.print(summary_table(manifest))
    for note in summary_notes(manifest):
        console.print(note, highlight=False)


def summary_table(manifest: dict[str, Any]) -> Table:
    """One row per split: lines read, kept, dropped, tokens and p50/p99/max length per side."""
    src, tgt = manifest["src_lang"], manifest["tgt_lang"]
    sizes = manifest["vocab_size"]
    vocab = f"joint {sizes['src']}" if manifest["joint"] else f"{sizes['src']} / {sizes['tgt']}"
    title = f"{src}->{tgt}, vocabulary {vocab}, {manifest['dtype']}"
    table = Table(title=title, title_justify="left")
    table.add_column("split")
    for col in ("read", "kept", "dropped", f"tokens {src}", f"tokens {tgt}"):
        table.add_column(col, justify="right")
    for lang in (src, tgt):
        table.add_column(f"{lang} p50/p99/max", justify="right")
    for name, s in manifest["splits"].items():
        lens = [s["lengths"][lang] for lang in (src, tgt)]
        table.add_row(
            name,
            f"{s['lines_read']:,}",
            f"{s['kept']:,}",
            f"{s['lines_read'] - s['kept'] - held_out(s):,}",
            *(f"{s['tokens'][lang]:,}" for lang in (src, tgt)),
            *(f"{x['p50']}/{x['p99']}/{x['max']}" for x in lens),
        )
    return table


def held_out(split: dict[str, Any]) -> int:
    """Pairs of a split that were read but neither kept nor dropped: train's pairs that went to
    valid/test, valid's lines left out of its --valid-sample."""
    held = split.get("held_out") or {}
    sample = split.get("sample") or {}
    unsampled = int(sample["of"]) - int(sample["lines"]) if sample else 0
    return int(held.get("valid", 0)) + int(held.get("test", 0)) + unsampled


def summary_notes(manifest: dict[str, Any]) -> list[str]:
    """Lowercased text; where the SentencePiece models came from (--spm-from); train pairs
    dropped by reason; valid/test lines too long for common position limits."""
    notes = []
    if lowercased(manifest):
        notes.append("every split lowercased (--lowercase): the model reads and writes lowercase")
    if manifest.get("spm_from"):
        notes.append(f"SentencePiece models copied from {manifest['spm_from']} (--spm-from)")
    if source := manifest.get("tokenizer_from"):
        notes.append(f"encoded with the tokenizer of {source['model']} (--tokenizer-from)")
    if ext := manifest.get("vocab_extension"):
        if ext["src"] == ext["tgt"]:
            sides = [("", ext["src"])]
        else:
            sides = [(" (source)", ext["src"]), (" (target)", ext["tgt"])]
        for label, e in sides:
            chars = e["characters"]
            shown = f"{chars[:20]}{'...' if len(chars) > 20 else ''}"
            kept = e.get("checked_languages") or []
            scope = (
                f"every piece the corpus wants that leaves {'/'.join(kept)} encoded as before"
                if e.get("all_pieces")
                else "pieces holding new characters"
            )
            notes.append(
                f"vocabulary extended{label}: {e['added']} pieces after its {e['from_size']} "
                f"({scope}; {len(chars)} new characters: {shown})"
                if e["added"]
                else f"vocabulary extension{label}: no new characters, nothing added"
            )
    for name, s in manifest["splits"].items():
        if held := s.get("held_out"):
            notes.append(
                f"{name}: {held['valid']:,} pairs held out as valid and {held['test']:,} as test "
                f"(--seed {held['seed']}); a test source never occurs in {name}"
                if held["test"]
                else f"{name}: {held['valid']:,} pairs held out as valid (--seed {held['seed']})"
            )
        if sample := s.get("sample"):
            notes.append(
                f"{name}: a sample of {sample['lines']:,} of its {sample['of']:,} lines "
                f"(--valid-sample, --seed {sample['seed']}), in file order"
            )
        if unknown := {k: v for k, v in s.get("unknown_lines", {}).items() if v}:
            counts = ", ".join(f"{lang} {n:,}" for lang, n in unknown.items())
            notes.append(
                f"{name}: lines with pieces the vocabulary lacks (read as <unk>): {counts}"
            )
        if any(s["dropped"].values()):
            reasons = ", ".join(f"{k} {v:,}" for k, v in s["dropped"].items() if v)
            notes.append(f"{name} dropped: {reasons}")
        over = s.get("over_limits", {})
        if any(over.values()):
            counts = ", ".join(f"{n:,} over {limit}" for limit, n in over.items())
            notes.append(
                f"{name}: lines longer than a model's max_positions (subwords + eos): {counts}; "
                "validation cuts them to the model's limit"
            )
    return notes


def stderr_progress() -> Callable[[str, int, int | None], None]:
    """Plain one-line-per-step progress for library callers that pass neither progress nor quiet."""
    started: dict[str, float] = {}

    def report(step: str, done: int, total: int | None) -> None:
        started.setdefault(step, time.perf_counter())
        if total is not None and done >= total:
            secs = time.perf_counter() - started[step]
            print(f"preprocess: {step}: {done:,} in {secs:.1f}s", file=sys.stderr)

    return report
