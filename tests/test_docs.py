"""The documentation describes the product as it is: no words about how the work went in tracked
files, and every shell command of README.md (and of docs/) names a real subcommand, option,
script and make target, reading under work/ or corpora/ only what an earlier README command wrote.

Fast and light: the CLI is introspected through click (no torch import), nothing is trained.
"""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOC_PAGES = sorted((REPO / "docs").rglob("*.md"))
PROCESS_WORDS = (
    r"[Ss]essions? [0-9]|[Ii]ssues? [0-9]|#1[0-9]\b|lent a GPU|left as is|these machines"
    r"|[Tt]he seed's|sandbox"
    # the machines a figure was measured on, beyond a benchmark's CPU, threads and versions
    r"|[Tt]hrottled|shared (and [a-z]+ )?machines|shared the machine"
    r"|beside (other|another) (work|training|run|job)|other work beside|another training run"
    r"|[Tt]oday's [0-9]+-minute|(noisy|busy|loaded) machines?"
)
SEPARATORS = {"|", "||", "&&", ";", "&"}
OUTPUT_OPTIONS = {"-o", "--output", "--out", "--dest"}
READ_ROOTS = ("work/", "corpora/")


def cli_group() -> Any:
    """The click group behind `nmt` (Typer's own click), found through nmt.cli.app wherever the
    Typer app lives."""
    candidates = [("nmt.cli.app", "app"), ("nmt.cli", "app"), ("nmt.cli.main", "app")]
    for module_name, attr in candidates:
        try:
            found = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError):
            continue
        if isinstance(found, typer.Typer):
            found = typer.main.get_command(found)
        if isinstance(getattr(found, "commands", None), dict):
            return found
    pytest.fail("no Typer app found as nmt.cli.app.app (nor nmt.cli.app / nmt.cli.main.app)")


def shell_blocks(text: str) -> list[str]:
    """The bodies of the ```sh and ```bash blocks of a markdown text."""
    return re.findall(r"^```(?:sh|bash)\n(.*?)^```", text, re.M | re.S)


def command_lines(block: str) -> Iterator[str]:
    """Logical command lines: continuations joined, here-document bodies skipped."""
    pending, heredoc_end = "", None
    for raw in block.splitlines():
        if heredoc_end is not None:
            heredoc_end = None if raw.strip() == heredoc_end else heredoc_end
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line, pending = pending + raw, ""
        if match := re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line):
            heredoc_end = match.group(1)
        if line.strip():
            yield line


def simple_commands(line: str) -> list[list[str]]:
    """A line's simple commands (split at pipes, `&&`, `;`), each as shell words."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def all_commands(text: str) -> list[list[str]]:
    """Every simple command of every shell block of a markdown text, in order."""
    return [
        cmd
        for block in shell_blocks(text)
        for line in command_lines(block)
        for cmd in simple_commands(line)
    ]


def option_names(command: Any) -> set[str]:
    """Every spelling of every option of a subcommand, --help included."""
    names = {"--help"}
    for param in command.params:
        if param.param_type_name == "option":
            names.update(param.opts, param.secondary_opts)
    return names


def is_flag_word(word: str) -> bool:
    """`-x` or `--xyz`, not `-` (stdin) or a negative number."""
    return word.startswith("-") and word != "-" and not re.fullmatch(r"-[0-9.]+", word)


def nmt_problems(words: list[str], group: Any) -> list[str]:
    """Unknown subcommands or options in one simple command that runs `nmt`."""
    at = next((i for i, w in enumerate(words) if Path(w).name == "nmt"), None)
    if at is None or at + 1 >= len(words) or is_flag_word(words[at + 1]):
        return []
    name = words[at + 1]
    if name not in group.commands:
        return [f"nmt {name}: no such subcommand"]
    known = option_names(group.commands[name])
    flags = [w.split("=", 1)[0] for w in words[at + 2 :] if is_flag_word(w)]
    return [f"nmt {name} {flag}: no such option" for flag in flags if flag not in known]


def make_targets() -> set[str]:
    """The targets the Makefile defines."""
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))


def make_outputs() -> dict[str, list[str]]:
    """What `make demo` and `make fetch` write, from the Makefile's own variables."""
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    work = re.search(r"^WORK\s*\?=\s*(\S+)", text, re.M)
    corpus = re.search(r"^CORPUS\s*:?=\s*(\S+)", text, re.M)
    assert work and corpus, "the Makefile no longer names WORK and CORPUS"
    return {"demo": [work.group(1), corpus.group(1)], "fetch": [corpus.group(1)]}


