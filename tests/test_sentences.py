"""Sentence splitting (nmt.data.sentences) and translating lines cut into pieces
(nmt.decode.paragraphs): the segmenter's hard cases in en, de, fr and cs, whitespace and blank
lines kept, long sentences fitted, and line N in giving line N out through a stand-in engine."""

from __future__ import annotations

import pytest
from test_translate import without_limit_warning

from nmt.data.sentences import Pieces, Segmenter, fit
from nmt.decode.engine import TextHypothesis, Translation
from nmt.decode.options import DecodeOptions
from nmt.decode.paragraphs import translate_lines
from nmt.dirs import ModelDir
from nmt.errors import NmtError

CASES = [
    # abbreviations, initials, decimals, quotes, legal references
    (
        "en",
        "Dr. Smith arrived at 3.5 p.m. He left early.",
        ["Dr. Smith arrived at 3.5 p.m.", "He left early."],
    ),
    ("en", 'He said "Stop." Then he ran.', ['He said "Stop."', "Then he ran."]),
    (
        "en",
        "See s. 12(1) of the Act. Paragraph (a) applies.",
        ["See s. 12(1) of the Act.", "Paragraph (a) applies."],
    ),
    (
        "en",
        "The U.S. economy grew 2.5% in 2019. Prices rose.",
        ["The U.S. economy grew 2.5% in 2019.", "Prices rose."],
    ),
    ("en", "J. Smith met Mr. Jones. They talked.", ["J. Smith met Mr. Jones.", "They talked."]),
    ("en", "It costs $3.50. Is it cheap? Yes!", ["It costs $3.50.", "Is it cheap?", "Yes!"]),
    (
        "de",
        "Dr. Müller kam z. B. um 15 Uhr. Er ging früh.",
        ["Dr. Müller kam z. B. um 15 Uhr.", "Er ging früh."],
    ),
    ("de", "Das kostet 3,50 Euro. Er zahlte.", ["Das kostet 3,50 Euro.", "Er zahlte."]),
    (
        "de",
        "Gemäß Abs. 2 Nr. 3 gilt dies. Der Rest nicht.",
        ["Gemäß Abs. 2 Nr. 3 gilt dies.", "Der Rest nicht."],
    ),
    ("de", "Er sagte: „Komm.“ Dann ging er.", ["Er sagte: „Komm.“", "Dann ging er."]),
    (
        "fr",
        "M. Dupont est arrivé. Il est parti tôt.",
        ["M. Dupont est arrivé.", "Il est parti tôt."],
    ),
    (
        "fr",
        "Voir l'art. 12(1) de la Loi. L'alinéa a) s'applique.",
        ["Voir l'art. 12(1) de la Loi.", "L'alinéa a) s'applique."],
    ),
    ("fr", "Il a dit « Arrête. » Puis il a couru.", ["Il a dit « Arrête. »", "Puis il a couru."]),
    (
        "fr",
        "Le prix est de 3,5 millions. Il a payé.",
        ["Le prix est de 3,5 millions.", "Il a payé."],
    ),
    (
        "cs",
        "Dr. Novák přišel např. v pondělí. Odešel brzy.",
        ["Dr. Novák přišel např. v pondělí.", "Odešel brzy."],
    ),
    ("cs", "Stojí to 3,50 Kč. Zaplatil.", ["Stojí to 3,50 Kč.", "Zaplatil."]),
    (
        "cs",
        "Podle čl. 5 odst. 2 to platí. Zbytek ne.",
        ["Podle čl. 5 odst. 2 to platí.", "Zbytek ne."],
    ),
]


@pytest.mark.parametrize(("lang", "text", "expected"), CASES)
def test_sentences_of_hard_cases(lang, text, expected):
    assert Segmenter(lang).sentences(text) == expected


def test_split_keeps_whitespace_and_blank_lines_and_join_uses_the_target_separator():
    seg = Segmenter("en")
    p = seg.split("  One. Two.\t")
    assert p == Pieces("  ", ["One.", "Two."], "\t")
    assert p.join(["Eins.", "Zwei. "], "de") == "  Eins. Zwei.\t"
    assert p.join(["", "Zwei."], "de") == "  Zwei.\t"  # an empty translation adds no space
    assert p.join(["一。", "二。"], "zh") == "  一。二。\t"
    assert seg.split("   ") == Pieces("   ", [], "")
    assert seg.split("   ").join([], "de") == "   "


def test_fit_cuts_at_punctuation_then_spaces_until_every_piece_fits():
    words = len  # a stand-in count: characters
    text = "aaaa bbbb, cccc dddd; eeee ffff"
    pieces = fit(text, words, 12)
    assert all(len(p) <= 12 for p in pieces)
    assert " ".join(pieces) == text  # nothing lost
    assert pieces[0] == "aaaa bbbb,"  # the comma, not the space before it
    assert fit("short", words, 12) == ["short"]
    assert "".join(fit("x" * 40, words, 12)) == "x" * 40  # no space at all: cut in the middle


