"""What the package keeps to, read from its source: callers ask an engine's capabilities and
a model's contract, never which engine or architecture they hold (no `hasattr` / `getattr` on
them, no engine names compared, in Python or in the page's script); special ids come from the
model's vocabulary, never from a default; a command's body stays short (it parses, opens, calls
one library function and prints)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

NMT = Path(__file__).resolve().parent.parent / "nmt"
# every module; the model registry is the one place that builds a model from its architecture's name
SOURCES = sorted(NMT.rglob("*.py"))
BUILDER = NMT / "models" / "__init__.py"
# a model or engine itself (`getattr(cfg.model, key)` reads a config, not a model)
ASKED = re.compile(r"\b(hasattr|getattr)\((self\.)?(model|module|net|engine|translator|decoder)\b")
NAMED = re.compile(r"""[!=]==?\s*["'](ctranslate2|pytorch|transformer|seq2seq)["']""")
CONSTANT_DEFAULT = re.compile(r"(?<![!=<>])=\s*(PAD|UNK|BOS|EOS)_ID\b")
# the vocabulary defines nmt's own ids; the export manifest names its format
VOCABULARY = NMT / "data" / "vocab.py"
FORMATS = NMT / "dirs" / "export.py"


def _where(pattern: re.Pattern[str], paths: list[Path]) -> list[str]:
    """`path:line` of every line matching `pattern`."""
    return [
        f"{path.relative_to(NMT.parent)}:{n}"
        for path in paths
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]


def test_no_caller_asks_which_model_or_engine_it_holds():
    assert _where(ASKED, SOURCES) == []


def test_no_engine_or_architecture_name_is_compared():
    script = sorted((NMT / "serve" / "static").glob("*.js"))
    assert _where(NAMED, [p for p in SOURCES if p not in (BUILDER, FORMATS)] + script) == []


def test_special_ids_are_never_a_default():
    assert _where(CONSTANT_DEFAULT, [p for p in SOURCES if p != VOCABULARY]) == []


@pytest.mark.parametrize("module", sorted(p.stem for p in (NMT / "cli").glob("*.py")))
def test_a_command_body_stays_under_40_lines(module):
    tree = ast.parse((NMT / "cli" / f"{module}.py").read_text(encoding="utf-8"))
    long = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_cmd"):
            body = node.body[1:] if ast.get_docstring(node) else node.body
            lines = (body[-1].end_lineno or 0) - body[0].lineno + 1
            if lines >= 40:
                long[node.name] = lines
    assert long == {}
