"""Training across machines: two torchrun agents on loopback stand for two nodes of one process
each (gloo, CPU). They must train what `--nproc 2` on one node trains, write only rank 0's
MODEL_DIR, and end with one line when the other node dies."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_training_loop import make_copy_data

from nmt.dirs.state import load_state
from nmt.errors import NmtError
from nmt.train import distributed

REPO = Path(__file__).resolve().parent.parent
STEPS = 20
TIMEOUT = 120  # seconds any one command may take


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A preprocessed copy-task DATA_DIR (the tiny one the DDP tests of test_training_loop train on)."""
    return make_copy_data(tmp_path_factory.mktemp("copy"), 3000, 100)


def _env(**extra: str) -> dict[str, str]:
    """One thread per process (as `--nproc 2` gives each of its two), the checkout importable."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **extra}


def _free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _train_args(data: Path, out: Path, *extra: str) -> list[str]:
    """`train ...` of the tiny preset, no validation during the run."""
    return [
        "train", "--preset", "transformer-tiny", "--data", str(data), "-o", str(out),
        "--set", "training.max_tokens=600", "--set", "training.valid_every=0",
        "--device", "cpu", "-q", *extra,
    ]  # fmt: skip


def _agent(node: int, port: int, args: list[str], **env: str) -> subprocess.Popen:
    """The torchrun agent of node `node` (of 2)."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
        "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
        "-m", "nmt", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=REPO, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (torchrun starts each worker in a session of its own, so a
    process group does not hold them)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent[int(stat.parent.name)] = int(fields[1])
    tree = [pid]
    for p in tree:
        tree += [c for c, pp in parent.items() if pp == p]
    return tree


def _kill_node(agent: subprocess.Popen, how: int = signal.SIGKILL) -> None:
    """A node dies (SIGKILL) or hangs (SIGSTOP): its agent and workers at once."""
    for pid in _tree(agent.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, how)


def _kill(agents: list[subprocess.Popen]) -> None:
    """Kill every agent still running, with its workers, and reap it."""
    for a in agents:
        if a.poll() is None:
            _kill_node(a)
        a.communicate(timeout=TIMEOUT)


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "checkpoints" / "last.safetensors"))


@pytest.mark.slow
def test_two_nodes_train_what_nproc_2_trains_bitwise(data_dir, tmp_path):
    ref, node0, node1 = tmp_path / "ref", tmp_path / "node0", tmp_path / "node1"
    port = _free_port()
    agents = [_agent(n, port, _train_args(data_dir, out, "--max-steps", str(STEPS)))
              for n, out in ((0, node0), (1, node1))]  # fmt: skip
    try:
        for a in agents:
            _, err = a.communicate(timeout=TIMEOUT)
            assert a.returncode == 0, err
    finally:
        _kill(agents)
    single = [sys.executable, "-m", "nmt", *_train_args(data_dir, ref, "--max-steps", str(STEPS))]
    proc = subprocess.run(
        [*single, "--nproc", "2"], cwd=REPO, env=_env(), capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not node1.exists()  # each node its own MODEL_DIR path: rank 1 writes nothing
    assert load_state(node0 / "checkpoints" / "last.state.pt")["train_state"]["step"] == STEPS
    a, b = _weights(ref), _weights(node0)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # Resuming needs every node to see the state: node 1's own path holds none, so both stop.
    port = _free_port()
    agents = [_agent(n, port, _train_args(data_dir, out, "--max-steps", str(STEPS + 2), "--resume"),
                     NMT_DIST_TIMEOUT="20s")
              for n, out in ((0, node0), (1, node1))]  # fmt: skip
    try:
        _, err = agents[0].communicate(timeout=TIMEOUT)
    finally:
        _kill(agents)
    assert agents[0].returncode != 0
    assert f"error: {node0}/checkpoints/last.state.pt: not every node sees it; --resume" in err, err
    assert load_state(node0 / "checkpoints" / "last.state.pt")["train_state"]["step"] == STEPS


@pytest.mark.skipif(sys.platform != "linux", reason="finds a node's processes in /proc")
@pytest.mark.parametrize(
    ("how", "limit"),
    [(signal.SIGKILL, (0, 10)), (signal.SIGSTOP, (8, 25))],  # killed: at once; hung: the timeout
    ids=["killed", "hung"],
)
@pytest.mark.slow
def test_a_dead_node_ends_the_run_with_one_line_and_resume_continues(
    data_dir, tmp_path, how, limit
):
    out = tmp_path / "m"  # one MODEL_DIR path both nodes see, as on a shared file system
    state = out / "checkpoints" / "last.state.pt"
    args = _train_args(data_dir, out, "--max-steps", "100000", "--set", "training.save_every=5")
    port = _free_port()
    agents = [_agent(n, port, args, NMT_DIST_TIMEOUT="8s") for n in (0, 1)]
    try:
        deadline = time.monotonic() + TIMEOUT
        while not state.exists() and time.monotonic() < deadline:
            assert all(a.poll() is None for a in agents)
            time.sleep(0.2)
        assert state.exists()
        _kill_node(agents[1], how)
        stopped = time.monotonic()
        _, err = agents[0].communicate(timeout=60)
        waited = time.monotonic() - stopped
    finally:
        _kill(agents)
    assert agents[0].returncode != 0
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(
        "error: rank 0 of 2: lost contact with the other training processes ("
    ), err
    assert limit[0] <= waited < limit[1], waited
    step = load_state(state)["train_state"]["step"]
    proc = subprocess.run(
        [sys.executable, "-m", "nmt", *_train_args(data_dir, out, "--max-steps", str(step + 2)),
         "--resume", "--nproc", "2"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert load_state(state)["train_state"]["step"] == step + 2


def test_collectives_wait_a_bounded_time_set_by_nmt_dist_timeout(monkeypatch):
    monkeypatch.delenv("NMT_DIST_TIMEOUT", raising=False)
    assert distributed.timeout() == timedelta(minutes=30)
    monkeypatch.setenv("NMT_DIST_TIMEOUT", "1m30s")
    assert distributed.timeout() == timedelta(seconds=90)
    for bad in ("0", "soon"):
        monkeypatch.setenv("NMT_DIST_TIMEOUT", bad)
        with pytest.raises(NmtError, match="NMT_DIST_TIMEOUT="):
            distributed.timeout()
