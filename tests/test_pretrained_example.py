"""The worked example of docs/pretrained.md (opus-mt-tc-big-fr-en adapted to Canadian law) runs
as typed: its commands, in their order, on a random model in tc-big's configuration shrunk to
2+2 layers with the real tokenizer, and on a few hundred lines of the corpus. Three things are
stood in for: the hub id (a local directory of that model), the mirror DIR (the corpus files
written here) and the preset's two-hour budget (a few updates)."""

from __future__ import annotations

import gzip
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require
from marian_fixtures import small_marian
from test_docs import command_lines, shell_blocks

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
SECTION = "### Worked example: Canadian law, French -> English"
SIZES = {"train": 300, "dev": 40, "test": 30}


def example_lines() -> list[str]:
    """The command lines of the example's shell block."""
    text = (REPO / "docs/pretrained.md").read_text(encoding="utf-8")
    part = text[text.index(SECTION) :]
    part = part[: part.index("\n## ")]
    (block,) = shell_blocks(part)
    return list(command_lines(block))


def write_corpus(shared: Path, dest: Path) -> None:
    """The first lines of each split of justice-laws-en-fr, as the fetcher would write them."""
    dest.mkdir(parents=True)
    for split, n in SIZES.items():
        for lang in ("en", "fr"):
            with gzip.open(shared / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = [next(f) for _ in range(n)]
            (dest / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")


def run(words: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """One command of the example in `cwd`, `nmt` as this interpreter's `-m nmt`."""
    if words[0] == "nmt":
        words = [sys.executable, "-m", "nmt", *words[1:]]
    elif words[0] == "python":
        words = [sys.executable, *words[1:]]
    return subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_worked_example_runs_as_typed(pretrained_root, repo_root, tmp_path):
    require("transformers")
    require("ctranslate2")
    corpus = repo_root.parent / "shared/corpora/justice-laws-en-fr"
    if not (corpus / "train.en.gz").is_file():
        pytest.skip(f"{corpus}: no justice-laws-en-fr mirror")
    model = small_marian(pretrained_root / "opus-mt-tc-big-fr-en", tmp_path / "tc-big")
    lines = example_lines()
    steps = ["import", "preprocess", "evaluate", "train", "evaluate", "export", "export"]
    assert [ln.split()[1] for ln in lines if ln.startswith("nmt ")] == steps
    for line in lines:
        words = shlex.split(line)
        if words[:2] == ["nmt", "import"]:
            words[2] = str(model)  # the hub id: a local directory of that model
        if words[:2] == ["python", "scripts/fetch_corpus.py"]:
            write_corpus(corpus, tmp_path / "corpora/justice-laws-en-fr")  # the mirror DIR
            continue
        if words[:2] == ["nmt", "train"]:
            words += ["--set", "training.max_steps=4", "--set", "training.valid_every=2"]
            words += ["--set", "training.warmup=1", "--set", "training.max_tokens=512"]
        if words[:2] == ["nmt", "preprocess"] or words[:2] == ["nmt", "train"]:
            words.append("--quiet")
        r = run(words, tmp_path)
        assert r.returncode == 0, f"{line}\n{r.stderr[-2000:]}"
        if words[:2] == ["nmt", "evaluate"]:
            assert re.search(r"BLEU", r.stdout + r.stderr)
    work = tmp_path / "work/tc-big-justice"
    assert (work / "model/checkpoints/best.safetensors").is_file()
    assert (work / "ct2/model.bin").is_file() and (work / "hf/config.json").is_file()
    test_fr = tmp_path / "corpora/justice-laws-en-fr/test.fr"
    r = run(["nmt", "translate", "-m", "work/tc-big-justice/ct2", str(test_fr), "-q"], tmp_path)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == SIZES["test"]
