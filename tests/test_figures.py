"""A measured figure lives on one page: the others link to it, so copies cannot drift apart.

The test reads the prose and tables of README.md, docs/**/*.md, DESIGN.md and the comments of the
presets (code blocks and `code spans` are commands and settings, not results), extracts every
measured figure (BLEU/chrF/TER scores, ratios, percentages, memory, speeds, times) and fails when a
figure stands on two pages. CHANGELOG.md is history and stays out. Fast: text only, no torch.
"""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NUM = r"\d[\d,]*(?:\.\d+)?"
START = r"(?<![\w.,+/=-])"
RANGE = rf"(?:[-\u2013]{NUM})?"  # 1.1-1.5x: both ends carry the unit
UNIT_WORDS = {
    "ratio": r"x\b",
    "percent": r"\s?%",
    "memory": r"\s?(?:GB|MB|KB|kB|GiB|MiB|KiB)\b",
    "speed": r"\s?(?:sent/s|sentences/s|tok/s|tokens/s|words/s|lines/s|updates/s|pairs/s)",
    "time": r"[\s-]?(?:ms|s|seconds?|min|minutes?|h|hours?)\b",
}
METRICS = {"BLEU": r"BLEU", "chrF": r"chrF", "TER": r"\bTER\b"}
# Words that make a paragraph's bare decimals scores (BLEU unless a metric is named nearer).
SCORE_CONTEXT = re.compile(r"BLEU|chrF|\bTER\b|\blc\b|[Ss]cor(?:ed|es)\b|lowercased")
# A score: a decimal of one or two places, 1 or more, or signed (+0.13), or named (0.7 BLEU).
SCORE = re.compile(
    rf"(?<![\w.,/=+-])([+-]?)(\d{{1,3}}\.\d{{1,2}})(?!\d|\.\d|e-?\d|{RANGE}(?:"
    + "|".join(UNIT_WORDS.values())
    + r"))(\s?(?:BLEU|chrF))?"
)
# A column of these holds no scores, whatever the table's metric.
NOT_SCORES = re.compile(
    r"ratio|length|updates|epochs|minutes|seconds|\bs\b|sent/s|tok/s|MB|GB|%|x\b|/ greedy|size|pieces|subwords|lines|words",
    re.I,
)
VERSION = re.compile(
    r"\b(?:torch|sacreBLEU|CTranslate2|ctranslate2|transformers|Python|CUDA|OpenNMT-py|JoeyNMT"
    r"|pysbd|sentence-splitter|version|cu)[ -]?v?\d+(?:\.\d+)+"
)

# Figures allowed on more than one page, each with its reason (at most 15 entries). Most are two
# measurements that happen to share a value: hundreds of scores fall between 10 and 45.
ALLOWED: dict[str, str] = {
    "BLEU 0.2": "small differences: an n-gram ban's cost in benchmarks; joined-caption ones",
    "BLEU 0.8": "the averaging gain in the Canadian-law recipe; interval bounds of paired differences",
    "BLEU 1.1": "a split-sentence gap in benchmarks; a floor score in the attention experiment",
    "BLEU 1.3": "an n-gram ban's gain in benchmarks; a bootstrap interval's width in the experiment",
    "BLEU 1.4": "an n-gram ban's chrF cost in benchmarks; a joined-caption difference",
    "BLEU 1.9": "a Czech child without new pieces in training; a gain from splitting",
    "BLEU 11.4": "a sampling speed in benchmarks; a gain of attention on Canadian law",
    "BLEU 12.2": "a split-sentence score in benchmarks; a gain of attention on Canadian law",
    "BLEU 4.0": "an n-gram ban's chrF gain in benchmarks; a small RNN score in the experiment",
    "BLEU 39.9": "averaged Canadian-law checkpoints; a 90-minute Multi30k run",
    "BLEU pair 0.0 / 0.1": "an n-gram ban's change in benchmarks; a joined-caption difference",
    "chrF 13.4": "a vocabulary-extension BLEU in training; an RNN score in the experiment",
    "chrF 37.1": "a vocabulary-extension run in training; an RNN score on Canadian law",
    "ratio 1.13": "tokens under subword sampling; a faster CPU step; a memory growth",
    "ratio 1.34": "tokens under subword sampling; bf16 against fp32 at beam 5",
}


def pages(repo: Path = REPO) -> list[Path]:
    """Every page a reader reads: README, DESIGN, docs/ and the presets (CHANGELOG is history)."""
    return [
        repo / "README.md",
        repo / "DESIGN.md",
        *sorted((repo / "docs").rglob("*.md")),
        *sorted((repo / "nmt" / "presets").glob("*.yaml")),
    ]


