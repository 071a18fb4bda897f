"""nmt.eval.scoring against sacrebleu's own API: same numbers, same signatures, for every option."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from nmt.errors import NmtError
from nmt.eval import printing as scoring_report
from nmt.eval import scoring


def _val_de(repo_root: Path) -> Path:
    """Multi30k val.de.gz from the local mirror (NMT_CORPUS_MIRROR or ../shared beside the repo)."""
    env = os.environ.get("NMT_CORPUS_MIRROR")
    mirror = Path(env) if env else repo_root.parent / "shared/corpora/multi30k"
    return mirror / "val.de.gz"


def _perturb(lines: list[str], seed: int) -> list[str]:
    """A plausible 'system output': dropped, swapped, re-cased and substituted words."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        for _ in range(rng.randint(0, 3)):
            if len(words) < 2:
                break
            i = rng.randrange(len(words))
            op = rng.choice(["drop", "swap", "case", "sub"])
            if op == "drop":
                words.pop(i)
            elif op == "swap":
                j = rng.randrange(len(words))
                words[i], words[j] = words[j], words[i]
            elif op == "case":
                words[i] = words[i].upper() if rng.random() < 0.5 else words[i].lower()
            else:
                words[i] = rng.choice(["der", "ein", "Hund", "läuft", "über", "Straße", "."])
        out.append(" ".join(words))
    return out


@pytest.fixture(scope="module")
def data(repo_root) -> dict[str, list[str]]:
    """60 real German references (Multi30k val), a second reference, two perturbed systems."""
    val_de = _val_de(repo_root)
    if val_de.exists():
        with gzip.open(val_de, "rt", encoding="utf-8") as f:
            ref = [next(f).rstrip("\n") for _ in range(60)]
    else:  # the corpus is read-only shared data; keep the test meaningful without it
        ref = [f"Ein Mann mit Hut {i} läuft über die Straße ." for i in range(60)]
    return {
        "ref": ref,
        "ref2": _perturb(ref, 7),
        "hyp": _perturb(ref, 1),
        "hyp2": _perturb(ref, 2),
    }


# (metric, nmt options, sacrebleu constructor, number of refs)
CASES = [
    ("bleu", {}, lambda: BLEU(), 1),
    ("bleu", {}, lambda: BLEU(), 2),
    ("bleu", {"lowercase": True}, lambda: BLEU(lowercase=True), 1),
    ("bleu", {"tokenize": "intl"}, lambda: BLEU(tokenize="intl"), 1),
    ("bleu", {"tokenize": "zh"}, lambda: BLEU(tokenize="zh"), 1),
    ("bleu", {"tokenize": "char"}, lambda: BLEU(tokenize="char"), 2),
    (
        "bleu",
        {"tokenize": "none", "lowercase": True},
        lambda: BLEU(tokenize="none", lowercase=True),
        1,
    ),
    ("chrf", {}, lambda: CHRF(), 1),
    ("chrf", {}, lambda: CHRF(), 2),
    ("chrf", {"lowercase": True}, lambda: CHRF(lowercase=True), 1),
    ("chrf++", {}, lambda: CHRF(word_order=2), 1),
    ("chrf++", {"lowercase": True}, lambda: CHRF(word_order=2, lowercase=True), 2),
    ("chrf", {"chrf_word_order": 2}, lambda: CHRF(word_order=2), 1),
    ("ter", {}, lambda: TER(), 1),
    ("ter", {}, lambda: TER(), 2),
    ("ter", {"ter_case_sensitive": True}, lambda: TER(case_sensitive=True), 1),
]


@pytest.mark.parametrize("metric,opts,make,nrefs", CASES)
def test_corpus_score_equals_sacrebleu_api(data, metric, opts, make, nrefs):
    """Score and signature are exactly sacrebleu's for the same options."""
    refs = [data["ref"], data["ref2"]][:nrefs]
    ours = scoring.score(data["hyp"], refs, metrics=[metric], **opts)
    assert len(ours) == 1
    m = make()
    theirs = m.corpus_score(data["hyp"], refs)
    assert ours[0].name == theirs.name
    assert ours[0].score == theirs.score
    assert ours[0].signature == m.get_signature().format()
    assert ours[0].line(2) == theirs.format(2, False, m.get_signature().format())
    assert 0.0 < ours[0].score < 100.0  # the data exercises the metric (not a trivial 0/100)