def make_target(words: list[str]) -> str | None:
    """The target of a `make ...` command (None: the default one)."""
    rest = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
    return rest[0] if rest else None


def static_problems(words: list[str], group: Any, targets: set[str]) -> list[str]:
    """Unknown subcommands, options, scripts and make targets in one simple command."""
    problems = nmt_problems(words, group)
    scripts = [w for w in words if w.startswith("scripts/")]
    problems += [f"{w}: no such file" for w in scripts if not (REPO / w).exists()]
    if words[0] == "make" and (target := make_target(words)) and target not in targets:
        problems.append(f"make {target}: no such target")
    return problems


def outputs_and_inputs(words: list[str]) -> tuple[list[str], list[str]]:
    """Paths a command writes (-o/--output/--out/--dest, `>`, mkdir, make) and those it reads
    under work/ or corpora/."""
    outputs: list[str] = []
    if words[0] == "mkdir":
        outputs += [w for w in words[1:] if not w.startswith("-")]
    if words[0] == "make":
        outputs += make_outputs().get(make_target(words) or "", [])
    for i, word in enumerate(words[:-1]):
        if word in OUTPUT_OPTIONS or word in {">", ">>"}:
            outputs.append(words[i + 1])
    values = [w.split("=", 1)[-1] for w in words]
    inputs = [v for v in values if v.startswith(READ_ROOTS) and v not in outputs]
    return outputs, inputs


def produced(path: str, outputs: set[str]) -> bool:
    """Whether an earlier command wrote this path, the folder holding it, or a PREFIX of it."""
    return any(
        path == out or path.startswith(out.rstrip("/") + "/") or path.startswith(out + ".")
        for out in outputs
    )


# ---- the words ---------------------------------------------------------------------------------


def test_no_work_process_words_in_tracked_files():
    """Sessions, issue numbers and the like belong to git history, not to the product."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    found = subprocess.run(
        ["git", "grep", "-nIE", PROCESS_WORDS, "--", ".", ":(exclude)tests/"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert found.returncode in (0, 1), found.stderr
    hits = found.stdout.splitlines()
    assert not hits, f"{len(hits)} lines about how the work went:\n" + "\n".join(hits)


def test_citation_and_changelog_name_the_current_version():
    """`nmt --version` is the CHANGELOG's newest released version (the first numbered heading,
    below the section for unreleased work) and CITATION.cff's."""
    import nmt

    citation = (REPO / "CITATION.cff").read_text(encoding="utf-8")
    assert f"\nversion: {nmt.__version__}\n" in citation
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", changelog, flags=re.M)
    assert headings[0] == "Unreleased"
    assert headings[1] == nmt.__version__, "the newest release heading is not nmt.__version__"


# ---- the commands ------------------------------------------------------------------------------


def test_readme_has_shell_commands():
    """The checks below read README's ```sh blocks: an empty parse would pass them all."""
    commands = all_commands(README.read_text(encoding="utf-8"))
    assert any(c[0] == "nmt" and c[1] == "train" for c in commands if len(c) > 1)


