"""Fault injection: `nmt train` killed with SIGKILL at random moments and re-run with `--resume`
(as a preemptible job does) ends bitwise equal to an uninterrupted run, and no checkpoint file
present after any kill fails to load."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_training_loop import REPO, copy_data  # noqa: F401 - the shared copy-task DATA_DIR fixture

from nmt.config import load_config
from nmt.dirs import DataDir, ModelDir
from nmt.dirs.state import load_state
from nmt.dirs.weights import save_weights
from nmt.errors import NmtError
from nmt.train.checkpoint import save_state
from nmt.train.loop import train

STEPS = 24
SETTINGS = [
    "training.valid_every=8",  # validations save step-N, best, last and the trainer state
    "training.save_every=4",
    "training.valid_max_sentences=8",
    "training.log_every=1",  # metrics.jsonl tells the test which step the run is at
    "training.warmup=10",
    "training.max_tokens=600",
]


def _train(data: Path, out: Path) -> subprocess.Popen:
    """The same command every time: `--resume` also starts a run that never saved."""
    sets = [arg for s in SETTINGS for arg in ("--set", s)]
    cmd = [sys.executable, "-m", "nmt", "train", "-d", str(data), "-o", str(out)]
    cmd += ["--preset", "transformer-tiny", *sets, "--max-steps", str(STEPS)]
    cmd += ["--device", "cpu", "--resume", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


def _kill_at(proc: subprocess.Popen, metrics: Path, step: int, delay: float) -> None:
    """SIGKILL `proc` `delay` seconds after metrics.jsonl reaches `step` (or when it ends)."""
    while proc.poll() is None and _last_step(metrics) < step:
        time.sleep(0.02)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)


def _last_step(metrics: Path) -> int:
    try:
        lines = metrics.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return -1
    steps = [json.loads(ln)["step"] for ln in lines if ln.endswith("}")]
    return max(steps, default=-1)


def _all_checkpoints_load(model_dir: Path) -> None:
    """Every published file loads; temporaries of the killed run may remain (next start cleans)."""
    folder = model_dir / "checkpoints"
    for path in folder.glob("*.safetensors") if folder.is_dir() else []:
        assert load_file(str(path)), path
    if (folder / "last.state.pt").exists():
        assert load_state(folder / "last.state.pt")["train_state"]["step"] > 0


@pytest.mark.slow  # five training runs, four of them new processes
def test_sigkill_then_resume_equals_an_uninterrupted_run(copy_data, tmp_path):  # noqa: F811
    full, cut = tmp_path / "full", tmp_path / "cut"
    # The reference run in-process, with the thread count the CLI picks from OMP_NUM_THREADS=1
    # (same arithmetic).
    cfg = load_config(
        preset="transformer-tiny", overrides=[*SETTINGS, f"training.max_steps={STEPS}"]
    )
    train(cfg, DataDir(copy_data), ModelDir.at(full), "cpu", quiet=True, threads=1)
    rng = random.Random(10)
    for step in sorted(rng.sample(range(2, STEPS - 1), 3)):
        _kill_at(_train(copy_data, cut), cut / "metrics.jsonl", step, rng.uniform(0, 0.3))
        _all_checkpoints_load(cut)
    _finish(_train(copy_data, cut))
    a = load_file(str(full / "checkpoints" / "last.safetensors"))
    b = load_file(str(cut / "checkpoints" / "last.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not list((cut / "checkpoints").glob("*.tmp"))


@pytest.fixture
def small_disk(tmp_path):
    """Mount tmpfs file systems of a given size under tmp_path (root only, else skip); each is
    unmounted at the end."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)]
        if subprocess.run(cmd, capture_output=True, timeout=10).returncode != 0:
            pytest.skip("cannot mount a tmpfs here")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def little_data(tmp_path_factory) -> Path:
    """A preprocessed copy-task DATA_DIR small enough to train on in a second."""
    from test_training_loop import make_copy_data

    return make_copy_data(tmp_path_factory.mktemp("little"), 300, 20)


def test_a_full_disk_names_the_trainer_state(small_disk):
    disk = small_disk("2m")
    path = disk / "checkpoints" / "last.state.pt"
    with pytest.raises(NmtError) as e:
        save_state(path, {"w": torch.zeros(1_000_000)})  # 4 MB
    assert str(e.value) == f"{path}: no space left on device (3.8 MB needed)"
    assert list(disk.rglob("*")) == [disk / "checkpoints"]


def test_a_full_disk_names_the_weights(small_disk):
    disk = small_disk("2m")
    path = disk / "last.safetensors"
    with pytest.raises(NmtError) as e:
        save_weights(torch.nn.Linear(1000, 1000), path, step=3)  # 4 MB
    assert str(e.value) == f"{path}: no space left on device (3.8 MB needed)"
    assert list(disk.iterdir()) == []


@pytest.mark.slow
def test_training_onto_a_full_disk_is_one_line_and_leaves_no_temporaries(little_data, small_disk):
    model_dir = small_disk("1m") / "m"  # room for config and SentencePiece, not the checkpoints
    cmd = [sys.executable, "-m", "nmt", "train", "-d", str(little_data), "-o", str(model_dir)]
    cmd += ["--preset", "transformer-tiny", "--max-steps", "2", "--device", "cpu", "--quiet"]
    cmd += ["--set", "training.max_tokens=600", "--set", "training.valid_every=0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NMT_DEBUG": ""}
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    pattern = rf"error: {re.escape(str(model_dir / 'checkpoints'))}/[\w.-]+: no space left on "
    assert re.fullmatch(pattern + r"device \(\d+\.\d MB needed\)\n", r.stderr), r.stderr
    assert not [p for p in model_dir.rglob(".*") if p.name != ".lock"]
