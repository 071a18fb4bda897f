"""Kernel caches: `nmt train` enlarges them before torch loads, and a user's setting wins."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nmt.runtime import KERNEL_CACHE_CAPACITY, KERNEL_CACHE_VARIABLES, enlarge_kernel_caches


def test_enlarging_keeps_what_the_user_set():
    env = {"LRU_CACHE_CAPACITY": "64"}
    assert enlarge_kernel_caches(env) == {
        "LRU_CACHE_CAPACITY": "64",
        "ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(KERNEL_CACHE_CAPACITY),
    }
    assert set(env) == set(KERNEL_CACHE_VARIABLES)


def test_nmt_train_enlarges_the_caches_before_torch_loads(tmp_path):
    # A real `nmt train` process (it fails on the missing data directory right after): the spy
    # records whether torch was already loaded when the caches were set.
    script = f"""
import os, sys
import nmt.runtime as runtime
real = runtime.enlarge_kernel_caches
def spy(env=None):
    print("torch loaded:", "torch" in sys.modules)
    return real(env)
runtime.enlarge_kernel_caches = spy
from nmt.cli import app
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
    assert lines[-1] == str({k: str(KERNEL_CACHE_CAPACITY) for k in KERNEL_CACHE_VARIABLES})
    assert "data directory not found" in out.stderr


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


def test_rss_follows_allocation_and_peak_stays():
    from nmt.runtime import peak_rss_mb, rss_mb

    before = rss_mb()
    assert before is not None and before > 0
    block = bytearray(256 * 2**20)  # zero-filled: every page touched
    grown = rss_mb()
    # Not the full 256: the kernel may reclaim other pages of the process meanwhile (a fresh
    # clone's run grew by 239 on a machine with proactive reclaim, kdamond, running).
    assert grown is not None and grown - before >= 200
    del block
    peak = peak_rss_mb()
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
