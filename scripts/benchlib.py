"""What every benchmark shares: the machine's own GEMM rate, so figures compare across machines.

A model's GFLOP/s means little alone (CPUs here differ by 30% and more, some have native bf16);
its ratio to a plain matrix product of the same dtype, measured in the same run, does not.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def gemm_gflops(
    dtype: str = "fp32",
    device: str = "cpu",
    m: int = 4096,
    n: int = 1024,
    k: int = 1024,
    repeats: int = 10,
) -> float:
    """Median GFLOP/s of an (m x k) @ (k x n) product in `dtype` on `device` (after warm-up)."""
    import torch

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(m, k, device=device).to(dt)
    b = torch.randn(k, n, device=device).to(dt)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(3):
        a @ b
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        sync()
        times.append(time.perf_counter() - t0)
    return 2.0 * m * n * k / statistics.median(times) / 1e9


def machine_line(threads: int) -> str:
    """CPU model, the flags that decide bf16 speed, and the thread count, for a report's header."""
    from nmt.runtime import cpu_flags

    name, flags = "unknown CPU", cpu_flags()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((x.split(":", 1)[1].strip() for x in f if x.startswith("model name")), name)
    except OSError:
        pass
    have = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name}; flags: {' '.join(have) or 'none of avx2/avx512'}; threads {threads}"


def synchronizer(device: str) -> Callable[[], None]:
    """What waits for the device's queued work, so a clock read after it covers that work."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def timed_runs(
    fn: Callable[[], Any], warmup: int, repeats: int, device: str = "cpu"
) -> list[float]:
    """Seconds of each of `repeats` calls of `fn` after `warmup` untimed ones (first shapes,
    kernel caches, allocator), the device synchronised before and after every timed call."""
    sync = synchronizer(device)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def write_json(path: str | Path, data: Any) -> None:
    """A benchmark's results as indented JSON, written atomically (a failed run leaves none)."""
    from nmt.textio import atomic_write

    with atomic_write(Path(path), "w") as f:
        f.write(json.dumps(data, indent=2) + "\n")
