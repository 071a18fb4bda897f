"""The large-corpus benchmark: its corpus generator, its memory measurement, its report, a quick run."""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WMT_MIRROR = REPO.parent / "shared/corpora/wmt-news-de-en"


def _script(name: str):
    """scripts/NAME.py as a module (scripts/ is not a package; it imports its siblings)."""
    if str(REPO / "scripts") not in sys.path:
        sys.path.insert(0, str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    return _script("make_scale_corpus")


@pytest.fixture(scope="module")
def wmt(tmp_path_factory):
    """A fetched wmt-news-de-en: the repository's, else one fetched from the local mirror."""
    here = REPO / "corpora/wmt-news-de-en"
    splits = ("train", "newstest2013", "newstest2014")
    if all((here / f"{s}.{lang}").is_file() for s in splits for lang in ("de", "en")):
        return here
    if not (WMT_MIRROR / "train.de.gz").is_file():
        pytest.skip(f"no wmt-news-de-en (corpora/) and no mirror at {WMT_MIRROR}")
    from nmt.data.corpus import fetch

    return fetch("wmt-news-de-en", tmp_path_factory.mktemp("wmt"), mirror=WMT_MIRROR, quiet=True)


@pytest.fixture(scope="module")
def corpus20k(gen, wmt, tmp_path_factory):
    """20,000 generated pairs (seed 3) as lists of lines."""
    paths = gen.write_corpus(tmp_path_factory.mktemp("c") / "c", 20_000, seed=3, corpus=wmt)
    return paths, [p.read_text("utf-8").split("\n") for p in paths]


def _lines(path: Path) -> list[str]:
    return path.read_text("utf-8").removesuffix("\n").split("\n")


def test_counts_read_as_people_write_them(gen):
    assert [gen.parse_count(t) for t in ("20000", "20k", "1M", "1.5M", "10_000", "3m")] == [
        20_000, 20_000, 1_000_000, 1_500_000, 10_000, 3_000_000,
    ]  # fmt: skip
    for bad in ("1x", "", "M", "0", "-5"):
        with pytest.raises(argparse.ArgumentTypeError):
            gen.parse_count(bad)


@pytest.mark.slow
def test_the_corpus_is_the_same_bytes_for_a_seed_and_other_bytes_for_another(
    gen, wmt, corpus20k, tmp_path
):
    again = gen.write_corpus(tmp_path / "again", 20_000, seed=3, corpus=wmt)
    other = gen.write_corpus(tmp_path / "other", 20_000, seed=4, corpus=wmt)
    for mine, same, differ in zip(corpus20k[0], again, other, strict=True):
        assert mine.read_bytes() == same.read_bytes()
        assert mine.read_bytes() != differ.read_bytes()


def test_both_sides_have_n_lines_none_empty(corpus20k):
    for text in corpus20k[1]:
        assert len(text) == 20_001 and text[-1] == ""  # each line ends in a newline
        assert all(line.strip() for line in text[:-1])


def _shape(lines: list[str]) -> tuple[float, float]:
    """Mean words per line and mean characters per word."""
    words = [w for line in lines for w in line.split()]
    return len(words) / len(lines), sum(map(len, words)) / len(words)


def test_lengths_and_words_follow_wmt_news_train(corpus20k, wmt):
    for lang, text in zip(("de", "en"), corpus20k[1], strict=True):
        mine, real = _shape(text[:-1]), _shape(_lines(wmt / f"train.{lang}"))
        assert abs(mine[0] / real[0] - 1) < 0.2, (lang, mine, real)  # words per line
        assert abs(mine[1] / real[1] - 1) < 0.2, (lang, mine, real)  # characters per word


def test_pairs_are_mostly_unique(corpus20k):
    de, en = corpus20k[1]
    assert len(set(zip(de, en, strict=True))) > 0.9 * len(de)


def test_without_noise_every_pair_is_a_real_pair(gen, wmt, tmp_path):
    """The noise changes words, never which sentences are paired."""
    de, en = gen.write_corpus(tmp_path / "clean", 2_000, seed=1, noise=0.0, corpus=wmt)
    real = {
        (" ".join(a.split()), " ".join(b.split()))
        for a, b in zip(_lines(wmt / "train.de"), _lines(wmt / "train.en"), strict=True)
    }
    pairs = list(zip(_lines(de), _lines(en), strict=True))
    assert len(pairs) == 2_000 and all(pair in real for pair in pairs)


@pytest.mark.slow
def test_gzip_holds_the_same_text_and_is_deterministic(gen, wmt, tmp_path):
    plain = gen.write_corpus(tmp_path / "p", 1_000, seed=5, corpus=wmt)
    gz = gen.write_corpus(tmp_path / "g", 1_000, seed=5, compress=True, corpus=wmt)
    gz2 = gen.write_corpus(tmp_path / "h", 1_000, seed=5, compress=True, corpus=wmt)
    assert [p.name for p in gz] == ["g.de.gz", "g.en.gz"]
    for p, g, g2 in zip(plain, gz, gz2, strict=True):
        assert gzip.decompress(g.read_bytes()) == p.read_bytes()
        assert g.read_bytes() == g2.read_bytes()


def test_a_bad_noise_or_count_is_one_line_and_exit_2(tmp_path):
    for args, msg in (
        (["--pairs", "10", "--noise", "1.5"], "--noise must be between 0 and 1, got 1.5"),
        (["--pairs", "ten"], "argument --pairs: not a count: 'ten'"),
    ):
        cmd = [sys.executable, str(REPO / "scripts/make_scale_corpus.py"), "--out", str(tmp_path)]
        r = subprocess.run([*cmd, *args], capture_output=True, text=True, check=False)
        assert r.returncode == 2 and msg in r.stderr.splitlines()[-1]
        assert "Traceback" not in r.stderr


def test_run_measured_sees_the_largest_process_and_the_exit_code():
    bench = _script("benchlib")
    grow = "b = bytearray(150 << 20); import time, sys; time.sleep(0.4); sys.exit(3)"
    m = bench.run_measured([sys.executable, "-c", grow])
    assert m["returncode"] == 3 and m["seconds"] >= 0.4
    assert m["largest_mb"] >= 150 and m["main_mb"] >= 150 and m["tree_mb"] >= 150
    assert m["children_mb"] == 0  # no workers


def _row(size: str, pairs: int, prep_mb: float, **kw) -> dict:
    row = {
        "size": size, "pairs": pairs, "preprocess_peak_mb": prep_mb,
        "preprocess_tree_pss_mb": prep_mb, "pairs_per_s": 60_000.0, "train_peak_mb": 500.0,
        "translate_peak_mb": 300.0, "train_first_update_s": 20.0,
    }  # fmt: skip
    return {**row, **kw}


def test_the_slope_is_least_squares_in_mb_per_million_pairs_and_targets_name_their_figures():
    bench = _script("bench_scale")
    rows = [_row("1M", 10**6, 110.0), _row("3M", 3 * 10**6, 130.0), _row("10M", 10**7, 200.0)]
    assert bench.slope_mb_per_million(rows, "preprocess_peak_mb") == pytest.approx(10.0)
    assert bench.slope_mb_per_million(rows[:1], "preprocess_peak_mb") is None
    assert all(ok for ok, _ in bench.targets(rows).values())
    rows[2].update(pairs_per_s=40_000.0, train_peak_mb=650.0, preprocess_peak_mb=2100.0)
    got = bench.targets(rows)
    assert got["preprocess >= 50k pairs/s at 10M"] == (False, "40,000 pairs/s")
    assert got["peak RSS <= 2 GB (largest process)"] == (False, "2,100 MB")
    assert got["train peak RSS within 1.2x of 1M's"] == (False, "1.30x")
    assert got["first update <= 60 s at 10M"] == (True, "20.0 s")
    long = {"long_budget": "30m", "long_peak_mb": 1500.0, "long_rss_first10_mb": 1000.0,
            "long_rss_last10_mb": 1150.0, "long_growth": 1.15, "long_steps": 1234}  # fmt: skip
    got = bench.targets(rows, long)
    assert got["RSS flat over 30m at 10M (last / first 10%) <= 1.1x"] == (
        False, "1,000 -> 1,150 MB, 1.15x over 1,234 updates"
    )  # fmt: skip
    long["long_peak_mb"] = 2500.0
    assert bench.targets(rows, long)["peak RSS <= 2 GB (largest process)"] == (False, "2,500 MB")
    assert [bench.label(n) for n in (20_000, 1_500_000, 10**7, 999)] == [
        "20k",
        "1.5M",
        "10M",
        "999",
    ]


@pytest.mark.slow
def test_quick_run_measures_every_size(wmt, tmp_path):
    out = tmp_path / "scale.json"
    cmd = [sys.executable, str(REPO / "scripts/bench_scale.py"), "--quick", "--work"]
    cmd += [str(tmp_path / "w"), "--corpus", str(wmt), "--json", str(out), "--long", "15s"]
    stale = tmp_path / "w/20k/model/metrics.jsonl"  # an earlier run's: not this run's first update
    stale.parent.mkdir(parents=True)
    stale.write_text('{"event": "train", "step": 1, "rss_mb": 1}\n', encoding="utf-8")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads(out.read_text("utf-8"))
    rows, long = result["rows"], result["long"]
    assert [(row["size"], row["pairs"]) for row in rows] == [("20k", 20_000), ("50k", 50_000)]
    for row in rows:
        assert row["pairs_per_s"] > 0 and row["lines_per_s"] > 0 and row["bytes_per_pair"] > 0
        assert 0.9 * row["pairs"] < row["kept_pairs"] <= row["pairs"]
        assert row["translate_lines_in"] == row["translate_lines_out"] == 200
        assert row["train_steps"] == 5
        assert row["train_first_event_elapsed_s"] < row["train_first_update_s"] <= row["train_s"]
        assert row["train_rss_first_mb"] > 0 and row["train_rss_last_mb"] > 0
        for step in ("preprocess", "train", "translate"):
            assert row[f"{step}_peak_mb"] > 0
    lines = r.stdout.splitlines()
    assert re.fullmatch(r".+; flags: .+; threads \d+", lines[0])
    assert any(line.startswith("preprocess peak RSS (largest process) slope: ") for line in lines)
    assert long["long_budget"] == "15s" and long["long_events"] >= 1 and long["long_peak_mb"] > 0
    assert long["long_growth"] == long["long_rss_last10_mb"] / long["long_rss_first10_mb"]
    assert sum(line.startswith(("met ", "MISS")) for line in lines) == 5
