"""Checkpoints: weights_only trainer state with RNGs, atomic writes, N-best pruning, averaging."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import stat
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import nmt.train.checkpoint as ck
from nmt.dirs import ModelDir
from nmt.dirs.state import SavedState, load_state
from nmt.dirs.weights import load_weights, save_weights, weights_step
from nmt.errors import NmtError
from nmt.train.selection import average


class Tied(nn.Module):
    """A model with a tied matrix, like the Transformer's embeddings/output."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(6, 4)
        self.out = nn.Linear(4, 6, bias=False)
        self.out.weight = self.emb.weight
        self.step = nn.Parameter(torch.zeros(2))


def _model(value: float) -> Tied:
    m = Tied()
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(value)
    return m


def test_rng_state_round_trips_through_weights_only_load(tmp_path):
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    ck.save_state(tmp_path / "s.pt", {"rng": ck.rng_state(), "step": 7})
    expect = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    state = load_state(tmp_path / "s.pt")  # weights_only=True inside
    ck.set_rng_state(state["rng"])
    assert state["step"] == 7
    assert torch.equal(torch.rand(3), expect[0])
    assert np.array_equal(np.random.rand(3), expect[1])
    assert [random.random() for _ in range(3)] == expect[2]


def _state(step: int, **fields) -> SavedState:
    """A trainer state at `step` with nothing else in it."""
    base = dict(model={}, optimizer={}, train_state={"step": step}, rng={}, world_size=1)
    return SavedState(**{**base, **fields})


