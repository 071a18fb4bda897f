#!/usr/bin/env python3
"""The Canadian-law experiment's report (scripts/justice_experiment.py): for every system that
translated test, BLEU and chrF whole and per source-length bucket with 95% bootstrap intervals,
BLEU relative to the shortest bucket, the output/reference length ratio and the share of
translations cut by the length limit per bucket, each attentional system's BLEU gain over
noattn per bucket (a paired bootstrap interval), and the run (updates, epochs, minutes, flat).

    python scripts/justice_report.py WORK [--docs DIR]

Writes WORK/justice_table.md and the figures DOCS/justice_bleu.png (BLEU by length, with
intervals), DOCS/justice_relative.png and DOCS/justice_curves.png."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from joined_report import (  # noqa: E402
    bootstrap,
    ci,
    cut_share,
    interval,
    read,
    resampled,
    run_info,
    table,
)

from nmt.eval.bylength import assign, parse_buckets  # noqa: E402

SRC, TGT = "en", "fr"
BASELINE = "noattn"  # the fixed-vector system the attentional ones are measured against


def score_system(work: Path, name: str, buckets: str) -> dict[str, Any] | None:
    """Every number of one system, or None when it has not translated test."""
    model, data = work / name, work / "data"
    hyp_file = model / f"test.hyp.{TGT}"
    if not hyp_file.exists() or not (model / "flat.json").exists():
        return None
    src, ref, hyp = (read(data / f"test.{SRC}.txt"), read(data / f"test.{TGT}.txt"), read(hyp_file))
    bleu, chrf = BLEU(), CHRF()
    groups, _ = assign([len(s.split()) for s in src], parse_buckets(buckets))
    rows = []
    for label, idx in zip(buckets.split(","), groups, strict=True):
        if not idx:
            continue
        pick = [src[i] for i in idx], [ref[i] for i in idx], [hyp[i] for i in idx]
        rows.append(
            {
                "bucket": label,
                "lines": len(idx),
                "mean_words": sum(len(s.split()) for s in pick[0]) / len(idx),
                "bleu": bootstrap(bleu, pick[2], pick[1]),
                "chrf": bootstrap(chrf, pick[2], pick[1]),
                "cut": cut_share(model, data, pick[0], pick[2]),
            }
        )
    whole = {
        "bleu": bootstrap(bleu, hyp, ref),
        "chrf": bootstrap(chrf, hyp, ref),
        "cut": cut_share(model, data, src, hyp),
    }
    return {"name": name, "run": run_info(model, data), "whole": whole, "by_length": rows}


def paired_gain(
    metric: Any, hyps: Sequence[str], base: Sequence[str], refs: Sequence[str]
) -> dict[str, float]:
    """`hyps`' score minus `base`'s, with the 95% interval of the difference over the same
    resamplings of the lines (paired: each one scores both systems on the same lines)."""
    score, values = resampled(metric, hyps, refs)
    base_score, base_values = resampled(metric, base, refs)
    lo, hi = interval(values - base_values)
    return {"score": score.score - base_score.score, "lo": lo, "hi": hi}


def attention_gains(work: Path, results: Sequence[dict[str, Any]], buckets: str) -> None:
    """Each attentional system's BLEU gain over `noattn` by source length, paired, under its
    result's "gain" (nothing without a finished noattn)."""
    names = [r["name"] for r in results]
    if BASELINE not in names:
        return
    src, ref = read(work / "data" / f"test.{SRC}.txt"), read(work / "data" / f"test.{TGT}.txt")
    groups, _ = assign([len(s.split()) for s in src], parse_buckets(buckets))
    base = read(work / BASELINE / f"test.hyp.{TGT}")
    pick = [(idx, [ref[i] for i in idx]) for idx in groups if idx]
    for r in results:
        if r["name"] == BASELINE:
            continue
        hyp = read(work / r["name"] / f"test.hyp.{TGT}")
        r["gain"] = [
            paired_gain(BLEU(), [hyp[i] for i in idx], [base[i] for i in idx], refs)
            for idx, refs in pick
        ]


