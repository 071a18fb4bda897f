"""DistributedDataParallel plumbing: read torchrun's environment, agree on decisions, launch torchrun.

Processes are started by torchrun (or `nmt train --nproc N`, which runs torchrun); this module
never spawns workers itself. nccl on GPUs, gloo on CPUs. On several machines torchrun runs on
each of them (docs/training.md); a collective that waits longer than NMT_DIST_TIMEOUT for
another process (a node that died without closing its connections) ends the run with an error.
"""

from __future__ import annotations

import enum
import os
import re
import subprocess
import sys
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as torch_dist
import typer

from nmt.config import parse_duration
from nmt.errors import NmtError

TIMEOUT_VARIABLE = "NMT_DIST_TIMEOUT"
# Longer than rank 0's longest validation and save, which the other processes wait through.
DEFAULT_TIMEOUT = "30m"


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits among the training processes."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Only the main process writes files and prints."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """Whether there is more than one process to talk to."""
        return self.world_size > 1


def from_env() -> DistInfo:
    """Read torchrun's variables; a plain `nmt train` is a world of one."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    return DistInfo(
        rank=int(os.environ.get("RANK", "0")),
        world_size=world,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))),
    )


def timeout() -> timedelta:
    """How long a collective waits for the other processes before the run fails: NMT_DIST_TIMEOUT
    (a duration: 90s, 10m, 1h), else DEFAULT_TIMEOUT, for gloo and nccl alike."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip() or DEFAULT_TIMEOUT
    try:
        seconds = parse_duration(text)
    except NmtError:
        seconds = None
    if not seconds:
        raise NmtError(f"{TIMEOUT_VARIABLE}={text!r}: expected a positive duration, e.g. 90s, 10m")
    return timedelta(seconds=seconds)


def init(info: DistInfo, device: torch.device) -> None:
    """Join the process group (nccl for CUDA, gloo otherwise)."""
    if not info.enabled or torch_dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    wait = timeout()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch_dist.init_process_group(
        backend=backend, rank=info.rank, world_size=info.world_size, timeout=wait
    )


def lost_peer(error: BaseException, info: DistInfo) -> NmtError | None:
    """A failed collective as one line (another process died, or hung past the timeout); None
    for any other error. gloo raises its transport failures as plain RuntimeErrors, and torch's
    messages start with a source location and may run on with a C++ backtrace."""
    text = str(error)
    if not (isinstance(error, torch_dist.DistError) or "/gloo/" in text):
        return None
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    reason = re.sub(r"^\[[^\]]*\]\s*", "", first).split(". ")[0]  # drop "[pair.cc:537] "
    return NmtError(
        f"rank {info.rank} of {info.world_size}: lost contact with the other training processes "
        f"({reason}); --resume continues from the last save"
    )


def cleanup(info: DistInfo) -> None:
    """Leave the process group so the launcher can exit cleanly."""
    if info.enabled and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def barrier(info: DistInfo) -> None:
    """Wait for every process (no-op alone)."""
    if info.enabled:
        torch_dist.barrier()


def agree_max(value: int, info: DistInfo, device: torch.device) -> int:
    """The largest of every process's `value`: one process wanting to stop stops them all."""
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
    return int(t.item())


def share_from_main(value: float | None, info: DistInfo, device: torch.device) -> float | None:
    """Rank 0's `value` (a non-negative float or None) on every process: state only the main
    process decides, such as where a cooldown ends, must drive every replica the same way."""
    if not info.enabled:
        return value
    t = torch.tensor([-1.0 if value is None else value], dtype=torch.float64, device=device)
    torch_dist.broadcast(t, src=0)
    shared = float(t.item())
    return None if shared < 0 else shared


def gather_rng(info: DistInfo, device: torch.device) -> list[torch.Tensor] | None:
    """Every process's torch generator state for `device` (its dropout stream), in rank order
    (None alone), so a resumed DDP run draws what an uninterrupted one would on every rank."""
    if not info.enabled:
        return None
    state = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    parts = [torch.empty_like(state, device=device) for _ in range(info.world_size)]
    torch_dist.all_gather(parts, state.to(device))
    return [p.cpu() for p in parts]


def set_rng(state: torch.Tensor, device: torch.device) -> None:
    """Restore what `gather_rng` collected for this process."""
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def needs_launch(nproc: int | None) -> bool:
    """`--nproc N` outside torchrun: this process starts torchrun instead of training."""
    return nproc is not None and nproc > 1 and from_env().world_size <= 1


def _text(value: Any) -> str:
    """A parsed value as the command line spells it."""
    return str(value.value if isinstance(value, enum.Enum) else value)


def _param_args(param: Any, value: Any) -> list[str]:
    """The argv words that make one declared parameter parse back to `value`."""
    if value is None:
        return []
    if param.param_type_name == "argument":
        return [_text(v) for v in value] if param.nargs == -1 else [_text(value)]
    name = next((opt for opt in param.opts if opt.startswith("--")), param.opts[0])
    if getattr(param, "is_flag", False):
        if value:
            return [name]
        return param.secondary_opts[:1]  # --no-x for a --x/--no-x switch, else the default
    values = value if param.multiple else [value]
    return [word for v in values for word in (name, _text(v))]


def relaunch_args(ctx: typer.Context, skip: Collection[str] = ()) -> list[str]:
    """`COMMAND ARGS...` that parses back to this command's parameters; built from every declared
    parameter, so an option added to the command cannot be forgotten in the relaunch."""
    args = [ctx.info_name or ctx.command.name or ""]
    for param in ctx.command.params:
        if param.name is not None and param.name not in skip:
            args += _param_args(param, ctx.params.get(param.name))
    return args


def launch(nproc: int, args: list[str]) -> int:
    """Run `nmt <args>` under torchrun with `nproc` local processes; return its exit code."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "nmt",
        *args,
    ]
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 130
