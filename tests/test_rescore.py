"""Forced decoding (`nmt rescore`): a target's score is the log-probability search reports for the
same tokens, does not depend on batching, is the mixture's for an ensemble, and the CLI writes one
line per pair with exact errors for files of different lengths."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_translate import build_tiny_model_dir, synthetic_lines

from nmt.data.vocab import EOS_ID, PAD_ID
from nmt.decode.options import ResolvedOptions
from nmt.decode.rescore import rescore
from nmt.decode.search.beam import beam_search
from nmt.decode.search.greedy import greedy_search
from nmt.dirs import ModelDir
from nmt.engines.translator import Translator
from nmt.errors import NmtError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> tuple[Path, Path]:
    """Two tiny random Transformers sharing one SentencePiece model (d_model 32 and 48)."""
    root = tmp_path_factory.mktemp("rescore")
    a = build_tiny_model_dir(root / "a")
    b = build_tiny_model_dir(root / "b", d_model=48)
    return a, b


def _padded(ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = [len(x) + 1 for x in ids]
    src = torch.full((len(ids), max(lengths)), PAD_ID, dtype=torch.long)
    for r, x in enumerate(ids):
        src[r, : len(x) + 1] = torch.tensor([*x, EOS_ID])
    return src, torch.tensor(lengths)


def test_scores_are_what_search_reports_for_the_same_tokens(dirs):
    tr = Translator.from_dir(ModelDir(dirs[0]), device="cpu")
    src = tr.encode_sources(synthetic_lines(12, seed=1), 1, print)
    s, lens = _padded(src)
    opts = ResolvedOptions(beam_size=3, nbest=3, max_len_a=1.0, max_len_b=3)
    for hyps in (
        [[h] for h in greedy_search(tr.model, s, lens, opts)],
        beam_search(tr.model, s, lens, opts),
    ):
        flat = [(i, h) for i, group in enumerate(hyps) for h in group]
        lps = tr.score_ids([src[i] for i, _ in flat], [h.tokens for _, h in flat])
        for (_, h), lp in zip(flat, lps, strict=True):
            assert len(lp) == len(h.tokens) + 1  # every token and eos
            assert sum(lp) == pytest.approx(h.log_prob, abs=1e-4)
    assert len({tuple(h.tokens) for _, h in flat}) > 12  # the 36 beam outputs are not all alike


def test_scores_do_not_depend_on_batching(dirs):
    tr = Translator.from_dir(ModelDir(dirs[0]), device="cpu")
    sources = synthetic_lines(30, seed=2)
    targets = synthetic_lines(30, seed=3)
    big = rescore(tr, sources, targets, batch_tokens=4096)
    small = rescore(tr, sources, targets, batch_tokens=25)
    assert [s.tokens for s in big] == [s.tokens for s in small]
    for a, b in zip(big, small, strict=True):
        assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)
        assert a.per_token == pytest.approx(a.log_prob / len(a.tokens))
        assert all(x <= 0 for x in a.token_log_probs) and a.tokens[-1] == "</s>"
    with pytest.raises(NmtError, match="30 sources but 29 targets"):
        rescore(tr, sources, targets[:29])


def test_an_ensemble_scores_with_its_mixture(dirs):
    a, b = (Translator.from_dir(ModelDir(d), device="cpu") for d in dirs)
    both = Translator.from_dir([ModelDir(d) for d in dirs], device="cpu")
    sources, targets = synthetic_lines(8, seed=4), synthetic_lines(8, seed=5)
    sa, sb, sab = (rescore(t, sources, targets) for t in (a, b, both))
    for x, y, m in zip(sa, sb, sab, strict=True):
        for lx, ly, lm in zip(x.token_log_probs, y.token_log_probs, m.token_log_probs, strict=True):
            assert lm == pytest.approx(math.log((math.exp(lx) + math.exp(ly)) / 2), abs=1e-4)


def test_long_targets_are_cut_with_a_warning_naming_the_line(dirs):
    tr = Translator.from_dir(ModelDir(dirs[0]), device="cpu")  # max_positions 64: 63 target tokens
    long = " ".join(synthetic_lines(20, seed=6))
    warnings: list[str] = []
    (score,) = rescore(tr, ["one line"], [long], first_line=7, on_warning=warnings.append)
    assert len(score.tokens) == 64
    assert len(warnings) == 1 and warnings[0].startswith("line 7: target has ")
    assert warnings[0].endswith(" subword tokens, scored on its first 63")


def _nmt(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "nmt", *args], cwd=REPO, env=env,
                          capture_output=True, text=True)  # fmt: skip


@pytest.mark.slow
def test_cli_writes_one_score_per_pair(dirs, tmp_path):
    src, tgt, out = tmp_path / "s.en", tmp_path / "t.de", tmp_path / "scores.txt"
    src.write_text("\n".join(synthetic_lines(9, seed=7)) + "\n\n", encoding="utf-8")
    tgt.write_text("\n".join(synthetic_lines(10, seed=8)) + "\n", encoding="utf-8")
    model = str(dirs[0])
    done = _nmt("rescore", "-m", model, str(src), str(tgt), "-o", str(out), "-q")
    assert done.returncode == 0, done.stderr
    totals = [float(x) for x in out.read_text().splitlines()]
    js = _nmt("rescore", "-m", model, str(src), str(tgt), "-f", "jsonl", "-q")
    mean = _nmt("rescore", "-m", model, str(src), str(tgt), "--average", "-q")
    records = [json.loads(x) for x in js.stdout.splitlines()]
    assert len(totals) == len(records) == 10
    for total, rec, avg in zip(totals, records, mean.stdout.splitlines(), strict=True):
        assert total == pytest.approx(rec["log_prob"], abs=1e-5)
        assert float(avg) == pytest.approx(rec["log_prob"] / len(rec["tokens"]), abs=1e-5)
        assert sum(rec["token_log_probs"]) == pytest.approx(total, abs=1e-4)

    short = tmp_path / "short.de"
    short.write_text("a\nb\n", encoding="utf-8")
    bad = _nmt("rescore", "-m", model, str(src), str(short), "-o", str(tmp_path / "none.txt"))
    assert bad.returncode == 2
    assert bad.stderr == (
        f"error: {src} has 10 lines but {short} has 2 (rescore needs one target per source line)\n"
    )
    assert not (tmp_path / "none.txt").exists()
    # From a pipe the lengths are found out while reading; the error is the same.
    piped = subprocess.run(
        [sys.executable, "-m", "nmt", "rescore", "-m", model, str(src), "/dev/stdin", "-q"],
        input="a\nb\n", cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert piped.returncode == 2
    assert piped.stderr == (
        f"error: {src} has 10 lines but /dev/stdin has 2 (rescore needs one target per source "
        "line)\n"
    )


@pytest.mark.slow
def test_cli_stops_quietly_when_the_reader_goes_away(dirs, tmp_path):
    """A reader gone before the scores come (`| head` done early): exit 141, nothing on stderr."""
    src, tgt = tmp_path / "s.en", tmp_path / "t.de"
    src.write_text("\n".join(synthetic_lines(50, seed=9)) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(synthetic_lines(50, seed=10)) + "\n", encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nmt", "rescore", "-m", str(dirs[0]), str(src), str(tgt), "-q"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    proc.stdout.close()  # long before the model has loaded
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == ""
