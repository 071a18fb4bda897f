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

from nmt.runtime import status_kb


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


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants (Linux /proc; processes that end meanwhile are skipped)."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children", encoding="ascii") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return tree


def run_measured(
    cmd: list[str],
    on_sample: Callable[[float], None] | None = None,
    interval: float = 0.05,
    **popen: Any,
) -> dict[str, float]:
    """Run `cmd` to its end and measure what a benchmark reports of it, sampling every `interval`
    seconds (`on_sample(seconds since start)` is called with each sample).

    seconds: wall time; returncode; cpu_seconds: user + system time of the process and the
    descendants it waited for; largest_mb: the largest single process's peak (the kernel's
    maxrss of the process and its reaped descendants, exact); main_mb: the command process's own
    peak (VmHWM at its last sample); tree_mb, children_mb: the peak sampled sum of VmRSS over the
    whole tree and over its descendants alone (worker processes; shared pages count once per
    process, so a sum overstates the memory they use together).
    """
    import os
    import subprocess
    import threading

    peaks = {"main": 0, "tree": 0, "children": 0, "pss": 0}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, **popen)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(interval):
            pids = process_tree(proc.pid)
            rss = [status_kb(p, "VmRSS") for p in pids]
            peaks["tree"] = max(peaks["tree"], sum(rss))
            peaks["children"] = max(peaks["children"], sum(rss[1:]))
            pss = sum(status_kb(p, "Pss", "smaps_rollup") for p in pids)
            peaks["pss"] = max(peaks["pss"], pss)
            peaks["main"] = max(peaks["main"], status_kb(proc.pid, "VmHWM"))
            if on_sample is not None:
                on_sample(time.perf_counter() - t0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "seconds": seconds,
        "returncode": proc.returncode,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "largest_mb": usage.ru_maxrss / 1024,
        "main_mb": peaks["main"] / 1024,
        "tree_mb": peaks["tree"] / 1024,
        "children_mb": peaks["children"] / 1024,
        "tree_pss_mb": peaks["pss"] / 1024,
    }


def multi30k(path: Path | None = None) -> Path:
    """The fetched, plain-text Multi30k folder (corpora/multi30k, or `path`), fetched with its
    checksums verified when it is not there yet: from NMT_CORPUS_MIRROR, else the shared mirror
    beside the repository when there is one, else the public address."""
    import os

    from nmt.data.corpus import fetch

    root = Path(__file__).resolve().parent.parent
    path = path or root / "corpora" / "multi30k"
    if not (path / "train.en").is_file() or not (path / "test_2016_flickr.en").is_file():
        shared = root.parent / "shared" / "corpora" / "multi30k"
        env = os.environ.get("NMT_CORPUS_MIRROR")
        mirror = Path(env) if env else shared if shared.is_dir() else None
        fetch("multi30k", path, mirror=mirror, quiet=True)
    return path
