"""Report pieces for the experiment scripts: Markdown tables, score cells, each run's training
figures and the data table from a preprocessed folder's manifest.

Not run on its own: the experiment scripts import it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nmt.plots.curves import read_events

RUN_HEAD = [
    "system",
    "parameters",
    "precision",
    "updates",
    "epochs",
    "minutes",
    "best valid BLEU (greedy)",
    "flat",
]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def sections(parts: Sequence[tuple[str, str]]) -> str:
    """Titled tables, one after another."""
    return "\n\n".join(f"{title}:\n\n{body}" for title, body in parts) + "\n"


def publish(md: str, path: Path, figures: Callable[[], Sequence[Path]]) -> None:
    """Write the tables to `path` and print them, then draw the figures and name each."""
    path.write_text(md, encoding="utf-8")
    print(md)
    for drawn in figures():
        print(f"wrote {drawn}")


def ci(cell: dict[str, float]) -> str:
    """'score [lo, hi]'."""
    return f"{cell['score']:.1f} [{cell['lo']:.1f}, {cell['hi']:.1f}]"


def signed(cell: dict[str, float]) -> str:
    """A difference and its interval, bold where the interval excludes 0: +5.2 [+4.1, +6.3]."""
    text = f"{cell['score']:+.1f} [{cell['lo']:+.1f}, {cell['hi']:+.1f}]"
    return f"**{text}**" if cell["lo"] > 0 or cell["hi"] < 0 else text


def percent(part: float, whole: float) -> str:
    """`part` as a whole-number % of `whole`."""
    return f"{100 * part / max(whole, 1e-9):.0f}%"


def read_json(path: Path) -> Any:
    """A JSON file's content."""
    return json.loads(path.read_text(encoding="utf-8"))


def parameters(model: Path) -> int:
    """How many parameters the model MODEL_DIR's config describes."""
    from nmt.dirs import ModelDir
    from nmt.models import build, count_parameters

    found = ModelDir.at(model)
    return count_parameters(build(found.config.model, found.vocab, init=False))


def precisions(events: Sequence[dict[str, Any]]) -> str:
    """The training precision of each start of a run, in order without repeats: `bf16`, or
    `bf16, then fp32 from update N` for a run resumed on a machine where `auto` resolves
    otherwise."""
    return changes(events, lambda e: str(e.get("precision", "unrecorded")))


def code_versions(events: Sequence[dict[str, Any]]) -> str:
    """The commit of the code of each start of a run, in order without repeats (`unrecorded`
    for a start that did not record it): which updates ran under which code."""
    return changes(events, lambda e: str(e.get("code", {}).get("commit", "unrecorded")))


def changes(events: Sequence[dict[str, Any]], value: Callable[[dict[str, Any]], str]) -> str:
    """`value` of each start event, in order without repeats: `a, then b from update N`."""
    parts: list[str] = []
    last = None
    for e in events:
        if e.get("event") != "start" or value(e) == last:
            continue
        last = value(e)
        parts.append(last if not parts else f"then {last} from update {e['step']:,}")
    return ", ".join(parts)


def run_info(model: Path, data: Path) -> dict[str, Any]:
    """Parameters, updates, epochs, minutes, best validation BLEU and flatness of one trained
    system (its flat.json: where the rule stopped it, and how far it had trained)."""
    events = read_events(model)
    valid = [e for e in events if e.get("event") == "valid" and e.get("bleu") is not None]
    flat = read_json(model / "flat.json")
    manifest = read_json(data / "manifest.json")
    end = [e for e in events if e.get("event") == "end"][-1]
    return {
        "parameters": parameters(model),
        "precision": precisions(events),
        "code": code_versions(events),
        "updates": flat.get("trained", flat["steps"]),
        "flat_at": flat["steps"],
        "flat": flat["flat"],
        "epochs": end["tgt_tokens"] / manifest["splits"]["train"]["tokens"][manifest["tgt_lang"]],
        "minutes": max(e["elapsed"] for e in valid) / 60,
        "best_valid": max(e["bleu"] for e in valid),
        "curve": [(e["step"], e["bleu"]) for e in valid],
    }


def flat_text(run: dict[str, Any], not_flat: str = "**no**") -> str:
    """Whether a run's curve was flat, and where when it trained past that point."""
    if not run["flat"]:
        return not_flat
    at = run.get("flat_at", run["updates"])
    return "yes" if at >= run["updates"] else f"yes, at {at:,}"


def run_row(name: str, run: dict[str, Any], flat: str) -> list[str]:
    """One system's training row (RUN_HEAD)."""
    return [
        name,
        f"{run['parameters'] / 1e6:.1f}M",
        run["precision"],
        f"{run['updates']:,}",
        f"{run['epochs']:.1f}",
        f"{run['minutes']:.0f}",
        f"{run['best_valid']:.2f}",
        flat,
    ]


def data_row(split: dict[str, Any], langs: Sequence[str]) -> list[str]:
    """A manifest split's lines read and kept (and of how many, for a sample), what
    preprocessing dropped and why, and its longest line in subwords."""
    dropped = {k: v for k, v in split.get("dropped", {}).items() if v}
    sample = split.get("sample")
    of = f" (a sample of {sample['lines']:,} of {sample['of']:,})" if sample else ""
    return [
        f"{split['lines_read']:,}",
        f"{split['kept']:,}{of}",
        ", ".join(f"{k} {v:,}" for k, v in dropped.items()) or "none",
        str(max(split["lengths"][lang]["max"] for lang in langs)),
    ]
