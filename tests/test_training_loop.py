"""The training loop end to end on a generated copy task: learning, exact resume, refusals,
signals, non-finite losses, DDP with two CPU processes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nmt.config import load_config
from nmt.dirs import DataDir, ModelDir
from nmt.dirs.state import SavedState, load_state
from nmt.errors import NmtError
from nmt.runtime import KERNEL_CACHE_VARIABLES
from nmt.train.finetune import check_init_outside
from nmt.train.loop import train

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike "
    "november oscar papa quebec romeo sierra tango"
).split()
REPO = Path(__file__).resolve().parent.parent


def _write_copy_corpus(root: Path, n_train: int, n_valid: int, seed: int = 0) -> None:
    """Source and target are the same random word sequences (3-8 words)."""
    rng = random.Random(seed)
    for split, n in (("train", n_train), ("valid", n_valid)):
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(3, 8))) for _ in range(n)]
        for lang in ("en", "de"):
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_copy_data(root: Path, n_train: int, n_valid: int) -> Path:
    """A preprocessed copy-task DATA_DIR under `root` (joint SentencePiece, a few dozen pieces)."""
    from nmt.data.preprocess import PreprocessConfig, preprocess

    _write_copy_corpus(root, n_train, n_valid)
    cfg = PreprocessConfig(
        "en", "de", root / "train", valid=root / "valid", vocab_size=64, threads=1
    )
    preprocess(cfg, root / "data", quiet=True)
    return root / "data"


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory) -> Path:
    """The copy task the trainer tests train on."""
    return make_copy_data(tmp_path_factory.mktemp("copy"), 3000, 100)


def _tiny(*overrides: str):
    base = [
        "training.valid_every=0",
        "training.log_every=5",
        "training.warmup=10",
        "training.max_tokens=600",
    ]
    return load_config(preset="transformer-tiny", overrides=[*base, *overrides])


def _run(data: Path, out: Path, *overrides: str, resume: bool = False):
    """A quiet one-thread CPU run of the tiny preset with `overrides`."""
    return train(
        _tiny(*overrides),
        DataDir(data),
        ModelDir.at(out),
        "cpu",
        resume=resume,
        quiet=True,
        threads=1,
    )


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "checkpoints" / "last.safetensors"))


@pytest.mark.slow
def test_resume_equals_uninterrupted_run_bitwise(copy_data, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    s_full = train(
        _tiny("training.max_steps=30"),
        DataDir(copy_data),
        ModelDir.at(full),
        "cpu",
        quiet=True,
        threads=1,
    )
    s1 = train(
        _tiny("training.max_steps=15"),
        DataDir(copy_data),
        ModelDir.at(cut),
        "cpu",
        quiet=True,
        threads=1,
    )
    assert s1.steps == 15
    s2 = train(
        _tiny("training.max_steps=30"),
        DataDir(copy_data),
        ModelDir.at(cut),
        "cpu",
        resume=True,
        quiet=True,
        threads=1,
    )
    assert s2.steps == s_full.steps == 30
    a, b = _weights(full), _weights(cut)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    st_a = load_state(full / "checkpoints" / "last.state.pt")
    st_b = load_state(cut / "checkpoints" / "last.state.pt")
    assert st_a["train_state"] == {**st_b["train_state"], "elapsed": st_a["train_state"]["elapsed"]}
    for pa, pb in zip(
        st_a["optimizer"]["state"].values(), st_b["optimizer"]["state"].values(), strict=True
    ):
        assert torch.equal(pa["exp_avg_sq"], pb["exp_avg_sq"])
    # The resumed run wrote one train event per logged step, none duplicated.
    rows = [json.loads(x) for x in (cut / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r["event"] == "train"]
    assert steps == [5, 10, 15, 20, 25, 30]


def test_an_epoch_budget_that_is_spent_stays_spent_on_resume(copy_data, tmp_path):
    # max_epochs is checked at the end of an epoch; a finished run resumed as is (a job script
    # that always passes --resume) must not train the next epoch.
    out = tmp_path / "m"
    first = _run(copy_data, out, "training.max_epochs=1")
    before = _weights(out)
    again = _run(copy_data, out, "training.max_epochs=1", resume=True)
    assert again.steps == first.steps and again.stopped == "max_epochs reached"
    after = _weights(out)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_cooldown_ends_a_step_budget_at_min_lr(copy_data, tmp_path):
    cfg = _tiny(
        "training.max_steps=20", "training.schedule=constant", "training.cooldown=0.5",
        "training.lr=0.002", "training.min_lr=0.0001",
    )  # fmt: skip
    train(cfg, DataDir(copy_data), ModelDir.at(tmp_path / "m"), "cpu", quiet=True, threads=1)
    rows = [json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    lrs = {r["step"]: r["lr"] for r in rows if r["event"] == "train"}
    # Warmup to step 10, then a straight line to min_lr at the end of the budget: update s
    # uses the share done before it, (s - 1) / 20, so the last update is one step above min_lr.
    assert lrs == pytest.approx({5: 0.001, 10: 0.002, 15: 0.00124, 20: 0.00029})


def test_model_dir_is_self_contained_and_reused_dirs_are_refused(copy_data, tmp_path):
    out = tmp_path / "m"
    train(
        _tiny("training.max_steps=2"),
        DataDir(copy_data),
        ModelDir.at(out),
        "cpu",
        quiet=True,
        threads=1,
    )
    for name in ("config.yaml", "vocab.json", "spm.model", "metrics.jsonl"):
        assert (out / name).exists(), name
    for name in ("last.safetensors", "last.state.pt", "best.safetensors"):
        assert (out / "checkpoints" / name).exists(), name
    with pytest.raises(NmtError, match="already has checkpoints; use --resume"):
        train(
            _tiny("training.max_steps=2"),
            DataDir(copy_data),
            ModelDir.at(out),
            "cpu",
            quiet=True,
            threads=1,
        )
    # --resume before any save (a preempted first run) starts from scratch.
    new = train(
        _tiny("training.max_steps=1"),
        DataDir(copy_data),
        ModelDir.at(tmp_path / "new"),
        "cpu",
        resume=True,
        quiet=True,
    )
    assert new.steps == 1
    s = train(
        _tiny("training.max_steps=1"),
        DataDir(copy_data),
        ModelDir.at(out),
        "cpu",
        force=True,
        quiet=True,
    )
    assert s.steps == 1
    # The translation side can rebuild the model from the directory alone.
    from nmt.dirs.loaded import load_model

    model, cfg, vocab, meta = load_model(ModelDir(out), "last")
    assert cfg.model.d_model == 64 and meta["src_lang"] == "en"


def test_init_from_the_output_dir_is_refused_before_its_checkpoints_are_deleted(
    copy_data, tmp_path
):
    # --force (or --resume without a state) empties MODEL_DIR/checkpoints before the initial
    # weights load: starting from MODEL_DIR itself would delete them, then fail to find them.
    out = tmp_path / "m"
    _run(copy_data, out, "training.max_steps=2")
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    link = tmp_path / "link"
    link.symlink_to(out)
    for init in (out, link, out / "checkpoints"):
        msg = (
            f"{init}: --init-from is the output directory {out} or inside its checkpoints "
            "(training would delete the checkpoints it starts from); train into a new directory"
        )
        for resume, force in ((False, True), (False, False)):
            with pytest.raises(NmtError) as e:
                train(
                    _tiny("training.max_steps=2", f"training.init_from={init}"),
                    DataDir(copy_data),
                    ModelDir.at(out),
                    "cpu",
                    resume=resume,
                    force=force,
                    quiet=True,
                    threads=1,
                )
            assert str(e.value) == msg
    best = out / "checkpoints" / "best.safetensors"
    cfg = _tiny(
        "training.max_steps=2", f"training.init_from={tmp_path / 'base'}",
        f"training.init_checkpoint={best}",
    )  # fmt: skip
    with pytest.raises(NmtError) as e:
        train(cfg, DataDir(copy_data), ModelDir.at(out), "cpu", force=True, quiet=True, threads=1)
    assert str(e.value) == (
        f"{best}: training.init_checkpoint is inside the output directory {out}'s checkpoints "
        "(training would delete it before it loads); train into a new directory"
    )
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == kept
    # a model directory merely under the output directory is not deleted by training: allowed
    check_init_outside(_tiny(f"training.init_from={out}").training, ModelDir.at(tmp_path))


def test_resume_refuses_a_model_of_other_heads_and_keeps_config_yaml(copy_data, tmp_path):
    # model.heads=8 keeps every tensor's shape: the state would load and be trained as 8 heads.
    out = tmp_path / "m"
    _run(copy_data, out, "training.max_steps=2")
    saved = (out / "config.yaml").read_text(encoding="utf-8")
    with pytest.raises(NmtError) as e:
        _run(copy_data, out, "training.max_steps=4", "model.heads=8", resume=True)
    assert str(e.value).startswith(
        f"{out / 'config.yaml'}: the saved model does not match this config's model section "
        "(model.heads 4 -> 8); "
    )
    assert (out / "config.yaml").read_text(encoding="utf-8") == saved
    assert _run(copy_data, out, "training.max_steps=4", "model.dropout=0.3", resume=True).steps == 4


def test_second_process_is_refused_by_the_lock(copy_data, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    code = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"
    )
    sleeper = subprocess.Popen(
        [sys.executable, "-c", code, str(out / ".lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == "held\n"
        (out / ".lock").write_text(f"{os.uname().nodename} {sleeper.pid}\n")
        with pytest.raises(NmtError, match="another process is training into this directory"):
            train(
                _tiny("training.max_steps=1"),
                DataDir(copy_data),
                ModelDir.at(out),
                "cpu",
                quiet=True,
                threads=1,
            )
    finally:
        sleeper.kill()
        sleeper.wait()
    # The kernel released the dead holder's lock.
    s = train(
        _tiny("training.max_steps=1"),
        DataDir(copy_data),
        ModelDir.at(out),
        "cpu",
        quiet=True,
        threads=1,
    )
    assert s.steps == 1 and not (out / ".lock").exists()


def test_nonfinite_losses_skip_updates_then_abort(copy_data, tmp_path, monkeypatch):
    import nmt.train.loss as loss_mod

    real = loss_mod.linear_smoothed_nll
    calls = {"n": 0}

    def flaky(hidden, weight, target, eps, pad_id=0):
        loss, nll, n = real(hidden, weight, target, eps, pad_id)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] in (2, 3) else loss), nll, n

    monkeypatch.setattr(loss_mod, "linear_smoothed_nll", flaky)
    out = tmp_path / "a"
    s = train(
        _tiny("training.max_steps=4"),
        DataDir(copy_data),
        ModelDir.at(out),
        "cpu",
        quiet=True,
        threads=1,
    )
    assert s.steps == 4
    after = _weights(out)
    assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())
    # Steps 2 and 3 were skipped: Adam took 2 updates, not 4.
    adam = load_state(out / "checkpoints" / "last.state.pt")["optimizer"]["state"]
    assert {float(v["step"]) for v in adam.values()} == {2.0}

    monkeypatch.setattr(
        loss_mod, "linear_smoothed_nll", lambda h, w, t, e, p=0: (h.sum() * float("inf"), 0, 1)
    )
    with pytest.raises(NmtError, match="training diverged: 10 non-finite losses in a row"):
        train(
            _tiny("training.max_steps=50"),
            DataDir(copy_data),
            ModelDir.at(tmp_path / "b"),
            "cpu",
            quiet=True,
        )


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "nmt", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_sigint_saves_last_and_resume_continues(copy_data, tmp_path):
    out = tmp_path / "m"
    args = ["train", "--preset", "transformer-tiny", "--data", str(copy_data), "-o", str(out)]
    args += ["--set", "training.log_every=1", "--set", "training.max_tokens=600", "--device", "cpu"]
    proc = _cli(*args, "--max-steps", "100000")
    deadline = time.monotonic() + 60
    metrics = out / "metrics.jsonl"
    while time.monotonic() < deadline:
        if metrics.exists() and '"event": "train"' in metrics.read_text():
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    st = load_state(out / "checkpoints" / "last.state.pt")
    step = st["train_state"]["step"]
    assert 1 <= step < 100000
    assert not (out / ".lock").exists()
    proc = _cli(*args, "--max-steps", str(step + 2), "--resume", "--quiet")
    out_text, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert err == "" and out_text == ""
    assert load_state(out / "checkpoints" / "last.state.pt")["train_state"]["step"] == step + 2


@pytest.mark.slow
def test_ddp_two_cpu_processes_write_one_model_dir(copy_data, tmp_path):
    out = tmp_path / "m"
    proc = _cli(
        "train", "--preset", "transformer-tiny", "--data", str(copy_data), "-o", str(out),
        "--set", "training.max_tokens=600", "--set", "training.log_every=2",
        "--max-steps", "4", "--device", "cpu", "--nproc", "2",
    )  # fmt: skip
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["event"] == "train"] == [2, 4]  # rank 0 only
    assert len([r for r in rows if r["event"] == "valid"]) == 1
    st = load_state(out / "checkpoints" / "last.state.pt")
    assert st["world_size"] == 2 and st["train_state"]["step"] == 4
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoints", "config.yaml", "metrics.jsonl", "spm.model", "vocab.json"
    ]  # fmt: skip


@pytest.mark.slow
def test_ddp_processes_share_the_cooldown_that_rank_0_starts(copy_data, tmp_path):
    # Only rank 0 validates, so only it runs out of patience (step 6 of 40, lr 1e-30: BLEU never
    # changes); the cooldown it starts must reach rank 1 too, and both stop at step 26.
    out = tmp_path / "m"
    proc = _cli(
        "train", "--preset", "transformer-tiny", "--data", str(copy_data), "-o", str(out),
        "--set", "training.max_tokens=600", "--set", "training.valid_every=2",
        "--set", "training.patience=2", "--set", "training.lr=1e-30",
        "--set", "training.schedule=constant", "--set", "training.warmup=0",
        "--set", "training.cooldown=0.5", "--max-steps", "40", "--device", "cpu", "--nproc", "2",
    )  # fmt: skip
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    st = load_state(out / "checkpoints" / "last.state.pt")
    assert st["train_state"]["step"] == 26 and st["train_state"]["cooldown_end"] == 0.65


@pytest.mark.slow
def test_ddp_resume_equals_an_uninterrupted_run_bitwise(copy_data, tmp_path):
    # Rank 1's dropout stream is saved with rank 0's state and restored on resume.
    def ddp(out: Path, steps: int, *extra: str) -> None:
        proc = _cli(
            "train", "--preset", "transformer-tiny", "--data", str(copy_data), "-o", str(out),
            "--set", "training.max_tokens=600", "--set", "training.valid_every=0",
            "--max-steps", str(steps), "--device", "cpu", "--nproc", "2", *extra,
        )  # fmt: skip
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err

    full, cut = tmp_path / "full", tmp_path / "cut"
    ddp(full, 8)
    ddp(cut, 4)
    assert len(load_state(cut / "checkpoints" / "last.state.pt")["ranks_rng"]) == 2
    ddp(cut, 8, "--resume")
    a, b = _weights(full), _weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_ddp_processes_skip_an_update_together(copy_data, tmp_path):
    # Rank 1 alone sees a non-finite loss at step 2 (a constant NaN: its gradients stay finite,
    # so nothing else flags the step). Both replicas must skip it, or they drift apart (and
    # fp16's loss scalers with them): Adam takes 3 updates of 4 on rank 0 too.
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import os\n"
        "import nmt.train.loss as loss_mod\n"
        "from nmt.cli.app import run\n"
        "real, calls = loss_mod.linear_smoothed_nll, [0]\n"
        "def flaky(hidden, weight, target, eps, pad_id=0):\n"
        "    loss, nll, n = real(hidden, weight, target, eps, pad_id)\n"
        "    calls[0] += 1\n"
        "    if os.environ['RANK'] == '1' and calls[0] == 2:\n"
        "        loss = loss + float('nan')\n"
        "    return loss, nll, n\n"
        "loss_mod.linear_smoothed_nll = flaky\n"
        "run()\n",
        encoding="utf-8",
    )
    out = tmp_path / "m"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(driver), "train", "--preset", "transformer-tiny", "--data", str(copy_data),
         "-o", str(out), "--set", "training.max_tokens=600", "--set", "training.valid_every=0",
         "--max-steps", "4", "--device", "cpu"],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "step 2: gradients are non-finite (on this or another process); update skipped" in (
        proc.stderr
    )
    adam = load_state(out / "checkpoints" / "last.state.pt")["optimizer"]["state"]
    assert {float(v["step"]) for v in adam.values()} == {3.0}


@pytest.mark.slow
def test_tiny_transformer_learns_to_copy(copy_data, tmp_path):
    cfg = load_config(
        preset="transformer-tiny",
        overrides=[
            "training.max_steps=400",
            "training.valid_every=100",
            "training.max_tokens=1500",
            "training.lr=0.005",
            "training.warmup=50",
            "training.early_stop_metric=bleu",
            "model.dropout=0.0",
        ],
    )
    s = train(cfg, DataDir(copy_data), ModelDir.at(tmp_path / "m"), "cpu", quiet=True, threads=1)
    assert s.best_score > 90, s


# ---- saves between validations; what --resume must agree on -----------------------------------


def _stop_after(monkeypatch, step: int) -> None:
    """Make the run die right after `step` (as a kill would, nothing saved at the end)."""
    from nmt.train.loop import Trainer

    real = Trainer._after_step

    def after(self) -> None:
        real(self)
        if self.state.step == step:
            raise RuntimeError("killed")

    monkeypatch.setattr(Trainer, "_after_step", after)


@pytest.mark.parametrize(
    ("overrides", "saved_step"),
    [
        (("training.save_every=5", "training.save_every_time=0"), 5),
        (("training.save_every=0", "training.save_every_time=0.001s"), 7),
    ],
)
def test_save_every_saves_state_without_validation(
    copy_data, tmp_path, monkeypatch, overrides, saved_step
):
    _stop_after(monkeypatch, 7)
    out = tmp_path / "m"
    with pytest.raises(RuntimeError, match="killed"):
        train(
            _tiny("training.max_steps=20", *overrides),
            DataDir(copy_data),
            ModelDir.at(out),
            "cpu",
            quiet=True,
        )
    st = load_state(out / "checkpoints" / "last.state.pt")
    assert st["train_state"]["step"] == saved_step
    assert (out / "checkpoints" / "last.safetensors").exists()


def test_resume_refuses_other_batching_and_retunes_the_optimizer(copy_data, tmp_path, capsys):
    import shutil

    out = tmp_path / "m"
    train(
        _tiny("training.max_steps=3"),
        DataDir(copy_data),
        ModelDir.at(out),
        "cpu",
        quiet=True,
        threads=1,
    )
    moved = tmp_path / "data2"
    shutil.copytree(copy_data, moved)
    changed = _tiny("training.max_steps=5", "training.max_tokens=500", "training.seed=2")
    with pytest.raises(NmtError) as e:
        train(changed, DataDir(moved), ModelDir.at(out), "cpu", resume=True, quiet=True, threads=1)
    assert str(e.value) == (
        "--resume: training.max_tokens changed (600 -> 500), training.seed changed (1 -> 2), "
        f"data directory changed ({copy_data.resolve()} -> {moved.resolve()}); the saved data "
        "position would point at different batches "
        "(set training.reset_data_position=true to start the epoch over)"
    )
    assert load_state(out / "checkpoints" / "last.state.pt")["train_state"]["position"] == 3
    capsys.readouterr()
    opt_in = _tiny(
        "training.max_steps=5", "training.max_tokens=500", "training.reset_data_position=true",
        "training.lr=0.001", "training.betas=[0.8, 0.9]",
    )  # fmt: skip
    train(opt_in, DataDir(copy_data), ModelDir.at(out), "cpu", resume=True, threads=1)
    err = capsys.readouterr().err
    assert "training.max_tokens changed (600 -> 500): epoch 1 starts over" in err
    assert "optimizer settings changed: training.lr 0.002 -> 0.001, training.betas " in err
    st = load_state(out / "checkpoints" / "last.state.pt")
    assert (st["train_state"]["step"], st["train_state"]["position"]) == (5, 2)
    assert st["settings"]["max_tokens"] == 500
    assert all(tuple(g["betas"]) == (0.8, 0.9) for g in st["optimizer"]["param_groups"])


def test_resume_refuses_another_early_stop_metric(copy_data, tmp_path):
    out = tmp_path / "m"
    _run(copy_data, out, "training.max_steps=3", "training.early_stop_metric=bleu")
    with pytest.raises(NmtError) as e:
        _run(copy_data, out, "training.max_steps=5", "training.early_stop_metric=loss", resume=True)
    assert str(e.value) == (
        "--resume: training.early_stop_metric changed (bleu -> loss); the best checkpoint and "
        "patience were judged by bleu: resume with bleu, or train into a new directory"
    )
    again = _run(
        copy_data, out, "training.max_steps=5", "training.early_stop_metric=bleu", resume=True
    )
    assert again.steps == 5


def test_resume_keeps_the_room_max_time_leaves_for_validation(copy_data, tmp_path):
    # max_time stops early enough for the final validation and the average's: a resumed run
    # knows how long a validation takes before its first one, or it would overrun the budget.
    from nmt.train import distributed
    from nmt.train.loop import Trainer

    out = tmp_path / "m"
    _run(copy_data, out, "training.max_steps=10", "training.valid_every=5")
    saved = load_state(out / "checkpoints" / "last.state.pt")["valid_seconds"]
    assert saved > 0
    cfg = _tiny("training.max_steps=20", "training.valid_every=5")
    trainer = Trainer(
        cfg,
        DataDir(copy_data),
        ModelDir.at(out),
        torch.device("cpu"),
        distributed.from_env(),
        True,
        True,
    )
    assert trainer.valid_seconds == saved


def test_resume_position_changes_table():
    from nmt.train.state import check_position, position_changes

    def saved(settings: dict | None = None, world_size: int = 1) -> SavedState:
        raw = dict(model={}, optimizer={}, train_state={}, rng={}, world_size=world_size)
        return SavedState.from_saved({**raw, "settings": settings}, "last.state.pt")

    now = {"max_tokens": 600, "accumulate": 2, "seed": 1, "data_dir": "/d"}
    old = saved({**now, "accumulate": 1}, 2)
    changes = position_changes(old, now, 1)
    assert changes == ["training.accumulate changed (1 -> 2)", "world size changed (2 -> 1)"]
    assert position_changes(saved(), now, 1) == []  # an older state: nothing to compare
    # A state saved before subword sampling existed has no subword_alpha: not compared.
    sampled = {**now, "subword_alpha": 0.3}
    assert position_changes(saved(now), sampled, 1) == []
    assert position_changes(saved({**now, "subword_alpha": 0.0}), sampled, 1) == [
        "training.subword_alpha changed (0.0 -> 0.3)"
    ]
    assert check_position(changes, 0, False) is False  # an epoch boundary means the same batches
    assert check_position(changes, 4, True) is True
    with pytest.raises(NmtError, match="world size changed"):
        check_position(changes, 4, False)


@pytest.mark.parametrize(
    ("precision", "valid"), [("auto", "fp32"), ("bf16", "bf16"), ("fp32", "fp32")]
)
def test_validation_decodes_in_the_precision_translate_would_use(
    copy_data, tmp_path, monkeypatch, precision, valid
):
    """A narrow model trained in bf16 under `auto` validates in fp32 (below d_model 256 on a CPU;
    `nmt translate` decodes this one in fp32 too); an explicit precision is kept for both."""
    import nmt.train.loop

    monkeypatch.setenv("NMT_CPU_BF16", "1")  # a native-bf16 CPU, whatever this one is
    real, seen = nmt.train.loop.validate, []

    def spy(model, data, device, autocast, *args, **kw):
        with autocast():
            seen.append(torch.is_autocast_enabled("cpu"))
        return real(model, data, device, autocast, *args, **kw)

    monkeypatch.setattr(nmt.train.loop, "validate", spy)
    cfg = _tiny(
        "training.max_steps=4", "training.valid_every=2", "training.log_every=2",
        f"training.precision={precision}",
    )  # fmt: skip
    train(cfg, DataDir(copy_data), ModelDir.at(tmp_path / "m"), "cpu", quiet=True, threads=1)
    rows = [json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    start = next(r for r in rows if r["event"] == "start")
    trained = "fp32" if precision == "fp32" else "bf16"
    assert (start["precision"], start["valid_precision"]) == (trained, valid)
    # The kernel cache sizes in force are in the run's record (set by train() unless the user did)
    assert start["kernel_caches"] == {k: os.environ[k] for k in KERNEL_CACHE_VARIABLES}
    assert start["code"]["nmt"] == nmt.__version__ and start["code"]["torch"] == torch.__version__
    assert seen == [valid == "bf16"] * 2  # two validations, each under the validation's autocast
    # Memory is logged with every train event, and the peak at the end
    rss = [r["rss_mb"] for r in rows if r["event"] == "train"]
    end = next(r for r in rows if r["event"] == "end")
    # The kernel's RSS counters are synced per thread in batches, so two reads may differ by a few MB
    assert rss and min(rss) > 0 and end["peak_rss_mb"] >= max(rss) - 8


@pytest.mark.slow
def test_subword_sampling_trains_new_segmentations_and_resumes_bitwise(copy_data, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    sampled = ("training.subword_alpha=0.2",)
    _run(copy_data, full, "training.max_steps=55", *sampled)
    _run(copy_data, cut, "training.max_steps=48", *sampled)
    st = load_state(cut / "checkpoints" / "last.state.pt")["train_state"]
    assert st["epoch"] == 2 and st["position"] > 0  # inside the second sampled epoch
    _run(copy_data, cut, "training.max_steps=55", *sampled, resume=True)
    a, b = _weights(full), _weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # The sampled epochs had other batches than the canonical segmentation's.
    _run(copy_data, tmp_path / "plain", "training.max_steps=55")
    c = _weights(tmp_path / "plain")
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.slow
def test_weight_average_is_what_checkpoints_hold_and_resumes_bitwise(copy_data, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    ema = ("training.ema_decay=0.9", "training.valid_every=10")
    _run(copy_data, full, "training.max_steps=30", *ema)
    _run(copy_data, cut, "training.max_steps=15", *ema)
    _run(copy_data, cut, "training.max_steps=30", *ema, resume=True)
    a, b = _weights(full), _weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # last.safetensors and the step checkpoints hold the average; the trainer state keeps the
    # raw weights (what training resumes from) and the average beside them.
    state = load_state(full / "checkpoints" / "last.state.pt")
    avg, raw = state["weight_average"], state["model"]
    assert all(torch.equal(a[k], avg[k]) for k in a)
    assert not any(torch.equal(avg[k], raw[k]) for k in a if k.endswith("weight"))
    step = load_file(str(full / "checkpoints" / "step-30.safetensors"))
    assert all(torch.equal(a[k], step[k]) for k in a)
    # The same run without the average: its raw weights equal the averaged run's raw weights.
    plain = tmp_path / "plain"
    _run(copy_data, plain, "training.max_steps=30", "training.valid_every=10")
    c = load_state(plain / "checkpoints" / "last.state.pt")["model"]
    assert all(torch.equal(c[k], raw[k]) for k in c)


def test_resume_turns_on_the_weight_average_from_the_restored_weights(copy_data, tmp_path):
    run = tmp_path / "m"
    _run(copy_data, run, "training.max_steps=10")
    assert "weight_average" not in load_state(run / "checkpoints" / "last.state.pt")
    _run(copy_data, run, "training.max_steps=20", "training.ema_decay=0.9", resume=True)
    state = load_state(run / "checkpoints" / "last.state.pt")
    avg, last = state["weight_average"], _weights(run)
    assert state["train_state"]["step"] == 20
    assert all(torch.equal(last[k], avg[k]) for k in last)
    assert not all(torch.equal(avg[k], state["model"][k]) for k in last)


def test_training_opens_its_data_folder_once(copy_data, tmp_path, monkeypatch):
    """One manifest parse and one SentencePiece load (a joint vocabulary) per training process,
    with validation and subword sampling, which all read the folder."""
    from nmt.data.vocab import Tokenizer
    from nmt.dirs import data as dataset

    parses, loads = [], []
    parse, load = dataset._parse_manifest, Tokenizer.load.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(dataset, "_parse_manifest", lambda d: parses.append(d) or parse(d))
    monkeypatch.setattr(
        Tokenizer, "load", classmethod(lambda c, *a, **k: loads.append(a) or load(c, *a, **k))
    )
    _run(copy_data, tmp_path / "m", "training.max_steps=4", "training.valid_every=2",
         "training.subword_alpha=0.1")  # fmt: skip
    assert parses == [copy_data]
    assert [Path(a[0]).name for a in loads] == ["spm.model"]


def test_a_state_in_the_format_before_versioning_still_resumes_bitwise(copy_data, tmp_path):
    """States written before they carried `format` (format 1: the same fields) resume as today's;
    a state from a newer nmt, or another file, is one line naming it."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    _run(copy_data, full, "training.max_steps=12")
    _run(copy_data, cut, "training.max_steps=6")
    path = cut / "checkpoints" / "last.state.pt"
    raw = load_state(path)
    assert raw["format"] == 2
    del raw["format"]  # how every state was written before the format was recorded
    torch.save(raw, path)
    assert _run(copy_data, cut, "training.max_steps=12", resume=True).steps == 12
    a, b = _weights(full), _weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.save({**raw, "format": 3}, path)
    with pytest.raises(NmtError) as e:
        _run(copy_data, cut, "training.max_steps=14", resume=True)
    assert str(e.value) == (
        f"{path}: trainer state format 3; this nmt reads formats 1 to 2 (a newer nmt wrote it)"
    )
    torch.save({"model": {}}, path)
    with pytest.raises(NmtError, match=r"not a trainer state \(no 'optimizer'\)$"):
        _run(copy_data, cut, "training.max_steps=14", resume=True)


