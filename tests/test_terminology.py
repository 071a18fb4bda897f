"""Terminology through the translator and `nmt translate`: glossaries (matching, bad files),
JSONL input, every constraint in the output on both architectures and ensembles, lowercased
models, unconstrained lines unchanged, the refusals (greedy, sampling, exports, lines too short
for their constraints), and one output line per input line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_translate import build_tiny_model_dir
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.data.vocab import Tokenizer
from nmt.decode.constraints import Glossary, parse_jsonl_line
from nmt.decode.options import DecodeOptions
from nmt.decode.paragraphs import translate_lines
from nmt.dirs import ExportDir, ModelDir
from nmt.engines.translator import Translator
from nmt.errors import NmtError

LINES = [
    "a man in a blue shirt is riding his bike .",
    "",
    "two dogs play in the snow .",
    "eine frau mit einem roten hut sitzt auf der bank .",
]
PHRASES = [["roten hut", "zwei"], [], ["park"], ["kinder spielen", "bank", "frau"]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("terms"))


@pytest.fixture(scope="module")
def translator(model_dir) -> Translator:
    return Translator.from_dir(ModelDir(model_dir), device="cpu")


def holds(tr: Translator, pieces: list[str], phrase: str) -> bool:
    want = [tr.tgt_tok.id_to_piece(i) for i in tr.tgt_tok.encode(phrase)]
    n = len(want)
    return any(pieces[i : i + n] == want for i in range(len(pieces) - n + 1))


# ---- glossary and JSONL input ----------------------------------------------------------------


def test_glossary_matches_whole_words_longest_first(tmp_path):
    path = tmp_path / "g.tsv"
    path.write_text("New York\tNew York\nNew York City\tNew York City\nYork City\tYC\n"
                    "cat\tKatze\nDr.\tDr.\n\n", encoding="utf-8")  # fmt: skip
    g = Glossary.load(path)
    assert g.constraints("I love New York City and New York.") == ["New York City", "New York"]
    assert g.constraints("Concatenate the cat, Dr. Who") == ["Katze", "Dr."]  # not in "Concatenate"
    assert g.constraints("the CAT") == [] and g.constraints("the CAT", lowercase=True) == ["Katze"]
    assert g.constraints("York City") == ["YC"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cat\n", "line 1: expected 'source term<TAB>target term', got 1 field(s)"),
        ("cat\tKatze\ndog\t \n", "line 2: expected 'source term<TAB>target term', got 2 field(s) "
                                 "with an empty term"),
        ("cat\tKatze\ncat\tKater\n", "line 2: 'cat' is already glossed as 'Katze'"),
    ],
)  # fmt: skip
def test_bad_glossary_lines_are_named(tmp_path, text, message):
    path = tmp_path / "g.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(NmtError) as e:
        Glossary.load(path)
    assert str(e.value) == f"{path}: {message}"
    with pytest.raises(NmtError, match="glossary file not found"):
        Glossary.load(tmp_path / "none.tsv")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{", "not JSON (Expecting property name enclosed in double quotes at column 2)"),
        ('["a"]', 'expected an object with a "text" string'),
        ('{"text": "a", "constraint": []}', "unknown field 'constraint' (fields: \"text\", "
                                            '"constraints")'),
        ('{"text": "a", "constraints": "b"}', '"constraints" must be a list of strings'),
        ('{"text": "a", "constraints": [" "]}', '"constraints" holds an empty phrase'),
    ],
)  # fmt: skip
def test_bad_jsonl_lines_are_named(raw, message):
    with pytest.raises(NmtError) as e:
        parse_jsonl_line(raw, "in.jsonl", 7)
    assert str(e.value) == f"in.jsonl: line 7: {message}"
    assert parse_jsonl_line('{"text": "a b", "constraints": ["c "]}', "x", 1) == ("a b", ["c"])


# ---- the translator --------------------------------------------------------------------------


def test_every_constraint_in_every_hypothesis_and_free_lines_unchanged(translator):
    free = translator.translate(LINES, beam_size=4, nbest=2)
    got = translator.translate(LINES, beam_size=4, nbest=2, constraints=PHRASES)
    assert len(got) == len(LINES) and got[1].text == ""
    for tr, phrases in zip(got, PHRASES, strict=True):
        for h in tr.hypotheses:
            assert all(holds(translator, h.tokens, p) for p in phrases), (phrases, h.text)
    assert [h.text for h in got[1].hypotheses] == [h.text for h in free[1].hypotheses]
    assert not holds(translator, free[0].hypotheses[0].tokens, "roten hut")  # not vacuous
    # a line alone gives what it gives in the batch
    (alone,) = translator.translate([LINES[3]], beam_size=4, nbest=2, constraints=[PHRASES[3]])
    assert [h.text for h in alone.hypotheses] == [h.text for h in got[3].hypotheses]


def test_ensembles_and_seq2seq_hold_constraints(model_dir, tmp_path):
    from test_export import VARIANTS, build_model_dir

    ensemble = Translator.from_dir([ModelDir(model_dir), ModelDir(model_dir)], device="cpu")
    rnn = Translator.from_dir(
        ModelDir(build_model_dir(tmp_path, VARIANTS["pre-tied-sin-relu"], model_type="seq2seq")),
        "cpu",
    )
    for tr in (ensemble, rnn):
        got = tr.translate(LINES, beam_size=4, constraints=PHRASES)
        for out, phrases in zip(got, PHRASES, strict=True):
            assert all(holds(tr, out.hypotheses[0].tokens, p) for p in phrases), out.text


def test_a_lowercased_model_takes_constraints_in_any_case(translator):
    lower = Translator(
        translator.model, translator.cfg,
        Tokenizer.load(translator.src_tok.path, lowercase=True),
        Tokenizer.load(translator.tgt_tok.path, lowercase=True), translator.device,
    )  # fmt: skip
    (got,) = lower.translate([LINES[0]], beam_size=4, constraints=[["ROTEN Hut"]])
    assert holds(lower, got.hypotheses[0].tokens, "roten hut")


def test_refusals_name_the_cause(translator):
    with pytest.raises(NmtError, match="^constraints need beam search with a beam of 2 or more$"):
        translator.translate(LINES, greedy=True, constraints=PHRASES)
    from nmt.decode.options import Sampling

    with pytest.raises(NmtError, match="^constraints need beam search, not sampling$"):
        translator.translate(LINES, beam_size=1, sampling=Sampling(), constraints=PHRASES)
    long = [["roten hut " * 8], [], [], []]
    with pytest.raises(NmtError) as e:
        translator.translate(LINES, beam_size=4, first_line=11, constraints=long)
    need = len(translator.tgt_tok.encode(long[0][0]))
    d = translator.cfg.decoding
    room = min(int(d.max_len_a * len(translator.src_tok.encode(LINES[0])) + d.max_len_b), 63)
    assert str(e.value) == (
        f"line 11: its constraints need {need} target subwords, more than the {room} its "
        "translation may hold (--max-len-a / --max-len-b, max_positions)"
    )
    with pytest.raises(NmtError) as e:
        translator.translate(LINES[:1], beam_size=4, first_line=3, constraints=[["Straße"]])
    assert str(e.value) == (
        "line 3: the constraint 'Straße' holds characters the model's target vocabulary lacks "
        "(it could only be written as <unk>)"
    )
    with pytest.raises(NmtError, match="2 constraint lists for 4 lines"):
        translator.translate(LINES, beam_size=4, constraints=PHRASES[:2])


def test_glossary_applies_per_sentence_and_explicit_constraints_keep_lines_whole(translator):
    from nmt.data.sentences import Segmenter

    glossary = Glossary((("dogs", "park"), ("shirt", "bank")))
    lines = ["Two dogs play. A man in a blue shirt sits.", "a man in a shirt ."]
    got = translate_lines(translator, lines, DecodeOptions(beam_size=4),
                          segmenter=Segmenter("en"), glossary=glossary)  # fmt: skip
    first = got[0].sentences
    assert first is not None and len(first) == 2  # split, each sentence with its own term
    assert holds(translator, first[0].hypotheses[0].tokens, "park")
    assert holds(translator, first[1].hypotheses[0].tokens, "bank")
    assert holds(translator, got[1].hypotheses[0].tokens, "bank")
    whole = translate_lines(translator, lines[:1], DecodeOptions(beam_size=4),
                            segmenter=Segmenter("en"), constraints=[["frau"]])  # fmt: skip
    assert whole[0].sentences is None and holds(translator, whole[0].hypotheses[0].tokens, "frau")


# ---- nmt translate ---------------------------------------------------------------------------


def test_cli_jsonl_input_and_glossary_one_line_per_line(model_dir, tmp_path, translator):
    records = [
        json.dumps({"text": t, "constraints": c}) for t, c in zip(LINES, PHRASES, strict=True)
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(records) + "\n", encoding="utf-8")
    runner = CliRunner()
    res = runner.invoke(app, ["translate", "-m", str(model_dir), "--input-format", "jsonl",
                              "-f", "jsonl", "--quiet", str(src)])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(out) == len(LINES) and out[1]["hypotheses"][0]["translation"] == ""
    for rec, phrases in zip(out, PHRASES, strict=True):
        assert all(holds(translator, rec["hypotheses"][0]["tokens"], p) for p in phrases)
    gloss = tmp_path / "g.tsv"
    gloss.write_text("dogs\tzwei kinder\n", encoding="utf-8")
    plain = tmp_path / "in.txt"
    plain.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    res = runner.invoke(app, ["translate", "-m", str(model_dir), "--glossary", str(gloss),
                              "--quiet", str(plain)])  # fmt: skip
    assert res.exit_code == 0, res.output
    texts = res.stdout.split("\n")[:-1]
    assert len(texts) == len(LINES) and "zwei kinder" in texts[2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(records[0] + "\nnot json\n", encoding="utf-8")
    res = runner.invoke(app, ["translate", "-m", str(model_dir), "--input-format", "jsonl",
                              "--quiet", str(bad)])  # fmt: skip
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {bad}: line 2: not JSON (Expecting value at column 1)"
    unknown = tmp_path / "unknown.tsv"
    unknown.write_text("dogs\tkinder\nbike\tStraße\n", encoding="utf-8")
    res = runner.invoke(app, ["translate", "-m", str(model_dir), "--glossary", str(unknown),
                              "--quiet", str(plain)])  # fmt: skip
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip() == (
        f"error: {unknown}: the target term 'Straße' holds characters the model's target "
        "vocabulary lacks (it could only be written as <unk>)"
    )
    res = runner.invoke(app, ["translate", "-m", str(model_dir), "--glossary", str(gloss),
                              "--greedy", str(plain)])  # fmt: skip
    assert res.exit_code == 2
    assert "--glossary: constraints need beam search with a beam of 2 or more" in res.stderr


@pytest.mark.slow
def test_an_export_refuses_constraints(tmp_path):
    pytest.importorskip("ctranslate2")
    from test_export import VARIANTS, build_model_dir

    from nmt.engines.ct2 import CT2Translator
    from nmt.export.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(
        ModelDir(build_model_dir(tmp_path, VARIANTS["pre-tied-sin-relu"])),
        tmp_path / "export",
        quiet=True,
    )
    ct2 = CT2Translator.from_dir(ExportDir(out), device="cpu")
    assert not ct2.capabilities.constraints
    with pytest.raises(NmtError, match="cannot apply them"):
        ct2.translate(["a b"], constraints=[["c"]])
    assert len(ct2.translate(["a b"], constraints=[[]])) == 1
    gloss = tmp_path / "g.tsv"
    gloss.write_text("a\tb\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["translate", "-m", str(out), "--glossary", str(gloss)])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "error: --glossary: constraints need a model directory: an `nmt export` decodes with "
        "CTranslate2, which cannot apply them"
    )