@pytest.mark.parametrize("page", [README, *DOC_PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_commands_name_real_subcommands_options_scripts_and_targets(page: Path):
    """A reader types these commands: a renamed option or script must fail here, not there."""
    group, targets = cli_group(), make_targets()
    problems = [
        f"{' '.join(words)}\n    {problem}"
        for words in all_commands(page.read_text(encoding="utf-8"))
        for problem in static_problems(words, group, targets)
    ]
    assert not problems, "\n".join(problems)


# A subcommand that does nothing without one of these options errors as typed without them.
NEEDS_ONE_OF = {"plot": {"-o", "--output", "--json"}}


def inline_commands(text: str) -> list[list[str]]:
    """The `nmt ...` code spans of a page's prose, as shell words; spans in bold are quoted
    messages (a symptom), not commands."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    spans = re.findall(r"(?<!\*\*)`(nmt [^`\n]+)`", prose)
    return [cmd for span in spans for cmd in simple_commands(span)]


def one_of_problems(words: list[str]) -> list[str]:
    """A subcommand run without any of the options it needs (NEEDS_ONE_OF)."""
    if len(words) < 2 or words[0] != "nmt" or words[1] not in NEEDS_ONE_OF:
        return []
    needed = NEEDS_ONE_OF[words[1]]
    given = {w.split("=", 1)[0] for w in words[2:]}
    return [] if given & needed else [f"nmt {words[1]} needs one of {sorted(needed)}"]


def test_troubleshooting_commands_run_as_typed():
    """Troubleshooting gives its commands inline: each names a real subcommand and real options,
    and carries what the subcommand needs to do anything."""
    group, targets = cli_group(), make_targets()
    text = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    commands = inline_commands(text) + all_commands(text)
    assert any(c[:2] == ["nmt", "plot"] for c in commands), "the page's commands were not found"
    problems = [
        f"{' '.join(words)}\n    {problem}"
        for words in commands
        for problem in static_problems(words, group, targets) + one_of_problems(words)
    ]
    assert not problems, "\n".join(problems)


def test_the_inline_checker_finds_a_plot_without_output():
    text = "Check **`nmt plot X`** it. Check the curve (`nmt plot MODEL_DIR`) and `nmt plot M -o a.png`."
    commands = inline_commands(text)
    assert commands == [["nmt", "plot", "MODEL_DIR"], ["nmt", "plot", "M", "-o", "a.png"]]
    assert one_of_problems(commands[0]) and not one_of_problems(commands[1])


def test_readme_reads_only_what_an_earlier_command_wrote():
    """README runs top to bottom in a fresh checkout: every input has to come from above."""
    written: set[str] = set()
    problems = []
    for words in all_commands(README.read_text(encoding="utf-8")):
        outputs, inputs = outputs_and_inputs(words)
        problems += [
            f"{' '.join(words)}\n    reads {p}" for p in inputs if not produced(p, written)
        ]
        written.update(outputs)
    assert not problems, "nothing earlier in README writes:\n" + "\n".join(problems)


def test_cli_page_documents_every_subcommand_and_option():
    """docs/cli.md is the manual of every option: a new one must be documented there."""
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## nmt (\S+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    missing = []
    for name, command in cli_group().commands.items():
        if name not in sections:
            missing.append(f"## nmt {name}")
            continue
        longs = {o for o in option_names(command) if o.startswith("--")} - {"--help"}
        missing += [f"nmt {name} {o}" for o in sorted(longs) if f"`{o}" not in sections[name]]
    assert not missing, "docs/cli.md lacks:\n" + "\n".join(missing)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", [README, *DOC_PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_reach_a_file_and_heading(page: Path):
    """Pages move and headings change: a link must still land somewhere."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", dest.read_text(encoding="utf-8"), re.M)
            if anchor not in {slug(h) for h in headings}:
                broken.append(f"{target}: no such heading")
    assert not broken, "\n".join(broken)


# ---- the checker itself ------------------------------------------------------------------------


def test_checker_parses_continuations_pipes_heredocs_and_redirects():
    """The parser above must see commands as the shell does, or the checks mean nothing."""
    block = (
        "echo 'a b' | nmt translate -m work/m \\\n    -o work/out.txt  # note\n"
        "cat > work/c.yaml <<'EOF'\nnmt bogus --nothing\nEOF\nmake demo DEMO_TIME=1m\n"
    )
    commands = [c for line in command_lines(block) for c in simple_commands(line)]
    assert commands == [
        ["echo", "a b"], ["nmt", "translate", "-m", "work/m", "-o", "work/out.txt"],
        ["cat", ">", "work/c.yaml", "<<", "EOF"], ["make", "demo", "DEMO_TIME=1m"],
    ]  # fmt: skip
    assert outputs_and_inputs(commands[1]) == (["work/out.txt"], ["work/m"])
    assert outputs_and_inputs(commands[2])[0] == ["work/c.yaml"]
    assert produced("corpora/x/train", {"corpora/x"}) and produced("work/l.en", {"work/l"})
    assert not produced("work/other", {"work/o"})
    group = cli_group()
    assert nmt_problems(["nmt", "translate", "--no-such-flag", "-q"], group) == [
        "nmt translate --no-such-flag: no such option"
    ]
    assert nmt_problems(["torchrun", "-m", "nmt", "train", "--nproc", "2"], group) == []


# ---- README ------------------------------------------------------------------------------------


def test_readme_is_a_short_guide():
    """README is a user's guide: results stay on their pages (tests/test_figures.py holds that)
    and README links to them."""
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines (at most 250)"
