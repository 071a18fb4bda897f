#!/usr/bin/env python3
"""Two source trees of nmt side by side (a refactor against the commit before it): the same
model's translations must be byte-identical, beam and greedy, and decoding and training speed
must agree. Each round runs old then new, then new then old, in fresh processes (PYTHONPATH picks
the tree); the speeds are medians of the per-round ratios new / old.

    git worktree add /tmp/old HEAD~5
    python scripts/compare_trees.py --old /tmp/old --new . -m work/demo/model -d work/demo/data

Reads test_2016_flickr from the fetched Multi30k (benchlib.multi30k)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import machine_line, multi30k  # noqa: E402

TRAIN_STEPS = 60


def run_tree(tree: Path, args: list[str], cwd: Path) -> float:
    """`python -m nmt ARGS` with `tree` first on the path; its wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "nmt", *args]
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def translate(tree: Path, model: Path, src: Path, out: Path, greedy: bool, cwd: Path) -> float:
    """Seconds `nmt translate` of `tree` takes on `src` (whole lines, the model's beam or greedy)."""
    args = [
        "translate",
        "-m",
        str(model.resolve()),
        str(src),
        "-o",
        str(out),
        "-q",
        "--whole-lines",
    ]
    return run_tree(tree, args + (["--greedy"] if greedy else []), cwd)


def train(tree: Path, data: Path, out: Path, cwd: Path, steps: int = TRAIN_STEPS) -> float:
    """Training tokens a second of `tree` over `steps` updates (from its metrics.jsonl)."""
    sets = [f"training.max_steps={steps}", "training.valid_every=0", "training.save_every=0"]
    args = ["train", "--preset", "transformer-multi30k", "-d", str(data.resolve()), "-o", str(out)]
    args += ["--force", "--quiet", *(x for s in sets for x in ("--set", s))]
    run_tree(tree, args, cwd)
    events = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x]
    return float(next(e for e in reversed(events) if e["event"] == "end")["tok_s"])


def main(argv: list[str] | None = None) -> int:
    """Compare the trees' outputs and speeds; exit 1 when a translation differs."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--old", type=Path, required=True, help="the tree before the change")
    p.add_argument("--new", type=Path, default=ROOT, help="the tree after it")
    p.add_argument("-m", "--model", type=Path, default=ROOT / "work/demo/model")
    p.add_argument("-d", "--data", type=Path, default=ROOT / "work/demo/data")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-train", action="store_true", help="decoding only")
    p.add_argument("--no-decode", action="store_true", help="training only")
    p.add_argument("--train-steps", type=int, default=TRAIN_STEPS)
    args = p.parse_args(argv)
    src = multi30k(None) / "test_2016_flickr.en"
    trees = {"old": args.old, "new": args.new}
    print(machine_line(0))
    ratios: dict[str, list[float]] = {"beam": [], "greedy": [], "train": []}
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(args.rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            for mode in () if args.no_decode else ("beam", "greedy"):
                secs, texts = {}, {}
                for name in order:
                    out = work / f"{name}.{mode}.txt"
                    secs[name] = translate(
                        trees[name], args.model, src, out, mode == "greedy", work
                    )
                    texts[name] = out.read_bytes()
                same &= texts["old"] == texts["new"]
                ratios[mode].append(secs["new"] / secs["old"])
                print(
                    f"round {r + 1} {mode}: old {secs['old']:.2f} s, new {secs['new']:.2f} s, "
                    f"identical {texts['old'] == texts['new']}",
                    flush=True,
                )
            if args.no_train:
                continue
            tok = {
                name: train(trees[name], args.data, work / f"train-{name}", work) for name in order
            }
            ratios["train"].append(tok["new"] / tok["old"])
            print(
                f"round {r + 1} train: old {tok['old']:.0f} tok/s, new {tok['new']:.0f} tok/s",
                flush=True,
            )
    for mode, values in ratios.items():
        if values:
            what = "tokens/s" if mode == "train" else "seconds"
            print(
                f"{mode}: new / old {what}, median of {len(values)} rounds: "
                f"{statistics.median(values):.3f}"
            )
    print("translations byte-identical" if same else "TRANSLATIONS DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
