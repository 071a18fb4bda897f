"""The small-corpus recipe: presets, end-of-training averaging and the `default` checkpoint, early
stopping on BLEU, decoding tuned on valid (nmt.eval.tuning, scripts/tune_decoding.py) and the sweep
(scripts/sweep.py), on a generated copy task."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.config import load_config
from nmt.dirs import DataDir, ModelDir
from nmt.errors import NmtError
from nmt.eval import tuning
from nmt.train.loop import train
from nmt.train.selection import average

REPO = Path(__file__).resolve().parent.parent
WORDS = "red green blue cyan black white pink gold grey teal".split()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A preprocessed copy task with valid and a `test` split (raw .txt kept for BLEU)."""
    from nmt.data.preprocess import PreprocessConfig, preprocess

    root = tmp_path_factory.mktemp("recipe")
    rng = random.Random(3)
    for split, n in (("train", 2000), ("valid", 60), ("test", 40)):
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(3, 7))) for _ in range(n)]
        for lang in ("en", "de"):
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = PreprocessConfig(
        "en", "de", root / "train", valid=root / "valid", tests=[root / "test"],
        vocab_size=40, threads=1,
    )  # fmt: skip
    preprocess(cfg, root / "data", quiet=True)
    return root / "data"


def _tiny(*overrides: str):
    base = ["training.log_every=5", "training.warmup=10", "training.max_tokens=600"]
    return load_config(preset="transformer-tiny", overrides=[*base, *overrides])


def _events(model_dir: Path, kind: str) -> list[dict]:
    rows = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["event"] == kind]


@pytest.fixture(scope="module")
def averaged_run(data, tmp_path_factory):
    """20 updates validated every 5, the newest 3 step checkpoints averaged at the end."""
    out = tmp_path_factory.mktemp("avg") / "m"
    cfg = _tiny(
        "training.max_steps=20", "training.valid_every=5", "training.keep_last=3",
        "training.average_last=3", "training.early_stop_metric=bleu", "training.lr=0.005",
    )  # fmt: skip
    summary = train(cfg, DataDir(data), ModelDir.at(out), "cpu", quiet=True, threads=1)
    return out, summary


# ---- presets and config ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["transformer-multi30k", "seq2seq-multi30k"])
def test_small_corpus_presets_regularise_average_and_stop_on_bleu(name):
    tc = load_config(preset=name).training
    assert load_config(preset=name).model.dropout >= 0.2  # the base presets have 0.1
    assert tc.label_smoothing > 0 and tc.weight_decay > 0
    assert 2 <= tc.average_last <= tc.keep_last
    assert (tc.early_stop_metric, tc.patience > 0, tc.max_time) == ("bleu", True, "25m")
    assert load_config(preset=name).training.precision == "auto"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["training.keep_last=4", "training.average_last=6"],
            "training.average_last 6 needs training.keep_last >= 6 "
            "(the step checkpoints it averages), got 4",
        ),
        (
            ["training.keep_best=3", "training.average_best=5"],
            "training.average_best 5 needs training.keep_best >= 5 "
            "(the step checkpoints it averages), got 3",
        ),
        (
            ["training.average_last=2", "training.average_best=2"],
            "training.average_last and training.average_best are two rules for one average: "
            "set one of them to 0",
        ),
    ],
)
def test_an_average_needs_its_step_checkpoints_kept_and_one_rule(overrides, message):
    with pytest.raises(NmtError) as e:
        load_config(overrides=overrides)
    assert str(e.value) == message


