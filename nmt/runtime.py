"""Process settings that must be in place before torch builds its first CPU kernel, the CPUs the
process may use, and its memory and code as training reports them.

Kept free of torch imports, so the CLI can apply them before anything loads torch.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, MutableMapping
from importlib import metadata
from pathlib import Path
from typing import NoReturn

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"


def parse_device(name: str) -> tuple[str, int | None]:
    """`--device` as (kind, GPU index or None): auto, cpu, mps, cuda or cuda:N; anything else is
    a one-line error. Torch-free, so the engines of both kinds read it the same way; whether the
    device exists is each engine's check."""
    from nmt.errors import NmtError

    kind, colon, index = name.partition(":")
    if kind in ("auto", "cpu", "mps", "cuda") and not colon:
        return kind, None
    if kind == "cuda" and index.isdigit():
        return kind, int(index)
    raise NmtError(f"--device {name!r}: expected {DEVICE_CHOICES}")


def usable_cpus(env: Mapping[str, str] | None = None) -> int:
    """CPUs this process should keep busy: OMP_NUM_THREADS when it is a positive number (how a
    shared machine's share is given), else the CPUs it may run on (taskset, a container's cpuset),
    not the host's count."""
    env = os.environ if env is None else env
    value = env.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows: no affinity API
        return os.cpu_count() or 1


# oneDNN builds one matmul kernel (a primitive) per shape, and both PyTorch's cache (ideep's) and
# oneDNN's keep the latest ones. A kept one holds ~0.5 MB of heap (more in the fragmentation
# around it), so how many to keep trades memory against build time, which the CPU decides:
# - AMX: a build took ~3 ms (with no cache bf16 ran at 4,400 against 10,200 tok/s), so
#   the caches hold an epoch of Multi30k's shapes (~90 x 49 primitives) and are never rebuilt.
# - elsewhere (avx512_bf16 without AMX) a build takes ~0.6 ms: keeping only a step's own ~40
#   (reused across its layers and its backward) cost nothing measurable (whole epochs 4,624 /
#   4,496 against 4,674 tok/s) while the peak fell from 3.05 to 1.24 GB (fp32's level).
# fp32 products run in MKL and build no primitives. (A capacity of 0 crashes ideep in torch 2.13.)
AMX_KERNEL_CACHE_CAPACITY = 16384
KERNEL_CACHE_CAPACITY = 64
KERNEL_CACHE_VARIABLES = ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (empty elsewhere)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def kernel_cache_capacity(flags: frozenset[str]) -> int:
    """How many matmul kernels to keep: an epoch's worth where building one is dear (AMX), a
    step's worth elsewhere, where keeping them cost memory and bought no speed."""
    return AMX_KERNEL_CACHE_CAPACITY if "amx_bf16" in flags else KERNEL_CACHE_CAPACITY


def size_kernel_caches(
    env: MutableMapping[str, str] | None = None, flags: frozenset[str] | None = None
) -> dict[str, str]:
    """Size PyTorch's (ideep) and oneDNN's kernel caches for training on this CPU; a value the
    user set wins. Returns the settings in force. Both are read when the first kernel is
    built, so this works after `import torch` but not after the first CPU matmul."""
    env = os.environ if env is None else env
    capacity = kernel_cache_capacity(cpu_flags() if flags is None else flags)
    for name in KERNEL_CACHE_VARIABLES:
        env.setdefault(name, str(capacity))
    return {name: env[name] for name in KERNEL_CACHE_VARIABLES}


# glibc's mallopt parameters, and what nmt sets them to: blocks of up to 32 MiB (mallopt's
# largest mmap threshold) come from the heap, and up to 1 GiB of freed heap stays mapped.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_SETTINGS = {M_TRIM_THRESHOLD: 2**30, M_MMAP_THRESHOLD: 2**25}
USER_MALLOC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")


