#!/usr/bin/env python3
"""Benchmark `nmt preprocess`: pairs per second and peak memory on a corpus sampled from Multi30k.

Builds a corpus of --pairs pairs by sampling Multi30k train lines (with replacement, seeded), runs
`nmt preprocess` on it in a subprocess --repeat times, and prints one JSON line with the median wall
time, pairs/s and peak RSS: of the largest single process (getrusage RUSAGE_CHILDREN ru_maxrss) and
of the whole process tree (the preprocess command plus its encoding workers, sampled every 50 ms),
plus CPU seconds per run and the load average, since other load on the CPU lowers wall-clock figures.
Target: 1,000,000 pairs at >= 20,000 pairs/s with peak RSS < 1.5 GB on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from nmt.runtime import usable_cpus

ROOT = Path(__file__).resolve().parent.parent
NMT = Path(sys.executable).parent / "nmt"
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import multi30k, process_tree  # noqa: E402

from nmt.runtime import status_kb  # noqa: E402


def build(src: Path, tgt: Path, out: Path, pairs: int, seed: int) -> None:
    """Write out.en / out.de with `pairs` aligned lines sampled from the train files."""
    a = src.read_text(encoding="utf-8").splitlines()
    b = tgt.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    with (
        open(f"{out}.en", "w", encoding="utf-8") as fa,
        open(f"{out}.de", "w", encoding="utf-8") as fb,
    ):
        for _ in range(pairs):
            i = rng.randrange(len(a))
            fa.write(a[i] + "\n")
            fb.write(b[i] + "\n")


def tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc (Linux)."""
    return sum(status_kb(p, "VmRSS") for p in process_tree(pid))


def run_once(cmd: list[str]) -> tuple[float, int]:
    """Run the command; return (wall seconds, peak tree RSS in KB)."""
    peak = 0
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.05):
            peak = max(peak, tree_rss_kb(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    secs = time.perf_counter() - t0
    done.set()
    sampler.join()
    if rc != 0:
        sys.exit(f"nmt preprocess failed with exit code {rc}")
    return secs, peak


def main() -> None:
    """Parse options, build the corpus, time the runs, print one JSON line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=1_000_000, help="corpus size (default 1M)")
    p.add_argument("--quick", action="store_true", help="100,000 pairs, one run")
    p.add_argument("--repeat", type=int, default=1, help="runs; the median is reported")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--spm-type", default="unigram")
    p.add_argument("--threads", type=int, default=None, help="passed to nmt preprocess")
    p.add_argument("--corpus", type=Path, default=None, help="fetched Multi30k (corpora/multi30k)")
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp dir)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.quick:
        args.pairs, args.repeat = 100_000, 1
    m30k = multi30k(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="bench_preprocess.", dir=args.work))
    try:
        build(m30k / "train.en", m30k / "train.de", work / "corpus", args.pairs, args.seed)
        cmd = [str(NMT), "preprocess", "--src-lang", "en", "--tgt-lang", "de"]
        cmd += ["--train", str(work / "corpus"), "--valid", str(m30k / "val")]
        cmd += ["--vocab-size", str(args.vocab_size), "--spm-type", args.spm_type, "--quiet"]
        cmd += ["--threads", str(args.threads)] if args.threads else []
        runs = []
        for i in range(args.repeat):
            runs.append(run_once([*cmd, "-o", str(work / f"data{i}")]))
            shutil.rmtree(work / f"data{i}")
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    secs = statistics.median(r[0] for r in runs)
    result = {
        "bench": "preprocess",
        "pairs": args.pairs,
        "runs": len(runs),
        "seconds_median": round(secs, 2),
        "pairs_per_s": round(args.pairs / secs),
        "cpu_seconds_per_run": round((usage.ru_utime + usage.ru_stime) / len(runs), 2),
        "peak_rss_mb_largest_process": round(usage.ru_maxrss / 1024),
        "peak_rss_mb_process_tree": round(max(r[1] for r in runs) / 1024),
        "vocab_size": args.vocab_size,
        "spm_type": args.spm_type,
        "threads": args.threads or usable_cpus(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),  # > cpus means the figures are depressed
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
