"""The four-command job end to end through the real CLI, on a toy copy task that runs in seconds:
preprocess -> train -> average -> translate -> score (and evaluate agrees with translate + score)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu

REPO = Path(__file__).resolve().parent.parent
WORDS = "red green blue cyan black white grey pink gold teal".split()


def _nmt(*args: str) -> subprocess.CompletedProcess:
    """Run `nmt ARGS` as a user would; fail the test with its stderr when it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "nmt", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"nmt {' '.join(args)} failed:\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A copy task (target = source): a few hundred training pairs, small valid and test sets."""
    rng = random.Random(7)
    root = tmp_path_factory.mktemp("e2e")
    for split, n in (("train", 400), ("valid", 40), ("test", 25)):
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(2, 6))) for _ in range(n)]
        for lang in ("en", "de"):
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.mark.slow
def test_preprocess_train_average_translate_score(corpus, tmp_path):
    data, model = tmp_path / "data", tmp_path / "model"
    _nmt(
        "preprocess", "--src-lang", "en", "--tgt-lang", "de", "--train", str(corpus / "train"),
        "--valid", str(corpus / "valid"), "--test", str(corpus / "test"), "-o", str(data),
        "--vocab-size", "40", "--threads", "1", "--quiet",
    )  # fmt: skip
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    assert set(manifest["splits"]) == {"train", "valid", "test"}
    assert manifest["splits"]["train"]["kept"] == 400

    _nmt(
        "train", "--preset", "transformer-tiny", "-d", str(data), "-o", str(model),
        "--max-steps", "30", "--set", "training.valid_every=10", "--set", "training.warmup=5",
        "--set", "training.max_tokens=500", "--device", "cpu", "--quiet",
    )  # fmt: skip
    ckpts = model / "checkpoints"
    assert {"best.safetensors", "last.safetensors", "last.state.pt"} <= {
        p.name for p in ckpts.iterdir()
    }
    events = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "valid"] == [10, 20, 30]

    avg = _nmt("average", "-m", str(model), "--last", "2")
    assert "averaged steps 20, 30" in avg.stderr
    assert (ckpts / "averaged.safetensors").is_file()

    hyp = tmp_path / "hyp.de"
    _nmt(
        "translate", str(corpus / "test.en"), "-m", str(model), "--checkpoint", "averaged",
        "-b", "2", "-o", str(hyp), "--quiet",
    )  # fmt: skip
    hyps = hyp.read_text(encoding="utf-8").splitlines()
    refs = (corpus / "test.de").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(refs) == 25

    scored = json.loads(_nmt("score", str(hyp), "-r", str(corpus / "test.de"), "--json").stdout)
    bleu = sacrebleu.BLEU()
    expected = bleu.corpus_score(hyps, [refs])
    assert scored[0]["score"] == pytest.approx(round(expected.score, 1))
    assert scored[0]["signature"] == str(bleu.get_signature())

    evaluated = _nmt(
        "evaluate", "-m", str(model), "--checkpoint", "averaged", "--src", str(corpus / "test.en"),
        "-r", str(corpus / "test.de"), "--beam-size", "2", "--json", "--quiet",
    )  # fmt: skip
    assert json.loads(evaluated.stdout)[0]["score"] == scored[0]["score"]