def retain_freed_memory(env: Mapping[str, str] | None = None) -> bool:
    """Keep freed memory mapped instead of handing it back to the OS (glibc only; settings
    the user made through the environment win). Decoding frees and reallocates the same
    multi-megabyte buffers (caches, logits) every step and batch; by default glibc returns
    them, and touching them again costs a page fault per 4 KiB: beam 5 on Multi30k ran 12%
    slower. Returns whether the settings were applied."""
    env = os.environ if env is None else env
    if any(name in env for name in USER_MALLOC_VARIABLES):
        return False
    if sys.platform != "linux" or not _glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(param, value) == 1 for param, value in HEAP_SETTINGS.items())


def release_freed_memory() -> int | None:
    """Hand freed heap back to the OS now (glibc's malloc_trim), wherever it lies: kept by
    `retain_freed_memory` between steps, and scattered between live blocks, where it would
    otherwise stay resident for good. Training calls it at each log event and after each
    validation, so a long run's RSS follows what it uses, not every shape it ever met.
    Returns the MB released (None: not glibc, nothing done)."""
    if sys.platform != "linux" or not _glibc():
        return None
    before = rss_mb()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        return None
    after = rss_mb()
    return None if before is None or after is None else max(0, before - after)


def _glibc() -> bool:
    """Whether this process runs on glibc (musl and others have no such mallopt)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False


def status_kb(pid: int | str, field: str, file: str = "status") -> int:
    """A size field of /proc/PID/status (VmRSS, VmHWM) or of another such file (smaps_rollup:
    Pss) in KiB; 0 where there is none (a process that has ended, another OS). The one reader of
    these fields: decoding workers and the benchmarks use it."""
    try:
        with open(f"/proc/{pid}/{file}", encoding="ascii") as f:
            return next((int(x.split()[1]) for x in f if x.startswith(field + ":")), 0)
    except (OSError, ValueError, IndexError):
        return 0


def rss_mb() -> int | None:
    """This process's resident memory now (Linux), so a run's log shows where memory grows."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20)


def peak_rss_mb() -> int | None:
    """This process's peak resident memory so far (where the OS reports it)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / 2**20 if sys.platform == "darwin" else peak / 2**10)  # bytes / KiB


def code_version(package: Path | None = None) -> dict[str, str]:
    """The code a run is made with, for its log: nmt's version and torch's, and, where nmt runs
    from a git checkout, its commit, with "+dirty" when the package's files differ from it (a run
    resumed after the code changed shows where). `package`: the nmt package's folder."""
    from nmt import __version__

    found = {"nmt": __version__}
    try:
        found["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pass
    folder = package or Path(__file__).resolve().parent
    commit = _git(folder, "rev-parse", "HEAD")
    if commit:
        dirty = _git(folder, "status", "--porcelain", "--", ".")
        found["commit"] = commit + ("+dirty" if dirty else "")
    return found


def _git(folder: Path, *args: str) -> str:
    """A git command's output in `folder`, stripped; "" outside a checkout or without git."""
    if not (folder.parent / ".git").exists():
        return ""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def exit_quickly(code: int | str | None) -> NoReturn:
    """End the process once its command has returned, skipping the interpreter's teardown:
    freeing torch's ~100k module objects and op registrations took 0.35 s of every command.
    Output is flushed and atexit handlers run first; while
    another thread, a profiler or tracer, or a torch.distributed group is alive, the exit is
    the ordinary one (they may still have work to finish)."""
    if not _quiet_process():
        sys.exit(code)
    status = _exit_status(code)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: started without it (`>&-`), nothing to flush
                stream.flush()
    except (OSError, ValueError):  # a closed or broken stream: let Python report it as usual
        sys.exit(status)
    atexit._run_exitfuncs()
    os._exit(status)


def _exit_status(code: int | str | None) -> int:
    """What sys.exit(code) would make the exit status (a message is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    if sys.stderr is not None:
        sys.stderr.write(f"{code}\n")
    return 1


def _quiet_process() -> bool:
    """Whether nothing but this thread is left that an ordinary exit would wait for or flush."""
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return False  # coverage, cProfile: they write their results at exit
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(t.is_alive() and not t.daemon for t in others):
        return False
    dist = sys.modules.get("torch.distributed")
    return not (dist is not None and dist.is_available() and dist.is_initialized())
