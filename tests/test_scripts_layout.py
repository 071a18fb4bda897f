"""The scripts' walls, as tests/test_layout.py holds the package's: no import cycles among the
modules of scripts/, each script short, each function short.

Read with `ast` (nothing is imported), counting imports inside functions too, since those are the
edges that hide cycles. A script imports another by its bare name (scripts/ is on sys.path).
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
MAX_SCRIPT_LINES = 450
MAX_FUNCTION_LINES = 70

FILES = {p.stem: p for p in sorted(SCRIPTS.glob("*.py"))}
TREES = {name: ast.parse(p.read_text(encoding="utf-8")) for name, p in FILES.items()}


def imports_of(tree: ast.AST) -> set[str]:
    """The scripts' modules a module imports anywhere in its text."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found & set(FILES)


GRAPH = {name: imports_of(tree) - {name} for name, tree in TREES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that returns to its start, or None."""
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as error:
        return list(error.args[1])
    return None


def test_find_cycle_finds_one_and_the_graph_sees_imports_in_functions() -> None:
    cycle = find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}})
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    text = "import flatrun\ndef f():\n    from expt_score import read\n    import json\n"
    assert imports_of(ast.parse(text)) == {"flatrun", "expt_score"}


def test_no_import_cycle_among_scripts() -> None:
    assert find_cycle(GRAPH) is None


def test_scripts_are_short() -> None:
    lines = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in FILES.items()}
    assert {n: k for n, k in lines.items() if k > MAX_SCRIPT_LINES} == {}


def test_functions_are_short() -> None:
    long = {
        f"{name}.{node.name}:{node.lineno}": node.end_lineno - node.lineno + 1
        for name, tree in TREES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert long == {}
