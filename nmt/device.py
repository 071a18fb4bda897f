"""Device and precision: one resolver for every command, the autocast factory, the bf16 check.

Training, translation and the benchmarks all ask here, so `--device cuda:1` or `--device auto`
means the same thing everywhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from nmt.errors import NmtError
from nmt.runtime import cpu_flags, parse_device

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
BF16_ENV = "NMT_CPU_BF16"  # 1/0 overrides the CPU flag check (containers may hide the flags)


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(name: str = "auto", local_rank: int | None = None) -> torch.device:
    """auto = cuda, then mps, then cpu; an unavailable or unknown device is a user error.

    `local_rank` (DDP) picks the GPU of a bare `cuda`; an explicit `cuda:N` is kept as given.
    """
    kind, index = parse_device(name)
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
    if kind == "cpu":
        return torch.device("cpu")
    if kind == "mps":
        if not _mps_available():
            raise NmtError("--device mps: MPS is not available")
        return torch.device("mps")
    return _cuda_device(name, index, local_rank)


def _cuda_device(name: str, index: int | None, local_rank: int | None) -> torch.device:
    """`cuda` (the local rank's GPU, else the current one) or `cuda:N`, checked to exist."""
    if not torch.cuda.is_available():
        raise NmtError(f"--device {name}: no CUDA device is available")
    if index is None:
        return torch.device("cuda", local_rank) if local_rank is not None else torch.device("cuda")
    if index >= torch.cuda.device_count():
        raise NmtError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def resolve_precision(precision: str, device: torch.device) -> str:
    """`auto` becomes what the hardware runs fastest without losing accuracy; others stay.

    CUDA: bf16 where supported, else fp16 (with a grad scaler in training); CPU: bf16 only
    with native bf16 (emulated bf16 is 10-40x slower than fp32); MPS and the rest: fp32.
    """
    if precision not in PRECISIONS:
        raise NmtError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    if device.type == "cuda":  # native bf16 from Ampere (8.0) on; emulated is not "supported"
        return "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"
    if device.type == "cpu" and cpu_has_native_bf16():
        return "bf16"
    return "fp32"


def compute_dtype(precision: str) -> torch.dtype:
    """The floating dtype a resolved precision computes in."""
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def autocast_for(precision: str, device: torch.device) -> Callable[[], Any]:
    """A factory of autocast contexts for a resolved `precision` on `device` (fp32: none)."""
    if precision == "auto":
        raise ValueError("autocast_for needs a resolved precision (see resolve_precision)")
    if precision == "fp32":
        return contextlib.nullcontext
    if precision == "fp16" and device.type == "cpu":
        raise NmtError("training.precision fp16 needs a GPU; use bf16 or fp32 on CPU")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def cpu_has_native_bf16() -> bool:
    """Whether the CPU multiplies bf16 natively; elsewhere PyTorch emulates it, very slowly.

    NMT_CPU_BF16=1 or 0 overrides the check (tests pin it; containers may hide the flags).
    """
    forced = os.environ.get(BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def emulated_bf16_warning(
    precision: str, device: torch.device, fix: str = "--set training.precision=fp32"
) -> str | None:
    """The warning for bf16 asked for on a CPU that can only emulate it; None when fine."""
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        return (
            "this CPU has no native bf16 (avx512_bf16/AMX): bf16 is emulated and "
            f"10-40x slower than fp32 here; use {fix}"
        )
    return None


def decode_precision(precision: str, device: torch.device) -> str:
    """The precision a translation decodes in: `auto` is fp32 on every device, because fp32 alone
    keeps a line's translation independent of the lines batched with it; bf16 and fp16 are the
    faster explicit choices that do not promise it (DESIGN.md)."""
    resolved = resolve_precision(precision, device) if precision != "auto" else "fp32"
    if resolved == "fp16" and device.type == "cpu":
        raise NmtError("--precision fp16 needs a GPU; use bf16 or fp32 on CPU")
    return resolved


# Validation keeps fp32 below 256 on a CPU: its greedy shapes, new at every validation, are new
# oneDNN kernels in bf16, and they grew a 25-minute run's kernel cache to 6.3 GB (3.6 in fp32).
VALID_BF16_MIN_WIDTH = 256


def inference_precision(
    precision: str,
    device: torch.device,
    width: int | None = None,
    min_width: int = VALID_BF16_MIN_WIDTH,
) -> str:
    """The resolved precision validation decodes a model of `width` (d_model) in: training's,
    except fp32 on a CPU under `auto` for models narrower than `min_width`."""
    resolved = resolve_precision(precision, device)
    narrow = width is not None and width < min_width
    if precision == "auto" and device.type == "cpu" and narrow:
        return "fp32"
    if resolved == "fp16" and device.type == "cpu":
        raise NmtError("--precision fp16 needs a GPU; use bf16 or fp32 on CPU")
    return resolved


@contextlib.contextmanager
def denormals_flushed(device: torch.device) -> Iterator[None]:
    """Subnormal floats (below 1.2e-38) flushed to zero in CPU arithmetic while the block runs,
    on this thread and on every thread of torch's OpenMP pool; afterwards the default (kept)
    again. A gradient fading back through a long recurrence reaches that range, where x86
    multiplies take about a hundred times their cycles: an RNN update on 160-token sentences
    slows several-fold (docs/benchmarks.md, speed by length). Nothing a training update changes
    is that small. Other devices: nothing changes."""
    if device.type != "cpu" or not _flush_denormals(True):
        yield
        return
    try:
        yield
    finally:
        _flush_denormals(False)


def _flush_denormals(on: bool) -> bool:
    """torch.set_flush_denormal(on) on this thread and on each of torch's OpenMP threads: a
    thread's floating-point mode is its own, and the pool's threads keep the mode they were
    started with. False where the CPU cannot flush."""
    if not torch.set_flush_denormal(on):
        return False
    _on_openmp_threads(lambda: torch.set_flush_denormal(on))
    return True


def _on_openmp_threads(fn: Callable[[], Any]) -> None:
    """fn once on every thread of the OpenMP team torch computes with (`GOMP_parallel` of the
    OpenMP runtime loaded in this process, libgomp or libiomp5); nothing where there is none."""
    threads = torch.get_num_threads()
    runtime = _openmp_runtime()
    if threads < 2 or runtime is None:
        return
    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: fn())
    runtime.GOMP_parallel(callback, None, ctypes.c_uint(threads), ctypes.c_uint(0))


def _openmp_runtime() -> ctypes.CDLL | None:
    """The OpenMP library this process has loaded (torch's own), from /proc/self/maps."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in maps:
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if Path(path).name.startswith(("libgomp", "libiomp5")):
            library = ctypes.CDLL(path)
            return library if hasattr(library, "GOMP_parallel") else None
    return None
