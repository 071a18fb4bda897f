"""The experiment framework of scripts/: paired and document bootstraps (scripts/expt_score.py),
the flat rule for weak systems (scripts/flatrun.py), documents and near-duplicates
(scripts/expt_corpus.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from expt_corpus import documents, near_duplicates  # noqa: E402
from expt_score import (  # noqa: E402
    bootstrap,
    document_weights,
    line_stats,
    line_weights,
    paired,
    score_of,
)
from flatrun import (  # noqa: E402
    FlatRule,
    Job,
    Runner,
    compare,
    flat_at,
    train_command,
    train_to_flat,
    valid_points,
)

REFS = [f"the cat number {i} sat on the mat near door {i % 7}" for i in range(200)]


def wrong(line: str) -> str:
    """A translation that misses two content words."""
    return line.replace("cat", "dog").replace("mat", "rug")


def test_scores_from_summed_statistics_are_sacrebleus():
    hyps = [wrong(r) if i % 3 == 0 else r for i, r in enumerate(REFS)]
    stats = line_stats(BLEU(), hyps, REFS)
    assert score_of(BLEU(), stats.sum(0)).score == BLEU().corpus_score(hyps, [REFS]).score
    assert line_weights(50).sum(1).tolist() == [50.0] * 1000  # each resample draws 50 lines


def test_a_real_difference_has_an_interval_that_excludes_zero():
    better = [wrong(r) if i % 10 == 0 else r for i, r in enumerate(REFS)]
    worse = [wrong(r) if i % 2 == 0 else r for i, r in enumerate(REFS)]
    diff = paired(BLEU(), better, worse, REFS)
    assert diff["score"] > 0 and 0 < diff["lo"] <= diff["score"] <= diff["hi"]
    assert paired(BLEU(), worse, worse, REFS) == {"score": 0.0, "lo": 0.0, "hi": 0.0}


def test_two_equally_good_systems_differ_by_an_interval_that_holds_zero():
    a = [wrong(r) if i % 4 == 0 else r for i, r in enumerate(REFS)]
    b = [wrong(r) if i % 4 == 2 else r for i, r in enumerate(REFS)]
    diff = paired(BLEU(), a, b, REFS)
    assert diff["lo"] < 0 < diff["hi"]


def test_pairing_narrows_the_interval_of_a_difference():
    """The same resamples for both: the difference's interval is narrower than either score's."""
    a = [wrong(r) if i % 5 == 0 else r for i, r in enumerate(REFS)]
    b = [wrong(r) if i % 5 in (0, 1) else r for i, r in enumerate(REFS)]
    diff, alone = paired(BLEU(), a, b, REFS), bootstrap(BLEU(), b, REFS)
    assert diff["hi"] - diff["lo"] < alone["hi"] - alone["lo"]


def test_document_bootstrap_is_wider_on_document_correlated_lines():
    """Twenty documents of ten lines, half translated badly throughout: the lines of a document
    are not independent, and resampling documents says so."""
    docs = [i // 10 for i in range(len(REFS))]
    hyps = [wrong(r) if docs[i] % 2 else r for i, r in enumerate(REFS)]
    by_line = bootstrap(BLEU(), hyps, REFS)
    by_doc = bootstrap(BLEU(), hyps, REFS, document_weights(docs))
    assert by_doc["score"] == by_line["score"]
    assert by_doc["hi"] - by_doc["lo"] > 1.5 * (by_line["hi"] - by_line["lo"])


def test_document_weights_draw_whole_documents():
    docs = ["a"] * 3 + ["b"] * 2 + ["c"]
    w = document_weights(docs, samples=200)
    assert w.shape == (200, 6)
    assert np.all(w[:, 0] == w[:, 1]) and np.all(w[:, 3] == w[:, 4])  # a document moves whole
    assert np.all(w[:, [0, 3, 5]].sum(1) == 3)  # three documents drawn each time


def test_documents_come_from_ids_or_from_blocks_of_consecutive_lines(tmp_path):
    ids, how = documents(10, None, 3)
    assert ids == ["block0"] * 4 + ["block1"] * 3 + ["block2"] * 3 and "3 blocks" in how
    (tmp_path / "test.docs").write_text("x\nx\ny\n")
    assert documents(3, tmp_path / "test.docs", 37)[0] == ["x", "x", "y"]
    with pytest.raises(SystemExit, match="3 document ids for 4 test lines"):
        documents(4, tmp_path / "test.docs", 37)


def test_near_duplicates_share_more_than_half_of_their_8_grams():
    base = "the minister may by order amend schedule one to add or delete the name of any body"
    train = [base, "payment out of consolidated revenue fund", "something else entirely here"]
    test = [
        base.replace("body", "agency"),  # 10 of its 11 8-grams in a training line
        "the minister may by order repeal schedule two and replace it with a list of bodies",
        "Payment out of Consolidated Revenue Fund",  # a short heading: the whole line, any case
        "",
    ]
    assert near_duplicates(test, train) == [True, False, True, False]


def weak(loss_step: float) -> list[tuple[int, float, float]]:
    """A weak system's curve: BLEU near 5.5 from update 2,000 on, loss falling by `loss_step`
    a validation (0: flat)."""
    points = []
    for i, s in enumerate(range(400, 8001, 400)):
        bleu = min(5.5, s / 400) + (0.05 if i % 2 else 0.0)
        points.append((s, bleu, 3.0 - loss_step * i))
    return points


def test_a_weak_system_whose_loss_still_falls_is_not_flat():
    rule = FlatRule(valid_every=400, chunk=800, min_steps=4000)
    falling = weak(0.05)  # about 2% a validation
    assert not flat_at(falling, 8000, rule)
    assert flat_at([(s, b, None) for s, b, _ in falling], 8000, rule)  # BLEU alone: flat
    # under the old absolute margin of 0.5 BLEU this run stopped: the loss rule is what holds it
    assert flat_at(weak(0.0), 8000, rule)


def test_a_small_rise_of_a_weak_system_is_not_flat():
    """2% of a best of 5 is 0.1: a rise of 0.3 over the last quarter is not flat (the old 0.5
    margin called it flat)."""
    rule = FlatRule()
    points = [(s, 5.0, 2.0) for s in range(200, 3001, 200)] + [(3200, 5.3, 2.0), (4000, 5.3, 2.0)]
    assert not flat_at(points, 4000, rule)
    assert flat_at(points[:-2] + [(3200, 5.05, 2.0), (4000, 5.05, 2.0)], 4000, rule)


class CurveTrainer(Runner):
    """A runner whose `nmt train` writes a weak system's curve up to the asked step instead of
    training: BLEU 5.5 throughout, loss falling 2% a validation until update 6,000."""

    def run(self, cmd, log=None):
        args = [str(c) for c in cmd]
        model = Path(args[args.index("-o") + 1])
        steps = int(next(a for a in args if a.startswith("training.max_steps=")).split("=")[1])
        with open(model / "metrics.jsonl", "w") as f:
            for s in range(400, steps + 1, 400):
                loss = 3.0 * 0.98 ** (min(s, 6000) / 400)
                f.write(json.dumps({"event": "valid", "step": s, "bleu": 5.5, "valid_loss": loss}))
                f.write("\n")
        (model / "checkpoints").mkdir(exist_ok=True)
        (model / "checkpoints" / "last.state.pt").touch()


def test_a_run_judged_flat_under_another_rule_trains_on_until_its_loss_is_flat(tmp_path, capsys):
    job = Job("noattn", "p", tmp_path / "data", tmp_path / "noattn")
    rule = FlatRule(valid_every=400, chunk=800, min_steps=4000, max_steps=12000)
    job.model.mkdir()
    CurveTrainer().run(train_command(job, rule, 4000, False))  # an earlier run, stopped at 4,000
    old = {"flat": True, "steps": 4000, "margin": 0.5, "points": valid_points(job.model)}
    (job.model / "flat.json").write_text(json.dumps(old))
    outcome = train_to_flat(CurveTrainer(), rule, job, tmp_path / "log")
    said = capsys.readouterr().out
    assert "training to update 4,800 (resumed)" in said and "flat at update 7,200" in said
    # flat three validations past the last 1% gain of the loss (BLEU was flat all along)
    assert outcome["flat"] and outcome["steps"] == outcome["trained"] == 7200
    again = train_to_flat(Runner(), rule, job, tmp_path / "log")  # reused: no training
    assert again == json.loads(json.dumps(outcome))


def test_the_rules_are_compared_on_a_finished_runs_curve(tmp_path):
    model = tmp_path / "noattn"
    model.mkdir()
    events = [{"event": "valid", "step": s, "bleu": b, "valid_loss": x} for s, b, x in weak(0.05)]
    (model / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rule = FlatRule(valid_every=400, chunk=800, min_steps=4000, max_steps=12000)
    said = compare([model], rule)
    assert said == [f"{model}: earlier rule flat at 4,000, this rule not flat by 8,000 (CHANGED)"]


def test_a_run_resumed_in_another_precision_says_from_which_update():
    from expt_report import precisions

    def start(step: int, precision: str) -> dict:
        return {"event": "start", "step": step, "precision": precision}

    same = [start(0, "bf16"), {"event": "train", "step": 100}, start(400, "bf16")]
    assert precisions(same) == "bf16"
    changed = [*same, start(2400, "fp32"), start(2800, "fp32"), start(3200, "bf16")]
    assert precisions(changed) == "bf16, then fp32 from update 2,400, then bf16 from update 3,200"


def test_the_code_of_each_stretch_of_a_run_is_named_from_its_update():
    from expt_report import code_versions

    def start(step: int, commit: str | None) -> dict:
        return {"event": "start", "step": step, **({"code": {"commit": commit}} if commit else {})}

    run = [start(0, None), start(348, None), start(2000, "3c1a4af"), start(2400, "3c1a4af")]
    assert code_versions(run) == "unrecorded, then 3c1a4af from update 2,000"
    assert code_versions([*run, start(2800, "5434eb3+dirty")]).endswith(
        "then 5434eb3+dirty from update 2,800"
    )


def test_children_get_their_threads_and_a_bounded_kernel_cache_unless_set(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    env = Runner(3).env
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "64"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024")
    assert Runner(1).env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "1024"  # the caller's own choice