class Words:
    """A stand-in tokenizer: one piece per word; not multilingual."""

    languages: list[str] = []

    def encode(self, text):
        return text.split()


class Upper:
    """A stand-in engine: the translation of a line is the line in capitals."""

    def __init__(self, max_source=6):
        self.src_tok, self.max_source, self.languages = Words(), max_source, ("en", "de")
        self.calls = []

    def translate(
        self, lines, options=None, *, first_line=1, on_warning=None, progress=None, keys=None
    ):
        self.calls.append(list(lines))
        self.keys = keys
        return [
            Translation(x, [TextHypothesis(x.upper(), x.split(), -1.0, -2.0)], x.split())
            for x in lines
        ]


def test_lines_under_the_limit_go_to_the_engine_as_they_are():
    engine = Upper()
    lines = ["a b. c d.", "", "e f"]
    out = translate_lines(engine, lines, DecodeOptions())
    assert engine.calls == [lines]  # splitting off: the same call as without this layer
    assert [t.text for t in out] == ["A B. C D.", "", "E F"]
    assert all(t.sentences is None for t in out)


def test_split_sentences_translates_pieces_and_gives_line_n_for_line_n():
    engine = Upper()
    lines = ["One two. Three four.", "", "  Five.  ", "Six seven eight nine ten eleven twelve."]
    warnings = []
    out = translate_lines(
        engine,
        lines,
        DecodeOptions(),
        segmenter=Segmenter("en"),
        tgt_lang="de",
        on_warning=warnings.append,
    )
    assert len(out) == len(lines)
    assert engine.calls == [
        ["One two.", "Three four.", "Five.", "Six seven eight nine", "ten eleven twelve."]
    ]
    assert [t.text for t in out] == [
        "ONE TWO. THREE FOUR.",
        "",
        "  FIVE.  ",
        "SIX SEVEN EIGHT NINE TEN ELEVEN TWELVE.",
    ]
    assert [t.source for t in out] == lines
    first = out[0]
    assert [s.source for s in first.sentences] == ["One two.", "Three four."]
    assert first.hypotheses[0].score == -2.0 and first.hypotheses[0].log_prob == -4.0
    assert first.to_json()["sentences"][1]["hypotheses"][0]["translation"] == "THREE FOUR."
    assert warnings == [  # its one sentence was over the limit
        "line 4: longer than the model's 6 source subwords: translated in 2 pieces cut at "
        "punctuation or spaces"
    ]


def test_a_long_line_is_cut_with_a_warning_not_truncated():
    engine = Upper(max_source=4)
    warnings = []
    line = "one two three, four five six seven"
    out = translate_lines(
        engine, ["short", line], DecodeOptions(), first_line=7, on_warning=warnings.append
    )
    assert [t.text for t in out] == ["SHORT", line.upper()]
    assert engine.calls == [["short", "one two three,", "four five six seven"]]
    assert warnings == [
        "line 8: longer than the model's 4 source subwords: translated in 2 pieces cut at "
        "punctuation or spaces"
    ]


def test_sampling_keys_follow_their_line_into_its_pieces():
    engine = Upper(max_source=3)
    translate_lines(engine, ["a b", "c d e f g", "h"], DecodeOptions(), keys=[10, 11, 12])
    assert engine.calls == [["a b", "c d e", "f g", "h"]] and engine.keys == [10, 11, 11, 12]


def test_split_refuses_nbest_attention_and_sampling():
    from nmt.decode.options import Sampling

    with pytest.raises(NmtError, match="--split-sentences takes beam or greedy search"):
        translate_lines(
            Upper(), ["a."], DecodeOptions(sampling=Sampling()), segmenter=Segmenter("en")
        )
    with pytest.raises(NmtError, match="use nbest 1"):
        translate_lines(Upper(), ["a."], DecodeOptions(nbest=2), segmenter=Segmenter("en"))
    with pytest.raises(NmtError, match="attention needs it off"):
        translate_lines(
            Upper(), ["a."], DecodeOptions(with_attention=True), segmenter=Segmenter("en")
        )


