"""`nmt train --nproc N` relaunches itself under torchrun: the workers must get every option."""

import typer.main
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.train import distributed

# A value different from its default for every option of `nmt train`, so none can be lost.
TRAIN_ARGV = [
    "my config.yaml",
    "--data", "data dir",
    "-o", "model",
    "--preset", "transformer-small",
    "--set", "model.layers=2",
    "--set", "training.lr=-0.5",
    "--max-steps", "7",
    "--max-epochs", "3",
    "--max-time", "1h30m",
    "--device", "cpu",
    "--seed", "-1",
    "--init-from", "base model",
    "--resume",
    "--force",
    "-q",
    "--nproc", "2",
]  # fmt: skip


def _parse(argv: list[str]) -> typer.Context:
    """What `nmt train ARGV` hands the command, without running it."""
    command = typer.main.get_command(app).commands["train"]
    return command.make_context("train", list(argv))


def test_every_train_option_round_trips_through_the_relaunch():
    ctx = _parse(TRAIN_ARGV)
    defaults = {p.name: p.default for p in ctx.command.params}
    unset = [name for name, value in ctx.params.items() if value in (defaults[name], None, [])]
    assert unset == [], f"add a non-default value for {unset} to TRAIN_ARGV"
    args = distributed.relaunch_args(ctx, skip={"nproc"})
    assert args[0] == "train"
    again = _parse(args[1:]).params
    assert again.pop("nproc") is None
    expected = dict(ctx.params)
    del expected["nproc"]
    assert again == expected


def test_relaunch_of_defaults_keeps_them():
    ctx = _parse(["-d", "d", "-o", "m"])
    args = distributed.relaunch_args(ctx)
    assert args == ["train", "--data", "d", "--output", "m", "--device", "auto"]
    assert _parse(args[1:]).params == ctx.params


def test_needs_launch_only_outside_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed.needs_launch(2)
    assert not distributed.needs_launch(1) and not distributed.needs_launch(None)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not distributed.needs_launch(2)


def test_train_nproc_hands_every_option_to_torchrun(monkeypatch):
    calls = []
    monkeypatch.setattr(distributed, "launch", lambda n, args: calls.append((n, args)) or 0)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    res = CliRunner().invoke(app, ["train", *TRAIN_ARGV])
    assert res.exit_code == 0, res.output
    ((nproc, args),) = calls
    assert nproc == 2 and args[0] == "train"
    expected = dict(_parse(TRAIN_ARGV).params, nproc=None)
    assert _parse(args[1:]).params == expected
