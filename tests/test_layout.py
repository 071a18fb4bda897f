"""The package's walls: layers import only downwards, no import cycles, modules and functions short.

Read with `ast` (nothing is imported), counting imports inside functions and under TYPE_CHECKING,
since those are the edges that hide cycles.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nmt"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 70
MAX_TOP_MODULES = 12

# Lowest first. A module may import its own layer (without a cycle) and the layers below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("nmt", "nmt.errors", "nmt.textio", "nmt.runtime", "nmt.config", "nmt.device")),
    ("plots", ("nmt.plots",)),
    ("data", ("nmt.data", "nmt.dirs")),  # nmt.dirs: every on-disk format, beside the data
    ("curves", ("nmt.plots.curves",)),  # training curves from a model directory's metrics
    ("models", ("nmt.models",)),
    ("loaded", ("nmt.dirs.loaded",)),  # a model directory's model built and loaded
    ("pretrained", ("nmt.pretrained",)),
    ("decode", ("nmt.decode",)),
    ("engines", ("nmt.engines",)),
    ("eval", ("nmt.eval",)),
    ("train", ("nmt.train",)),
    ("export", ("nmt.export",)),
    ("serve", ("nmt.serve",)),
    ("cli", ("nmt.cli", "nmt.__main__")),
]


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = module_files()
TREES = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in MODULES.items()}


def layer_of(module: str) -> int:
    """Index in LAYERS of the longest prefix that names the module (every module has one)."""
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


def _target(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """The package's modules that `module` imports anywhere in its text (functions included)."""
    found: set[str] = set()
    for node in ast.walk(TREES[module]):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _target(module, node)
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        for name in names:
            # `import nmt.a.b` and `from nmt.a import b` both depend on the deepest module named.
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module and name != "nmt":
                found.add(name)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if layer_of(m) < 0] == []


def test_imports_only_go_down() -> None:
    upward = [
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {d} ({LAYERS[layer_of(d)][0]})"
        for m, deps in GRAPH.items()
        for d in sorted(deps)
        if layer_of(d) > layer_of(m)
    ]
    assert upward == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that returns to its start, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle() -> None:
    assert find_cycle(GRAPH) is None


def test_modules_are_short() -> None:
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    assert {m: n for m, n in lines.items() if n > MAX_MODULE_LINES} == {}


def _is_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A Typer command (`@app.command(...)`, `@group.callback(...)`): its options are its signature."""
    for deco in node.decorator_list:
        call = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(call, ast.Attribute) and call.attr in ("command", "callback"):
            return True
    return False


def function_lengths(tree: ast.AST) -> dict[str, int]:
    """Lines of every function, from `def` (a command: from its body) to its last line."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = node.body[0].lineno if _is_command(node) else node.lineno
            out[f"{node.name}:{node.lineno}"] = (node.end_lineno or node.lineno) - start + 1
    return out


def test_function_lengths_counts_a_command_from_its_body() -> None:
    text = (
        "@app.command()\ndef cmd(\n    a: int = 1,\n    b: int = 2,\n) -> None:\n    x = 1\n    y = 2\n"
        "def plain(\n    a: int,\n) -> None:\n    pass\n"
    )
    assert function_lengths(ast.parse(text)) == {"cmd:2": 2, "plain:8": 4}


def test_functions_are_short() -> None:
    long = {
        f"{m}.{name}": n
        for m, tree in TREES.items()
        for name, n in function_lengths(tree).items()
        if n > MAX_FUNCTION_LINES
    }
    assert long == {}


def test_few_modules_at_the_top() -> None:
    top = [m for m, p in MODULES.items() if p.parent == PACKAGE and m != "nmt"]
    assert len(top) <= MAX_TOP_MODULES, top


@pytest.mark.parametrize(
    "name", ["Translator", "ModelDir", "Sampling", "DecodeOptions", "__version__"]
)
def test_public_api_importable(name: str) -> None:
    import nmt

    assert getattr(nmt, name) is not None


# Directories travel as objects: only the layers that turn command-line strings into directories
# (the formats themselves, the CLI, the server) take a path where a directory object would do.
DIR_TYPES = {"DataDir", "ModelDir", "ExportDir", "Opened", "AnyDir"}
PATH_TYPES = {"str", "Path"}
TURN_PATHS_INTO_DIRS = ("nmt.dirs", "nmt.cli", "nmt.serve")


def _union_members(node: ast.expr) -> list[ast.expr]:
    """The members of an `a | b | c` union (one member when it is none)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    return [node]


def _name(node: ast.expr) -> str:
    """The type a union member names (`Path`, `nmt.dirs.ModelDir`, `Sequence[...]`: Sequence)."""
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def path_or_dir_unions(annotation: ast.expr) -> list[str]:
    """Each union in `annotation` (nested ones included) that joins a path with a directory."""
    unions = [n for n in ast.walk(annotation) if isinstance(n, ast.BinOp)]
    inner = {id(n.left) for n in unions} | {id(n.right) for n in unions}
    found = []
    for node in (n for n in unions if id(n) not in inner):  # each whole union once
        members = {_name(m) for m in _union_members(node)}
        if members & PATH_TYPES and members & DIR_TYPES:
            found.append(ast.unparse(node))
    return found


def test_path_or_dir_unions_finds_them() -> None:
    text = (
        "def f(a: str | Path | ModelDir, b: Sequence[Path | Opened], c: ModelDir | None,"
        " d: ExportDir | str | Path | Sequence[str | Path]): pass"
    )
    func = ast.parse(text).body[0]
    assert isinstance(func, ast.FunctionDef)
    found = [u for arg in func.args.args for u in path_or_dir_unions(arg.annotation)]
    assert found == [
        "str | Path | ModelDir",
        "Path | Opened",
        "ExportDir | str | Path | Sequence[str | Path]",
    ]


def test_directories_are_objects_past_the_cli() -> None:
    unions = [
        f"{m}.{node.name}({arg.arg}: {union})"
        for m, tree in TREES.items()
        if not m.startswith(TURN_PATHS_INTO_DIRS)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        if arg.annotation is not None
        for union in path_or_dir_unions(arg.annotation)
    ]
    assert unions == []