def markdown(results: Sequence[dict[str, Any]], data: Path) -> str:
    """The report's tables."""
    m = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    drops = []
    for split, e in m["splits"].items():
        dropped = ", ".join(f"{k} {v:,}" for k, v in e.get("dropped", {}).items() if v) or "none"
        sample = (
            f" (a sample of {e['sample']['lines']:,} of {e['sample']['of']:,})"
            if "sample" in e
            else ""
        )
        longest = max(e["lengths"][lang]["max"] for lang in (SRC, TGT))
        drops.append(
            [split, f"{e['lines_read']:,}", f"{e['kept']:,}{sample}", dropped, str(longest)]
        )
    parts = [("Data", table(["split", "lines", "kept", "dropped", "longest (subwords)"], drops))]
    runs = [
        [
            r["name"],
            f"{r['run']['updates']:,}",
            f"{r['run']['epochs']:.1f}",
            f"{r['run']['minutes']:.0f}",
            f"{r['run']['best_valid']:.2f}",
            "yes" if r["run"]["flat"] else "**no**",
        ]
        for r in results
    ]
    parts.append(
        (
            "Training (one thread each)",
            table(
                ["system", "updates", "epochs", "minutes", "best valid BLEU (greedy)", "flat"], runs
            ),
        )
    )
    whole = [
        [
            r["name"],
            ci(r["whole"]["bleu"]),
            ci(r["whole"]["chrf"]),
            f"{r['whole']['bleu']['ratio']:.2f}",
            f"{r['whole']['cut']:.1f}",
        ]
        for r in results
    ]
    parts.append(
        (
            "Test, whole",
            table(
                ["system", "BLEU [95%]", "chrF2 [95%]", "length ratio", "cut by the limit, %"],
                whole,
            ),
        )
    )
    first = results[0]["by_length"]
    head = ["system"] + [f"{b['bucket']} (n={b['lines']:,})" for b in first]
    for title, cell in (
        ("BLEU by source length (words) [95%]", lambda b, r: ci(b["bleu"])),
        (
            "BLEU as % of the shortest bucket's",
            lambda b, r: (
                f"{100 * b['bleu']['score'] / max(1e-9, r['by_length'][0]['bleu']['score']):.0f}%"
            ),
        ),
        ("chrF2 by source length [95%]", lambda b, r: ci(b["chrf"])),
        ("Output / reference length by source length", lambda b, r: f"{b['bleu']['ratio']:.2f}"),
        ("Translations cut by the length limit, % of the bucket", lambda b, r: f"{b['cut']:.1f}"),
    ):
        rows = [[r["name"]] + [cell(b, r) for b in r["by_length"]] for r in results]
        parts.append((title, table(head, rows)))
    gains = [[r["name"]] + [signed(g) for g in r["gain"]] for r in results if "gain" in r]
    if gains:
        title = f"BLEU gain over {BASELINE} by source length [95%, paired bootstrap]"
        parts.append((title, table(head, gains)))
    return "\n\n".join(f"{t}:\n\n{body}" for t, body in parts) + "\n"


def signed(cell: dict[str, float]) -> str:
    """A difference and its interval: +5.2 [+4.1, +6.3]."""
    return f"{cell['score']:+.1f} [{cell['lo']:+.1f}, {cell['hi']:+.1f}]"


def figures(results: Sequence[dict[str, Any]], docs: Path) -> list[Path]:
    """BLEU by length with intervals, relative BLEU, validation curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs.mkdir(parents=True, exist_ok=True)
    labels = [b["bucket"] for b in results[0]["by_length"]]
    xs = list(range(len(labels)))
    out = []
    for name, relative in (("justice_bleu.png", False), ("justice_relative.png", True)):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in results:
            base = r["by_length"][0]["bleu"]["score"] or 1e-9
            scale = 100 / base if relative else 1.0
            y = [b["bleu"]["score"] * scale for b in r["by_length"]]
            if relative:
                ax.plot(xs, y, marker="o", label=r["name"])
            else:
                err = [
                    [b["bleu"]["score"] - b["bleu"]["lo"] for b in r["by_length"]],
                    [b["bleu"]["hi"] - b["bleu"]["score"] for b in r["by_length"]],
                ]
                ax.errorbar(xs, y, yerr=err, marker="o", capsize=3, label=r["name"])
        ax.set(
            xticks=xs,
            xticklabels=labels,
            xlabel="source length (words)",
            ylabel="BLEU, % of the 0-10 bucket" if relative else "BLEU (test, en->fr)",
        )
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(docs / name, dpi=110)
        plt.close(fig)
        out.append(docs / name)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        steps, vals = zip(*r["run"]["curve"], strict=True)
        ax.plot(steps, vals, label=r["name"])
    ax.set(xlabel="updates", ylabel="validation BLEU (greedy)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(docs / "justice_curves.png", dpi=110)
    plt.close(fig)
    return out + [docs / "justice_curves.png"]


def write_report(
    work: Path, docs: Path, names: Sequence[str], buckets: str
) -> list[dict[str, Any]]:
    """Score every system of `names` that translated test; write the tables and figures."""
    results = [r for n in names if (r := score_system(work, n, buckets)) is not None]
    if not results:
        print(f"no finished system in {work}")
        return []
    attention_gains(work, results, buckets)
    md = markdown(results, work / "data")
    (work / "justice_table.md").write_text(md, encoding="utf-8")
    print(md)
    for path in figures(results, docs):
        print(f"wrote {path}")
    return results


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and write the report."""
    from justice_experiment import BUCKETS, SYSTEMS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("work", type=Path, help="the experiment's WORK folder")
    p.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the figures go")
    args = p.parse_args(argv)
    write_report(args.work, args.docs, list(SYSTEMS), BUCKETS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