def prose(path: Path) -> str:
    """A page's prose and tables: a preset's comments; a Markdown page without its code."""
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        return "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", " ", text)


def metric_near(text: str, at: int, default: str) -> str:
    """The metric named nearest to position `at` of a text, else `default`."""
    best, distance = default, len(text) + 1
    for name, pattern in METRICS.items():
        for m in re.finditer(pattern, text):
            d = min(abs(m.start() - at), abs(m.end() - at))
            if d < distance:
                best, distance = name, d
    return best


# A decimal right after one of these words is a setting or another measure, not a score.
SETTING = re.compile(
    r"(?:penalty|alpha|dropout|smoothing|decay|\blr|rate|ratio|temperature|top-?p|beta|penalties)"
    r"\s*(?:of|is|=|:)?\s*$"
)


def scores(text: str, metric: str | None = None) -> list[tuple[str, str]]:
    """The scores of a text that names a metric (see SCORE), each with its metric: `metric`,
    else the one named nearest."""
    return [
        (metric or metric_near(text, m.start(2), "BLEU"), m.group(2))
        for m in SCORE.finditer(text)
        if (m.group(1) or m.group(3) or float(m.group(2)) >= 1)
        and not SETTING.search(text[max(0, m.start() - 30) : m.start()])
    ]


def table_scores(rows: list[str], caption: str) -> list[list[tuple[str, str]]]:
    """The scores of a Markdown table: a column headed by a metric holds it ("BLEU / chrF":
    both, in order); a table whose header or caption names a metric holds it in every other
    column that is not a count, time, speed, size or ratio. One list per row."""
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    cells = [c for c, r in zip(cells, rows, strict=True) if not set(r.strip()) <= set("|-: ")]
    if len(cells) < 2:
        return []
    header, body = cells[0], cells[1:]
    found: list[list[tuple[str, str]]] = [[] for _ in body]
    named = [m for m in METRICS if re.search(METRICS[m], " ".join(header))]
    default = (
        named[0]
        if named
        else (metric_near(caption, 0, "BLEU") if SCORE_CONTEXT.search(caption) else None)
    )
    for col, head in enumerate(header):
        in_head = [m for m in METRICS if re.search(METRICS[m], head)]
        if in_head:
            metrics = in_head
        elif default and col > 0 and not NOT_SCORES.search(head):
            metrics = [default]
        else:
            continue
        for row, out in zip(body, found, strict=True):
            if col >= len(row):
                continue
            parts = row[col].split(" / ") if len(metrics) > 1 else [row[col]]
            for part, metric in zip(parts, metrics + metrics[-1:] * len(parts), strict=False):
                out += scores(part, metric)
    return found


SCORE_UNITS = set(METRICS)


def figures(text: str) -> list[tuple[str, str, str]]:
    """The measured figures of a page's prose, as (unit, value, where) in order, commas dropped:
    the units of UNIT_WORDS, and scores by metric (BLEU, chrF, TER) in tables and in paragraphs
    that name a metric; version numbers and bootstrap intervals are no figures. `where` is
    "prose" or "table"; two scores side by side in a table row are also one figure, unit
    "METRIC pair" (how a copied row shows)."""
    found: list[tuple[str, str, str]] = []
    text = VERSION.sub(" ", text)
    text = re.sub(r"\[[-+0-9., ]+\]", " ", text)  # a bootstrap interval: the figure's error bar
    caption = ""
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        rows = [line for line in lines if line.lstrip().startswith("|")]
        body = "\n".join(line for line in lines if not line.lstrip().startswith("|"))
        for unit, word in UNIT_WORDS.items():
            for part, kind in ((body, "prose"), ("\n".join(rows), "table")):
                for m in re.finditer(rf"{START}({NUM}){RANGE}{word}", part):
                    found.append((unit, m.group(1).replace(",", ""), kind))
                for m in re.finditer(rf"(?<=\d[-\u2013])({NUM}){word}", part):
                    found.append((unit, m.group(1).replace(",", ""), kind))
        if SCORE_CONTEXT.search(body):
            found += [(unit, value, "prose") for unit, value in scores(body)]
        if rows:
            for row in table_scores(rows, body or caption):
                found += [(unit, value, "table") for unit, value in row]
                found += [
                    (f"{a[0]} pair", f"{a[1]} / {b[1]}", "table")
                    for a, b in zip(row, row[1:], strict=False)
                ]
        caption = body
    return found