@pytest.mark.slow
def test_average_best_averages_the_best_on_validation_not_the_newest(data, tmp_path, monkeypatch):
    # Validation BLEU made to fall, validation after validation: the three best are the oldest.
    import dataclasses

    import nmt.train.loop

    calls: list[float] = []

    def falling(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(50.0 - len(calls))
        return dataclasses.replace(result, bleu=calls[-1])

    real = nmt.train.loop.validate
    monkeypatch.setattr(nmt.train.loop, "validate", falling)
    cfg = _tiny("training.max_steps=30", "training.valid_every=5", "training.keep_best=3",
                "training.keep_last=1", "training.average_best=3", "training.patience=0",
                "training.early_stop_metric=bleu", "training.lr=0.005")  # fmt: skip
    out = tmp_path / "m"
    s = train(cfg, DataDir(data), ModelDir.at(out), "cpu", quiet=True, threads=1)
    assert [v["step"] for v in _events(out, "valid")] == [5, 10, 15, 20, 25, 30]
    averaged = _events(out, "averaged")
    assert [(a["steps"], a["bleu"], a["chosen"]) for a in averaged] == [([5, 10, 15], 44.0, "best")]
    assert s.final_checkpoint == "best"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["training.schedule=cosine", "training.cooldown=0.2", "training.max_steps=100"],
            "training.cooldown applies to the inverse_sqrt and constant schedules; "
            "cosine already decays over the whole budget",
        ),
        (
            ["training.cooldown=0.2", "training.max_time=0"],
            "training.cooldown needs a budget to end on: training.max_steps or training.max_time",
        ),
    ],
)
def test_cooldown_needs_a_schedule_it_can_end_and_a_budget(overrides, message):
    with pytest.raises(NmtError) as e:
        load_config(overrides=overrides)
    assert str(e.value) == message


def test_a_budget_given_by_a_train_flag_satisfies_the_cooldown():
    from nmt.config import resolve_train_config

    sets = ["training.cooldown=0.2", "training.max_time=0"]
    flags = {"max_steps": 40, "max_epochs": None, "max_time": None, "seed": None}
    cfg = resolve_train_config(None, "transformer-multi30k", sets, flags)
    assert (cfg.training.cooldown, cfg.training.max_steps) == (0.2, 40)
    with pytest.raises(NmtError, match="training.cooldown needs a budget to end on"):
        resolve_train_config(None, "transformer-multi30k", sets, {})


# ---- end-of-training averaging, the default checkpoint ---------------------------------------


def test_training_ends_with_a_validated_average_and_a_default_choice(averaged_run):
    out, s = averaged_run
    (ev,) = _events(out, "averaged")
    assert ev["steps"] == [10, 15, 20] and ev["step"] == 20
    assert (out / "checkpoints" / "averaged.safetensors").exists()
    choice = json.loads((out / "checkpoints" / "default.json").read_text())
    assert choice["checkpoint"] == ev["chosen"] == s.final_checkpoint
    better = choice["averaged_score"] > choice["best_score"] == s.best_score
    assert choice["checkpoint"] == ("averaged" if better else "best")
    assert s.final_score >= s.best_score  # the chosen checkpoint is never worse than best
    assert max(v["bleu"] for v in _events(out, "valid")) <= round(s.final_score, 2) + 0.005
    (end,) = _events(out, "end")
    assert end["final_checkpoint"] == s.final_checkpoint and end["steps"] == 20
    default = ModelDir(out).checkpoint("default")
    assert default.name == f"{s.final_checkpoint}.safetensors"
    assert ModelDir(out).checkpoint("best").name == "best.safetensors"  # explicit names still work


def test_default_means_the_recorded_choice_else_best(averaged_run, tmp_path):
    import shutil

    out = tmp_path / "m"
    shutil.copytree(averaged_run[0], out)
    ModelDir.at(out).write_default({"checkpoint": "averaged"})
    assert ModelDir(out).checkpoint("default").name == "averaged.safetensors"
    average(ModelDir.at(out), last=2)  # a new, unvalidated average: the choice is forgotten
    assert not (out / "checkpoints" / "default.json").exists()
    assert ModelDir(out).checkpoint("default").name == "best.safetensors"
    ModelDir.at(out).write_default({"checkpoint": "averaged"})
    (out / "checkpoints" / "averaged.safetensors").unlink()
    assert ModelDir(out).checkpoint("default").name == "best.safetensors"


def test_averaging_is_skipped_with_fewer_than_two_step_checkpoints(data, tmp_path):
    cfg = _tiny("training.max_steps=4", "training.valid_every=0", "training.keep_last=5",
                "training.average_last=5")  # fmt: skip
    s = train(cfg, DataDir(data), ModelDir.at(tmp_path / "m"), "cpu", quiet=True, threads=1)
    assert _events(tmp_path / "m", "averaged") == [] and s.final_checkpoint == "best"
    assert not (tmp_path / "m" / "checkpoints" / "averaged.safetensors").exists()


