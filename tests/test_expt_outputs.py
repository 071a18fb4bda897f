"""scripts/expt_outputs.py: a finished system's outputs kept without weights and put back, byte
for byte, only where they were made under the same rule and the work folder holds no run."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from expt_outputs import keep, restore  # noqa: E402

RULE = {"valid_every": 400, "max_steps": 3200}


def finished(model: Path, rule: dict) -> None:
    model.mkdir(parents=True)
    (model / "config.yaml").write_text("decoding:\n  max_len_a: 1.2\n")
    (model / "vocab.json").write_text('{"src": 16000}')
    (model / "metrics.jsonl").write_text('{"event": "valid", "step": 400, "bleu": 1.5}\n')
    (model / "flat.json").write_text(json.dumps({"flat": False, "steps": 3200, "rule": rule}))
    (model / "test.hyp.fr").write_text("".join(f"ligne {i} é\n" for i in range(500)))
    (model / "checkpoints").mkdir()
    (model / "checkpoints" / "last.safetensors").write_bytes(b"weights")


def test_kept_outputs_come_back_byte_for_byte_without_weights(tmp_path):
    model, kept, again = tmp_path / "model", tmp_path / "kept", tmp_path / "again"
    finished(model, RULE)
    keep(model, kept, ["test.hyp.fr"])
    assert sorted(p.name for p in kept.iterdir()) == [
        "config.yaml",
        "flat.json",
        "metrics.jsonl",
        "test.hyp.fr.gz",
        "vocab.json",
    ]
    packed = (kept / "test.hyp.fr.gz").read_bytes()
    assert gzip.decompress(packed) == (model / "test.hyp.fr").read_bytes()
    keep(model, kept, ["test.hyp.fr"])  # no time stamp inside: the same bytes again
    assert (kept / "test.hyp.fr.gz").read_bytes() == packed
    assert restore(kept, again, RULE)
    for name in ("config.yaml", "vocab.json", "metrics.jsonl", "flat.json", "test.hyp.fr"):
        assert (again / name).read_bytes() == (model / name).read_bytes()
    assert not (again / "checkpoints").exists() and not list(again.glob("*.tmp"))


def test_outputs_are_not_put_back_under_another_rule_or_over_a_run(tmp_path):
    model, kept = tmp_path / "model", tmp_path / "kept"
    finished(model, RULE)
    keep(model, kept, ["test.hyp.fr"])
    assert not restore(kept, tmp_path / "other", {**RULE, "max_steps": 12000})
    assert not (tmp_path / "other").exists()
    running = tmp_path / "running"
    running.mkdir()
    (running / "metrics.jsonl").write_text('{"event": "start", "step": 0}\n')
    assert not restore(kept, running, RULE)
    assert sorted(p.name for p in running.iterdir()) == ["metrics.jsonl"]
    assert not restore(tmp_path / "nothing-kept", tmp_path / "fresh", RULE)
