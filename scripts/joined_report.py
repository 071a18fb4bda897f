#!/usr/bin/env python3
"""The joined-caption experiment's report (scripts/joined_experiment.py): tables and figures from
its WORK folder.

For every system whose test.k1 .. test.k6 translations exist: BLEU and chrF on each test.kN with
95% percentile intervals from a bootstrap over the lines (each line one group of captions; the
same resampled lines for every system, so the intervals are paired), the split oracle (the
system's own test.k1 translations joined in groups of k, scored on test.kN), the output/reference
length ratio, the share of translations that ran to the decoder's length limit, and the run:
updates, epochs, minutes, best validation BLEU, whether the curve was flat.

    python scripts/joined_report.py WORK [--docs DIR]

Writes WORK/joined_table.md and WORK/joined_results.json, and the figures of the K=6 systems
DOCS/joined_bleu.png (BLEU against k, the oracle dashed), DOCS/joined_relative.png (BLEU as % of
each system's k1) and DOCS/joined_length.png (length ratio against k), DOCS/joined_curves.png
(every system's validation BLEU against updates) and, once K=4 systems are scored,
DOCS/joined_extrapolation.png (BLEU as % of the split oracle, K=4 beside K=6)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from sacrebleu.metrics import BLEU, CHRF

from nmt.dirs.data import DataDir
from nmt.plots.curves import read_events

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from joined_figures import figures  # noqa: E402
from make_joined_corpus import fixed_groups, join  # noqa: E402

SRC, TGT = "en", "de"
TEST_K = 6
SAMPLES = 1000
SEED = 12345
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def resampled(metric: Any, hyps: Sequence[str], refs: Sequence[str]) -> tuple[Any, np.ndarray]:
    """The corpus score, and the scores of SAMPLES resamplings of the lines in drawing order
    (seeded, so equal-sized sets are resampled alike: two systems' i-th resamplings hold the
    same lines, which pairs them)."""
    stats = np.array(metric._extract_corpus_statistics(hyps, [refs]))
    rng = np.random.RandomState(SEED)
    idx = rng.randint(0, len(hyps), size=(SAMPLES, len(hyps)))
    values = [metric._compute_score_from_stats(stats[i].sum(0)).score for i in idx]
    return metric._compute_score_from_stats(stats.sum(0)), np.array(values)


def interval(values: np.ndarray) -> tuple[float, float]:
    """The 95% percentile interval of SAMPLES resampled scores."""
    ordered = np.sort(values)
    return float(ordered[int(0.025 * SAMPLES)]), float(ordered[int(0.975 * SAMPLES) - 1])


def bootstrap(metric: Any, hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    """The corpus score and its 95% percentile interval over SAMPLES resamplings of the lines."""
    score, values = resampled(metric, hyps, refs)
    lo, hi = interval(values)
    out = {"score": score.score, "lo": lo, "hi": hi}
    if hasattr(score, "sys_len"):
        out["ratio"] = score.sys_len / score.ref_len
    return out


def read(path: Path) -> list[str]:
    """A text file's lines."""
    return path.read_text(encoding="utf-8").splitlines()


def cut_share(model: Path, data: Path, sources: Sequence[str], hyps: Sequence[str]) -> float:
    """% of translations at least as long (re-encoded subwords) as the decoder's length limit,
    floor(max_len_a * source subwords + max_len_b): those ended at the limit, not at eos."""
    dec = yaml.safe_load((model / "config.yaml").read_text(encoding="utf-8"))["decoding"]
    src_tok, tgt_tok = DataDir(data).tokenizers
    hit = 0
    for s, h in zip(sources, hyps, strict=True):
        limit = max(1, math.floor(dec["max_len_a"] * len(src_tok.encode(s)) + dec["max_len_b"]))
        hit += len(tgt_tok.encode(h)) >= limit
    return 100 * hit / len(hyps)


