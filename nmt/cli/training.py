"""`nmt train`, `nmt average` and `nmt plot`: a model from a DATA_DIR (nmt.train.loop), its
checkpoints averaged (nmt.train.selection), its training curves drawn (nmt.plots.curves)."""

from __future__ import annotations

import sys

import typer

from nmt.cli.errors import user_errors
from nmt.cli.flags import DeviceOpt, ModelDirOpt, QuietOpt

commands = typer.Typer()


@commands.command("train")
@user_errors
def train_cmd(
    ctx: typer.Context,
    config: str = typer.Argument(None, metavar="[CONFIG.yaml]", help="YAML config (optional)."),
    data_dir: str = typer.Option(..., "--data", "-d", help="DATA_DIR from nmt preprocess."),
    model_dir: str = typer.Option(..., "--output", "-o", help="MODEL_DIR to train into."),
    preset: str = typer.Option(None, "--preset", "-p", help="Start from a shipped preset."),
    overrides: list[str] = typer.Option(
        None, "--set", help="Override a config key: section.key=value (repeatable)."
    ),
    max_steps: int = typer.Option(None, "--max-steps", help="Stop after N updates in total."),
    max_epochs: int = typer.Option(None, "--max-epochs", help="Stop after N epochs."),
    max_time: str = typer.Option(None, "--max-time", help="Wall-clock budget, e.g. 25m, 1h30m."),
    device: DeviceOpt = "auto",
    seed: int = typer.Option(None, "--seed", help="Random seed (training.seed)."),
    init_from: str = typer.Option(
        None,
        "--init-from",
        help="Fine-tune: start from this MODEL_DIR's weights (training.init_from; its config is "
        "the base without CONFIG, and --preset is laid over it). DATA_DIR must be preprocessed "
        "with --spm-from it (--tokenizer-from for an imported model).",
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue from MODEL_DIR's last state."),
    force: bool = typer.Option(False, "--force", help="Discard MODEL_DIR's checkpoints."),
    quiet: QuietOpt = False,
    nproc: int = typer.Option(
        None, "--nproc", help="Run N DDP processes on this machine (launches torchrun)."
    ),
) -> None:
    """Train a model on DATA_DIR into MODEL_DIR (config: preset < CONFIG.yaml < --set)."""
    from nmt.runtime import size_kernel_caches

    size_kernel_caches()  # before torch loads; torchrun's workers inherit it
    from nmt.train import distributed

    if distributed.needs_launch(nproc):  # every option but --nproc goes to the torchrun workers
        raise SystemExit(distributed.launch(nproc, distributed.relaunch_args(ctx, skip={"nproc"})))
    from nmt.dirs import DataDir, ModelDir
    from nmt.dirs.opening import open_initial, open_trained
    from nmt.train.loop import train
    from nmt.train.setup import run_config

    flags = {"max_steps": max_steps, "max_epochs": max_epochs, "max_time": max_time, "seed": seed}
    resumed = open_trained(model_dir) if resume else None  # each directory read once
    init = open_initial(init_from) if init_from else None
    cfg = run_config(config, preset, overrides or [], flags, resumed, init)
    out = resumed or ModelDir.at(model_dir)
    summary = train(
        cfg, DataDir.at(data_dir), out, device, init=init, resume=resume, force=force, quiet=quiet
    )
    if summary.exit_code:
        raise SystemExit(summary.exit_code)


@commands.command("average")
@user_errors
def average_cmd(
    model_dir: ModelDirOpt,
    last: int = typer.Option(0, "--last", help="Average the N newest step checkpoints."),
    best: int = typer.Option(0, "--best", help="Average the N best step checkpoints."),
    quiet: QuietOpt = False,
) -> None:
    """Average checkpoints into MODEL_DIR/checkpoints/averaged.safetensors."""
    from nmt.dirs import ModelDir
    from nmt.train.selection import average

    path, steps = average(ModelDir.at(model_dir), last=last, best=best)
    if not quiet:
        sys.stderr.write(f"averaged steps {', '.join(map(str, steps))} -> {path}\n")


@commands.command("plot")
@user_errors
def plot_cmd(
    model_dirs: list[str] = typer.Argument(..., help="MODEL_DIRs written by nmt train."),
    output: str = typer.Option(None, "--output", "-o", help="PNG file to write."),
    x: str = typer.Option("minutes", "--x", help="minutes (wall clock), steps or epochs."),
    y: str = typer.Option(
        "bleu",
        "--y",
        help="bleu (validation), loss or ppl (training solid, validation dashed), tok_s "
        "(training speed) or rss (resident memory, MB).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the plotted series as JSON."),
    quiet: QuietOpt = False,
) -> None:
    """Training curves of one or several models in one figure, from their metrics.jsonl."""
    from nmt.plots.curves import plot_runs

    series, path = plot_runs(model_dirs, x, y, output, series=as_json)
    if path is not None and not quiet and not as_json:
        print(f"wrote {path}")
    if as_json:
        import json

        print(json.dumps([s.to_json() for s in series], indent=1))
