"""Whole `nmt translate` commands timed by bench_translate.py: start-up, model load and file I/O
included, their overhead over decoding, and one sentence end to end.

Not run on its own: imported by scripts/bench_translate.py.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_translate_setup import ROOT, child_env, length_args, test_file

ONE_SENTENCE = "A man is walking.\n"


def time_cli(model: Path, args: argparse.Namespace, extra: list[str], stdin: str = "") -> float:
    """Wall time of the whole `nmt translate` command, start-up included (stdin when given)."""
    cmd = [sys.executable, "-m", "nmt", "translate", "-m", str(model), "--quiet"]
    if not stdin:
        cmd += [str(cli_input(args)), "-o", str(Path(args.work) / "cli.hyp")]
    cmd += ["--device", args.device, *length_args(args), *extra]
    cmd += ["--workers", str(args.workers)] if args.workers else []
    return wall_s(cmd, args, input=stdin, text=True, stdout=subprocess.DEVNULL)


def wall_s(cmd: list[str], args: argparse.Namespace, **run_kwargs: Any) -> float:
    """Wall time of one child process, start-up included, in the children's environment."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=child_env(args), cwd=ROOT, **run_kwargs)
    return time.perf_counter() - t0


def cli_input(args: argparse.Namespace) -> Path:
    """The --sentences lines the children decode, as a file, so command and decoding compare."""
    from nmt.textio import read_lines

    path = Path(args.work) / f"input.{args.src}"
    lines = list(read_lines(test_file(args, args.src)))[: args.sentences]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def cli_has_precision(args: argparse.Namespace) -> bool:
    """Whether `nmt translate` takes --precision (else it runs the model's own precision)."""
    cmd = [sys.executable, "-m", "nmt", "translate", "--help"]
    env = {**child_env(args), "COLUMNS": "200"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    return "--precision" in out.stdout


def import_torch_s(args: argparse.Namespace) -> float:
    """Wall time of a fresh interpreter that only imports torch: the part of any command's
    start-up that nmt cannot shorten (median of --repeats)."""
    cmd = [sys.executable, "-c", "import torch"]
    return statistics.median(wall_s(cmd, args) for _ in range(args.repeats))


def cli_times(model: Path, args: argparse.Namespace, results: dict) -> dict:
    """Whole-command seconds per precision and mode (median of --repeats), the overhead over
    decoding, the interpreter + `import torch` share of it, and one sentence end to end."""
    out: dict[str, Any] = {}
    flag = cli_has_precision(args)
    for prec in args.precisions if flag else ["fp32"]:
        for mode, opt in (("beam5", ["--beam-size", "5"]), ("greedy", ["--greedy"])):
            extra = opt + (["--precision", prec] if flag else [])
            cli = statistics.median(time_cli(model, args, extra) for _ in range(args.repeats))
            decode = results["runs"][f"nmt-{prec}-{mode}"]["median_s"]
            out[f"{prec}-{mode}"] = {"cli_s": round(cli, 2), "overhead_s": round(cli - decode, 2)}
    out["cli_one_sentence_s"] = round(time_cli(model, args, [], stdin=ONE_SENTENCE), 2)
    out["import_torch_s"] = round(import_torch_s(args), 2)
    return out
