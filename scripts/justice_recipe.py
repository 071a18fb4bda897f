#!/usr/bin/env python3
"""The Canadian-law experiment's best system as a model to use (docs/recipes/justice-laws.md):
the system with the best validation BLEU, its best checkpoint against the average of its last
five (lines translated whole), the same with each line split into sentences (`--split-sentences`),
and, for a Transformer, its CTranslate2 exports (float32 and int8); each translates the whole test
set (beam 5) and is scored with BLEU and chrF, and timed on the same threads one after another.

    python scripts/justice_recipe.py WORK [--threads 2]

Reuses what WORK/recipe.json already holds (one entry per row, written as each finishes), so an
interrupted run goes on where it stopped. Writes WORK/recipe.json and WORK/recipe_table.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from expt_report import table  # noqa: E402
from flatrun import BIN, Runner, valid_points  # noqa: E402
from justice_systems import SRC, SYSTEMS, TGT  # noqa: E402

from nmt.dirs.model import ModelDir  # noqa: E402

AVERAGE_LAST = 5


def best_system(work: Path, names: Sequence[str]) -> str | None:
    """The trained system (flat.json written) with the highest validation BLEU, or None."""
    scored = [
        (max(b for _, b, _ in points), n)
        for n in names
        if (work / n / "flat.json").exists() and (points := valid_points(work / n))
    ]
    return max(scored)[1] if scored else None


def is_transformer(model: Path) -> bool:
    """Whether MODEL_DIR holds a Transformer (the architecture `nmt export` takes)."""
    config = ModelDir.at(model).saved_config()
    return config is not None and config.model.type == "transformer"


def averaged_count(model: Path) -> int:
    """How many step checkpoints the average takes: the last AVERAGE_LAST, or fewer where a short
    run kept fewer."""
    return min(AVERAGE_LAST, len(list((model / "checkpoints").glob("step-*.safetensors"))))


def rows_of(work: Path, name: str) -> list[dict[str, Any]]:
    """The rows to measure: label, the model or export directory, and translate options."""
    model = work / name
    n = averaged_count(model)
    rows = [
        {
            "row": "best checkpoint",
            "model": model,
            "opts": ["--checkpoint", "best", "--whole-lines"],
        },
        {
            "row": f"average of the last {n}",
            "model": model,
            "opts": ["--checkpoint", "averaged", "--whole-lines"],
        },
        {
            "row": f"average of the last {n}, --split-sentences",
            "model": model,
            "opts": ["--checkpoint", "averaged", "--split-sentences"],
        },
    ]
    if is_transformer(model):
        for q in ("float32", "int8"):
            export = work / f"{name}-ct2-{q}"
            rows.append({"row": f"CTranslate2 {q}", "model": export, "opts": ["--whole-lines"]})
    return rows


def build(runner: Runner, work: Path, name: str, log: Path) -> None:
    """The average of the last checkpoints and the CTranslate2 exports, unless already there."""
    model = work / name
    if not (model / "checkpoints" / "averaged.safetensors").exists():
        cmd = [BIN / "nmt", "average", "-m", model, "--last", averaged_count(model), "-q"]
        runner.run(cmd, log)
    for q in ("float32", "int8") if is_transformer(model) else ():
        out = work / f"{name}-ct2-{q}"
        if not (out / "model.bin").exists():
            cmd: list[object] = [BIN / "nmt", "export", "-m", model, "-o", out]
            runner.run(
                cmd + ["--quantization", q, "--checkpoint", "averaged", "--force", "-q"], log
            )


def measure(runner: Runner, row: dict[str, Any], data: Path, hyp: Path, beam: int, log: Path):
    """Translate test with one row's model and options; return its scores and timing."""
    src = data / f"test.{SRC}.txt"
    cmd: list[object] = [BIN / "nmt", "translate", "-m", row["model"], src, "-o", hyp]
    start = time.perf_counter()
    runner.run(cmd + ["--beam-size", beam, "--workers", 1, "--quiet", *row["opts"]], log)
    seconds = time.perf_counter() - start
    sources = src.read_text(encoding="utf-8").splitlines()
    refs = (data / f"test.{TGT}.txt").read_text(encoding="utf-8").splitlines()
    hyps = hyp.read_text(encoding="utf-8").splitlines()
    if len(hyps) != len(refs):
        raise SystemExit(f"error: {hyp}: {len(hyps)} lines for {len(refs)} test lines")
    return {
        "row": row["row"],
        "bleu": round(BLEU().corpus_score(hyps, [refs]).score, 2),
        "chrf": round(CHRF().corpus_score(hyps, [refs]).score, 2),
        "seconds": round(seconds, 1),
        "words_per_s": round(sum(len(s.split()) for s in sources) / seconds, 1),
        "threads": runner.threads,
        "lines": len(refs),
    }


def recipe(work: Path, names: Sequence[str], runner: Runner, beam: int = 5) -> dict[str, Any]:
    """Measure every row of the best system, reusing WORK/recipe.json's finished rows."""
    out = work / "recipe.json"
    name = best_system(work, names)
    if name is None:
        return {}
    done = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    if done.get("system") != name:
        done = {"system": name, "rows": []}
    log = work / "recipe.log"
    build(runner, work, name, log)
    have = {r["row"] for r in done["rows"]}
    for i, row in enumerate(rows_of(work, name)):
        if row["row"] not in have:
            hyp = work / name / f"recipe-{i}.hyp.{TGT}"
            done["rows"].append(measure(runner, row, work / "data", hyp, beam, log))
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(done, indent=1), encoding="utf-8")
            tmp.replace(out)
    return done


def markdown(result: dict[str, Any]) -> str:
    """The recipe's table: BLEU, chrF, seconds and source words a second for every row."""
    rows = [
        [
            r["row"],
            f"{r['bleu']:.1f}",
            f"{r['chrf']:.1f}",
            f"{r['seconds']:.0f}",
            f"{r['words_per_s']:.0f}",
        ]
        for r in result["rows"]
    ]
    head = ["model", "BLEU", "chrF2", "seconds", "source words/s"]
    first = result["rows"][0] if result["rows"] else {"threads": 0, "lines": 0}
    return (
        f"{result['system']} on test ({first['lines']:,} lines, beam 5, "
        f"{first['threads']} thread(s), one row after another):\n\n"
        f"{table(head, rows)}\n"
    )


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, measure, write the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("work", type=Path, help="the experiment's WORK folder")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every translation")
    p.add_argument("--beam", type=int, default=5, help="beam width")
    args = p.parse_args(argv)
    result = recipe(args.work, list(SYSTEMS), Runner(args.threads), args.beam)
    if not result:
        print(f"no trained system in {args.work}")
        return 1
    md = markdown(result)
    (args.work / "recipe_table.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