def test_options_change_the_numbers(data):
    """The option table is not vacuous: each option moves the score on these inputs."""

    def one(metric, **kw):
        return scoring.score(data["hyp"], [data["ref"]], metrics=[metric], **kw)[0].score

    assert one("bleu", lowercase=True) != one("bleu")
    assert one("bleu", tokenize="char") != one("bleu")
    assert one("chrf++") != one("chrf")
    assert one("ter", ter_case_sensitive=True) != one("ter")
    two = scoring.score(data["hyp"], [data["ref"], data["ref2"]], metrics=["bleu"])[0]
    assert two.signature.startswith("nrefs:2|")


def test_several_metrics_come_in_sacrebleus_order(data):
    """`-m ter -m bleu` reports BLEU then TER, as the sacrebleu command prints them (sorted by
    name); names follow sacrebleu (chrF2++)."""
    res = scoring.score(data["hyp"], [data["ref"]], metrics=["ter", "bleu", "chrf++"])
    assert [r.name for r in res] == ["BLEU", "chrF2++", "TER"]


def test_identical_hypothesis_gives_100_and_exact_lengths():
    """Hand-checkable case: BLEU 100, precisions 100, BP 1, lengths are token counts."""
    lines = ["the cat sat on the mat .", "a dog runs in the park"]
    (r,) = scoring.score(lines, [lines], metrics=["bleu"])
    assert r.score == pytest.approx(100.0)
    assert r.verbose["precisions"] == pytest.approx([100.0] * 4)
    assert r.verbose["bp"] == 1.0 and r.verbose["ratio"] == 1.0
    assert r.verbose["hyp_len"] == r.verbose["ref_len"] == 13
    assert r.verbose["counts"] == [13, 11, 9, 7]


def test_bleu_json_fields(data):
    """to_dict = sacrebleu's JSON object plus the verbose numbers."""
    (r,) = scoring.score(data["hyp"], [data["ref"]])
    m = BLEU()
    s = m.corpus_score(data["hyp"], [data["ref"]])
    d = r.to_dict(2)
    assert d["name"] == "BLEU" and d["score"] == float(f"{s.score:.2f}")
    assert d["signature"] == m.get_signature().format()
    assert d["verbose_score"] == s._verbose
    assert d["precisions"] == s.precisions and d["bp"] == s.bp
    assert d["hyp_len"] == s.sys_len and d["ref_len"] == s.ref_len
    assert d["ratio"] == s.sys_len / s.ref_len
    assert d["nrefs"] == "1" and d["tok"] == "13a"


def test_trailing_whitespace_is_ignored_like_the_sacrebleu_command(data):
    """The command rstrips lines; so do we (TER would otherwise count the spaces)."""
    spaced = [h + "  " for h in data["hyp"]]
    a = scoring.score(spaced, [data["ref"]], metrics=["bleu", "chrf", "ter"])
    b = scoring.score(data["hyp"], [data["ref"]], metrics=["bleu", "chrf", "ter"])
    assert [x.score for x in a] == [x.score for x in b]


def test_score_systems_equals_separate_scores(data):
    """Cached reference n-grams give the same scores as scoring each system alone."""
    rows = scoring.score_systems([data["hyp"], data["hyp2"]], [data["ref"]], ["bleu", "ter"])
    for hyps, row in zip([data["hyp"], data["hyp2"]], rows, strict=True):
        alone = scoring.score(hyps, [data["ref"]], metrics=["bleu", "ter"])
        assert [r.score for r in row] == [r.score for r in alone]
    assert rows[0][0].score != rows[1][0].score


def test_sentence_scores_equal_sacrebleu_sentence_score(data):
    """Sentence BLEU uses effective order (as `sacrebleu -sl`); chrF per line too."""
    per_line = scoring.sentence_scores(data["hyp"][:20], [data["ref"][:20]], ["bleu", "chrf"])
    assert len(per_line) == 20
    bleu, chrf = BLEU(effective_order=True), CHRF()
    for i, (b, c) in enumerate(per_line):
        assert b.score == bleu.sentence_score(data["hyp"][i], [data["ref"][i]]).score
        assert c.score == chrf.sentence_score(data["hyp"][i], [data["ref"][i]]).score
    assert "eff:yes" in per_line[0][0].signature