def run_info(model: Path, data: Path) -> dict[str, Any]:
    """Updates, epochs, minutes, best validation BLEU and flatness of one trained system."""
    events = read_events(model)
    valid = [e for e in events if e.get("event") == "valid" and e.get("bleu") is not None]
    flat = json.loads((model / "flat.json").read_text(encoding="utf-8"))
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    end = [e for e in events if e.get("event") == "end"][-1]
    return {
        "updates": flat["steps"],
        "flat": flat["flat"],
        "epochs": end["tgt_tokens"] / manifest["splits"]["train"]["tokens"][manifest["tgt_lang"]],
        "minutes": max(e["elapsed"] for e in valid) / 60,
        "best_valid": max(e["bleu"] for e in valid),
        "curve": [(e["step"], e["bleu"]) for e in valid],
    }


def score_system(work: Path, name: str, corpus: str) -> dict[str, Any] | None:
    """Every number of one system (trained on WORK/data-CORPUS), or None when its translations
    are not all there."""
    model = work / name
    hyp = {k: model / f"test.k{k}.hyp.{TGT}" for k in range(1, TEST_K + 1)}
    if not (model / "flat.json").exists() or not all(p.exists() for p in hyp.values()):
        return None
    data, text = work / f"data-{corpus}", work / f"corpus-{corpus}"
    bleu, chrf = BLEU(), CHRF()
    k1 = read(hyp[1])
    rows = []
    for k in range(1, TEST_K + 1):
        src, ref, out = (
            read(text / f"test.k{k}.{SRC}"),
            read(text / f"test.k{k}.{TGT}"),
            read(hyp[k]),
        )
        oracle = join(k1, fixed_groups(len(k1), k))
        rows.append(
            {
                "k": k,
                "lines": len(src),
                "mean_words": sum(len(s.split()) for s in src) / len(src),
                "bleu": bootstrap(bleu, out, ref),
                "chrf": bootstrap(chrf, out, ref),
                "oracle_bleu": bootstrap(bleu, oracle, ref),
                "floor_bleu": floor(bleu, out, ref),
                "cut": cut_share(model, data, src, out),
            }
        )
    refs1 = read(text / f"test.k1.{TGT}")
    position = by_position(k1, read(hyp[TEST_K]), refs1, TEST_K)
    split = model / f"test.k{TEST_K}.split.hyp.{TGT}"
    return {
        "name": name,
        "corpus": corpus,
        "run": run_info(model, data),
        "by_k": rows,
        "by_position": position,
        "split": bootstrap(bleu, read(split), read(text / f"test.k{TEST_K}.{TGT}"))
        if split.exists()
        else None,
    }


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


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def ci(cell: dict[str, float]) -> str:
    """'score [lo, hi]'."""
    return f"{cell['score']:.1f} [{cell['lo']:.1f}, {cell['hi']:.1f}]"


def flat_cell(r: dict[str, Any]) -> str:
    """Whether a run's curve was flat; a plain reference that is not flat stopped at its budget
    (its K=6 counterpart's updates)."""
    if r["run"]["flat"]:
        return "yes"
    return "no (stopped at the K=6 run's updates)" if r["corpus"] == "k1" else "**no**"


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
        rows.append(
            [
                joined["name"],
                f"{plain['run']['updates']:,} / {joined['run']['updates']:,}",
                ci(a),
                ci(b),
                f"{100 * b['score'] / max(a['score'], 1e-9):.0f}%",
            ]
        )
    return rows


