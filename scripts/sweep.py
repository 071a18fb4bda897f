"""A reproducible hyper-parameter search: a grid of `--set` overrides, each trained under the same
time budget through the `nmt` command line (in sequence, or `--jobs N` side by side with the CPU
threads split between them), then evaluated; writes a table.

    .venv/bin/python scripts/sweep.py --data data/multi30k --out sweeps/multi30k \
        --preset transformer-multi30k --max-time 25m \
        --grid model.dropout=0.2,0.3 --grid training.lr=0.003,0.005 \
        --test test_2016_flickr --test test_2017_flickr

The grid is the Cartesian product of the --grid options (and of a --grid-file: YAML/JSON mapping
of key -> list of values, or a list of {key: value} runs). --set adds overrides to every run.
Each run trains into OUT/runs/NAME/model; its result lands in OUT/runs/NAME/result.json, and a
run with a result is skipped when the sweep is started again (resumable). Test splits are
DATA_DIR/<split>.<lang>.txt, translated with the run's default checkpoint (averaged when it won on
valid) and decoding config, scored cased and lowercased (sacreBLEU 13a). OUT/results.md (a table
in Markdown) and OUT/results.json hold every finished run.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nmt.textio import atomic_write  # noqa: E402

NMT = [sys.executable, "-m", "nmt"]
ROOT = Path(__file__).resolve().parent.parent


def parse_grid(specs: list[str], grid_file: str | None) -> list[dict[str, Any]]:
    """The runs: one {key: value} dict each, in a stable order."""
    axes: dict[str, list[Any]] = {}
    explicit: list[dict[str, Any]] = []
    if grid_file:
        data = yaml.safe_load(Path(grid_file).read_text(encoding="utf-8"))
        if isinstance(data, dict):
            axes.update({k: v if isinstance(v, list) else [v] for k, v in data.items()})
        elif isinstance(data, list) and all(isinstance(r, dict) for r in data):
            explicit = data
        else:
            raise SystemExit(f"{grid_file}: expected a mapping key -> [values] or a list of runs")
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--grid {spec!r}: expected section.key=v1,v2,...")
        axes[key.strip()] = [scalar(v) for v in values.split(",")]
    product = [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]
    if explicit:
        return [{**e, **p} for e in explicit for p in product]
    return product


def scalar(text: str) -> Any:
    """A value as YAML reads it, except that 5e-3 is a number (YAML 1.1 reads a string)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def run_name(overrides: dict[str, Any]) -> str:
    """A directory name that says what the run changed ('baseline' when nothing)."""
    if not overrides:
        return "baseline"
    text = "_".join(f"{k.split('.')[-1]}={_value(v)}" for k, v in overrides.items())
    name = re.sub(r"[^A-Za-z0-9._=+-]", "-", text)
    if name == text and len(name) <= 120:
        return name
    # Cut or changed characters could make two grid points one name: a digest keeps them apart.
    digest = hashlib.sha256(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:10]
    return f"{name[:109]}-{digest}"


def _value(v: Any) -> str:
    """An override value as YAML would read it back."""
    return json.dumps(v) if isinstance(v, (list, dict, bool)) or v is None else str(v)


