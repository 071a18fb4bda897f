#!/usr/bin/env python3
"""The Canadian-law experiment's report (scripts/justice_experiment.py), read as Bahdanau et al.'s
Fig. 2: BLEU against source length.

For every system that translated test: BLEU and chrF whole and in 10-word source-length bins out to
70+, with 95% intervals from a bootstrap by document (the test lines come from a few dozen
documents, so lines are not independent; the whole-test BLEU's interval is also drawn over lines
and, where documents are blocks of lines, over half and twice as many blocks), the lines and
documents in each bin, BLEU relative to the 10-20 bin (0-10 is mostly headings and names), the
output/reference length ratio and the share of translations cut by the length limit per bin, each
attentional system's BLEU gain over noattn per bin (paired, on the same document resamples), the
train/test near-duplicate rate (test lines whose 8-gram set a training line holds more than half
of) and BLEU by length without those lines, and the run (updates, epochs, minutes, flat).

    python scripts/justice_report.py WORK [--docs DIR]

Documents come from WORK/corpus/test.docs (one id a line) where it exists, else from cutting the
test set, which is in document order, into 37 runs of consecutive lines. Writes
WORK/justice_table.md and the figures DOCS/justice_bleu.png (BLEU by length, with intervals),
DOCS/justice_relative.png and DOCS/justice_curves.png."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import expt_report as rep  # noqa: E402
from expt_corpus import documents, near_duplicates  # noqa: E402
from expt_score import (  # noqa: E402
    bootstrap,
    cut_flags,
    document_weights,
    line_weights,
    paired,
    read,
)
from justice_figures import figures  # noqa: E402
from justice_systems import BASELINE, BUCKETS, DOCUMENTS, RELATIVE_TO, SRC, SYSTEMS, TGT  # noqa: E402

from nmt.eval.bylength import assign, parse_buckets  # noqa: E402


@dataclass
class LawTestSet:
    """The test lines, their bins by source words, documents and near-duplicate flags, and the
    document resamples every system is scored on."""

    src: list[str]
    ref: list[str]
    bins: list[tuple[str, list[int]]]  # non-empty bins: label, line numbers
    docs: list[str]
    how: str
    weights: np.ndarray
    near: list[bool]
    groupings: dict[str, np.ndarray]  # label: resamples, for the whole-test interval's check


def train_text(work: Path) -> Path:
    """The source side the systems trained on: the sample when one was drawn."""
    sample = work / f"train-subset.{SRC}"
    return sample if sample.exists() else work / "corpus" / f"train.{SRC}"


def law_test_set(work: Path, buckets: str) -> LawTestSet:
    """WORK's test set, cut into `buckets`, with its documents and near-duplicates."""
    data = work / "data"
    src, ref = read(data / f"test.{SRC}.txt"), read(data / f"test.{TGT}.txt")
    groups, _ = assign([len(s.split()) for s in src], parse_buckets(buckets))
    bins = [(label, idx) for label, idx in zip(buckets.split(","), groups, strict=True) if idx]
    docs, how = documents(len(src), work / "corpus" / "test.docs", DOCUMENTS)
    train = train_text(work)
    near = near_duplicates(src, read(train)) if train.exists() else [False] * len(src)
    weights = document_weights(docs)
    return LawTestSet(src, ref, bins, docs, how, weights, near, groupings(len(src), how, weights))