def distinctive(unit: str, value: str) -> bool:
    """Whether a figure is unlikely to recur by chance: scores, ratios, memory and speeds always;
    a percentage or a time when it has a decimal point or three digits (a bare 10% or 25 minutes
    is as often a setting or a share of something else)."""
    return unit not in ("percent", "time") or "." in value or len(value) >= 3


def figure_pages(
    repo: Path = REPO,
) -> tuple[dict[str, int], dict[tuple[str, str], dict[str, set[str]]]]:
    """Figures per page (pairs not counted), and for each distinctive figure the pages it stands
    on, with where on each (prose, table)."""
    counts: dict[str, int] = {}
    where: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for page in pages(repo):
        found = figures(prose(page))
        name = str(page.relative_to(repo))
        counts[name] = sum(not unit.endswith(" pair") for unit, _, _ in found)
        for unit, value, kind in found:
            if distinctive(unit, value):
                where[(unit, value)][name].add(kind)
    return counts, where


def restated(unit: str, on: dict[str, set[str]]) -> bool:
    """Whether a figure on these pages is a copy: on two pages, and, for a single score, stated in
    prose on one of them (two tables' cells meet by chance among hundreds of scores between 10 and
    45; a copied table row still shows as a pair)."""
    if len(on) < 2:
        return False
    return unit not in SCORE_UNITS or any("prose" in kinds for kinds in on.values())


def repeated(repo: Path = REPO) -> list[str]:
    """Figures on two pages or more, outside the allow-list."""
    _, where = figure_pages(repo)
    return [
        f"{value} ({unit}) on {', '.join(sorted(on))}"
        for (unit, value), on in sorted(where.items())
        if restated(unit, on) and f"{unit} {value}" not in ALLOWED
    ]


def test_each_figure_stands_on_one_page():
    counts, _ = figure_pages()
    print("\nfigures per page:")
    for name, count in counts.items():
        print(f"  {count:4d}  {name}")
    problems = repeated()
    assert not problems, "a figure stated twice: keep it on its results page and link to it\n" + (
        "\n".join(problems)
    )


def test_the_extractor_finds_todays_figures():
    """A floor: a broken extractor that found nothing would pass the test above."""
    counts, where = figure_pages()
    assert sum(counts.values()) >= 1100, counts  # 1,265 when written: lower it only on purpose
    assert len(where) >= 850
    units = {unit for unit, _ in where if not unit.endswith(" pair")}
    assert units == set(UNIT_WORDS) | {"BLEU", "chrF"}, units


def test_the_allow_list_stays_small():
    assert len(ALLOWED) <= 15


SEEDS = {
    "BLEU": "It scores 12.34 BLEU.",
    "chrF": "Its chrF2 is 56.78.",
    "ratio": "It runs 7.77x faster.",
    "percent": "It keeps 88.8% of it.",
    "memory": "It takes 4.56 GB.",
    "speed": "It decodes 9,876 sent/s.",
    "time": "It takes 5.43 s.",
}


@pytest.mark.parametrize("unit", sorted(SEEDS))
def test_a_figure_restated_on_a_second_page_fails(unit: str, tmp_path: Path):
    """Each unit seeded on two pages of a copy of the docs is caught, and only it."""
    copy = tmp_path / "repo"
    (copy / "nmt").mkdir(parents=True)
    shutil.copytree(REPO / "docs", copy / "docs", ignore=shutil.ignore_patterns("*.png"))
    shutil.copytree(REPO / "nmt" / "presets", copy / "nmt" / "presets")
    for name in ("README.md", "DESIGN.md"):
        shutil.copy(REPO / name, copy / name)
    assert repeated(copy) == repeated(REPO)
    assert figures(SEEDS[unit])[0][0] == unit
    for name in ("README.md", "docs/troubleshooting.md"):
        with (copy / name).open("a", encoding="utf-8") as page:
            page.write(f"\n{SEEDS[unit]}\n")
    new = set(repeated(copy)) - set(repeated(REPO))
    assert len(new) == 1 and "README.md, docs/troubleshooting.md" in new.pop(), new


def test_make_test_fast_runs_this_test():
    """`make test-fast` runs the tests not marked slow: this file has no slow mark."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = makefile[makefile.index("\ntest-fast:") :].split("\n\n")[0]
    assert '-m "not slow"' in recipe
    assert "mark.slow" not in Path(__file__).read_text(encoding="utf-8").replace('"mark.slow"', "")