def test_early_stopping_on_bleu_stops_a_run_that_no_longer_improves(data, tmp_path):
    # lr 1e-9: the weights (and the greedy outputs) do not change, so BLEU never improves
    cfg = _tiny("training.max_steps=200", "training.valid_every=2", "training.patience=2",
                "training.early_stop_metric=bleu", "training.lr=1e-9", "training.keep_last=2",
                "training.average_last=2")  # fmt: skip
    s = train(cfg, DataDir(data), ModelDir.at(tmp_path / "m"), "cpu", quiet=True, threads=1)
    assert (s.stopped, s.steps, s.best_step) == ("early stopping", 6, 2)
    assert [v["step"] for v in _events(tmp_path / "m", "valid")] == [2, 4, 6]
    assert _events(tmp_path / "m", "averaged")[0]["steps"] == [4, 6]


@pytest.mark.slow
def test_out_of_patience_with_a_cooldown_anneals_before_stopping(data, tmp_path, monkeypatch):
    # BLEU never changes (lr 1e-30 leaves the weights as they are): patience runs out at step 6,
    # 15% of the 40-step budget, so the rate falls linearly over the next 50% (to 65%, step 26)
    # and the run stops there.
    cfg = _tiny("training.max_steps=40", "training.valid_every=2", "training.patience=2",
                "training.lr=1e-30", "training.schedule=constant", "training.warmup=0",
                "training.cooldown=0.5", "training.keep_last=2", "training.average_last=2")  # fmt: skip
    s = train(cfg, DataDir(data), ModelDir.at(tmp_path / "m"), "cpu", quiet=True, threads=1)
    assert (s.stopped, s.steps, s.best_step) == ("early stopping", 26, 2)
    # update s runs at the share done before it, (s - 1) / 40
    lrs = {r["step"]: r["lr"] / 1e-30 for r in _events(tmp_path / "m", "train")}
    assert lrs == pytest.approx({5: 1.0, 10: 0.85, 15: 0.6, 20: 0.35, 25: 0.1})
    state = torch.load(ModelDir.at(tmp_path / "m").state_path, weights_only=True)["train_state"]
    assert state["cooldown_end"] == pytest.approx(0.65)
    # Killed in the cooldown and resumed, the run follows the same rates and stops at step 26.
    from nmt.train.loop import Trainer

    real = Trainer._after_step

    def killed_at_12(self) -> None:
        real(self)
        if self.state.step == 12:
            raise RuntimeError("killed")

    monkeypatch.setattr(Trainer, "_after_step", killed_at_12)
    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, DataDir(data), ModelDir.at(tmp_path / "cut"), "cpu", quiet=True, threads=1)
    monkeypatch.undo()
    s = train(
        cfg, DataDir(data), ModelDir.at(tmp_path / "cut"), "cpu", resume=True, quiet=True, threads=1
    )
    assert (s.stopped, s.steps) == ("early stopping", 26)
    resumed = {r["step"]: r["lr"] / 1e-30 for r in _events(tmp_path / "cut", "train")}
    assert resumed == pytest.approx(lrs)


def test_the_time_budget_keeps_room_for_validating_the_average(data, tmp_path):
    from nmt.train import distributed
    from nmt.train.loop import Trainer
    from nmt.train.schedule import Stop

    cfg = _tiny("training.max_time=100s", "training.keep_last=2", "training.average_last=2")
    out = tmp_path / "m"
    out.mkdir()
    t = Trainer(
        cfg,
        DataDir(data),
        ModelDir.at(out),
        __import__("torch").device("cpu"),
        distributed.from_env(),
        False,
        True,
    )
    t.budget.start -= 85  # 15 s left
    t.state.step = t.state.last_valid_step = 10  # just validated: only the average's validation
    t.valid_seconds = 10.0
    assert t._limits_reached() == Stop.NONE
    t.valid_seconds = 16.0
    assert t._limits_reached() == Stop.TIME
    t.tc.average_last, t.tc.average_best = 0, 2
    assert t._limits_reached() == Stop.TIME
    t.tc.average_best = 0
    assert t._limits_reached() == Stop.NONE


