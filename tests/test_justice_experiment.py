"""scripts/justice_experiment.py: the seeded train sample, the corpus mirror, a failed step's
one-line error, and the whole script's smoke mode on the justice-laws-en-fr mirror (fetch, sample,
preprocess with a valid sample, three systems to a flat curve, test translated line for line, the
report's tables and figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MIRROR = REPO.parent / "shared" / "corpora" / "justice-laws-en-fr"
sys.path.insert(0, str(REPO / "scripts"))

from expt_corpus import sample_pairs  # noqa: E402
from expt_score import paired  # noqa: E402
from flatrun import Runner, corpus_mirror  # noqa: E402
from justice_experiment import main, rule_of  # noqa: E402
from justice_recipe import best_system, markdown, recipe  # noqa: E402
from justice_report import groupings  # noqa: E402
from justice_systems import CAPS  # noqa: E402


def test_sample_pairs_is_seeded_aligned_and_in_file_order(tmp_path):
    for lang in ("en", "fr"):
        (tmp_path / f"c.{lang}").write_text("".join(f"{lang} {i}\n" for i in range(100)))
    n = sample_pairs(tmp_path / "c.en", tmp_path / "c.fr", tmp_path / "s", 30, seed=1)
    en = (tmp_path / "s.en").read_text().splitlines()
    fr = (tmp_path / "s.fr").read_text().splitlines()
    assert n == 30 and len(en) == 30
    numbers = [int(x.split()[1]) for x in en]
    assert numbers == sorted(numbers) and [int(x.split()[1]) for x in fr] == numbers
    sample_pairs(tmp_path / "c.en", tmp_path / "c.fr", tmp_path / "t", 30, seed=1)
    assert (tmp_path / "t.en").read_text() == (tmp_path / "s.en").read_text()
    assert sample_pairs(tmp_path / "c.en", tmp_path / "c.fr", tmp_path / "u", 500, seed=1) == 100


def test_each_system_trains_to_its_cap_unless_max_steps_sets_one(tmp_path, monkeypatch):
    seen = {}

    def fake_job(cfg, name):
        seen[name] = rule_of(cfg, name).max_steps

    def run_all(runner, jobs, at_once):  # the jobs in turn, with no signal handlers installed
        for job in jobs.values():
            job()
        return 0

    monkeypatch.setattr("justice_experiment.system_job", fake_job)
    monkeypatch.setattr("flatrun.run_all", run_all)
    monkeypatch.setattr("justice_experiment.prepare", lambda cfg: None)
    monkeypatch.setattr("justice_report.write_report", lambda *a: [])
    monkeypatch.setattr("justice_recipe.recipe", lambda *a: {})
    assert main(["--work", str(tmp_path)]) == 0
    assert seen == CAPS and CAPS["bahdanau"] == CAPS["noattn"]  # the RNNs end at the same count
    assert main(["--work", str(tmp_path), "--max-steps", "500"]) == 0
    assert seen == dict.fromkeys(CAPS, 500)


def test_best_system_is_the_trained_one_with_the_best_validation_bleu(tmp_path):
    for name, bleus, trained in (("a", [10, 30], True), ("b", [20, 25], True), ("c", [50], False)):
        (tmp_path / name).mkdir()
        events = [{"event": "valid", "step": 100 * (i + 1), "bleu": b} for i, b in enumerate(bleus)]
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(json.dumps(e) + "\n" for e in events)
        )
        if trained:  # c is still training: no flat.json yet
            (tmp_path / name / "flat.json").write_text("{}")
    assert best_system(tmp_path, ["a", "b", "c"]) == "a"
    assert best_system(tmp_path, ["b", "c"]) == "b"
    assert best_system(tmp_path, ["c"]) is None


@pytest.mark.slow
def test_a_mirror_named_on_purpose_is_kept_and_a_missing_default_dropped(tmp_path, monkeypatch):
    monkeypatch.delenv("NMT_CORPUS_MIRROR", raising=False)
    given, default = tmp_path / "nowhere", tmp_path / "default"
    assert corpus_mirror(given, default) == given  # the fetcher names it, no download
    assert corpus_mirror(None, default) is None
    default.mkdir()
    assert corpus_mirror(None, default) == default
    monkeypatch.setenv("NMT_CORPUS_MIRROR", str(tmp_path / "env"))
    assert corpus_mirror(None, default) == tmp_path / "env"


def test_a_failed_step_ends_the_script_in_one_line_naming_it(tmp_path):
    missing = tmp_path / "no-mirror"
    script = REPO / "scripts/justice_experiment.py"
    cmd = [sys.executable, str(script), "--work", str(tmp_path), "--mirror", str(missing)]
    r = subprocess.run([*cmd, "--prepare-only"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    fetcher, script_line = r.stderr.splitlines()
    assert fetcher == f"error: mirror {missing}: no such folder"
    assert script_line.startswith("error: ") and "fetch_corpus.py justice-laws-en-fr" in script_line
    assert script_line.endswith(f"--mirror {missing} exited with status 2")


@pytest.mark.slow
def test_smoke_run_end_to_end(tmp_path):
    if not (MIRROR / "SHA256SUMS").is_file():
        pytest.skip(f"no justice-laws-en-fr mirror in {MIRROR}")
    work = tmp_path / "work"
    cmd = [
        sys.executable,
        str(REPO / "scripts/justice_experiment.py"),
        "--smoke",
        "--work",
        str(work),
        "--docs",
        str(tmp_path / "docs"),
        "--mirror",
        str(MIRROR),
    ]
    r = subprocess.run([*cmd, "--prepare-only"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "data" / "manifest.json").is_file() and not (work / "noattn").exists()
    kept = ["--kept", str(tmp_path / "kept")]
    r = subprocess.run([*cmd, *kept], capture_output=True, text=True, timeout=600)  # data reused
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((work / "data" / "manifest.json").read_text())
    assert manifest["splits"]["valid"]["sample"] == {"lines": 120, "of": 10197, "seed": 1}
    assert manifest["splits"]["train"]["lines_read"] == 600
    for name in ("noattn", "bahdanau", "transformer"):
        assert json.loads((work / name / "flat.json").read_text())["steps"] >= 20
        assert len((work / name / "test.hyp.fr").read_text().splitlines()) == 120
    table = (work / "justice_table.md").read_text()
    assert "Test, whole" in table and "| transformer |" in table and "10-20" in table
    assert "Near-duplicates: " in table and "bootstrap by document" in table
    for png in ("justice_bleu", "justice_relative", "justice_curves"):
        assert (tmp_path / "docs" / f"{png}.png").stat().st_size > 10_000
    best = json.loads((work / "recipe.json").read_text())
    assert best["system"] in ("noattn", "bahdanau", "transformer")
    n = len(list((work / best["system"] / "checkpoints").glob("step-*.safetensors")))
    assert [r["row"] for r in best["rows"]][:3] == [
        "best checkpoint",
        f"average of the last {min(5, n)}",
        f"average of the last {min(5, n)}, --split-sentences",
    ]
    assert all(r["lines"] == 120 and r["seconds"] > 0 for r in best["rows"])
    assert (work / best["system"] / "checkpoints" / "averaged.safetensors").is_file()
    # the Transformer's rows add its CTranslate2 exports, each translating line for line
    exported = recipe(work, ["transformer"], Runner(1), beam=2)
    assert [r["row"] for r in exported["rows"]][3:] == ["CTranslate2 float32", "CTranslate2 int8"]
    assert (work / "transformer-ct2-int8" / "model.bin").is_file()
    assert "| CTranslate2 int8 |" in markdown(exported)
    # the kept outputs (no weights) draw the same report in a new work folder, with no training
    again = tmp_path / "again"
    cmd[cmd.index("--work") + 1] = str(again)
    cmd[cmd.index("--docs") + 1] = str(again / "docs")
    r = subprocess.run([*cmd, *kept, "--no-recipe"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("not trained") == 3 and not list(again.glob("*/checkpoints"))
    assert (again / "justice_table.md").read_text() == table
    assert not (again / "recipe.json").exists()


def test_the_gain_over_the_baseline_is_paired():
    """Both systems are resampled on the same lines: equal outputs gain exactly 0 in every
    resampling, and a system right where the other is wrong gains with an interval above 0."""
    from sacrebleu.metrics import BLEU

    refs = [f"the cat number {i} sat on the mat" for i in range(80)]
    worse = [r if i % 4 else r.replace("cat", "dog") for i, r in enumerate(refs)]
    assert paired(BLEU(), worse, worse, refs) == {"score": 0.0, "lo": 0.0, "hi": 0.0}
    gain = paired(BLEU(), refs, worse, refs)
    assert gain["score"] == pytest.approx(100.0 - BLEU().corpus_score(worse, [refs]).score)
    assert 0 < gain["lo"] <= gain["score"] <= gain["hi"]


def test_the_whole_test_interval_is_checked_against_other_groupings_of_blocks_only():
    """Documents found as blocks of lines are drawn again as half and twice as many blocks, and
    as lines; documents from ids only as lines. Each grouping resamples every line's document
    whole: within a block, every line is drawn as often."""
    from expt_corpus import documents
    from expt_score import document_weights

    docs, how = documents(370, None, 37)
    found = groupings(370, how, document_weights(docs))
    assert list(found) == ["37 blocks of consecutive lines", "18 blocks", "74 blocks", "lines"]
    halves = found["18 blocks"]
    assert halves.shape == (1000, 370)
    first = [i for i in range(370) if i * 18 // 370 == 0]
    assert (halves[:, first] == halves[:, [first[0]]]).all()
    assert not (found["lines"][:, first] == found["lines"][:, [first[0]]]).all()
    assert list(groupings(370, "document ids from test.docs", document_weights(docs))) == [
        "document ids from test.docs",
        "lines",
    ]
