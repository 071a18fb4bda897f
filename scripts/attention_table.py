#!/usr/bin/env python3
"""The attention experiment's tables in Markdown, from its outputs (scripts/attention_experiment.sh):
each system's run (parameters, updates, epochs, speed, validation BLEU), its test scores, and per
source-length bucket BLEU, BLEU as % of the 0-10 bucket, chrF and the output/reference length ratio;
with --source, also the share of translations per bucket that run to the decoder's length limit
(floor(max_len_a * n + max_len_b) subwords for a source of n subwords), which is how a model that has
not learnt to stop shows itself.

    python scripts/attention_table.py WORK MODEL_DIR [MODEL_DIR ...] > table.md
    python scripts/attention_table.py WORK MODEL_DIR ... --source test.de --hyp test.hyp.en

WORK holds scores.json (`nmt score --json`) and by_length.json (`nmt score --by-length --json`);
the systems are named by their MODEL_DIR's folder name, in the order given."""

from __future__ import annotations

import argparse
import json
import math
import struct
from pathlib import Path
from typing import Any

from nmt.plots.curves import read_events


def parameters(model_dir: Path) -> int:
    """Parameters in the model's best (else any) checkpoint, read from the safetensors header."""
    files = sorted((model_dir / "checkpoints").glob("*.safetensors"))
    best = [f for f in files if f.name.startswith("best")] or files
    with open(best[0], "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    total = 0
    for name, meta in header.items():
        if name != "__metadata__":
            n = 1
            for d in meta["shape"]:
                n *= d
            total += n
    return total


def run_row(name: str, model_dir: Path, scores: dict[str, dict[str, Any]]) -> list[str]:
    """One system's run and whole-test-set scores."""
    evs = read_events(model_dir)
    end = next(e for e in reversed(evs) if e["event"] == "end")
    valid = [e["bleu"] for e in evs if e["event"] == "valid" and e.get("bleu") is not None]
    bleu, chrf = scores["BLEU"], scores["chrF2"]
    return [
        name,
        f"{parameters(model_dir) / 1e6:.1f}M",
        f"{end['steps']:,}",
        f"{end['tgt_tokens'] / 1e6:.1f}M ({end['epochs_completed']})",
        f"{end['tok_s']:,.0f}",
        f"{max(valid):.1f}" if valid else "-",
        f"{bleu['score']:.1f}",
        f"{chrf['score']:.1f}",
        f"{bleu['ratio']:.2f}",
    ]


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def bucket_tables(by_length: list[dict[str, Any]], names: list[str]) -> str:
    """BLEU, BLEU relative to the first bucket, chrF and length ratio per bucket, one row each system."""
    buckets = list(dict.fromkeys(r["bucket"] for r in by_length))
    first = {r["bucket"]: r for r in by_length}
    head = ["system"] + [
        f"{b} (n={first[b]['lines']}, mean {first[b]['mean_length'] or 0:.0f})" for b in buckets
    ]

    def cell(system: str, bucket: str, metric: str) -> dict[str, Any]:
        return next(
            r for r in by_length
            if r["system"] == system and r["bucket"] == bucket and r["name"] == metric
        )  # fmt: skip

    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    bleu = [[n] + [fmt(cell(n, b, "BLEU")["score"], ".1f") for b in buckets] for n in names]
    rel = []
    for n in names:
        ys = [cell(n, b, "BLEU")["score"] for b in buckets]
        base = next((y for y in ys if y is not None), None)
        rel.append(
            [n] + [fmt(None if y is None or not base else 100 * y / base, ".0f") for y in ys]
        )
    chrf = [[n] + [fmt(cell(n, b, "chrF2")["score"], ".1f") for b in buckets] for n in names]
    ratio = [[n] + [fmt(cell(n, b, "BLEU")["ratio"], ".2f") for b in buckets] for n in names]
    parts = [
        ("BLEU by source length (words)", bleu),
        ("BLEU as % of the system's BLEU on the shortest bucket", rel),
        ("chrF2 by source length", chrf),
        ("Output length / reference length (BLEU's ratio) by source length", ratio),
    ]
    return "\n\n".join(f"{title}:\n\n{table(head, rows)}" for title, rows in parts)


def limit_table(
    work: Path, models: list[Path], names: list[str], source: Path, hyp: str, buckets: list[str]
) -> str:
    """Per system and bucket, the % of translations whose length (re-encoded subwords) reaches
    the decoding length limit: such a translation ended because the limit cut it, not at eos."""
    import yaml

    from nmt.dirs.data import DataDir
    from nmt.eval.bylength import assign, parse_buckets

    src = source.read_text(encoding="utf-8").splitlines()
    bks = parse_buckets(",".join(buckets))
    groups, _ = assign([len(line.split()) for line in src], bks)
    src_tok, tgt_tok = DataDir(work / "data").tokenizers
    n_src = [len(src_tok.encode(line)) for line in src]
    rows = []
    for name, model in zip(names, models, strict=True):
        dec = yaml.safe_load((model / "config.yaml").read_text(encoding="utf-8"))["decoding"]
        out = (model / hyp).read_text(encoding="utf-8").splitlines()
        hit = [
            len(tgt_tok.encode(h)) >= max(1, math.floor(dec["max_len_a"] * n + dec["max_len_b"]))
            for n, h in zip(n_src, out, strict=True)
        ]
        rows.append(
            [name] + [f"{100 * sum(hit[i] for i in g) / max(1, len(g)):.0f}" for g in groups]
        )
    head = ["system"] + [f"{b} (n={len(g)})" for b, g in zip(buckets, groups, strict=True)]
    return "Translations that run to the length limit, % of the bucket's lines:\n\n" + table(
        head, rows
    )


def main() -> None:
    """Print the tables."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("work", type=Path, help="the experiment's WORK folder")
    p.add_argument("models", type=Path, nargs="+", help="the systems' MODEL_DIRs, in order")
    p.add_argument("--source", type=Path, help="the test source: adds the length-limit table")
    p.add_argument(
        "--hyp", default="newstest2014.hyp.en", help="translation file in each MODEL_DIR"
    )
    args = p.parse_args()
    names = [m.name for m in args.models]
    whole = json.loads((args.work / "scores.json").read_text(encoding="utf-8"))
    per_metric = len(whole) // len(names)
    scores = [
        {r["name"]: r for r in whole[i * per_metric : (i + 1) * per_metric]}
        for i in range(len(names))
    ]
    head = ["system", "parameters", "updates", "target tokens (epochs)", "tok/s",
            "best valid BLEU (greedy)", "test BLEU", "test chrF2", "length ratio"]  # fmt: skip
    rows = [run_row(n, m, s) for n, m, s in zip(names, args.models, scores, strict=True)]
    print(table(head, rows))
    print()
    by_length = json.loads((args.work / "by_length.json").read_text(encoding="utf-8"))
    print(bucket_tables(by_length, names))
    if args.source:
        buckets = list(dict.fromkeys(r["bucket"] for r in by_length))
        print()
        print(limit_table(args.work, args.models, names, args.source, args.hyp, buckets))


if __name__ == "__main__":
    main()
