"""Subnormal floats during training: flushed to zero on CPU while a run lasts, kept afterwards
(nmt.device.denormals_flushed, entered by nmt.train.setup.process)."""

from __future__ import annotations

import torch

from nmt.device import denormals_flushed
from nmt.train.distributed import DistInfo
from nmt.train.setup import process

TINY = 1e-39  # subnormal in float32 (the smallest normal is 1.18e-38)


def _kept() -> bool:
    """Whether float32 arithmetic keeps a subnormal result (the default) or flushes it."""
    return bool((torch.tensor([TINY]) * 1.0).item() != 0.0)


def test_flushed_inside_kept_outside():
    assert _kept()
    with denormals_flushed(torch.device("cpu")):
        assert not _kept()
        assert (torch.tensor([2e-38]) * 0.5).item() == 0.0  # a product landing there, too
        assert (torch.tensor([2e-38]) * 1.0).item() > 0.0  # normal values untouched
    assert _kept()


def test_flushed_back_even_when_the_block_fails():
    try:
        with denormals_flushed(torch.device("cpu")):
            raise ValueError("x")
    except ValueError:
        pass
    assert _kept()


def test_a_training_run_flushes_them_and_restores_the_default():
    threads = torch.get_num_threads()
    with process(torch.device("cpu"), DistInfo(), 1):
        assert not _kept() and torch.get_num_threads() == 1
    assert _kept() and torch.get_num_threads() == threads


def test_other_devices_are_left_alone():
    with denormals_flushed(torch.device("meta")):
        assert _kept()


POOL = """
import torch
from nmt.device import denormals_flushed

torch.set_num_threads(2)
x = torch.full((1 << 22,), 1e-39)  # split among both threads: the pool exists before the flush


def kept() -> int:
    return int((x * 1.0).count_nonzero())


before = kept()
with denormals_flushed(torch.device("cpu")):
    inside = kept()
print(before, inside, kept())
"""


def test_every_thread_of_the_pool_flushes_and_then_keeps_again():
    """A thread's floating-point mode is its own, and torch's OpenMP threads keep the one they
    started with: a flush on the calling thread alone leaves the pool's share of an op kept."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", POOL], capture_output=True, text=True, check=True
    ).stdout.split()
    n = 1 << 22
    assert out == [str(n), "0", str(n)]