# ---- decoding tuned on valid -----------------------------------------------------------------


def test_grid_runs_greedy_once_and_best_prefers_the_faster_of_ties():
    assert tuning.grid([5, 1, 4], [1.0, 0.6]) == [(1, None), (4, 0.6), (4, 1.0), (5, 0.6), (5, 1.0)]
    rows = [
        tuning.TuneRow(1, None, 30.0, 300.0, "sig"),
        tuning.TuneRow(4, 1.0, 31.02, 80.0, "sig"),
        tuning.TuneRow(8, 1.2, 31.05, 40.0, "sig"),
    ]
    assert tuning.best(rows) is rows[1]  # 0.03 below the top: a tie, and faster
    rows[2].bleu = 31.2
    assert tuning.best(rows) is rows[2]
    with pytest.raises(NmtError, match="beam sizes must be >= 1, got 0"):
        tuning.grid([0], [1.0])


def test_tune_scores_each_grid_point_and_writes_the_choice(averaged_run, tmp_path):
    import shutil

    from nmt.engines.translator import Translator

    out = tmp_path / "m"
    shutil.copytree(averaged_run[0], out)
    src, ref = tuning.valid_files(out, None)  # DATA_DIR recorded in the trainer state
    assert (src.name, ref.name) == ("valid.en.txt", "valid.de.txt")
    lines = src.read_text().splitlines()[:20]
    refs = ref.read_text().splitlines()[:20]
    translator = Translator.from_dir(ModelDir(out), device="cpu")
    rows = tuning.tune(translator, lines, refs, [(1, None), (2, 0.6)])
    greedy = [t.text for t in translator.translate(lines, greedy=True)]
    from nmt.eval.scoring import score

    assert rows[0].bleu == score(greedy, [refs], ["bleu"])[0].score  # what nmt score would say
    assert [(r.beam_size, r.length_penalty) for r in rows] == [(1, None), (2, 0.6)]
    tuning.write_decoding(out, tuning.TuneRow(2, 0.6, 0.0, 1.0, ""))
    cfg = ModelDir(out).config
    assert (cfg.decoding.beam_size, cfg.decoding.length_penalty) == (2, 0.6)
    assert cfg.model == ModelDir(averaged_run[0]).config.model  # nothing else changed


