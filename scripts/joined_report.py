#!/usr/bin/env python3
"""The joined-caption experiment's report (scripts/joined_experiment.py): tables and figures from
its WORK folder.

For every system whose test.k1 .. test.k6 translations exist: BLEU and chrF on each test.kN with
95% percentile intervals from a bootstrap over the lines (each line one group of captions), the
split oracle (the system's own test.k1 translations joined in groups of k, scored on test.kN), the
output/reference length ratio, the share of translations that ran to the decoder's length limit,
and the run: updates, epochs, minutes, best validation BLEU, whether the curve was flat. The
bootstrap draws the same resampled lines for every system, so differences are paired: whole minus
split oracle for each system, and Bahdanau minus noattn and the Transformer minus Bahdanau, at
every k, each with its 95% interval.

    python scripts/joined_report.py WORK [--docs DIR] [--systems NAME ...]

Writes WORK/joined_table.md, WORK/joined_results.json (every system's numbers) and
WORK/joined_pairs.json (the system-minus-system differences), and the figures of the K=6 systems
DOCS/joined_bleu.png (BLEU against k, the oracle dashed), DOCS/joined_relative.png (BLEU as % of
each system's k1) and DOCS/joined_length.png (length ratio against k), DOCS/joined_curves.png
(every system's validation BLEU against updates) and, once K=4 systems are scored,
DOCS/joined_extrapolation.png (BLEU as % of the split oracle, K=4 beside K=6)."""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from expt_report import (  # noqa: E402
    RUN_HEAD,
    ci,
    data_row,
    flat_text,
    percent,
    publish,
    read_json,
    run_info,
    run_row,
    sections,
    signed,
    table,
)
from expt_score import bootstrap, cut_share, line_weights, paired, read  # noqa: E402
from joined_figures import figures  # noqa: E402
from joined_systems import PAIRS, SRC, SYSTEMS, TEST_K, TGT  # noqa: E402
from make_joined_corpus import fixed_groups, join  # noqa: E402

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@functools.cache
def weights(lines: int) -> np.ndarray:
    """The resamples of a test set of `lines` lines: the same for every system."""
    return line_weights(lines)


def score_k(work: Path, name: str, corpus: str, k: int, k1: Sequence[str]) -> dict[str, Any]:
    """One system's numbers on test.kK: scores with intervals, the split oracle and the paired
    difference from it, the floor, the length-limit share."""
    model, text = work / name, work / f"corpus-{corpus}"
    src, ref = read(text / f"test.k{k}.{SRC}"), read(text / f"test.k{k}.{TGT}")
    out, w = read(model / f"test.k{k}.hyp.{TGT}"), weights(len(ref))
    oracle = join(k1, fixed_groups(len(k1), k))
    bleu = BLEU()
    return {
        "k": k,
        "lines": len(src),
        "mean_words": sum(len(s.split()) for s in src) / len(src),
        "bleu": bootstrap(bleu, out, ref, w),
        "chrf": bootstrap(CHRF(), out, ref, w),
        "oracle_bleu": bootstrap(bleu, oracle, ref, w),
        "whole_minus_oracle": paired(bleu, out, oracle, ref, w),
        "floor_bleu": floor(bleu, out, ref),
        "cut": cut_share(model, work / f"data-{corpus}", src, out),
    }


def score_system(work: Path, name: str, corpus: str) -> dict[str, Any] | None:
    """Every number of one system (trained on WORK/data-CORPUS), or None when its translations
    are not all there."""
    model, text = work / name, work / f"corpus-{corpus}"
    hyp = {k: model / f"test.k{k}.hyp.{TGT}" for k in range(1, TEST_K + 1)}
    if not (model / "flat.json").exists() or not all(p.exists() for p in hyp.values()):
        return None
    k1 = read(hyp[1])
    rows = [score_k(work, name, corpus, k, k1) for k in range(1, TEST_K + 1)]
    refs = read(text / f"test.k{TEST_K}.{TGT}")
    split = model / f"test.k{TEST_K}.split.hyp.{TGT}"
    return {
        "name": name,
        "corpus": corpus,
        "run": run_info(model, work / f"data-{corpus}"),
        "by_k": rows,
        "by_position": by_position(k1, read(hyp[TEST_K]), read(text / f"test.k1.{TGT}"), TEST_K),
        "split": bootstrap(BLEU(), read(split), refs) if split.exists() else None,
    }