@pytest.mark.parametrize("test,n", [("bs", 200), ("ar", 300)])
def test_paired_test_equals_sacrebleu_pairedtest(data, test, n):
    """Scores, means, CIs and p-values are sacrebleu's PairedTest's, baseline first."""
    systems = [("base", data["hyp"]), ("sys1", data["hyp2"]), ("sys2", data["ref2"])]
    ours = scoring.paired_test(systems, [data["ref"]], ["bleu", "chrf"], test, n)
    metrics = {"bleu": BLEU(references=[data["ref"]]), "chrf": CHRF(references=[data["ref"]])}
    ar_ci = 1000 if test == "ar" else -1
    sigs, theirs = PairedTest(systems, metrics, None, test, n, n_ar_confidence=ar_ci)()
    assert [[r.system for r in row] for row in ours] == [["base"] * 2, ["sys1"] * 2, ["sys2"] * 2]
    assert [r.baseline for row in ours for r in row] == [True, True] + [False] * 4
    for j, name in enumerate(["BLEU", "chrF2"]):
        for i in range(3):
            r, t = ours[i][j], theirs[name][i]
            assert (r.name, r.score, r.mean, r.ci, r.p_value) == (
                name,
                t.score,
                t.mean,
                t.ci,
                t.p_value,
            )
            assert r.signature == sigs[name].format()
        assert ours[0][j].p_value is None and ours[1][j].p_value is not None
        assert f"{test}:{n}" in ours[0][j].signature and "seed:12345" in ours[0][j].signature
    assert ours[1][0].mean is not None and ours[1][0].ci > 0


def test_paired_text_cell_matches_sacrebleu_format():
    """The cell reads like sacrebleu's table: score (mean ± ci) (p = ...)* with p <= 0.05."""
    r = scoring.PairedResult("s", "BLEU", 35.123, 35.01, 1.26, 0.031, "sig")
    assert r.text(1) == "35.1 (35.0 ± 1.3) (p = 0.0310)*"
    r.p_value = 0.2
    assert r.text(2) == "35.12 (35.01 ± 1.26) (p = 0.2000)"


def test_align_lines_like_sacrebleu():
    """Text before '=' is right-aligned across metrics."""
    assert scoring_report.align_lines(["AB|x = 1", "A|xyz = 2"]) == [" AB|x = 1", "A|xyz = 2"]


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: scoring.score(["a"], [["a", "b"]]), "hypotheses has 1 lines, reference 1 has 2"),
        (lambda: scoring.score([], [[]]), "empty hypothesis"),
        (lambda: scoring.score(["a"], []), "no reference given"),
        (lambda: scoring.score(["a"], [["a"]], metrics=["bleurt"]), "unknown metric 'bleurt'"),
        (lambda: scoring.score(["a"], [["a"]], tokenize="moses"), "unknown tokenizer 'moses'"),
        (lambda: scoring.paired_test([("a", ["x"])], [["x"]]), "at least two systems"),
        (lambda: scoring.paired_test([("a", ["x"])] * 2, [["x"]], test="t"), "unknown paired"),
        # sacrebleu takes these silently: a negative order, chrf++ ignoring it, a default n
        (lambda: scoring.score(["a"], [["a"]], metrics=["chrf"], chrf_word_order=-1),
         r"^--chrf-word-order must be >= 0, got -1$"),
        (lambda: scoring.score(["a"], [["a"]], metrics=["chrf++"], chrf_word_order=1),
         r"^--chrf-word-order 1 goes with -m chrf; chrf\+\+ is chrF with word order 2$"),
        (lambda: scoring.paired_test([("a", ["x"])] * 2, [["x"]], n_samples=-5),
         r"^--paired-n must be >= 0 \(0: sacrebleu's default\), got -5$"),
    ],
)  # fmt: skip
def test_library_errors_are_nmterror(call, message):
    """Bad arguments are NmtError with a message a user can act on."""
    with pytest.raises(NmtError, match=message):
        call()


def test_parse_metrics():
    """Repeated, comma-separated and upper-case names normalise; duplicates collapse."""
    assert scoring.parse_metrics(["BLEU,chrF++", "ter", "bleu"]) == ["bleu", "chrf++", "ter"]
    assert scoring.parse_metrics([]) == ["bleu"]


def test_rich_tables_render_scores_and_details(data):
    """The terminal tables carry the numbers (the CLI prints signatures under them)."""
    from rich.console import Console

    rows = [("sysA", scoring.score(data["hyp"], [data["ref"]], metrics=["bleu", "ter"]))]
    console = Console(record=True, width=100)
    console.print(scoring_report.rich_table(rows, width=2))
    text = console.export_text()
    assert f"{rows[0][1][0].score:.2f}" in text and "BP =" in text and "TER" in text
    assert scoring_report.signature_lines(rows[0][1])[0] == f"BLEU|{rows[0][1][0].signature}"
    paired = scoring.paired_test(
        [("a", data["hyp"]), ("b", data["hyp2"])], [data["ref"]], n_samples=50
    )
    console.print(scoring_report.rich_paired_table(paired, "bs", 50, width=1))
    text = console.export_text()
    assert "Baseline: a" in text and f"{paired[1][0].p_value:.4f}" in text
