"""The joined-caption experiment: scripts/make_joined_corpus.py (the k partition, the same captions
in every test.kN, determinism), training to flat (scripts/flatrun.py), the bootstrap and oracle of
scripts/joined_report.py, and the whole script's smoke mode, rerun to check that it
reuses what is done."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import joined_experiment as je  # noqa: E402
import joined_report  # noqa: E402
import make_joined_corpus as mjc  # noqa: E402
from expt_score import bootstrap  # noqa: E402
from flatrun import FlatRule, Job, Runner, flat_at, train_to_flat, translate  # noqa: E402


def fake_multi30k(folder: Path, n_train: int = 57, n_val: int = 20, n_test: int = 13) -> None:
    """A Multi30k-shaped folder whose every caption is unique and names its split and line."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("val", n_val), ("test_2016_flickr", n_test)):
        for lang in ("en", "de"):
            lines = [f"{lang} {split} caption {i} ." for i in range(n)]
            (folder / f"{split}.{lang}").write_text("".join(x + "\n" for x in lines))


def test_random_groups_partition_every_line_once_with_k_in_range():
    for seed in range(20):
        sizes = mjc.random_groups(1000, 6, random.Random(seed))
        assert sum(sizes) == 1000
        assert all(1 <= k <= 6 for k in sizes)
    sizes = mjc.random_groups(29000, 6, random.Random(1))
    assert {k for k in sizes[:-1]} == {1, 2, 3, 4, 5, 6}  # every k drawn
    assert abs(sum(sizes) / len(sizes) - 3.5) < 0.1  # uniform 1..6: mean 3.5
    assert mjc.random_groups(10, 1, random.Random(3)) == [1] * 10


def test_fixed_groups_and_join():
    assert mjc.fixed_groups(1000, 6) == [6] * 166 + [4]
    assert mjc.fixed_groups(7, 1) == [1] * 7
    assert mjc.join(["a b", " c ", "d"], [2, 1]) == ["a b c", "d"]
    with pytest.raises(ValueError, match="add up to 2, not 3 lines"):
        mjc.join(["a", "b", "c"], [1, 1])


