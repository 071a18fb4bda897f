#!/usr/bin/env python3
"""Benchmark a large corpus on one machine: preprocess, start training, translate, with bounded memory.

For each size (default 1M, 3M, 10M pairs) a WMT-news-shaped corpus is written with
scripts/make_scale_corpus.py (or reused from the work folder), then three commands run as
subprocesses, each timed with its peak memory: RSS of the largest single process (exact, from the
kernel), of the command's own process, and the sampled sums of RSS and of PSS over its process tree
(encoding and decoding workers; see benchlib.run_measured):

- `nmt preprocess` de->en, valid newstest2013, test newstest2014, vocabulary 8000: pairs/s, bytes
  per input pair of DATA_DIR;
- `nmt train` with a transformer preset for a few updates (log every update, validation only at the
  end and on a few sentences): time from process start to the first update (when its event appears
  in metrics.jsonl), and rss_mb of the first and last update events;
- `nmt translate` greedy of 10,000 corpus sources with that model: lines/s and the output count.

With `--long 30m`, `nmt train` then runs on the largest size for that budget (validation every
500 updates), and the median rss_mb of its first and last 10% of update events shows whether
memory stays flat.

It prints a table, the slope of preprocessing's peak RSS against corpus size, and the targets:
preprocess >= 50k pairs/s at the largest size, every largest-process peak <= 2 GB, first update
<= 60 s at the largest size, training's peak within 1.2x of the smallest size's, and with --long
its last 10% within 1.1x of its first; `--json` writes every row. Outputs stay in --work/<size>/
(data, model, the commands' logs) and the corpora in --work/corpus-<size>-seed<S>-noise<P>.{de,en}, reused by later runs. `--quick` checks that it runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from benchlib import machine_line, run_measured, write_json  # noqa: E402
from make_scale_corpus import CORPUS, output_paths, parse_count, write_corpus  # noqa: E402

from nmt.plots.curves import read_events  # noqa: E402

NMT = Path(sys.executable).parent / "nmt"
LIMIT_MB = 2048
QUICK = {
    "sizes": [20_000, 50_000],
    "vocab_size": 1000,
    "spm_type": "bpe",
    "preset": "transformer-tiny",
    "steps": 5,
    "translate_lines": 200,
}
QUICK_HELP = "20k and 50k pairs, BPE 1000, transformer-tiny, 5 updates, 200 lines: that it runs"
TARGETS = {"pairs_per_s": 50_000, "first_update_s": 60.0, "train_growth": 1.2, "long_growth": 1.1}


@dataclass(frozen=True)
class Settings:
    """What every size runs with."""

    work: Path
    corpus: Path
    seed: int
    noise: float
    threads: int
    vocab_size: int
    spm_type: str
    spm_sample: int | None
    preset: str
    steps: int
    valid_sentences: int
    translate_lines: int
    device: str


def label(n: int) -> str:
    """20000 -> 20k, 1000000 -> 1M: a size as folder names and tables show it."""
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % (div // 10) == 0:
            return f"{n / div:g}{unit}"
    return str(n)


def parse_sizes(text: str) -> list[int]:
    """Comma-separated pair counts (argparse's type for --sizes)."""
    sizes = [parse_count(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sizes


def corpus_for(s: Settings, n: int) -> tuple[Path, float]:
    """The corpus prefix of `n` pairs (written unless a complete one is there) and the seconds
    its writing took (0 when reused)."""
    prefix = s.work / f"corpus-{label(n)}-seed{s.seed}-noise{s.noise:g}"
    if all(path.is_file() for path in output_paths(prefix, False)):
        return prefix, 0.0
    t0 = time.perf_counter()
    write_corpus(prefix, n, s.seed, s.noise, corpus=s.corpus)
    return prefix, time.perf_counter() - t0


def run(cmd: list[str], log: Path, on_sample: Any = None) -> dict[str, float]:
    """Measure one command, its output in `log`; a failure ends the benchmark naming the log."""
    with open(log, "wb") as out:
        m = run_measured(cmd, on_sample, stdout=out, stderr=out)
    if m["returncode"] != 0:
        tail = log.read_text("utf-8", errors="replace").strip().splitlines()[-1:] or [""]
        sys.exit(
            f"error: {Path(cmd[1]).name} failed ({int(m['returncode'])}): {tail[0]} (see {log})"
        )
    return m


def preprocess(s: Settings, prefix: Path, data: Path, n: int) -> dict[str, Any]:
    """`nmt preprocess` of the corpus: rate, memory, DATA_DIR bytes per pair."""
    cmd = [str(NMT), "preprocess", "--src-lang", "de", "--tgt-lang", "en", "--train", str(prefix)]
    cmd += ["--valid", str(s.corpus / "newstest2013"), "--test", str(s.corpus / "newstest2014")]
    cmd += ["--vocab-size", str(s.vocab_size), "--spm-type", s.spm_type]
    cmd += ["--spm-sample", str(s.spm_sample)] if s.spm_sample is not None else []
    cmd += ["--threads", str(s.threads), "-o", str(data)]
    m = run([*cmd, "--force", "--quiet"], data.parent / "preprocess.log")
    size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    manifest = json.loads((data / "manifest.json").read_text("utf-8"))
    return {
        "preprocess_s": m["seconds"],
        "pairs_per_s": n / m["seconds"],
        "preprocess_cpu_s": m["cpu_seconds"],
        "preprocess_peak_mb": m["largest_mb"],
        "preprocess_main_mb": m["main_mb"],
        "preprocess_tree_mb": m["tree_mb"],
        "preprocess_tree_pss_mb": m["tree_pss_mb"],
        "preprocess_workers_mb": m["children_mb"],
        "kept_pairs": manifest["splits"]["train"]["kept"],
        "data_bytes": size,
        "bytes_per_pair": size / n,
    }


def first_train_event(metrics: Path) -> dict[str, Any] | None:
    """The first update's event in metrics.jsonl, once it is there (a line being written is
    skipped)."""
    if not metrics.is_file():
        return None
    return next((r for r in read_events(metrics.parent) if r.get("event") == "train"), None)


def train_cmd(s: Settings, data: Path, model: Path, limit: list[str], sets: list[str]) -> list[str]:
    """An `nmt train` command line into a removed `model` (a previous run's metrics.jsonl is
    not this one's), with a limit (--max-steps N or --max-time T) and training.* settings."""
    shutil.rmtree(model, ignore_errors=True)
    cmd = [str(NMT), "train", "-d", str(data), "-o", str(model), "--preset", s.preset, *limit]
    cmd += ["--device", s.device, "--force", "--quiet"]
    for key in [*sets, f"valid_max_sentences={s.valid_sentences}"]:
        cmd += ["--set", f"training.{key}"]
    return cmd


def train(s: Settings, data: Path, model: Path) -> dict[str, Any]:
    """The start of `nmt train`: seconds to the first update, peak RSS, rss_mb first vs last."""
    limit, sets = ["--max-steps", str(s.steps)], ["valid_every=0", "log_every=1"]
    cmd = train_cmd(s, data, model, limit, sets)
    seen: dict[str, float] = {}

    def watch(seconds: float) -> None:
        if "first" not in seen and first_train_event(model / "metrics.jsonl") is not None:
            seen["first"] = seconds

    m = run(cmd, model.parent / "train.log", watch)
    events = [row for row in read_events(model) if row.get("event") == "train"]
    if not events:
        sys.exit(f"error: {model}/metrics.jsonl has no train event")
    return {
        "train_first_update_s": seen.get("first", m["seconds"]),
        "train_first_event_elapsed_s": events[0]["elapsed"],
        "train_s": m["seconds"],
        "train_steps": events[-1]["step"],
        "train_peak_mb": m["largest_mb"],
        "train_tree_mb": m["tree_mb"],
        "train_tree_pss_mb": m["tree_pss_mb"],
        "train_rss_first_mb": events[0].get("rss_mb"),
        "train_rss_last_mb": events[-1].get("rss_mb"),
    }


def long_run(s: Settings, data: Path, model: Path, budget: str) -> dict[str, Any]:
    """`nmt train` for a wall-clock budget with validation every 500 updates: whether its
    memory stays flat (median rss_mb of the first and the last 10% of its update events)."""
    cmd = train_cmd(s, data, model, ["--max-time", budget], ["valid_every=500", "log_every=10"])
    m = run(cmd, model.parent / "train-long.log")
    rows = read_events(model)
    rss = [row["rss_mb"] for row in rows if row.get("event") == "train" and row.get("rss_mb")]
    if not rss:
        sys.exit(f"error: {model}/metrics.jsonl has no train event with rss_mb")
    tenth = max(1, len(rss) // 10)
    first, last = float(np.median(rss[:tenth])), float(np.median(rss[-tenth:]))
    return {
        "long_budget": budget,
        "long_s": m["seconds"],
        "long_events": len(rss),
        "long_steps": rows[-1].get("steps") or len(rss),
        "long_peak_mb": m["largest_mb"],
        "long_rss_first10_mb": first,
        "long_rss_last10_mb": last,
        "long_growth": last / first,
    }


def translate(s: Settings, prefix: Path, model: Path) -> dict[str, Any]:
    """Greedy `nmt translate` of the corpus's first sources: lines/s, peak RSS, line counts."""
    src, out = model.parent / "translate.de", model.parent / "translate.en"
    with open(output_paths(prefix, False)[0], "rb") as f, open(src, "wb") as w:
        w.writelines(itertools.islice(f, s.translate_lines))
    lines_in = sum(1 for _ in open(src, "rb"))
    cmd = [str(NMT), "translate", "-m", str(model), "--beam-size", "1", "--device", s.device]
    m = run([*cmd, "-o", str(out), "--quiet", str(src)], model.parent / "translate.log")
    return {
        "translate_s": m["seconds"],
        "lines_per_s": lines_in / m["seconds"],
        "translate_peak_mb": m["largest_mb"],
        "translate_tree_mb": m["tree_mb"],
        "translate_tree_pss_mb": m["tree_pss_mb"],
        "translate_lines_in": lines_in,
        "translate_lines_out": sum(1 for _ in open(out, "rb")),
    }


def one_size(s: Settings, n: int) -> dict[str, Any]:
    """Every measurement of one corpus size."""
    folder = s.work / label(n)
    folder.mkdir(parents=True, exist_ok=True)
    prefix, corpus_s = corpus_for(s, n)
    row: dict[str, Any] = {"size": label(n), "pairs": n, "corpus_s": corpus_s}
    row.update(preprocess(s, prefix, folder / "data", n))
    row.update(train(s, folder / "data", folder / "model"))
    row.update(translate(s, prefix, folder / "model"))
    return row


def slope_mb_per_million(rows: list[dict[str, Any]], key: str) -> float | None:
    """Least-squares slope of `key` against corpus size, in MB per million pairs."""
    if len({r["pairs"] for r in rows}) < 2:
        return None
    x = np.array([r["pairs"] / 1e6 for r in rows])
    return float(np.polyfit(x, np.array([r[key] for r in rows], dtype=float), 1)[0])


def targets(
    rows: list[dict[str, Any]], long: dict[str, Any] | None = None
) -> dict[str, tuple[bool, str]]:
    """Each target: met or not, and the figure that decides it."""
    big, small = max(rows, key=lambda r: r["pairs"]), min(rows, key=lambda r: r["pairs"])
    steps = ("preprocess", "train", "translate")
    peak = max(r[f"{step}_peak_mb"] for r in rows for step in steps)
    if long is not None:
        peak = max(peak, long["long_peak_mb"])
    growth = big["train_peak_mb"] / small["train_peak_mb"]
    flat = {}
    if long is not None:
        flat[f"RSS flat over {long['long_budget']} at {big['size']} (last / first 10%) <= 1.1x"] = (
            long["long_growth"] <= TARGETS["long_growth"],
            f"{long['long_rss_first10_mb']:,.0f} -> {long['long_rss_last10_mb']:,.0f} MB, "
            f"{long['long_growth']:.2f}x over {long['long_steps']:,} updates",
        )
    return flat | {
        f"preprocess >= 50k pairs/s at {big['size']}": (
            big["pairs_per_s"] >= TARGETS["pairs_per_s"],
            f"{big['pairs_per_s']:,.0f} pairs/s",
        ),
        "peak RSS <= 2 GB (largest process)": (peak <= LIMIT_MB, f"{peak:,.0f} MB"),
        f"first update <= 60 s at {big['size']}": (
            big["train_first_update_s"] <= TARGETS["first_update_s"],
            f"{big['train_first_update_s']:.1f} s",
        ),
        f"train peak RSS within 1.2x of {small['size']}'s": (
            growth <= TARGETS["train_growth"],
            f"{growth:.2f}x",
        ),
    }


COLUMNS = (
    ("size", "size", "{}"),
    ("prep s", "preprocess_s", "{:.1f}"),
    ("pairs/s", "pairs_per_s", "{:,.0f}"),
    ("prep MB", "preprocess_peak_mb", "{:,.0f}"),
    ("prep PSS MB", "preprocess_tree_pss_mb", "{:,.0f}"),
    ("bytes/pair", "bytes_per_pair", "{:.0f}"),
    ("1st update s", "train_first_update_s", "{:.1f}"),
    ("train MB", "train_peak_mb", "{:,.0f}"),
    ("rss first/last", "train_rss", "{}"),
    ("transl s", "translate_s", "{:.1f}"),
    ("lines/s", "lines_per_s", "{:,.0f}"),
    ("transl MB", "translate_peak_mb", "{:,.0f}"),
)


def report(rows: list[dict[str, Any]], long: dict[str, Any] | None = None) -> list[str]:
    """The table, the slopes and the targets as lines."""
    cells = [[head for head, _, _ in COLUMNS]]
    for r in rows:
        r = {**r, "train_rss": f"{r['train_rss_first_mb']}/{r['train_rss_last_mb']}"}
        cells.append([fmt.format(r[key]) for _, key, fmt in COLUMNS])
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    for key, what in (
        ("preprocess_peak_mb", "largest process"),
        ("preprocess_tree_pss_mb", "process tree, PSS"),
    ):
        slope = slope_mb_per_million(rows, key)
        if slope is not None:
            lines.append(f"preprocess peak RSS ({what}) slope: {slope:+,.1f} MB per million pairs")
    for name, (ok, figure) in targets(rows, long).items():
        lines.append(f"{'met ' if ok else 'MISS'}  {name}: {figure}")
    return lines


def main() -> None:
    """Parse options, measure every size, print the report, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1M,3M,10M"))
    p.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p.add_argument("--work", type=Path, default=REPO / "work/scale", help="corpora and outputs")
    p.add_argument("--corpus", type=Path, default=CORPUS, help="fetched wmt-news-de-en")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--noise", type=float, default=0.1, help="make_scale_corpus.py --noise")
    p.add_argument("--threads", type=int, default=None, help="nmt preprocess --threads (all CPUs)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--spm-type", default="unigram", help="nmt preprocess --spm-type")
    p.add_argument("--spm-sample", type=int, default=None, help="nmt preprocess --spm-sample")
    p.add_argument("--preset", default="transformer-small")
    p.add_argument("--steps", type=int, default=50, help="training updates")
    p.add_argument("--translate-lines", type=int, default=10_000)
    p.add_argument("--device", default="auto", help="for nmt train and translate")
    p.add_argument("--json", type=Path, default=None, help="write every row here")
    p.add_argument("--long", default=None, help="also train the largest size this long (e.g. 30m)")
    args = p.parse_args()
    if args.quick:
        vars(args).update(QUICK)
    for name in ("threads", "steps", "translate_lines"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    from nmt.errors import NmtError
    from nmt.runtime import usable_cpus

    threads = args.threads or usable_cpus()
    given = {f.name: getattr(args, f.name) for f in fields(Settings) if hasattr(args, f.name)}
    s = Settings(**{**given, "threads": threads, "valid_sentences": 50 if args.quick else 200})
    print(machine_line(threads), flush=True)
    rows = []
    for n in sorted(set(args.sizes)):
        try:
            rows.append(one_size(s, n))
        except NmtError as e:  # the corpus: no wmt-news-de-en and no mirror to fetch it from
            sys.exit(f"error: {e}")
        secs = sum(rows[-1][k] for k in ("corpus_s", "preprocess_s", "train_s", "translate_s"))
        print(f"{label(n)}: measured in {secs:.0f} s", flush=True)
    long = None
    if args.long:
        big = s.work / label(max(args.sizes))
        long = long_run(s, big / "data", big / "model-long", args.long)
        print(f"{label(max(args.sizes))}: trained for {args.long}", flush=True)
    for line in report(rows, long):
        print(line)
    if args.json is not None:
        write_json(args.json, {"machine": machine_line(threads), "rows": rows, "long": long})


if __name__ == "__main__":
    main()
