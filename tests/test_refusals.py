"""Every refusal a user of `nmt translate`, `nmt rescore`, `nmt attention` and `nmt evaluate`
meets about their options, met by a library user too, with the same message: the command line
prints it as one line (exit 2, no traceback), the library raises it (an option named by its
field there, by its flag on the command line: `OptionError`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_translate import build_tiny_model_dir
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.cli.errors import cli_message
from nmt.decode.constraints import Glossary
from nmt.decode.engine import Engine
from nmt.decode.lines import check_model_dirs
from nmt.decode.options import DecodeOptions, Sampling, sampling_options
from nmt.decode.rescore import rescore_files
from nmt.decode.translate_files import check_engine, check_target, translate_files
from nmt.dirs import open_dirs
from nmt.engines.loading import open_translator
from nmt.errors import NmtError
from nmt.eval.printing import check_width


@dataclass
class Place:
    """What the refusals are asked about: a model, its export, an input, a glossary, and both
    engines loaded."""

    model: Path
    export: Path
    src: Path
    glossary: Path
    missing: Path
    engine: Engine
    ct2: Engine

    def fill(self, args: list[str]) -> list[str]:
        """The command line with {model}, {export}, {src}, {glossary} and {missing} filled in."""
        return [a.format(**{k: str(v) for k, v in vars(self).items()}) for a in args]


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Place:
    pytest.importorskip("ctranslate2")
    root = tmp_path_factory.mktemp("refusals")
    model = build_tiny_model_dir(root)
    export = root / "export"
    result = CliRunner().invoke(app, ["export", "-m", str(model), "-o", str(export), "-q"])
    assert result.exit_code == 0, result.output
    src, glossary = root / "in.txt", root / "terms.tsv"
    src.write_text("a b c\n", encoding="utf-8")
    glossary.write_text("a\tb\n", encoding="utf-8")
    engine = open_translator(open_dirs([str(model)]), device="cpu")
    ct2 = open_translator(open_dirs([str(export)]), device="cpu")
    return Place(model, export, src, glossary, root / "none", engine, ct2)


def files(p: Place, engine: Engine | None = None, **kwargs: Any) -> None:
    """`translate_files` of the input into a file beside it."""
    translate_files(engine or p.engine, [str(p.src)], str(p.src) + ".out", **kwargs)


def target(p: Place, target_lang: str) -> None:
    """The target language checked against the model directory before its model loads."""
    check_target(open_dirs([str(p.model)])[0], str(p.model), target_lang)


TRANSLATE = ["translate", "-m", "{model}", "{src}", "-o", "{src}.out", "--device", "cpu", "-q"]
EXPORTED = ["translate", "-m", "{export}", "{src}", "-o", "{src}.out", "--device", "cpu", "-q"]
# (name, command line, the library call that refuses the same)
CASES: list[tuple[str, list[str], Callable[[Place], object]]] = [
    ("format", [*TRANSLATE, "--format", "xml"], lambda p: files(p, fmt="xml")),
    ("errors", [*TRANSLATE, "--errors", "x"], lambda p: files(p, errors="x")),
    (
        "attention-text",
        [*TRANSLATE, "--with-attention"],
        lambda p: files(p, with_attention=True),
    ),
    ("nbest", [*TRANSLATE, "--nbest", "0"], lambda p: files(p, nbest=0)),
    ("buffer", [*TRANSLATE, "--buffer-size", "0"], lambda p: files(p, buffer_size=0)),
    (
        "missing-input",
        ["translate", "-m", "{model}", "{missing}"],
        lambda p: translate_files(p.engine, [str(p.missing)]),
    ),
    (
        "directory-input",
        ["translate", "-m", "{model}", "{model}"],
        lambda p: translate_files(p.engine, [str(p.model)]),
    ),
    (
        "missing-model",
        ["translate", "-m", "{missing}", "{src}"],
        lambda p: check_model_dirs([str(p.missing)]),
    ),
    (
        "input-format",
        [*TRANSLATE, "--input-format", "xml"],
        lambda p: files(p, input_format="xml"),
    ),
    (
        "missing-glossary",
        [*TRANSLATE, "--glossary", "{missing}"],
        lambda p: Glossary.load(p.missing),
    ),
    (
        "target-lang",
        [*TRANSLATE, "--target-lang", "fra"],
        lambda p: target(p, "fra"),
    ),
    (
        "glossary-export",
        [*EXPORTED, "--glossary", "{glossary}"],
        lambda p: files(p, p.ct2, glossary=Glossary.load(p.glossary)),
    ),
    (
        "glossary-greedy",
        [*TRANSLATE, "--glossary", "{glossary}", "--greedy"],
        lambda p: files(p, glossary=Glossary.load(p.glossary), greedy=True),
    ),
    (
        "sampling-flags",
        [*TRANSLATE, "--temperature", "2"],
        lambda p: sampling_options(False, 2.0, None, None, None),
    ),
    (
        "sampling-beam",
        [*TRANSLATE, "--sampling", "--beam-size", "4"],
        lambda p: files(p, sampling=Sampling(), beam_size=4),
    ),
    (
        "temperature",
        [*TRANSLATE, "--sampling", "--temperature", "0"],
        lambda p: Sampling(temperature=0.0),
    ),
    ("beam-size", [*TRANSLATE, "--beam-size", "0"], lambda p: files(p, beam_size=0)),
    (
        "nbest-beam",
        [*TRANSLATE, "--beam-size", "2", "--nbest", "3"],
        lambda p: files(p, beam_size=2, nbest=3),
    ),
    (
        "split-nbest",
        [*TRANSLATE, "--split-sentences", "--beam-size", "2", "--nbest", "2", "-f", "jsonl"],
        lambda p: files(p, split_sentences=True, beam_size=2, nbest=2, fmt="jsonl"),
    ),
    (
        "sampling-export",
        [*EXPORTED, "--sampling"],
        lambda p: check_engine(p.ct2, DecodeOptions(sampling=Sampling()), str(p.export)),
    ),
    (
        "precision-export",
        [*EXPORTED, "--precision", "bf16"],
        lambda p: open_translator(open_dirs([str(p.export)]), precision="bf16"),
    ),
    (
        "attention-kind",
        ["attention", "a b", "-m", "{model}", "-o", "{src}.png", "--kind", "both"],
        lambda p: p.engine.attention("a b", kind="both"),
    ),
    (
        "rescore-format",
        ["rescore", "{src}", "{src}", "-m", "{model}", "--format", "xml"],
        lambda p: rescore_files(p.engine, str(p.src), str(p.src), fmt="xml"),
    ),
    (
        "width",
        ["evaluate", "-m", "{model}", "--src", "{src}", "--ref", "{src}", "-w", "-1"],
        lambda p: check_width(-1),
    ),
]


@pytest.mark.parametrize(("args", "call"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_command_line_and_the_library_refuse_alike(place, args, call):
    with pytest.raises(NmtError) as refused:
        call(place)
    result = CliRunner().invoke(app, place.fill(args))
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {cli_message(refused.value)}\n"
    assert "Traceback" not in result.output