def test_corpus_holds_each_caption_once_in_order_and_the_same_test_captions(tmp_path):
    src = tmp_path / "m30k"
    fake_multi30k(src)
    out = tmp_path / "joined"
    assert mjc.main([str(src), "--dest", str(out), "--max-k", "6", "--seed", "1"]) == 0
    for split, orig, n in (("train", "train", 57), ("val", "val", 20)):
        for lang in ("en", "de"):
            lines = (out / f"{split}.{lang}").read_text().splitlines()
            assert len(lines) < n  # joined
            captions = [f"{lang} {orig} caption {i} ." for i in range(n)]
            assert " ".join(lines) == " ".join(captions)  # each once, in order
        en = (out / f"{split}.en").read_text().splitlines()
        de = (out / f"{split}.de").read_text().splitlines()
        assert [x.count("caption") for x in en] == [x.count("caption") for x in de]
    meta = json.loads((out / "joined.json").read_text())
    assert sum(meta["groups"]["train"]) == 57 and max(meta["groups"]["train"]) <= 6
    test = [f"en test_2016_flickr caption {i} ." for i in range(13)]
    for k in range(1, 7):
        lines = (out / f"test.k{k}.en").read_text().splitlines()
        assert len(lines) == -(-13 // k)
        assert " ".join(lines) == " ".join(test)  # the same 13 captions every time
        assert [x.count("caption") for x in lines] == mjc.fixed_groups(13, k)
        assert len((out / f"test.k{k}.de").read_text().splitlines()) == len(lines)


def test_corpus_is_deterministic_and_seeded(tmp_path):
    src = tmp_path / "m30k"
    fake_multi30k(src, n_train=200)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for out, seed in ((a, 1), (b, 1), (c, 2)):
        assert mjc.main([str(src), "--dest", str(out), "--seed", str(seed)]) == 0
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert (a / "train.en").read_bytes() != (c / "train.en").read_bytes()
    assert (a / "test.k3.en").read_bytes() == (c / "test.k3.en").read_bytes()


def test_max_k_1_is_plain_multi30k_and_limit_cuts(tmp_path):
    src = tmp_path / "m30k"
    fake_multi30k(src)
    out = tmp_path / "plain"
    assert mjc.main([str(src), "--dest", str(out), "--max-k", "1", "--limit", "30"]) == 0
    assert (out / "train.de").read_text() == "".join(f"de train caption {i} .\n" for i in range(30))
    assert len((out / "test.k1.en").read_text().splitlines()) == 13  # fewer than the limit


def test_uneven_languages_are_one_line_error(tmp_path, capsys):
    src = tmp_path / "m30k"
    fake_multi30k(src)
    (src / "val.de").write_text("one line\n")
    assert mjc.main([str(src), "--dest", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {src}/val: the languages differ in line count (en 20, de 1)"


def test_flat_rule_on_bleu_alone():
    """Runs that log no loss are judged by BLEU: within max(0.1, 2% of the best) of the best
    before 0.75 S."""
    rule = FlatRule()
    rising = [(s, s / 100, None) for s in range(200, 4001, 200)]  # +2 BLEU per 200 updates
    assert not flat_at(rising, 4000, rule)
    plateau = [(s, min(s, 2000) / 100, None) for s in range(200, 4001, 200)]
    assert flat_at(plateau, 4000, rule)  # best after 3000 = best before
    # the margin is 2% of the best: rising by 0.3 over the last quarter is flat, by 0.5 is not
    assert flat_at(plateau[:-1] + [(4000, 20.3, None)], 4000, rule)
    assert not flat_at(plateau[:-1] + [(4000, 20.5, None)], 4000, rule)
    # only the points up to the step count; a step with no point after 0.75 of it is not flat
    assert flat_at(plateau + [(4200, 30.0, None)], 4000, rule)
    assert not flat_at([(200, 1.0, None), (400, 1.0, None)], 2000, rule)


class FakeTrainer(Runner):
    """A runner whose `nmt train` writes a validation point every 200 updates up to the asked
    step on a curve rising by 1 BLEU each (never flat), instead of training."""

    def run(self, cmd, log=None):
        args = [str(c) for c in cmd]
        model = Path(args[args.index("-o") + 1])
        steps = int(next(a for a in args if a.startswith("training.max_steps=")).split("=")[1])
        done = (
            len((model / "metrics.jsonl").read_text().splitlines()) * 200
            if "--resume" in args
            else 0
        )
        with open(model / "metrics.jsonl", "a" if done else "w") as f:
            for s in range(done + 200, steps + 1, 200):
                f.write(json.dumps({"event": "valid", "step": s, "bleu": s / 200}) + "\n")
        (model / "checkpoints").mkdir(exist_ok=True)
        (model / "checkpoints" / "last.state.pt").touch()


def test_a_budget_that_is_not_a_whole_chunk_stops_the_run_exactly_there(tmp_path, capsys):
    job = Job("ref", "p", tmp_path / "data", tmp_path / "ref")
    rule = FlatRule(valid_every=200, chunk=400, min_steps=2000, max_steps=3000)
    outcome = train_to_flat(FakeTrainer(), rule, job, tmp_path / "ref.log")
    assert outcome["steps"] == 3000 and not outcome["flat"]
    assert tuple(outcome["points"][-1]) == (3000, 15.0, None)
    said = capsys.readouterr().out
    assert "training to update 2,800" in said and "training to update 3,000 (resumed)" in said
    assert "3,200" not in said and "NOT flat at update 3,000" in said


def test_test_sets_are_translated_whole_line_by_line(tmp_path):
    """A joined line holds several sentences: split (nmt translate's default) it would be
    translated caption by caption, and the experiment would measure nothing."""
    asked = []

    class Recorder(Runner):
        def run(self, cmd, log=None):
            asked.append([str(c) for c in cmd])

    translate(Recorder(), tmp_path / "m", tmp_path / "in", tmp_path / "out", 5, tmp_path / "l")
    assert asked and "--whole-lines" in asked[0] and "--split-sentences" not in asked[0]
    (tmp_path / "out").touch()  # done: not translated again
    translate(Recorder(), tmp_path / "m", tmp_path / "in", tmp_path / "out", 5, tmp_path / "l")
    assert len(asked) == 1


def test_a_plain_reference_trains_for_its_counterparts_updates(tmp_path):
    cfg = je.Settings(tmp_path, tmp_path, None, Runner())
    plain = next(s for s in je.SYSTEMS if s.name == "bahdanau-plain")
    with pytest.raises(RuntimeError, match="bahdanau-plain trains for bahdanau's updates"):
        je.rule_of(cfg, plain)
    (tmp_path / "bahdanau").mkdir()
    (tmp_path / "bahdanau" / "flat.json").write_text(json.dumps({"steps": 9600, "flat": True}))
    assert je.rule_of(cfg, plain) == FlatRule(max_steps=9600)
    assert je.rule_of(cfg, je.SYSTEMS[0]) == FlatRule()


def test_bootstrap_interval_holds_the_score_and_oracle_joins_k1(tmp_path):
    refs = [f"the cat number {i} sat on the mat" for i in range(60)]
    hyps = [r if i % 3 else r.replace("cat", "dog") for i, r in enumerate(refs)]
    cell = bootstrap(BLEU(), hyps, refs)
    assert cell["lo"] <= cell["score"] <= cell["hi"]
    assert cell["score"] == pytest.approx(BLEU().corpus_score(hyps, [refs]).score)
    assert cell["ratio"] == 1.0
    assert bootstrap(BLEU(), refs, refs)["lo"] == pytest.approx(100.0)
    # the split oracle of perfect k1 translations is perfect at every k
    for k in (2, 5):
        joined = mjc.join(refs, mjc.fixed_groups(len(refs), k))
        oracle = mjc.join(refs, mjc.fixed_groups(len(refs), k))
        assert bootstrap(BLEU(), oracle, joined)["score"] == pytest.approx(100.0)


def test_floor_scores_each_line_against_the_next_lines_references():
    refs = ["a red car waits at the lights", "two dogs run on the beach", "a man sings in a bar"]
    assert joined_report.floor(BLEU(), refs[1:] + refs[:1], refs) == pytest.approx(100.0)
    assert joined_report.floor(BLEU(), refs, refs) < 5.0  # right references, wrong pairing


def test_by_position_scores_caption_j_of_each_line_against_its_own_reference():
    refs = [f"the cat number {i} sat on the mat ." for i in range(7)]
    joined = mjc.join(refs, mjc.fixed_groups(7, 3))  # 3 lines; the last (1 caption) is not full
    bad = joined[1].replace("cat number 5", "dog")  # caption 3 of line 2 wrong
    res = joined_report.by_position(refs, [joined[0], bad, joined[2]], refs, 3)
    assert res["aligned"] == 2 and res["lines"] == 2
    assert res["whole"][:2] == [pytest.approx(100.0)] * 2 and res["whole"][2] < 100.0
    assert res["alone"] == [pytest.approx(100.0)] * 3
    merged = joined[0].replace(" . the", " , the", 1)  # two sentences run together: not aligned
    assert joined_report.by_position(refs, [merged, bad], refs, 3)["aligned"] == 1
    none = joined_report.by_position(refs, [merged, merged], refs, 3)  # no line splits into 3
    assert none["aligned"] == 0 and none["whole"] == [None] * 3


def test_figures_draw_the_k6_systems_and_the_extrapolation_once_k4_runs_exist(tmp_path):
    def result(name: str, corpus: str, drop: float) -> dict:
        cells = [
            {
                "k": k,
                "mean_words": 12.0 * k,
                "bleu": {
                    "score": 30 - drop * k,
                    "lo": 29 - drop * k,
                    "hi": 31 - drop * k,
                    "ratio": 1.0,
                },
                "oracle_bleu": {"score": 30.0 + k},
            }
            for k in range(1, 7)
        ]
        return {
            "name": name,
            "corpus": corpus,
            "run": {"curve": [(200, 1.0), (400, 2.0)]},
            "by_k": cells,
        }

    core = [result("noattn", "k6", 1.0), result("bahdanau", "k6", 0.1)]
    for r, updates, flat in zip(core, (6400, 9600), (True, True), strict=True):
        r["run"].update(updates=updates, flat=flat)
    plain = result("noattn-plain", "k1", 1.0)
    plain["run"].update(updates=6400, flat=False)
    plain["by_k"][0]["bleu"] = {"score": 25.0, "lo": 24.0, "hi": 26.0}
    rows = joined_report.reference_rows(core + [plain])
    assert rows == [["noattn", "6,400 / 6,400", "25.0 [24.0, 26.0]", "29.0 [28.0, 30.0]", "116%"]]
    assert joined_report.flat_cell(plain) == "no (stopped at the K=6 run's updates)"
    assert joined_report.flat_cell(core[0]) == "yes"
    paths = joined_report.figures(core, tmp_path)
    names = ["joined_bleu.png", "joined_relative.png", "joined_length.png", "joined_curves.png"]
    assert [p.name for p in paths] == names
    paths = joined_report.figures(core + [result("noattn-K4", "k4", 2.0)], tmp_path)
    assert paths[-1].name == "joined_extrapolation.png" and paths[-1].stat().st_size > 10_000


@pytest.mark.slow
def test_smoke_run_stops_on_sigterm_resumes_then_reuses_everything(tmp_path, multi30k_mirror):
    work = tmp_path / "work"
    cmd = [
        sys.executable,
        str(REPO / "scripts/joined_experiment.py"),
        "--smoke",
        "--work",
        str(work),
        "--docs",
        str(tmp_path / "docs"),
        "--mirror",
        str(multi30k_mirror),
    ]
    # SIGTERM while training: the children save and stop, the script exits 1 and says so.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "training to update" in line:
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err
    assert "stopped: run the same command again to resume" in err

    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("noattn", "bahdanau", "transformer"):
        outcome = json.loads((work / name / "flat.json").read_text())
        assert outcome["steps"] >= 20
        assert [s for s, *_ in outcome["points"]][:2] == [10, 20]
        for k in range(1, 7):
            hyp = (work / name / f"test.k{k}.hyp.de").read_text().splitlines()
            assert len(hyp) == -(-120 // k)  # one line out per line in
    table = (work / "joined_table.md").read_text()
    assert "| noattn |" in table and "| transformer |" in table and "Split oracle" in table
    assert "BLEU as % of the split oracle" in table and "Floor: BLEU against" in table
    assert "BLEU by caption position in test.k6" in table
    assert "test.k6 translated whole against split into sentences" in table
    for name in ("noattn", "bahdanau", "transformer"):  # the control: k6 split into sentences
        assert len((work / name / "test.k6.split.hyp.de").read_text().splitlines()) == 20
    for png in ("joined_bleu", "joined_relative", "joined_length", "joined_curves"):
        assert (tmp_path / "docs" / f"{png}.png").stat().st_size > 10_000
    results = json.loads((work / "joined_results.json").read_text())
    assert [c["lines"] for c in results[0]["by_k"]] == [120, 60, 40, 30, 24, 20]
    from nmt.dirs import ModelDir
    from nmt.dirs.loaded import load_model
    from nmt.models import count_parameters

    head = "| system | parameters | precision | updates | epochs | minutes |"
    assert head in table  # the header names every column its rows fill
    for r in results:  # the training table's parameters: the trained model's own count
        count = count_parameters(load_model(ModelDir.at(work / r["name"]))[0])
        assert r["run"]["parameters"] == count
        row = f"| {r['name']} | {count / 1e6:.1f}M | {r['run']['precision']} | {r['run']['updates']:,} |"
        assert row in table and r["run"]["precision"] in {"bf16", "fp32"}

    # A rerun trains and translates nothing; a lost outcome is recomputed from the curve.
    before = (work / "bahdanau" / "flat.json").read_text()
    (work / "bahdanau" / "flat.json").unlink()
    (work / "noattn" / "test.k6.hyp.de").unlink()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "training to update" not in r.stdout
    assert (work / "bahdanau" / "flat.json").read_text() == before
    assert len((work / "noattn" / "test.k6.hyp.de").read_text().splitlines()) == 20