def groupings(lines: int, how: str, weights: np.ndarray) -> dict[str, np.ndarray]:
    """The resamples the whole-test interval is drawn again with, to show how much it depends
    on the grouping: documents, lines, and where documents are blocks of consecutive lines (no
    ids), half and twice as many blocks."""
    out = {how: weights}
    if "blocks" in how:
        for n in (DOCUMENTS // 2, DOCUMENTS * 2):
            out[f"{n} blocks"] = document_weights(documents(lines, None, n)[0])
    out["lines"] = line_weights(lines)
    return out


def bin_row(ts: LawTestSet, label: str, idx: list[int], hyp: list[str], cut: list[bool]) -> dict:
    """One bin's numbers: lines, documents, mean words, BLEU and chrF by document bootstrap."""
    refs, hyps, w = [ts.ref[i] for i in idx], [hyp[i] for i in idx], ts.weights[:, idx]
    return {
        "bucket": label,
        "lines": len(idx),
        "documents": len({ts.docs[i] for i in idx}),
        "mean_words": sum(len(ts.src[i].split()) for i in idx) / len(idx),
        "bleu": bootstrap(BLEU(), hyps, refs, w),
        "chrf": bootstrap(CHRF(), hyps, refs, w),
        "cut": 100 * sum(cut[i] for i in idx) / len(idx),
    }


def score_system(work: Path, name: str, ts: LawTestSet) -> dict[str, Any] | None:
    """Every number of one system, or None when it has not translated test."""
    model, data = work / name, work / "data"
    hyp_file = model / f"test.hyp.{TGT}"
    if not hyp_file.exists() or not (model / "flat.json").exists():
        return None
    hyp = read(hyp_file)
    cut = cut_flags(model, data, ts.src, hyp)
    by_grouping = {k: bootstrap(BLEU(), hyp, ts.ref, w) for k, w in ts.groupings.items()}
    whole = {
        "bleu": by_grouping[ts.how],  # the documents' resamples, the first grouping
        "by_grouping": by_grouping,
        "chrf": bootstrap(CHRF(), hyp, ts.ref, ts.weights),
        "cut": 100 * sum(cut) / len(hyp),
    }
    clean = [(label, [i for i in idx if not ts.near[i]]) for label, idx in ts.bins]
    return {
        "name": name,
        "run": rep.run_info(model, data),
        "whole": whole,
        "by_length": [bin_row(ts, label, idx, hyp, cut) for label, idx in ts.bins],
        "clean_by_length": [bin_row(ts, label, idx, hyp, cut) for label, idx in clean if idx],
    }


def attention_gains(work: Path, results: Sequence[dict[str, Any]], ts: LawTestSet) -> None:
    """Each attentional system's BLEU gain over BASELINE by source length, paired on the same
    document resamples, under its result's "gain" (nothing without a finished baseline)."""
    if BASELINE not in [r["name"] for r in results]:
        return
    base = read(work / BASELINE / f"test.hyp.{TGT}")
    for r in results:
        if r["name"] == BASELINE:
            continue
        hyp = read(work / r["name"] / f"test.hyp.{TGT}")
        r["gain"] = [
            paired(
                BLEU(),
                [hyp[i] for i in idx],
                [base[i] for i in idx],
                [ts.ref[i] for i in idx],
                ts.weights[:, idx],
            )
            for _, idx in ts.bins
        ]


def relative(r: dict[str, Any], rows: str = "by_length") -> list[str]:
    """Each bin's BLEU as % of the RELATIVE_TO bin's (the first bin's where it is empty)."""
    cells = r[rows]
    base = next((b for b in cells if b["bucket"] == RELATIVE_TO), cells[0])["bleu"]["score"]
    return [rep.percent(b["bleu"]["score"], base) for b in cells]


def bin_head(cells: Sequence[dict[str, Any]]) -> list[str]:
    """The header of a by-length table: each bin with its lines and documents."""
    return ["system"] + [f"{b['bucket']} ({b['lines']:,} l, {b['documents']} d)" for b in cells]


def length_tables(results: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The tables with one column per source-length bin."""
    specs = [
        (
            "BLEU by source length (words) [95%, bootstrap by document]",
            lambda r: [rep.ci(b["bleu"]) for b in r["by_length"]],
        ),
        (f"BLEU as % of the {RELATIVE_TO} bin's", relative),
        (
            "chrF2 by source length [95%, by document]",
            lambda r: [rep.ci(b["chrf"]) for b in r["by_length"]],
        ),
        (
            "Output / reference length",
            lambda r: [f"{b['bleu']['ratio']:.2f}" for b in r["by_length"]],
        ),
        (
            "Translations cut by the length limit, % of the bin",
            lambda r: [f"{b['cut']:.1f}" for b in r["by_length"]],
        ),
    ]
    head = bin_head(results[0]["by_length"])
    parts = [
        (title, rep.table(head, [[r["name"], *cells(r)] for r in results]))
        for title, cells in specs
    ]
    if gains := [[r["name"]] + [rep.signed(g) for g in r["gain"]] for r in results if "gain" in r]:
        title = f"BLEU gain over {BASELINE} by source length [95%, paired, by document]"
        parts.append((title, rep.table(head, gains)))
    return parts


def grouping_table(results: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """The whole-test BLEU's interval under each grouping of the lines, with its width."""
    labels = list(results[0]["whole"]["by_grouping"])
    body = [
        [r["name"]]
        + [
            f"{rep.ci(c)} ({c['hi'] - c['lo']:.1f})"
            for c in (r["whole"]["by_grouping"][k] for k in labels)
        ]
        for r in results
    ]
    title = "Whole-test BLEU [95%] resampled by each grouping of the lines (width)"
    return title, rep.table(["system", *labels], body)


def near_table(results: Sequence[dict[str, Any]], ts: LawTestSet) -> tuple[str, str]:
    """BLEU by length on the test lines that are not near-duplicates of a training line."""
    head = bin_head(results[0]["clean_by_length"])
    body = [[r["name"], *(rep.ci(b["bleu"]) for b in r["clean_by_length"])] for r in results]
    body += [[f"{r['name']}, % of {RELATIVE_TO}", *relative(r, "clean_by_length")] for r in results]
    title = f"{near_summary(ts)} BLEU by source length without them [95%, by document]"
    return title, rep.table(head, body)


def near_summary(ts: LawTestSet) -> str:
    """How many test lines are near-duplicates of a training line, in one sentence."""
    share = 100 * sum(ts.near) / max(1, len(ts.near))
    return (
        f"Near-duplicates: {sum(ts.near):,} of {len(ts.near):,} test lines ({share:.1f}%) have a "
        "training line holding more than half of their 8-grams."
    )


def markdown(results: Sequence[dict[str, Any]], data: Path, ts: LawTestSet) -> str:
    """The report's tables."""
    m = rep.read_json(data / "manifest.json")
    drops = [[split, *rep.data_row(e, (SRC, TGT))] for split, e in m["splits"].items()]
    runs = [rep.run_row(r["name"], r["run"], rep.flat_text(r["run"])) for r in results]
    whole = [
        [
            r["name"],
            rep.ci(r["whole"]["bleu"]),
            rep.ci(r["whole"]["chrf"]),
            f"{r['whole']['bleu']['ratio']:.2f}",
            f"{r['whole']['cut']:.1f}",
        ]
        for r in results
    ]
    head = ["system", "BLEU [95%, documents]", "chrF2 [95%, documents]"]
    head += ["length ratio", "cut by the limit, %"]
    parts = [
        ("Data", rep.table(["split", "lines", "kept", "dropped", "longest (subwords)"], drops)),
        ("Training (one thread each)", rep.table(rep.RUN_HEAD, runs)),
        (f"Test, whole (documents: {ts.how})", rep.table(head, whole)),
        grouping_table(results),
        *length_tables(results),
        near_table(results, ts),
    ]
    return rep.sections(parts)


def write_report(
    work: Path, docs: Path, names: Sequence[str], buckets: str = BUCKETS
) -> list[dict[str, Any]]:
    """Score every system of `names` that translated test; write the tables and figures."""
    ts = law_test_set(work, buckets)
    results = [r for n in names if (r := score_system(work, n, ts)) is not None]
    if not results:
        print(f"no finished system in {work}")
        print(near_summary(ts))
        return []
    attention_gains(work, results, ts)
    md = markdown(results, work / "data", ts)
    rep.publish(md, work / "justice_table.md", lambda: figures(results, docs, RELATIVE_TO))
    return results


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and write the report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("work", type=Path, help="the experiment's WORK folder")
    p.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the figures go")
    args = p.parse_args(argv)
    write_report(args.work, args.docs, list(SYSTEMS), BUCKETS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
