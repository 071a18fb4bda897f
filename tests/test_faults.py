"""Fault injection: `nmt train` killed with SIGKILL at random moments and re-run with `--resume`
(as a preemptible job does) ends bitwise equal to an uninterrupted run, and no checkpoint file
present after any kill fails to load."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_trainer import REPO, copy_data  # noqa: F401 - the shared copy-task DATA_DIR fixture

from nmt.config import load_config
from nmt.modeldir import load_state
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
    train(cfg, copy_data, full, "cpu", quiet=True, threads=1)
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
