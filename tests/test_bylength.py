"""`nmt score --by-length`: every line in exactly one bucket, per-bucket scores equal to sacrebleu on
that subset, empty buckets reported, bucket parsing, labels, the PNGs (absolute and relative to the
shortest bucket)."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest
import sacrebleu
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.errors import NmtError
from nmt.eval import bylength, scoring
from nmt.eval.bylength import Bucket, parse_buckets

WORDS = "a man in the blue shirt rides his bike down street two dogs play snow".split()


def corpus(n: int = 120, seed: int = 3) -> tuple[list[str], list[str], list[str], list[str]]:
    """Sources of 1..70 words, references, and two noisy 'systems' (word drops / swaps)."""
    rng = random.Random(seed)
    src = [" ".join(rng.choices(WORDS, k=rng.randint(1, 70))) for _ in range(n)]
    ref = [" ".join(rng.choices(WORDS, k=rng.randint(3, 30))) for _ in range(n)]
    sys1 = [" ".join(w for w in r.split() if rng.random() > 0.2) for r in ref]
    sys2 = [" ".join(rng.sample(r.split(), len(r.split()))) for r in ref]
    return src, ref, sys1, sys2


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def test_parse_buckets_and_errors():
    assert parse_buckets("0-5,5-20,20+") == [Bucket(0, 5), Bucket(5, 20), Bucket(20, None)]
    assert [b.label for b in parse_buckets(None)] == bylength.DEFAULT_BUCKETS.split(",")
    for spec, message in [
        ("0-10,12-20", "--buckets: 0-10 and 12-20 must meet (gap or overlap)"),
        ("0-10,5-20", "--buckets: 0-10 and 5-20 must meet (gap or overlap)"),
        ("10-10", "--buckets: '10-10' is empty (the end must exceed the start)"),
        ("0-10,10+,20-30", "--buckets: 10+ is open-ended, so it must come last"),
        ("short", "--buckets: 'short' is not LO-HI or LO+"),
    ]:
        with pytest.raises(NmtError, match="^" + message.replace("+", r"\+").replace("(", r"\(")
                           .replace(")", r"\)")):  # fmt: skip
            parse_buckets(spec)


def test_buckets_are_half_open_and_cover_each_line_once():
    lengths = [0, 9, 10, 19, 20, 49, 50, 500]
    groups, outside = bylength.assign(lengths, parse_buckets("0-10,10-20,20-50,50+"))
    assert groups == [[0, 1], [2, 3], [4, 5], [6, 7]] and outside == 0
    groups, outside = bylength.assign(lengths, parse_buckets("10-20,20-50"))
    assert groups == [[2, 3], [4, 5]] and outside == 4


def test_per_bucket_scores_equal_sacrebleu_on_the_subset():
    src, ref, sys1, sys2 = corpus()
    buckets = parse_buckets(None)
    report = bylength.score_by_length(src, [("s1", sys1), ("s2", sys2)], [ref], buckets,
                                      metrics=["bleu", "chrf"])  # fmt: skip
    lines = [i for b in report.buckets for i in b.lines]
    assert sorted(lines) == list(range(len(src))) and report.outside == 0  # each line once
    for b in report.buckets:
        assert all(b.bucket.holds(len(src[i].split())) for i in b.lines)
        for s, hyps in enumerate((sys1, sys2)):
            sub_h, sub_r = [hyps[i] for i in b.lines], [[ref[i] for i in b.lines]]
            bleu, chrf = b.scores[s]
            assert bleu.score == pytest.approx(sacrebleu.corpus_bleu(sub_h, sub_r).score, abs=1e-9)
            assert chrf.score == pytest.approx(sacrebleu.corpus_chrf(sub_h, sub_r).score, abs=1e-9)


def test_empty_bucket_has_no_score():
    hyp = ["a man rides his bike", "two dogs play in the snow"]
    report = bylength.score_by_length(["a b", "a b c"], [("x", hyp)], [hyp],
                                      parse_buckets("0-5,5-10,10+"))  # fmt: skip
    rows = report.to_json()
    assert [(r["bucket"], r["lines"], r["score"]) for r in rows] == [
        ("0-5", 2, 100.0), ("5-10", 0, None), ("10+", 0, None)
    ]  # fmt: skip
    # every row has the same keys, and the empty ones the metric's name and signature
    assert all(r.keys() == rows[0].keys() for r in rows)
    assert rows[1]["name"] == rows[0]["name"] and rows[1]["signature"] == rows[0]["signature"]


def test_subword_lengths_and_length_errors(tmp_path):
    from nmt.data.vocab import Tokenizer, train_spm

    src, *_ = corpus(60)
    spm = train_spm(src, tmp_path / "spm", vocab_size=40)
    tok = Tokenizer.load(spm)
    assert bylength.source_lengths(src, "subword", spm) == [len(tok.encode(x)) for x in src]
    with pytest.raises(NmtError, match="^--length-unit subword needs --spm"):
        bylength.source_lengths(src, "subword")
    with pytest.raises(NmtError, match="^--length-unit: expected one of word, subword"):
        bylength.source_lengths(src, "char")
    with pytest.raises(NmtError, match="^line counts differ: src.txt has 2 lines, the refer"):
        bylength.score_by_length(["a", "b"], [("x", ["a"])], [["a"]], parse_buckets(None),
                                 source_name="src.txt")  # fmt: skip


def test_labels():
    assert bylength.system_labels(["a/hyp.de", "b/other.de"], None) == ["hyp.de", "other.de"]
    assert bylength.system_labels(["a/hyp.de", "b/hyp.de"], None) == ["a/hyp.de", "b/hyp.de"]
    assert bylength.system_labels(["a", "b"], ["X", "Y"]) == ["X", "Y"]
    with pytest.raises(NmtError, match=r"^--label given 1 times for 2 hypothesis file\(s\)$"):
        bylength.system_labels(["a", "b"], ["X"])


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_cli_json_counts_and_plot(tmp_path):
    src, ref, sys1, sys2 = corpus()
    paths = [write(tmp_path / n, x) for n, x in
             [("src.en", src), ("ref.de", ref), ("s1.de", sys1), ("s2.de", sys2)]]  # fmt: skip
    png = tmp_path / "by_length.png"
    r = CliRunner().invoke(
        app,
        [
            "score",
            "--by-length",
            paths[0],
            paths[2],
            paths[3],
            "-r",
            paths[1],
            "--json",
            "--plot",
            str(png),
            "--plot-relative",
            str(tmp_path / "relative.png"),
            "--label",
            "A",
            "--label",
            "B",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert {row["system"] for row in rows} == {"A", "B"}
    a = [row for row in rows if row["system"] == "A"]
    assert [row["bucket"] for row in a] == bylength.DEFAULT_BUCKETS.split(",")
    assert sum(row["lines"] for row in a) == len(src)
    for row in a:
        idx = [i for i, s in enumerate(src) if Bucket(row["lo"], row["hi"]).holds(len(s.split()))]
        assert row["lines"] == len(idx)
        expected = sacrebleu.corpus_bleu([sys1[i] for i in idx], [[ref[i] for i in idx]])
        assert row["score"] == pytest.approx(round(expected.score, 1))
    assert png_size(png) == (700, 450)
    assert png_size(tmp_path / "relative.png") == (700, 450)
    # the plain table: one row per bucket, then the notes and signatures
    r = CliRunner().invoke(app, ["score", "--by-length", paths[0], paths[2], "-r", paths[1]])
    body = [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]
    assert body[0].split("\t") == ["bucket", "lines", "mean len", "BLEU"] and len(body) == 7


def test_relative_series_is_percent_of_first_scored_bucket():
    def bucket(lo, hi, lines, scores):
        return bylength.BucketScores(Bucket(lo, hi), lines, 5.0 if lines else None, scores)

    def res(x):
        return [scoring.Result("BLEU", x, "sig")]

    report = bylength.ByLength("word", ["A", "B"], ["bleu"], [
        bucket(0, 10, [], [[], []]),  # empty: the first *scored* bucket is the reference
        bucket(10, 20, [0], [res(20.0), res(0.0)]),
        bucket(20, None, [1], [res(5.0), res(3.0)]),
    ], 0)  # fmt: skip
    assert bylength.relative_series(report) == [[None, 100.0, 25.0], [None, None, None]]


def test_cli_option_errors(tmp_path):
    src, ref, sys1, _ = corpus(10)
    s, rf, h = (write(tmp_path / n, x) for n, x in [("s", src), ("r", ref), ("h", sys1)])
    run = CliRunner().invoke
    r = run(app, ["score", h, "-r", rf, "--plot", str(tmp_path / "x.png")])
    assert (
        r.exit_code == 2 and "--plot-relative and --label go with --by-length SRC_FILE" in r.output
    )
    r = run(app, ["score", "--by-length", s, h, "-r", rf, "--paired-bs"])
    assert r.exit_code == 2 and "--by-length cannot be combined" in r.output
    r = run(app, ["score", "--by-length", s, h, "-r", rf, "--plot", str(tmp_path / "x.jpg")])
    assert r.exit_code == 2 and "the plot is written as PNG" in r.output
    # checked before anything is scored or drawn: the good --plot is not written either
    good = tmp_path / "ok.png"
    args = ["--plot", str(good), "--plot-relative", str(tmp_path / "rel.svg")]
    r = run(app, ["score", "--by-length", s, h, "-r", rf, *args])
    assert r.exit_code == 2 and "rel.svg: the plot is written as PNG" in r.output
    assert not good.exists() and r.stdout.count("BLEU") == 0