def sh(cmd: list[str], log: Path, threads: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run one `nmt` command (on `threads` CPU threads when given), appending its output to the
    run's log."""
    env = os.environ.copy()
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n{proc.stderr}{proc.stdout}\n")
    return proc


def events(model_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl of a run (torn lines skipped); none before the run wrote one."""
    from nmt.plots.curves import read_events

    return read_events(model_dir) if (model_dir / "metrics.jsonl").exists() else []


def training_facts(model_dir: Path) -> dict[str, Any]:
    """Updates, epochs, stop reason and validation BLEU (best, last, averaged, the chosen one)."""
    rows = events(model_dir)
    valid = [r for r in rows if r.get("event") == "valid"]
    end = next((r for r in reversed(rows) if r.get("event") == "end"), {})
    averaged = next((r for r in reversed(rows) if r.get("event") == "averaged"), None)
    bleus = [r["bleu"] for r in valid]
    best = max(bleus) if bleus else None
    chosen = end.get("final_checkpoint", "best")
    # `best` is the early-stopping metric's best step (with loss, not the highest BLEU seen)
    at_best = next((r["bleu"] for r in valid if r.get("step") == end.get("best_step")), best)
    final = averaged["bleu"] if averaged and chosen == "averaged" else at_best
    return {
        "updates": end.get("steps"),
        "epochs": end.get("epochs_completed"),
        "seconds": end.get("seconds"),
        "stopped": end.get("stopped"),
        "valid_bleu_best": best,
        "valid_bleu_best_step": end.get("best_step"),
        "valid_bleu_last": bleus[-1] if bleus else None,
        "valid_bleu_averaged": averaged["bleu"] if averaged else None,
        "valid_bleu_final": final,
        "checkpoint": chosen,
    }


def test_bleu(
    model_dir: Path | list[Path],
    data_dir: Path,
    split: str,
    langs: tuple[str, str],
    log: Path,
    threads: int | None = None,
) -> dict:
    """Cased and lowercased BLEU (with signatures) of the default checkpoint on one test split
    (several model directories: their ensemble)."""
    src, ref = (data_dir / f"{split}.{lang}.txt" for lang in langs)
    dirs = model_dir if isinstance(model_dir, list) else [model_dir]
    models = [x for d in dirs for x in ("-m", str(d))]
    with tempfile.TemporaryDirectory() as tmp:
        hyp = Path(tmp) / "hyp.txt"
        cmd = [*NMT, "evaluate", *models, "--src", str(src), "--ref", str(ref)]
        cased = sh([*cmd, "-o", str(hyp), "--json", "--width", "2", "--quiet"], log, threads)
        if cased.returncode:
            return {"error": cased.stderr.strip().splitlines()[-1:]}
        lower = sh(
            [*NMT, "score", str(hyp), "-r", str(ref), "--lowercase", "--json", "-w", "2"], log
        )
        if lower.returncode:
            return {"error": lower.stderr.strip().splitlines()[-1:]}
    c, lc = json.loads(cased.stdout)[0], json.loads(lower.stdout)[0]
    return {
        "bleu": c["score"],
        "signature": c["signature"],
        "bleu_lc": lc["score"],
        "signature_lc": lc["signature"],
    }


def one_run(args: argparse.Namespace, overrides: dict[str, Any], langs: tuple[str, str]) -> dict:
    """Train (fresh) under the budget, then evaluate; the result dict (also saved)."""
    name = run_name(overrides)
    run_dir = Path(args.out) / "runs" / name
    result_path = run_dir / "result.json"
    same = {
        "preset": args.preset,
        "max_time": args.max_time,
        "common": args.common,
        "overrides": overrides,
        "data": str(Path(args.data).resolve()),
    }
    if result_path.exists():
        done = json.loads(result_path.read_text(encoding="utf-8"))
        if any(k in done and done[k] != v for k, v in same.items()):  # older files lack "data"
            raise SystemExit(
                f"{result_path}: made with another preset, --max-time, --set, "
                "grid point or --data; use another --out"
            )
        todo = [t for t in args.test if "bleu" not in done.get("test", {}).get(t, {})]
        if todo:  # a split added since, or one whose evaluation failed: evaluate it now
            data, model_dir, log = Path(args.data), run_dir / "model", run_dir / "log.txt"
            for t in todo:
                done.setdefault("test", {})[t] = test_bleu(
                    model_dir, data, t, langs, log, args.threads
                )
            with atomic_write(result_path) as f:
                json.dump(done, f, indent=1)
        evaluated = f" (evaluated {', '.join(todo)})" if todo else ""
        print(f"{name}: done before, skipped{evaluated}", file=sys.stderr)
        return done
    run_dir.mkdir(parents=True, exist_ok=True)
    model_dir, log = run_dir / "model", run_dir / "log.txt"
    sets = [f"{k}={_value(v)}" for k, v in [*args.common.items(), *overrides.items()]]
    cmd = [*NMT, "train", "--preset", args.preset, "--data", str(args.data), "-o", str(model_dir)]
    cmd += ["--max-time", args.max_time, "--device", args.device, "--quiet", "--force"]
    cmd += [x for s in sets for x in ("--set", s)]
    print(f"{name}: training ({args.max_time})", file=sys.stderr)
    started = time.time()
    proc = sh(cmd, log, args.threads)
    if proc.returncode:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"{name}: training failed ({tail}); see {log}", file=sys.stderr)
        return {"name": name, "overrides": overrides, "error": tail}
    result = {"name": name, "overrides": overrides, **same, **training_facts(model_dir)}
    result.update(threads=args.threads, started=started, trained=time.time())
    data = Path(args.data)
    result["test"] = {t: test_bleu(model_dir, data, t, langs, log, args.threads) for t in args.test}
    with atomic_write(result_path) as f:  # written last: its presence means done
        json.dump(result, f, indent=1)
    return result


def ensemble_run(args: argparse.Namespace, results: list[dict], langs: tuple[str, str]) -> dict:
    """The ensemble of every successful run on each test split (saved; reused when the same
    runs come again)."""
    names = [r["name"] for r in results if "error" not in r]
    path = Path(args.out) / "ensemble.json"
    if path.exists():
        done = json.loads(path.read_text(encoding="utf-8"))
        tested = done.get("test", {})
        if (
            done.get("members") == names
            and set(tested) == set(args.test)
            and all("bleu" in v for v in tested.values())
        ):  # the same members and splits, none failed
            print("ensemble: done before, skipped", file=sys.stderr)
            return done
    print(f"ensemble of {len(names)}: evaluating", file=sys.stderr)
    dirs = [Path(args.out) / "runs" / n / "model" for n in names]
    log = Path(args.out) / "ensemble.log"
    result = {
        "name": f"ensemble of {len(names)}",
        "members": names,
        "test": {t: test_bleu(dirs, Path(args.data), t, langs, log) for t in args.test},
    }
    with atomic_write(path) as f:
        json.dump(result, f, indent=1)
    return result


def markdown(results: list[dict[str, Any]], tests: list[str]) -> str:
    """The Markdown table: one row per run, best final validation BLEU first."""
    head = ["run", "updates", "epochs", "valid best", "valid final (ckpt)"]
    head += [f"{t} (cased / lc)" for t in tests]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def key(r: dict[str, Any]) -> float:
        return -(r.get("valid_bleu_final") or -1.0)

    for r in sorted(results, key=key):
        if "error" in r:
            lines.append(f"| {r['name']} | failed: {r['error']} |" + " |" * (len(head) - 2))
            continue
        if "members" in r:  # the ensemble row: no training of its own
            cells = [f"{r['name']} ({', '.join(r['members'])})", "-", "-", "-", "-"]
        else:
            cells = [
                r["name"],
                str(r["updates"]),
                str(r["epochs"]),
                _f(r["valid_bleu_best"]),
                f"{_f(r['valid_bleu_final'])} ({r['checkpoint']})",
            ]
        for t in tests:
            s = r.get("test", {}).get(t, {})
            cells.append(f"{_f(s.get('bleu'))} / {_f(s.get('bleu_lc'))}" if "bleu" in s else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def run_threads(jobs: int) -> int | None:
    """CPU threads per run when `jobs` run side by side (None: one at a time, the default):
    this process's threads (OMP_NUM_THREADS, else the CPUs it may run on) split evenly."""
    if jobs == 1:
        return None
    from nmt.runtime import usable_cpus

    return max(1, usable_cpus() // jobs)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="DATA_DIR from nmt preprocess.")
    p.add_argument("--out", required=True, help="Sweep directory (runs, results.md, results.json).")
    p.add_argument("--preset", required=True, help="The preset every run starts from.")
    p.add_argument("--max-time", required=True, help="Budget of each run, e.g. 25m.")
    p.add_argument("--grid", action="append", default=[], help="section.key=v1,v2 (repeatable).")
    p.add_argument("--grid-file", help="YAML/JSON grid: {key: [values]} or [{key: value}, ...].")
    p.add_argument("--set", dest="sets", action="append", default=[], help="Override for all runs.")
    p.add_argument("--test", action="append", default=[], help="Test split in DATA_DIR (repeat).")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or mps.")
    jobs = "Runs side by side, the CPU threads split between them (every run of a batch then sees "
    jobs += "the same machine)."
    p.add_argument("--jobs", type=int, default=1, help=jobs)
    ensemble = "Also evaluate the ensemble of all runs (e.g. a grid of seeds; add --test valid to "
    ensemble += "choose on validation)."
    p.add_argument("--ensemble", action="store_true", help=ensemble)
    p.add_argument("--dry-run", action="store_true", help="List the runs and stop.")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    args.threads = run_threads(args.jobs)
    args.common = {}
    for s in args.sets:
        key, sep, value = s.partition("=")
        if not sep:
            p.error(f"--set {s!r}: expected section.key=value")
        args.common[key.strip()] = scalar(value)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run every grid point not done yet, then write the tables."""
    args = parse_args(argv)
    runs = parse_grid(args.grid, args.grid_file)
    names = [run_name(r) for r in runs]
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise SystemExit(f"grid points share a run name: {', '.join(twice)}")
    if args.dry_run:
        for r in runs:
            print(run_name(r))
        return 0
    manifest = json.loads((Path(args.data) / "manifest.json").read_text(encoding="utf-8"))
    langs = (manifest["src_lang"], manifest["tgt_lang"])
    for t in args.test:
        for lang in langs:
            if not (Path(args.data) / f"{t}.{lang}.txt").exists():
                raise SystemExit(f"{args.data}/{t}.{lang}.txt: no such test split")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda r: one_run(args, r, langs), runs))
    if args.ensemble and sum("error" not in r for r in results) > 1:
        results.append(ensemble_run(args, results, langs))
    out = Path(args.out)
    table = markdown(results, args.test)
    with atomic_write(out / "results.json") as f:
        f.write(json.dumps(results, indent=1) + "\n")
    with atomic_write(out / "results.md") as f:
        f.write(table + "\n")
    print(table)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