def pair_differences(work: Path, results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """BLEU of each PAIRS system minus its partner's at every k, paired over the same resamples
    of the lines (both scored, each on its own corpus's test sets: the same captions)."""
    scored = {r["name"]: r for r in results}
    out = []
    for a, b in PAIRS:
        if a not in scored or b not in scored:
            continue
        cells = []
        for k in range(1, TEST_K + 1):
            ref = read(work / f"corpus-{scored[a]['corpus']}" / f"test.k{k}.{TGT}")
            hyp_a, hyp_b = (read(work / n / f"test.k{k}.hyp.{TGT}") for n in (a, b))
            cells.append(paired(BLEU(), hyp_a, hyp_b, ref, weights(len(ref))))
        out.append({"pair": f"{a} - {b}", "by_k": cells})
    return out


def floor(metric: Any, hyps: Sequence[str], refs: Sequence[str]) -> float:
    """The score against another line's references (each line's of the next one): what fluent
    output that ignores its source would get, for it grows with k as generic n-grams pile up."""
    return float(metric.corpus_score(list(hyps), [list(refs[1:]) + list(refs[:1])]).score)


def by_position(
    k1: Sequence[str], joined: Sequence[str], refs: Sequence[str], k: int
) -> dict[str, Any]:
    """BLEU of each caption position within the full lines of test.kK, on the lines whose output
    splits into k sentences (so sentence j is caption j's translation), beside the same captions
    translated alone: a model that forgets the middle of a long input drops there."""
    whole: list[list[str]] = [[] for _ in range(k)]
    alone: list[list[str]] = [[] for _ in range(k)]
    gold: list[list[str]] = [[] for _ in range(k)]
    full = len(refs) // k
    for i, line in enumerate(joined[:full]):
        parts = SENTENCE_END.split(line.strip())
        if len(parts) != k:
            continue
        for j in range(k):
            whole[j].append(parts[j])
            alone[j].append(k1[i * k + j])
            gold[j].append(refs[i * k + j])
    bleu = BLEU()

    def scores(hyps: list[list[str]]) -> list[float | None]:
        return [bleu.corpus_score(hyps[j], [gold[j]]).score if gold[j] else None for j in range(k)]

    return {"aligned": len(whole[0]), "lines": full, "whole": scores(whole), "alone": scores(alone)}


def flat_cell(r: dict[str, Any]) -> str:
    """Whether a run's curve was flat; a plain reference that is not flat stopped at its budget
    (its K=6 counterpart's updates)."""
    stopped = "no (stopped at the K=6 run's updates)" if r["corpus"] == "k1" else "**no**"
    return flat_text(r["run"], stopped)


def reference_rows(results: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Each plain-Multi30k reference beside its K=6 counterpart: test.k1 BLEU of both, and the
    joined-trained one's as a share of the reference's (did long lines cost the short ones?)."""
    by_name = {r["name"]: r for r in results}
    rows = []
    for plain in (r for r in results if r["corpus"] == "k1"):
        joined = by_name.get(plain["name"].removesuffix("-plain"))
        if joined is None:
            continue
        a, b = plain["by_k"][0]["bleu"], joined["by_k"][0]["bleu"]
        updates = f"{plain['run']['updates']:,} / {joined['run']['updates']:,}"
        rows.append([joined["name"], updates, ci(a), ci(b), percent(b["score"], a["score"])])
    return rows


def by_k_tables(results: Sequence[dict[str, Any]], heads: list[str]) -> list[tuple[str, str]]:
    """The tables with one column per k: scores, the oracle, shares, floor, length, cuts."""

    def rows(cell: Any) -> list[list[str]]:
        return [[r["name"]] + [cell(c, r) for c in r["by_k"]] for r in results]

    specs = [
        ("BLEU on test.kN [95% bootstrap interval]", lambda c, r: ci(c["bleu"])),
        (
            "Split oracle: the system's test.k1 translations joined in groups of k",
            lambda c, r: ci(c["oracle_bleu"]),
        ),
        (
            "BLEU as % of the split oracle (what joining cost)",
            lambda c, r: percent(c["bleu"]["score"], c["oracle_bleu"]["score"]),
        ),
        (
            "Whole minus split oracle, BLEU [95%, paired bootstrap; bold: the interval excludes 0]",
            lambda c, r: signed(c["whole_minus_oracle"]),
        ),
        (
            "BLEU as % of the system's k1",
            lambda c, r: percent(c["bleu"]["score"], r["by_k"][0]["bleu"]["score"]),
        ),
        (
            "Floor: BLEU against the next line's references (source ignored)",
            lambda c, r: f"{c['floor_bleu']:.1f}",
        ),
        ("chrF2 on test.kN [95% bootstrap interval]", lambda c, r: ci(c["chrf"])),
        ("Output / reference length (BLEU's ratio)", lambda c, r: f"{c['bleu']['ratio']:.2f}"),
        ("Translations that ran to the length limit, %", lambda c, r: f"{c['cut']:.1f}"),
    ]
    return [(title, table(heads, rows(cell))) for title, cell in specs]


def position_table(results: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """BLEU by caption position within test.kK's lines, beside the captions alone."""
    rows = []
    for r in results:
        p = r["by_position"]
        cells = [
            "-" if w is None or a is None else f"{w:.1f} ({a:.1f})"
            for w, a in zip(p["whole"], p["alone"], strict=True)
        ]
        rows.append([r["name"], f"{p['aligned']} of {p['lines']}", *cells])
    head = ["system", f"lines split into {TEST_K}"] + [f"caption {j}" for j in range(1, TEST_K + 1)]
    title = (
        f"BLEU by caption position in test.k{TEST_K}, on the lines whose output splits into "
        f"{TEST_K} sentences (in brackets: the same captions translated alone)"
    )
    return title, table(head, rows)


def markdown(results: Sequence[dict[str, Any]], pairs: Sequence[dict[str, Any]] = ()) -> str:
    """The report's tables."""
    heads = ["system"] + [
        f"k{r['k']} (n={r['lines']}, {r['mean_words']:.0f} w)" for r in results[0]["by_k"]
    ]
    runs = [run_row(r["name"], r["run"], flat_cell(r)) for r in results]
    title = "Training (updates and epochs to a flat curve; minutes on one thread)"
    parts = [(title, table(RUN_HEAD, runs)), *by_k_tables(results, heads)]
    if pairs:
        rows = [[p["pair"]] + [signed(c) for c in p["by_k"]] for p in pairs]
        title = "System minus system, BLEU at every k [95%, paired bootstrap; bold: excludes 0]"
        parts.insert(5, (title, table(["difference"] + heads[1:], rows)))
    parts.append(position_table(results))
    if split := [r for r in results if r.get("split")]:
        head = ["system", "whole lines", "split into sentences", "split oracle"]
        last = [r["by_k"][-1] for r in split]
        rows = [
            [r["name"], ci(c["bleu"]), ci(r["split"]), ci(c["oracle_bleu"])]
            for r, c in zip(split, last, strict=True)
        ]
        title = (
            f"test.k{TEST_K} translated whole against split into sentences "
            "(`--split-sentences`), BLEU [95%]"
        )
        parts.append((title, table(head, rows)))
    if refs := reference_rows(results):
        head = ["system", "updates (plain / K=6)", "plain-trained", "K=6-trained", "K=6 / plain"]
        title = (
            "The k1 reference: test.k1 BLEU of the preset trained on plain Multi30k (k = 1 lines) "
            "for at most the K=6 run's updates, beside the K=6-trained system's"
        )
        parts.insert(2, (title, table(head, refs)))
    return sections(parts)


def data_table(work: Path, corpora: Sequence[str]) -> str:
    """Each training corpus: lines read and kept, what preprocessing dropped and why, and the
    longest line in subwords (against max_positions 256: nothing is cut in training either)."""
    rows = []
    for corpus in corpora:
        manifest = read_json(work / f"data-{corpus}" / "manifest.json")
        for split in ("train", "valid"):
            rows.append([corpus, split, *data_row(manifest["splits"][split], (SRC, TGT))])
    head = ["corpus", "split", "lines", "kept", "dropped", "longest (subwords)"]
    return "Data (K=6 joined, K=4 joined, plain):\n\n" + table(head, rows) + "\n"


def write_report(
    work: Path, docs: Path, systems: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """Score every finished system of (name, corpus) `systems`, in order; write the tables, the
    JSON and the figures."""
    results = [r for n, c in systems if (r := score_system(work, n, c)) is not None]
    if not results:
        print(f"no finished system in {work}")
        return []
    pairs = pair_differences(work, results)
    scored = {r["name"] for r in results}
    used = [c for c in ("k6", "k4", "k1") if any(n in scored and k == c for n, k in systems)]
    md = data_table(work, used) + "\n" + markdown(results, pairs)
    (work / "joined_results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    (work / "joined_pairs.json").write_text(json.dumps(pairs, indent=1), encoding="utf-8")
    publish(md, work / "joined_table.md", lambda: figures(results, docs))
    return results


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and write the report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("work", type=Path, help="the experiment's WORK folder")
    p.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the figures go")
    p.add_argument("--systems", nargs="+", default=None, help="these systems, in this order")
    args = p.parse_args(argv)
    order = args.systems or [s.name for s in SYSTEMS]
    corpus = {s.name: s.corpus for s in SYSTEMS}
    write_report(args.work, args.docs, [(n, corpus[n]) for n in order])
    return 0


if __name__ == "__main__":
    sys.exit(main())
