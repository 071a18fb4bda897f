"""Process settings: kernel caches (`nmt train` sizes them for the CPU before torch loads, a user's setting
wins), the allocator's freed memory, the quick exit after a command, and the code a run records."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.runtime import (
    AMX_KERNEL_CACHE_CAPACITY,
    KERNEL_CACHE_CAPACITY,
    KERNEL_CACHE_VARIABLES,
    code_version,
    cpu_flags,
    kernel_cache_capacity,
    size_kernel_caches,
)

AMX = frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
AVX512_BF16 = frozenset({"avx2", "avx512f", "avx512_bf16"})


def test_sizing_keeps_what_the_user_set():
    env = {"LRU_CACHE_CAPACITY": "64"}
    assert size_kernel_caches(env, AMX) == {
        "LRU_CACHE_CAPACITY": "64",
        "ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(AMX_KERNEL_CACHE_CAPACITY),
    }
    assert set(env) == set(KERNEL_CACHE_VARIABLES)


def test_amx_keeps_an_epoch_of_kernels_other_cpus_a_step():
    # Building a kernel costs ~3 ms with AMX and ~0.6 ms without, where keeping an epoch's
    # worth tripled bf16 training's peak memory and bought no speed (runtime.py).
    assert kernel_cache_capacity(AMX) == AMX_KERNEL_CACHE_CAPACITY == 16384
    assert kernel_cache_capacity(AVX512_BF16) == KERNEL_CACHE_CAPACITY == 64
    assert kernel_cache_capacity(frozenset()) == KERNEL_CACHE_CAPACITY
    env: dict[str, str] = {}
    assert size_kernel_caches(env, AVX512_BF16) == dict.fromkeys(KERNEL_CACHE_VARIABLES, "64")


def test_cpu_flags_read_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n"
        "bugs\t\t: sysret_ss_attrs\n\nprocessor\t: 1\nflags\t\t: fpu avx2 avx512_bf16\n"
    )
    assert cpu_flags(str(info)) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


@pytest.mark.slow
def test_nmt_train_sizes_the_caches_before_torch_loads(tmp_path):
    # A real `nmt train` process (it fails on the missing data directory right after): the spy
    # records whether torch was already loaded when the caches were set.
    script = f"""
import os, sys
import nmt.runtime as runtime
real = runtime.size_kernel_caches
def spy(env=None):
    print("torch loaded:", "torch" in sys.modules)
    return real(env)
runtime.size_kernel_caches = spy
from nmt.cli.app import app
try:
    app(["train", "--data", {str(tmp_path / "missing")!r}, "-o", {str(tmp_path / "m")!r}])
except SystemExit:
    pass
print({{k: os.environ.get(k) for k in {KERNEL_CACHE_VARIABLES!r}}})
"""
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHE_VARIABLES}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    lines = out.stdout.splitlines()
    assert lines[0] == "torch loaded: False", out.stdout + out.stderr
    capacity = str(kernel_cache_capacity(cpu_flags()))
    assert lines[-1] == str({k: capacity for k in KERNEL_CACHE_VARIABLES})
    assert "data directory not found" in out.stderr


@pytest.mark.slow
def test_the_cache_capacity_is_read_at_the_first_kernel_not_at_import():
    # Why trainer.train() can still set it: oneDNN reads the variable when it builds its first
    # kernel. Capacity 0 set after `import torch` turns the second product's cache hit into a miss.
    script = """
import os, sys
import torch
if sys.argv[1] != "-":
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = sys.argv[1]
a, b = torch.ones(64, 128, dtype=torch.bfloat16), torch.ones(128, 96, dtype=torch.bfloat16)
for _ in range(2):
    a @ b
