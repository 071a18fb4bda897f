"""Shared fixtures: the real Multi30k corpus through the project's fetcher, tiny synthetic corpora."""

from __future__ import annotations

import os

import pytest
import torch

# Two xdist workers share two cores: one thread each keeps them from fighting.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def repo_root():
    """The repository root (where the Makefile is)."""
    from pathlib import Path

    return Path(__file__).resolve().parent.parent
