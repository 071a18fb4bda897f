"""Shared fixtures: the real Multi30k corpus through the project's fetcher, tiny synthetic corpora."""

from __future__ import annotations

import os

import pytest
import torch

# Two xdist workers share two cores: one thread each keeps them from fighting.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# precision `auto` means fp32 in the suite on every CPU, so bitwise tests hold on bf16 machines
# too; bf16 paths have their own explicit tests. NMT_CPU_BF16=1 make test trains
# under auto in bf16 (decoding's auto is fp32 everywhere).
os.environ.setdefault("NMT_CPU_BF16", "0")


def require(module: str):
    """Import `module` for a parity test; skip without it, but fail under CI=true, where
    `make test` installs it and a missing one is a broken install, not a reason to skip."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{module} is not installed (make test installs it)")
        pytest.skip(f"{module} is not installed")


PRETRAINED = ("opus-mt-en-mg", "opus-mt-uk-en", "opus-mt-tc-big-fr-en")


@pytest.fixture(scope="session")
def pretrained_root(repo_root):
    """../shared/pretrained: the real OPUS-MT tokenizers and configs (no weights)."""
    root = repo_root.parent / "shared/pretrained"
    if not (root / PRETRAINED[0] / "config.json").is_file():  # nothing downloads them
        pytest.skip(f"{root}: no OPUS-MT tokenizers on this machine")
    return root


@pytest.fixture(scope="session")
def repo_root():
    """The repository root (where the Makefile is)."""
    from pathlib import Path

    return Path(__file__).resolve().parent.parent


def _corpus_mirror(root):
    """The local Multi30k mirror: NMT_CORPUS_MIRROR, else ../shared/corpora/multi30k beside the repo."""
    from pathlib import Path

    env = os.environ.get("NMT_CORPUS_MIRROR")
    for candidate in ([Path(env)] if env else []) + [root.parent / "shared/corpora/multi30k"]:
        if (candidate / "train.en.gz").is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def multi30k_mirror(repo_root):
    """Folder of the gzipped Multi30k mirror; skips when this machine has none (no network in tests)."""
    mirror = _corpus_mirror(repo_root)
    if mirror is None:
        pytest.skip(
            "no Multi30k mirror (set NMT_CORPUS_MIRROR or provide ../shared/corpora/multi30k)"
        )
    return mirror


@pytest.fixture(scope="session")
def multi30k(repo_root, tmp_path_factory):
    """Path of a fetched, verified, decompressed Multi30k (train/val/test_2016_flickr/... .en/.de/...):
    from the mirror, else the corpus `make demo` fetched into corpora/multi30k (its stamp says
    every file is there and unchanged, so nothing is downloaded); skips without either."""
    from nmt.data.corpus import STAMP, fetch

    mirror, fetched = _corpus_mirror(repo_root), repo_root / "corpora/multi30k"
    if mirror is None and (fetched / STAMP).is_file():
        return fetch("multi30k", fetched, quiet=True)
    if mirror is None:
        why = "no mirror (NMT_CORPUS_MIRROR, ../shared/corpora/multi30k), no corpora/multi30k"
        pytest.skip(f"no Multi30k: {why} fetched by make demo")
    return fetch("multi30k", tmp_path_factory.mktemp("multi30k"), mirror=mirror, quiet=True)


def pytest_addoption(parser):
    parser.addoption(
        "--max-test-seconds",
        type=float,
        default=None,
        help="fail a test not marked slow whose call takes longer than this (make test-fast: 5)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The budget of `make test-fast`: a passing test not marked slow that ran longer than
    --max-test-seconds fails, naming its time, so the fast suite stays fast."""
    outcome = yield
    report = outcome.get_result()
    limit = item.config.getoption("--max-test-seconds")
    if (
        limit is not None
        and call.when == "call"
        and report.passed
        and item.get_closest_marker("slow") is None
        and call.duration > limit
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {call.duration:.1f} s, over the {limit:g} s a test not marked "
            "slow may take: make it faster or mark it @pytest.mark.slow"
        )


# The files that take longest, slowest first: run first, so that two workers taking whole files
# (`--dist loadfile`) finish at about the same time instead of one running a long file alone.
SLOWEST_FILES = (
    "test_import_beam.py",
    "test_sentences.py",
    "test_justice_experiment.py",
    "test_joined_experiment.py",
    "test_multinode.py",
    "test_training_loop.py",
    "test_pretrained_example.py",
    "test_import_parity.py",
    "test_bench_scale.py",
    "test_invariance.py",
    "test_import_ct2.py",
    "test_finetune_imported.py",
)


def pytest_collection_modifyitems(config, items):
    """The slowest files first, each file's tests in their order."""
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
