"""The benchmark scripts' arithmetic: medians over interleaved rounds and per-round ratios."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _script(name: str):
    """scripts/NAME.py as a module (scripts/ is not a package; its modules import each other)."""
    if str(REPO / "scripts") not in sys.path:
        sys.path.insert(0, str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench_train():
    return _script("bench_train")


def _row(preset: str, precision: str, rnd: int, tok_s: float, rss: int = 1000) -> dict:
    return {
        "preset": preset, "precision": precision, "round": rnd, "tok_s_median": tok_s,
        "tok_s_first_median": tok_s - 100, "peak_rss_mb": rss, "gemm_gflops": 200.0,
        "gemm_ratio": 0.5,
    }  # fmt: skip


def test_rounds_report_medians_and_the_ratio_of_each_round_not_of_the_medians():
    rows = [
        _row("small", "fp32", 1, 3000), _row("small", "bf16", 1, 6000, 1500),
        _row("small", "bf16", 2, 4000, 1700), _row("small", "fp32", 2, 2500),  # a slow stretch
        _row("small", "fp32", 3, 3100), _row("small", "bf16", 3, 6200, 1600),
    ]  # fmt: skip
    lines = _bench_train().summarise(rows)
    fp32 = (
        "small              fp32  3,000 tgt tok/s (2,500-3,100; first use 2,900)  peak RSS 1,000 MB"
    )
    bf16 = (
        "small              bf16  6,000 tgt tok/s (4,000-6,200; first use 5,900)  peak RSS 1,600 MB"
    )
    assert fp32 in lines[2] and bf16 in lines[3]
    assert lines[4] == "small              bf16/fp32 by round 2.00, 1.60, 2.00: median 2.00x"


def test_a_model_without_both_precisions_gets_no_ratio():
    lines = _bench_train().summarise([_row("s2s", "fp32", 1, 10.0), _row("s2s", "fp32", 2, 12.0)])
    assert len(lines) == 3 and "s2s" in lines[2] and "ratio" not in "".join(lines)


def test_translate_ratios_to_ct2_are_per_round():
    """Round 2 is a slow stretch for both engines: its ratio is still 0.8, as in round 1."""
    rounds = [
        {"nmt-fp32-greedy": {"seconds": [2.0, 2.5, 2.6]}, "ct2-float32-greedy": {"seconds": [2.0]}},
        {"nmt-fp32-greedy": {"seconds": [5.0]}, "ct2-float32-greedy": {"seconds": [4.0, 4.1]}},
        {"nmt-fp32-greedy": {"seconds": [2.0]}, "ct2-float32-greedy": {"seconds": [2.0]}},
    ]  # nmt medians 2.5, 5.0, 2.0; CTranslate2's 2.0, 4.05, 2.0
    bench = _script("bench_translate_report")
    ratios = bench.ct2_ratios(rounds, "nmt-fp32-greedy")
    assert [round(r, 3) for r in ratios] == [0.8, 0.81, 1.0]
    assert bench.ct2_ratios(rounds, "ct2-float32-greedy") == []
    assert bench.ct2_ratios(rounds, "nmt-fp32-beam5") == []


def test_translate_bench_names_ct2_rows_by_the_exports_type():
    """An int8 export is compared as "ct2-int8", with no %GEMM (no int8 GEMM is timed)."""
    bench = _script("bench_translate_report")
    rounds = [{"nmt-bf16-beam5": {"seconds": [3.0]}, "ct2-int8-beam5": {"seconds": [1.5]}}]
    assert bench.ct2_ratios(rounds, "nmt-bf16-beam5") == [0.5]
    rounds[0]["ct2-float32-beam5"] = {"seconds": [6.0]}  # --ct2-also: timed, not the peer
    assert bench.ct2_ratios(rounds, "nmt-bf16-beam5", "int8") == [0.5]
    assert bench.ct2_ratios(rounds, "nmt-bf16-beam5", "float32") == [2.0]
    engines = _script("bench_translate_engines")
    types = ("float32", "bfloat16", "int8", "int8_float32")
    assert [engines.gemm_type("ct2", t) for t in types] == ["fp32", "bf16", None, None]
    assert engines.gemm_type("nmt", "bf16") == "bf16"


def test_translate_bench_scores_a_lowercased_model_case_insensitively(tmp_path):
    """A model preprocessed with --lowercase writes lowercase: cased BLEU would mostly measure case."""
    from nmt.config import Config

    bench = _script("bench_translate_report")
    for name, lc in (("cased", False), ("lc", True)):
        model = tmp_path / name
        model.mkdir()
        Config().save(model / "config.yaml")
        meta = {"src_size": 8000, "tgt_size": 8000, "lowercase": lc}
        (model / "vocab.json").write_text(json.dumps(meta), encoding="utf-8")
        assert bench.lowercased(model) is lc


def test_constraint_phrases_come_from_the_reference_without_overlap():
    bench = _script("bench_constraints")

    ref = "Ein Mann in einem blauen Hemd fährt mit dem Fahrrad die Straße hinunter."
    for seed in range(20):
        phrases = bench.draw_phrases(ref, 3, random.Random(seed))
        assert len(phrases) == 3 and all(1 <= len(p.split()) <= 3 for p in phrases)
        assert all(p in ref and not p.endswith(".") for p in phrases)
        spans = [ref.index(p) for p in phrases]  # distinct words: no span starts inside another
        assert len(set(spans)) == 3
    again = bench.draw_phrases(ref, 2, random.Random(1))
    assert again == bench.draw_phrases(ref, 2, random.Random(1))
    assert bench.draw_phrases("Hund", 3, random.Random(0)) == ["Hund"]
    assert bench.coverage(["a b c", "a"], [["a", "c"], ["b"]]) == 50.0


def test_translate_bench_reads_the_test_set_it_is_given(tmp_path):
    """--test SOURCE REFERENCE: the children decode SOURCE and BLEU is scored against REFERENCE."""
    import argparse

    bench, setup = _script("bench_translate_report"), _script("bench_translate_setup")
    src, ref, hyp = tmp_path / "law.en", tmp_path / "law.fr", tmp_path / "hyp.fr"
    src.write_text("the Minister may make regulations\nthis Act applies to Canada\n", "utf-8")
    lines = "le ministre peut prendre des règlements\nla présente loi s'applique au Canada\n"
    ref.write_text(lines, encoding="utf-8")
    hyp.write_text(lines, encoding="utf-8")
    args = argparse.Namespace(test=[str(src), str(ref)], src="en", tgt="fr", sentences=2)
    assert setup.test_file(args, "en") == src and setup.test_file(args, "fr") == ref
    assert setup.test_name(args) == str(src)
    assert bench.bleu_of(hyp, args) == 100.0
    args.sentences = 1  # a part of the test set is not scored
    assert bench.bleu_of(hyp, args) is None