def test_crash_while_writing_leaves_previous_checkpoint_loadable(tmp_path, monkeypatch):
    c = ck.Checkpoints(ModelDir.at(tmp_path))
    c.save_last(_model(1.0), _state(1))

    def torn_save(obj, f, *a, **kw):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(ck.torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        c.save_last(_model(2.0), _state(2))
    monkeypatch.undo()

    def torn_weights(tensors, filename, metadata=None):
        open(filename, "wb").write(b"junk")
        raise OSError("disk full")

    monkeypatch.setattr("safetensors.torch.save_file", torn_weights)
    with pytest.raises(OSError, match="disk full"):
        c.save_step(_model(3.0), 5, "bleu", 1.0, is_best=True)
    monkeypatch.undo()
    assert load_state(c.state_path)["train_state"]["step"] == 1
    assert torch.all(load_file(str(c.dir / "last.safetensors"))["emb.weight"] == 1.0)
    assert sorted(p.name for p in c.dir.iterdir()) == ["last.safetensors", "last.state.pt"]


def test_damaged_state_is_a_one_line_error(tmp_path):
    (tmp_path / "s.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(NmtError, match=r"s\.pt: cannot read trainer state"):
        load_state(tmp_path / "s.pt")


def test_state_with_arbitrary_objects_is_refused(tmp_path):
    torch.save({"evil": ck.Checkpoints}, tmp_path / "s.pt")
    with pytest.raises(NmtError, match="cannot read trainer state"):
        load_state(tmp_path / "s.pt")


def test_keeps_n_best_and_n_last_and_best(tmp_path):
    c = ck.Checkpoints(ModelDir.at(tmp_path), keep_best=2, keep_last=1)
    scores = {100: 10.0, 200: 30.0, 300: 20.0, 400: 5.0, 500: 25.0}
    best = None
    for step, bleu in scores.items():
        is_best = best is None or bleu > best
        best = bleu if is_best else best
        c.save_step(_model(step), step, "bleu", bleu, is_best)
    kept = sorted(int(p.stem.split("-")[1]) for p in c.dir.glob("step-*.safetensors"))
    assert kept == [200, 500]  # two best (30, 25); 500 is also the newest
    assert [e["step"] for e in c.read_index()] == [200, 500]
    assert torch.all(load_file(str(c.dir / "best.safetensors"))["emb.weight"] == 200)


def test_loss_metric_ranks_lower_first():
    entries = [
        {"step": 1, "metric": "loss", "score": 3.0},
        {"step": 2, "metric": "loss", "score": 2.0},
        {"step": 3, "metric": "loss", "score": 2.5},
    ]
    assert [e["step"] for e in ck.ranked(entries)] == [2, 3, 1]


def test_average_last_and_best(tmp_path):
    c = ck.Checkpoints(ModelDir.at(tmp_path), keep_best=5, keep_last=5)
    for step, (value, bleu) in {1: (1.0, 9.0), 2: (2.0, 7.0), 3: (4.0, 5.0)}.items():
        c.save_step(_model(value), step, "bleu", bleu, False)
    path, steps = average(ModelDir.at(tmp_path), last=2)
    assert steps == [2, 3] and path.name == "averaged.safetensors"
    avg = load_file(str(path))
    assert torch.allclose(avg["emb.weight"], torch.full((6, 4), 3.0))
    assert "out.weight" not in avg  # the tied matrix is stored once, as save_weights does
    _, steps = average(ModelDir.at(tmp_path), best=2)
    assert steps == [1, 2]
    # The averaged file loads into the model like any other checkpoint.
    from nmt.dirs.weights import load_weights

    m = _model(0.0)
    load_weights(m, path)
    assert torch.allclose(m.out.weight, torch.full((6, 4), 1.5))  # best: steps 1 and 2


def test_average_needs_enough_checkpoints(tmp_path):
    c = ck.Checkpoints(ModelDir.at(tmp_path))
    c.save_step(_model(1.0), 10, "bleu", 1.0, True)
    with pytest.raises(NmtError, match="asked to average 3 checkpoints but only 1 are kept"):
        average(ModelDir.at(tmp_path), last=3)
    with pytest.raises(NmtError, match="choose one of --last N or --best N"):
        average(ModelDir.at(tmp_path), last=1, best=1)


def test_average_last_refuses_what_keep_last_did_not_keep(tmp_path):
    # keep_last 2, keep_best 2: after steps 1-4 the index holds 1 and 2 (best) and 3, 4 (newest);
    # "the 3 newest" would be 2, 3, 4 with a gap where nothing was dropped, or skip some that were.
    from nmt.config import load_config

    cfg = load_config(preset="transformer-tiny", overrides=["training.keep_last=2"])
    cfg.save(tmp_path / "config.yaml")
    c = ck.Checkpoints(ModelDir.at(tmp_path), keep_best=2, keep_last=2)
    for step, bleu in {1: 9.0, 2: 8.0, 3: 1.0, 4: 2.0}.items():
        c.save_step(_model(float(step)), step, "bleu", bleu, False)
    assert [e["step"] for e in c.read_index()] == [1, 2, 3, 4]
    msg = (
        f"{c.dir}: --last 3: training kept only the 2 newest step checkpoints (training.keep_last); "
        "the older ones kept are the best, not the next newest: use --last 2 or fewer, or --best N"
    )
    with pytest.raises(NmtError, match=f"^{re.escape(msg)}$"):
        average(ModelDir.at(tmp_path), last=3)
    assert average(ModelDir.at(tmp_path), last=2)[1] == [3, 4]
    assert average(ModelDir.at(tmp_path), best=3)[1] == [1, 2, 4]
    (c.dir / "index.json").write_text("[{", encoding="utf-8")
    with pytest.raises(
        NmtError, match=f"^{re.escape(str(c.dir / 'index.json'))}: not a checkpoint"
    ):
        average(ModelDir.at(tmp_path), best=1)


def test_resume_forgets_newer_steps_and_repoints_best(tmp_path):
    # A run saved step 10 (best) with its state, then step 20 (best, indexed) and step 30 (file
    # only), and died before writing the state again: the resumed history ends at step 10.
    c = ck.Checkpoints(ModelDir.at(tmp_path), keep_best=5, keep_last=5)
    c.save_step(_model(10.0), 10, "bleu", 1.0, is_best=True)
    c.save_step(_model(20.0), 20, "bleu", 2.0, is_best=True)
    save_weights(_model(30.0), c.dir / "step-30.safetensors", 30)
    save_weights(_model(30.0), c.dir / "best.safetensors", 30)
    c.truncate_after(10, best_step=10)
    assert sorted(p.name for p in c.dir.glob("step-*")) == ["step-10.safetensors"]
    assert [e["step"] for e in c.read_index()] == [10]
    assert torch.all(load_file(str(c.dir / "best.safetensors"))["emb.weight"] == 10.0)
    assert weights_step(c.dir / "best.safetensors") == 10
    c.truncate_after(5, best_step=0)  # no best in the resumed history: no best file
    assert not (c.dir / "best.safetensors").exists()


def test_published_files_are_durable_with_normal_permissions(tmp_path, monkeypatch):
    import nmt.textio

    synced: list[str] = []
    monkeypatch.setattr(nmt.textio, "fsync_file", lambda p: synced.append(Path(p).name[:6]))
    monkeypatch.setattr(nmt.textio, "fsync_dir", lambda p: synced.append(f"dir {Path(p).name}"))
    old = os.umask(0o022)
    try:
        c = ck.Checkpoints(ModelDir.at(tmp_path), keep_best=5, keep_last=5)
        c.save_last(_model(1.0), _state(1))
        c.save_step(_model(1.0), 1, "bleu", 1.0, is_best=False)
        c.save_step(_model(2.0), 2, "bleu", 2.0, is_best=False)
        average(ModelDir.at(tmp_path), last=2)
    finally:
        os.umask(old)
    assert synced[:4] == [".last.", "dir checkpoints", ".last.", "dir checkpoints"]
    assert synced[-2:] == [".avera", "dir checkpoints"]
    for name in ("last.state.pt", "last.safetensors", "averaged.safetensors"):
        assert stat.S_IMODE((c.dir / name).stat().st_mode) == 0o644, name


def test_damaged_or_mismatched_weights_are_one_line_errors(tmp_path):
    good = tmp_path / "good.safetensors"
    save_weights(_model(1.0), good)
    data = good.read_bytes()
    (tmp_path / "torn.safetensors").write_bytes(data[: len(data) // 2])
    header = json.dumps({"emb.weight": {"dtype": "F32", "shape": [6, 4], "data_offsets": [0, 9]}})
    forged = struct.pack("<Q", len(header)) + header.encode() + b"x" * 9
    (tmp_path / "forged.safetensors").write_bytes(forged)
    for name in ("torn", "forged"):
        path = tmp_path / f"{name}.safetensors"
        with pytest.raises(NmtError, match=f"^{path}: damaged or not a safetensors file"):
            load_weights(_model(0.0), path)

    class Wider(Tied):
        def __init__(self) -> None:
            super().__init__()
            self.step = nn.Parameter(torch.zeros(3))

    msg = f"^{good}: weights do not match the model in config.yaml \\(size mismatch for step"
    with pytest.raises(NmtError, match=msg):
        load_weights(Wider(), good)


def test_average_of_a_damaged_or_other_shaped_checkpoint_names_the_file(tmp_path):
    c = ck.Checkpoints(ModelDir.at(tmp_path), keep_best=5, keep_last=5)
    for step in (1, 2):
        c.save_step(_model(float(step)), step, "loss", float(step), False)
    second = c.dir / "step-2.safetensors"
    data = second.read_bytes()
    second.write_bytes(data[: len(data) // 2])
    with pytest.raises(NmtError) as e:
        average(ModelDir.at(tmp_path), last=2)
    assert str(e.value).startswith(f"{second}: damaged or not a safetensors file (")

    class Wider(Tied):
        def __init__(self) -> None:
            super().__init__()
            self.step = nn.Parameter(torch.zeros(3))

    save_weights(Wider(), second, 2)
    with pytest.raises(NmtError) as e:
        average(ModelDir.at(tmp_path), last=2)
    assert str(e.value) == (
        f"{second}: tensors differ from the other checkpoints (step has shape (3,), not (2,))"
    )
    assert not (c.dir / "averaged.safetensors").exists()


@pytest.mark.parametrize(("last", "best", "flag"), [(-2, 0, "--last -2"), (-1, 2, "--last -1"),
                                                     (2, -3, "--best -3")])  # fmt: skip
def test_average_refuses_a_negative_count(tmp_path, last, best, flag):
    # `--last -2 --best 2` passed the one-of check and averaged entries[2:] (the wrong set).
    c = ck.Checkpoints(ModelDir.at(tmp_path), keep_best=5, keep_last=5)
    for step in (1, 2, 3, 4):
        c.save_step(_model(float(step)), step, "loss", float(step), False)
    name, value = flag.split(" ")
    with pytest.raises(NmtError) as e:
        average(ModelDir.at(tmp_path), last=last, best=best)
    assert str(e.value) == f"{name} must be at least 1, got {value}"


def test_a_full_disk_while_saving_the_state_is_one_line_naming_it(tmp_path, monkeypatch):
    c = ck.Checkpoints(ModelDir.at(tmp_path))
    c.save_last(_model(1.0), _state(1))

    def torn_save(obj, f, *a, **kw):  # what torch's zip writer raises on ENOSPC
        f.write(b"half a checkpoint")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(ck.torch, "save", torn_save)
    monkeypatch.setattr("shutil.disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, 0))
    state = _state(2, model={"w": torch.zeros(3 << 18)})  # 3 MB
    with pytest.raises(NmtError) as e:
        c.save_last(_model(2.0), state)
    assert str(e.value) == f"{c.state_path}: no space left on device (3.0 MB needed)"
    monkeypatch.undo()
    assert load_state(c.state_path)["train_state"]["step"] == 1
    assert sorted(p.name for p in c.dir.iterdir()) == ["last.safetensors", "last.state.pt"]