def markdown(results: Sequence[dict[str, Any]]) -> str:
    """The report's tables."""
    first = results[0]["by_k"]
    heads = ["system"] + [f"k{r['k']} (n={r['lines']}, {r['mean_words']:.0f} w)" for r in first]
    run_rows = [
        [
            r["name"],
            f"{r['run']['updates']:,}",
            f"{r['run']['epochs']:.1f}",
            f"{r['run']['minutes']:.0f}",
            f"{r['run']['best_valid']:.2f}",
            flat_cell(r),
        ]
        for r in results
    ]
    bleu = [[r["name"]] + [ci(c["bleu"]) for c in r["by_k"]] for r in results]
    oracle = [[r["name"]] + [ci(c["oracle_bleu"]) for c in r["by_k"]] for r in results]
    rel = [
        [r["name"]]
        + [f"{100 * c['bleu']['score'] / r['by_k'][0]['bleu']['score']:.0f}%" for c in r["by_k"]]
        for r in results
    ]
    whole = [
        [r["name"]]
        + [f"{100 * c['bleu']['score'] / c['oracle_bleu']['score']:.0f}%" for c in r["by_k"]]
        for r in results
    ]
    floors = [[r["name"]] + [f"{c['floor_bleu']:.1f}" for c in r["by_k"]] for r in results]
    chrf = [[r["name"]] + [ci(c["chrf"]) for c in r["by_k"]] for r in results]
    ratio = [[r["name"]] + [f"{c['bleu']['ratio']:.2f}" for c in r["by_k"]] for r in results]
    cut = [[r["name"]] + [f"{c['cut']:.1f}" for c in r["by_k"]] for r in results]
    pos_rows = [
        [r["name"], f"{r['by_position']['aligned']} of {r['by_position']['lines']}"]
        + [
            "-" if w is None or a is None else f"{w:.1f} ({a:.1f})"
            for w, a in zip(r["by_position"]["whole"], r["by_position"]["alone"], strict=True)
        ]
        for r in results
    ]
    pos_head = ["system", f"lines split into {TEST_K}"] + [
        f"caption {j}" for j in range(1, TEST_K + 1)
    ]
    parts = [
        (
            "Training (updates and epochs to a flat curve; minutes on one thread)",
            table(
                ["system", "updates", "epochs", "minutes", "best valid BLEU (greedy)", "flat"],
                run_rows,
            ),
        ),
        ("BLEU on test.kN [95% bootstrap interval]", table(heads, bleu)),
        (
            "Split oracle: the system's test.k1 translations joined in groups of k",
            table(heads, oracle),
        ),
        ("BLEU as % of the split oracle (what joining cost)", table(heads, whole)),
        ("BLEU as % of the system's k1", table(heads, rel)),
        (
            "Floor: BLEU against the next line's references (source ignored)",
            table(heads, floors),
        ),
        ("chrF2 on test.kN [95% bootstrap interval]", table(heads, chrf)),
        ("Output / reference length (BLEU's ratio)", table(heads, ratio)),
        ("Translations that ran to the length limit, %", table(heads, cut)),
        (
            f"BLEU by caption position in test.k{TEST_K}, on the lines whose output splits into "
            f"{TEST_K} sentences (in brackets: the same captions translated alone)",
            table(pos_head, pos_rows),
        ),
    ]
    if split := [r for r in results if r.get("split")]:
        head = ["system", "whole lines", "split into sentences", "split oracle"]
        rows = [
            [r["name"], ci(r["by_k"][-1]["bleu"]), ci(r["split"]), ci(r["by_k"][-1]["oracle_bleu"])]
            for r in split
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
    return "\n\n".join(f"{title}:\n\n{body}" for title, body in parts) + "\n"


def data_table(work: Path, corpora: Sequence[str]) -> str:
    """Each training corpus: lines read and kept, what preprocessing dropped and why, and the
    longest line in subwords (against max_positions 256: nothing is cut in training either)."""
    rows = []
    for corpus in corpora:
        m = json.loads((work / f"data-{corpus}" / "manifest.json").read_text(encoding="utf-8"))
        for split in ("train", "valid"):
            e = m["splits"][split]
            dropped = {k: v for k, v in e.get("dropped", {}).items() if v}
            longest = max(e["lengths"][lang]["max"] for lang in (SRC, TGT))
            rows.append(
                [
                    corpus,
                    split,
                    f"{e['lines_read']:,}",
                    f"{e['kept']:,}",
                    ", ".join(f"{k} {v}" for k, v in dropped.items()) or "none",
                    str(longest),
                ]
            )
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
    scored = {r["name"] for r in results}
    used = [c for c in ("k6", "k4", "k1") if any(n in scored and k == c for n, k in systems)]
    md = data_table(work, used) + "\n" + markdown(results)
    (work / "joined_table.md").write_text(md, encoding="utf-8")
    (work / "joined_results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(md)
    for path in figures(results, docs):
        print(f"wrote {path}")
    return results


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and write the report."""
    from joined_experiment import SYSTEMS

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