"""

    def creates(capacity: str) -> list[str]:
        env = {**os.environ, "ONEDNN_VERBOSE": "2"}
        env.pop("ONEDNN_PRIMITIVE_CACHE_CAPACITY", None)
        run = subprocess.run(
            [sys.executable, "-c", script, capacity], capture_output=True, text=True, env=env
        )
        return [x for x in (run.stdout + run.stderr).split(",") if x.startswith("create:cache_")]

    default = creates("-")
    if not default:
        pytest.skip("bf16 matmul does not go through oneDNN on this CPU")
    assert default == ["create:cache_miss", "create:cache_hit"]
    assert creates("0") == ["create:cache_miss", "create:cache_miss"]


RSS_SCRIPT = """
import json
from nmt.runtime import peak_rss_mb, rss_mb
before = rss_mb()
block = bytearray(256 * 2**20)  # zero-filled by bytearray: every page written
grown = rss_mb()
del block
print(json.dumps([before, grown, peak_rss_mb()]))
"""


def test_rss_follows_allocation_and_peak_stays():
    """In a fresh process: a test worker holds a gigabyte of cold pages, which proactive
    reclaim may take back while the block is written, hiding the growth."""
    run = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT], capture_output=True, text=True, check=True
    )
    before, grown, peak = json.loads(run.stdout)
    assert before is not None and before > 0
    assert grown is not None and grown - before >= 200
    assert peak is not None and peak >= grown - 8  # the kernel syncs RSS counters in batches


def test_freed_memory_is_retained_unless_the_user_tuned_malloc():
    """Every nmt command keeps freed heap mapped (glibc); a user's MALLOC_* or GLIBC_TUNABLES
    setting wins, and off glibc nothing is attempted."""
    from nmt.runtime import USER_MALLOC_VARIABLES, retain_freed_memory

    for name in USER_MALLOC_VARIABLES:
        assert retain_freed_memory({name: "0"}) is False
    on_glibc = sys.platform == "linux" and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith(
        "glibc"
    )
    assert retain_freed_memory({}) is on_glibc


RELEASE_SCRIPT = """
import ctypes, json
from nmt.runtime import release_freed_memory, retain_freed_memory, rss_mb
retain_freed_memory({})
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
blocks = [libc.malloc(64 * 1024) for _ in range(2400)]  # 150 MB, heap (under the mmap threshold)
for b in blocks:
    libc.memset(b, 1, 64 * 1024)  # resident
before = rss_mb()
for b in blocks[:-1]:
    libc.free(b)  # the last block stays: the freed ones lie below a live one, never trimmed
kept = rss_mb()
released = release_freed_memory()
print(json.dumps([before, kept, rss_mb(), released]))
"""


def test_release_hands_freed_heap_back():
    """Freed heap kept by retain_freed_memory (or stuck below a live block) stays resident until
    release_freed_memory: training's RSS would otherwise keep every shape's high-water mark."""
    if not (
        sys.platform == "linux" and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    ):
        pytest.skip("malloc_trim is glibc's")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    run = subprocess.run(
        [sys.executable, "-c", RELEASE_SCRIPT], capture_output=True, text=True, env=env, check=True
    )
    before, kept, after, released = json.loads(run.stdout)
    assert kept > before - 20  # freeing alone gave nothing back
    assert kept - after >= 120 and released >= 120  # of the 150 MB freed


def _exit_script(body: str, tmp_path) -> subprocess.CompletedProcess:
    """Run `body` then exit_quickly in a fresh interpreter; marker files go to tmp_path."""
    script = f"import atexit, os, sys, threading\nfrom nmt.runtime import exit_quickly\n{body}"
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )


def test_quick_exit_flushes_output_runs_atexit_and_keeps_the_status(tmp_path):
    r = _exit_script(
        "atexit.register(lambda: open('atexit-ran', 'w').close())\n"
        "sys.stdout.write('x' * 100000)\nsys.stderr.write('warned')\nexit_quickly(3)",
        tmp_path,
    )
    assert (r.returncode, len(r.stdout), r.stderr) == (3, 100000, "warned")
    assert (tmp_path / "atexit-ran").exists()
    r = _exit_script("exit_quickly('error: bad input')", tmp_path)
    assert (r.returncode, r.stderr) == (1, "error: bad input\n")  # as sys.exit(str)
    r = _exit_script(
        "threading.Thread(target=__import__('time').sleep, args=(0.2,)).start()\n"
        "exit_quickly('error: once')",
        tmp_path,
    )  # the ordinary exit (a thread still runs) prints the message once too
    assert (r.returncode, r.stderr) == (1, "error: once\n")
    assert _exit_script("exit_quickly(None)", tmp_path).returncode == 0


def test_quick_exit_without_stdout_or_stderr_keeps_the_status(tmp_path):
    # Started with `>&-` (or `2>&-`), Python has None for the stream: nothing to flush.
    r = _exit_script("sys.stdout = None\nsys.stderr.write('kept')\nexit_quickly(0)", tmp_path)
    assert (r.returncode, r.stderr) == (0, "kept")
    r = _exit_script("sys.stdout = sys.stderr = None\nexit_quickly('error: lost')", tmp_path)
    assert (r.returncode, r.stderr) == (1, "")


def test_quick_exit_waits_for_a_running_thread_as_an_ordinary_exit_does(tmp_path):
    # A non-daemon thread still at work: the exit is the ordinary one, which lets it finish.
    r = _exit_script(
        "import time\n"
        "def late():\n    time.sleep(0.5)\n    open('thread-done', 'w').close()\n"
        "threading.Thread(target=late).start()\nexit_quickly(0)",
        tmp_path,
    )
    assert r.returncode == 0 and (tmp_path / "thread-done").exists()


def test_nmt_command_exit_codes_through_the_entry_point(tmp_path):
    # `python -m nmt` is the console script's run(): statuses as typer / user_errors set them.
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    ok = subprocess.run(
        [sys.executable, "-m", "nmt", "score", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ok.returncode == 0 and "BLEU" in ok.stdout
    hyp = tmp_path / "hyp"
    hyp.write_text("a b\n", encoding="utf-8")
    bad = subprocess.run(
        [sys.executable, "-m", "nmt", "score", str(hyp), "-r", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "missing" in bad.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "nmt", "score", "--no-such-option"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert usage.returncode == 2 and "No such option" in usage.stderr


def test_a_missing_model_directory_fails_before_torch_loads(tmp_path):
    # A mistyped -m costs a fraction of a second: the check runs before `import torch` (1.3 s+).
    src = tmp_path / "src.en"
    src.write_text("a dog .\n", encoding="utf-8")
    missing = str(tmp_path / "nope")
    script = f"""
