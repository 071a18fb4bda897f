"""The systems of the joined-caption experiment (scripts/joined_experiment.py): which preset each
trains, on which corpus, and which pairs of systems its report compares.

Not run on its own: joined_experiment.py and joined_report.py import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SRC, TGT = "en", "de"
TEST_K = 6
CORPORA = {"k6": 6, "k4": 4, "k1": 1}


@dataclass(frozen=True)
class System:
    """One trained model: its name, preset, corpus (by K) and extra `--set` overrides."""

    name: str
    preset: str
    corpus: str  # k6, k4 or k1
    sets: tuple[str, ...] = ()
    group: str = "core"
    budget_of: str = ""  # a reference trains for this system's updates (the same budget)
    max_steps: int = 0  # a cap of its own (0: the rule's)


SYSTEMS = [
    System("noattn", "seq2seq-noattn", "k6"),
    System("bahdanau", "seq2seq-bahdanau", "k6"),
    System("transformer", "transformer-multi30k", "k6"),
    System("noattn-plain", "seq2seq-noattn", "k1", group="all", budget_of="noattn"),
    System("bahdanau-plain", "seq2seq-bahdanau", "k1", group="all", budget_of="bahdanau"),
    System("noattn-K4", "seq2seq-noattn", "k4", group="all"),
    System("bahdanau-K4", "seq2seq-bahdanau", "k4", group="all"),
    System("transformer-K4", "transformer-multi30k", "k4", group="all"),
    System(
        "noattn-512",
        "seq2seq-noattn",
        "k6",
        ("model.embed_dim=512", "model.hidden_size=512"),
        group="capacity",
        max_steps=9600,
    ),
    System("noattn-seed2", "seq2seq-noattn", "k6", ("training.seed=2",), group="extra"),
    System("bahdanau-seed2", "seq2seq-bahdanau", "k6", ("training.seed=2",), group="extra"),
]
SMOKE_PRESETS = {
    "seq2seq-noattn": ("seq2seq-tiny", ("model.attention=none",)),
    "seq2seq-bahdanau": ("seq2seq-tiny", ("model.attention=bahdanau",)),
    "transformer-multi30k": ("transformer-tiny", ()),
}
# The report's paired differences between systems: the first minus the second, at every k.
PAIRS = [
    ("bahdanau", "noattn"),
    ("transformer", "bahdanau"),
    ("noattn-512", "noattn"),  # the capacity control: does twice the width rescue the vector?
    ("bahdanau", "noattn-512"),
    ("noattn-seed2", "noattn"),  # the seed spread: the same run but for its seed
    ("bahdanau-seed2", "bahdanau"),
]
GROUPS = {
    "core": {"core"},
    "all": {"core", "all"},
    "capacity": {"capacity"},
    "extra": {"extra"},
}


def choose(names: Sequence[str]) -> list[System]:
    """The systems named (names, or the groups core, all and extra), in the table's order."""
    wanted: set[str] = set()
    for n in names:
        if n in GROUPS:
            wanted |= {s.name for s in SYSTEMS if s.group in GROUPS[n]}
        elif n in {s.name for s in SYSTEMS}:
            wanted.add(n)
        else:
            known = ", ".join(s.name for s in SYSTEMS)
            raise SystemExit(
                f"error: unknown system {n!r} (choose from {', '.join(GROUPS)}, {known})"
            )
    return [s for s in SYSTEMS if s.name in wanted]