@pytest.mark.slow
def test_cli_gives_line_n_for_line_n_from_files_and_pipes(tmp_path):
    """A real (tiny, random) model through `nmt translate`: with and without --split-sentences,
    from a file and from a pipe, as many output lines as input lines; without it, the same text
    as the engine gives line by line."""
    import subprocess
    import sys

    from test_translate import build_tiny_model_dir

    from nmt.engines.translator import Translator

    model = build_tiny_model_dir(tmp_path)
    lines = [
        "A man rides. Two dogs play in the snow.",
        "",
        "  A woman sells flowers.  ",
        "The child plays. It is late. He sleeps.",
    ] * 3
    src = tmp_path / "in.en"
    src.write_text("".join(x + "\n" for x in lines))
    nmt = [sys.executable, "-m", "nmt", "translate", "-m", str(model), "-q", "--workers", "1"]
    outs = {}
    for split in (["--whole-lines"], ["--split-sentences"], []):
        from_file = subprocess.run(nmt + [str(src), *split], capture_output=True, text=True)
        piped = subprocess.run(nmt + split, input=src.read_text(), capture_output=True, text=True)
        assert from_file.returncode == 0 and piped.returncode == 0, from_file.stderr + piped.stderr
        assert from_file.stdout == piped.stdout
        assert from_file.stdout.count("\n") == len(lines)
        assert without_limit_warning(from_file.stderr) == ""  # --quiet: no note
        assert without_limit_warning(piped.stderr) == ""
        outs[split[0] if split else "default"] = from_file.stdout.split("\n")[:-1]
    # Without --quiet, the default says how many lines it split; asked for either way, it does not.
    loud = [a for a in nmt if a != "-q"]
    said = subprocess.run(loud + [str(src)], capture_output=True, text=True).stderr
    assert said.splitlines()[-1] == (
        f"note: {src}: 6 of 12 lines hold several sentences: each was translated sentence by "
        "sentence and joined (--whole-lines translates lines whole)"
    )
    piped = subprocess.run(loud, input=src.read_text(), capture_output=True, text=True).stderr
    assert piped.splitlines()[-1].startswith("note: <stdin>: 6 of 12 lines hold several")
    for flag in ("--whole-lines", "--split-sentences"):
        said = subprocess.run(loud + [str(src), flag], capture_output=True, text=True).stderr
        assert "note:" not in said
    whole, split_all, default = outs["--whole-lines"], outs["--split-sentences"], outs["default"]
    with Translator.from_dir(ModelDir(model), workers=1) as tr:
        assert whole == [t.text for t in tr.translate(lines)]
        assert split_all[2].startswith("  ") and split_all[2].endswith("  ")
        assert split_all[1] == ""
        # the default splits the lines of several sentences and leaves the others whole
        several = [len(Segmenter("en").sentences(x)) > 1 for x in lines]
        assert default == [s if m else w for s, w, m in zip(split_all, whole, several, strict=True)]
        assert any(several) and not all(several)
        one = tr.translate(["A man rides.", "Two dogs play in the snow."])
        assert split_all[0] == f"{one[0].text} {one[1].text}"


@pytest.mark.slow
def test_evaluate_splits_sentences_as_translate_does(tmp_path):
    """`nmt evaluate --split-sentences` writes what `nmt translate --split-sentences` writes."""
    import subprocess
    import sys

    from test_translate import build_tiny_model_dir

    model = build_tiny_model_dir(tmp_path)
    src = tmp_path / "in.en"
    src.write_text("A man rides. Two dogs play.\nThe child plays.\n")
    nmt = [sys.executable, "-m", "nmt"]
    t = subprocess.run(
        nmt + ["translate", "-m", str(model), str(src), "--split-sentences", "-q"],
        capture_output=True,
        text=True,
    )
    e = subprocess.run(
        nmt
        + [
            "evaluate",
            "-m",
            str(model),
            "--src",
            str(src),
            "-r",
            str(src),
            "--split-sentences",
            "-q",
            "-o",
            str(tmp_path / "hyp"),
        ],
        capture_output=True,
        text=True,
    )
    assert t.returncode == 0 and e.returncode == 0, t.stderr + e.stderr
    assert (tmp_path / "hyp").read_text() == t.stdout
    # by default it splits the line of two sentences too, and says so unless --quiet
    evaluate = nmt + ["evaluate", "-m", str(model), "--src", str(src), "-r", str(src)]
    said = subprocess.run(evaluate, capture_output=True, text=True)
    assert said.returncode == 0, said.stderr
    assert said.stderr.splitlines()[-1] == (
        f"note: {src}: 1 of 2 lines hold several sentences: each was translated sentence by "
        "sentence and joined (--whole-lines translates lines whole)"
    )
    quiet = subprocess.run(evaluate + ["-q"], capture_output=True, text=True)
    assert without_limit_warning(quiet.stderr) == "" and quiet.stdout == said.stdout


@pytest.mark.slow
def test_bench_paragraphs_prints_every_way_with_a_real_model(
    tmp_path, multi30k_mirror, monkeypatch
):
    """scripts/bench_paragraphs.py with a tiny model: a row for the oracle, no splitting and each
    installed segmenter, six k columns."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from test_translate import build_tiny_model_dir

    model = build_tiny_model_dir(tmp_path)
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench_paragraphs.py"
    env = {**os.environ, "NMT_CORPUS_MIRROR": str(multi30k_mirror)}
    r = subprocess.run(
        [sys.executable, str(script), "-m", str(model), "--corpus", str(tmp_path / "m30k")]
        + ["--captions", "120"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    rows = [x for x in r.stdout.splitlines() if x.startswith("| ") and "---" not in x]
    names = [x.split(" | ")[0][2:] for x in rows[1:]]
    assert names[:4] == [
        "oracle: each caption alone, joined",
        "no splitting",
        "nmt --split-sentences",
        "sentencex alone",
    ]
    assert all(x.count(" / ") == 6 for x in rows[1:])