@pytest.mark.slow
def test_tune_decoding_script_prints_json_and_writes_config(averaged_run, tmp_path):
    import shutil

    out = tmp_path / "m"
    shutil.copytree(averaged_run[0], out)
    proc = subprocess.run(
        [sys.executable, "scripts/tune_decoding.py", "-m", str(out), "--beams", "1,2",
         "--penalties", "1.0", "--max-sentences", "10", "--device", "cpu", "--json", "--write"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["sentences"] == 10 and len(res["rows"]) == 2
    cfg = ModelDir(out).config
    assert cfg.decoding.beam_size == res["chosen"]["beam_size"]
    bad = subprocess.run(
        [sys.executable, "scripts/tune_decoding.py", "-m", str(out), "--src", "x"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (bad.returncode, bad.stderr) == (2, "error: --src and --ref go together\n")


# ---- the sweep -------------------------------------------------------------------------------


def _sweep_module():
    spec = importlib.util.spec_from_file_location("sweep", REPO / "scripts" / "sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sweep_splits_the_threads_between_side_by_side_runs(monkeypatch):
    sweep = _sweep_module()
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert [sweep.run_threads(j) for j in (1, 2, 3, 8)] == [None, 2, 1, 1]
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    assert sweep.run_threads(2) == 3  # the CPUs this process may run on, split
    with pytest.raises(SystemExit):
        sweep.parse_args(["--data", "d", "--out", "o", "--preset", "p", "--max-time", "1m",
                          "--jobs", "0"])  # fmt: skip


def test_sweep_grid_is_the_product_of_axes_and_names_say_what_changed(tmp_path):
    sweep = _sweep_module()
    runs = sweep.parse_grid(["model.dropout=0.1,0.3", "training.lr=1e-3,5e-3"], None)
    assert runs[1] == {"model.dropout": 0.1, "training.lr": 0.005} and len(runs) == 4
    assert sweep.run_name(runs[1]) == "dropout=0.1_lr=0.005"
    assert sweep.run_name({}) == "baseline"
    # names cut at 120 characters or with characters replaced get a digest of the whole point
    axes = {f"model.k{i}_long_setting_name": 1 for i in range(8)}
    a, b = ({**axes, "training.lr": lr} for lr in (0.0005, 0.0007))
    assert len(sweep.run_name(a)) == 120 and sweep.run_name(a) != sweep.run_name(b)
    assert sweep.run_name({"x.init_from": "a b"}) != sweep.run_name({"x.init_from": "a-b"})
    twice = tmp_path / "twice.yaml"
    twice.write_text("- {model.d_model: 64}\n- {model.d_model: 64}\n")
    with pytest.raises(SystemExit, match="^grid points share a run name: d_model=64$"):
        sweep.main(["--data", "d", "--out", "o", "--preset", "p", "--max-time", "1m",
                    "--grid-file", str(twice), "--dry-run"])  # fmt: skip
    grid = tmp_path / "g.yaml"
    grid.write_text("- {model.d_model: 64}\n- {model.d_model: 128, model.ff_dim: 256}\n")
    runs = sweep.parse_grid(["training.lr=1e-3,2e-3"], str(grid))
    assert len(runs) == 4 and runs[3] == {"model.d_model": 128, "model.ff_dim": 256,
                                          "training.lr": 0.002}  # fmt: skip


@pytest.mark.slow
def test_sweep_trains_evaluates_tabulates_and_resumes(data, tmp_path, capsys):
    # the step limit ends each run (a wall-clock budget would make the test depend on the load)
    out = tmp_path / "sweep"
    cmd = [sys.executable, "scripts/sweep.py", "--data", str(data), "--out", str(out),
           "--preset", "transformer-tiny", "--max-time", "5m", "--device", "cpu",
           "--set", "training.max_steps=8", "--set", "training.valid_every=4",
           "--set", "training.max_tokens=600", "--grid", "training.lr=0.002,0.005",
           "--test", "test", "--jobs", "2", "--ensemble"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in results] == ["lr=0.002", "lr=0.005", "ensemble of 2"]
    ensemble = results.pop()
    assert ensemble["members"] == ["lr=0.002", "lr=0.005"]
    assert "case:mixed" in ensemble["test"]["test"]["signature"]
    # side by side: the two trainings overlapped in time, each on half of the 2 threads
    a, b = results
    assert a["started"] < b["trained"] and b["started"] < a["trained"]
    assert a["threads"] == b["threads"] == 1
    for r in results:
        assert (r["updates"], r["stopped"], r["epochs"]) == (8, "max_steps reached", 0)
        assert r["valid_bleu_best"] is not None and r["checkpoint"] in ("best", "averaged")
        t = r["test"]["test"]
        assert "case:mixed" in t["signature"] and "case:lc" in t["signature_lc"]
    table = (out / "results.md").read_text()
    assert (
        table.startswith("| run | updates | epochs | valid best |") and "| lr=0.005 | 8 |" in table
    )
    assert table.splitlines()[-1].startswith("| ensemble of 2 (lr=0.002, lr=0.005) | - |")
    sweep = _sweep_module()
    assert sweep.main(cmd[2:]) == 0  # resumed: nothing left to run, no subprocess started
    err = capsys.readouterr().err
    assert err.count("done before, skipped") == 3 and "ensemble: done before" in err
    with pytest.raises(SystemExit, match="made with another preset, --max-time, --set, grid point"):
        sweep.main([*cmd[2:], "--set", "model.dropout=0.0"])
    # a split added later is evaluated for the runs already done, not left empty
    assert sweep.main([*cmd[2:], "--test", "valid"]) == 0
    err = capsys.readouterr().err
    assert err.count("done before, skipped (evaluated valid)") == 2
    results = json.loads((out / "results.json").read_text())
    assert all("bleu" in r["test"]["valid"] for r in results)