def test_nmt_train_reads_each_model_directory_once(copy_data, tmp_path, monkeypatch):
    """`nmt train --resume` reads the MODEL_DIR's config.yaml and vocab.json once, and
    `--init-from` the initial model's once (the CLI's config and the checks share them)."""
    from typer.testing import CliRunner

    import nmt.config.load as load
    import nmt.dirs.model as modeldir
    from nmt.cli.app import app

    base = tmp_path / "base"
    _run(copy_data, base, "training.max_steps=2")
    reads: list[str] = []
    for module, name in ((modeldir, "read_saved_config"), (load, "read_saved_config"),
                         (modeldir, "read_json_object")):  # fmt: skip
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda p, real=real: reads.append(str(p)) or real(p))
    common = ["-d", str(copy_data), "--device", "cpu", "--quiet", "--set", "training.valid_every=0"]
    res = CliRunner().invoke(
        app, ["train", "-o", str(base), "--resume", "--max-steps", "4", *common]
    )
    assert res.exit_code == 0, res.output
    assert sorted(reads) == sorted(str(base / f) for f in ("config.yaml", "vocab.json"))
    reads.clear()
    tuned = tmp_path / "tuned"
    res = CliRunner().invoke(app, ["train", "-o", str(tuned), "--init-from", str(base),
                                   "--max-steps", "2", *common])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert sorted(reads) == sorted(str(base / f) for f in ("config.yaml", "vocab.json"))