import sys
from nmt.cli.app import app
for args in (["translate", "-m", {missing!r}, {str(src)!r}],
             ["rescore", {str(src)!r}, {str(src)!r}, "-m", {missing!r}],
             ["attention", "a dog .", "-m", {missing!r}, "-o", {str(tmp_path / "a.png")!r}],
             ["evaluate", "-m", {missing!r}, "--src", {str(src)!r}, "-r", {str(src)!r}]):
    try:
        app(args)
    except SystemExit as e:
        print(args[0], e.code, "torch" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.splitlines() == [
        "translate 2 False",
        "rescore 2 False",
        "attention 2 False",
        "evaluate 2 False",
    ], out.stdout + out.stderr
    assert out.stderr.splitlines() == [f"error: {missing}: model directory not found"] * 4


@pytest.mark.parametrize(
    ("omp", "expected"),
    [("3", 3), (" 2 ", 2), ("0", None), ("x", None), ("", None), ("-1", None)],
)
def test_usable_cpus_takes_omp_num_threads_else_the_affinity(monkeypatch, omp, expected):
    from nmt.runtime import usable_cpus

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 5}, raising=False)
    assert usable_cpus({"OMP_NUM_THREADS": omp}) == (3 if expected is None else expected)
    assert usable_cpus({}) == 3


def test_parse_device_takes_every_spelling_once_for_both_engines():
    from nmt.errors import NmtError
    from nmt.runtime import parse_device

    assert [parse_device(d) for d in ("auto", "cpu", "mps", "cuda", "cuda:3")] == [
        ("auto", None),
        ("cpu", None),
        ("mps", None),
        ("cuda", None),
        ("cuda", 3),
    ]
    for bad in ("gpu", "cuda:", "cuda:x", "cpu:0", "CUDA"):
        with pytest.raises(NmtError) as e:
            parse_device(bad)
        assert str(e.value) == f"--device {bad!r}: expected auto, cpu, cuda, cuda:N or mps"


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_code_version_names_the_commit_and_whether_the_package_differs(tmp_path):
    package = tmp_path / "nmt"
    package.mkdir()
    (package / "model.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("outside the package\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    from nmt import __version__

    assert code_version(package)["commit"] == head
    assert code_version(package)["nmt"] == __version__
    (tmp_path / "notes.txt").write_text("changed, but not the package\n")
    assert code_version(package)["commit"] == head
    (package / "model.py").write_text("x = 2\n")  # the package's code changed since the commit
    assert code_version(package)["commit"] == head + "+dirty"


def test_code_version_outside_a_checkout_has_no_commit(tmp_path):
    package = tmp_path / "nmt"
    package.mkdir()
    found = code_version(package)
    assert "commit" not in found and found["nmt"]
