"""Sentence splitting for translating paragraphs and documents (`--split-sentences`).

A model trained on sentences translates a line of several sentences badly: it drops some, and a
line longer than its positions is cut. So each input line is split into sentences, they are
translated in the same batches as any other line, and each line's translations are joined back
into one output line, keeping the line's leading and trailing whitespace.

The boundaries come from `sentencex` (rules for ~300 languages; chosen over pysbd and Moses'
splitter by measurement, docs/benchmarks.md "Sentence splitting"), with two repairs it needs on
real text: a split before a lowercase letter is undone, as is one after an abbreviation that
does not end a sentence ("M. Dupont", "z. B.", "s. 12(1)", "art. 5", "Abs. 2"). A sentence still
longer than the model's source limit is split again at the punctuation nearest its middle (; : ,),
else at the space nearest its middle, until every piece fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


def _words(text: str) -> set[str]:
    """The abbreviations of a comma-separated list (one may hold a space: "z. b")."""
    return set(text.split(", "))


# Abbreviations after which a period never ends a sentence (titles, "for example", ...), and
# those that end one only when no number follows (references: "s. 12", "Abs. 2"). Lowercase
# entries match case-insensitively.
TITLES = {
    "en": _words("mr, mrs, ms, dr, prof, st, mt, messrs, sr, jr, e.g, i.e, cf, vs, etc, approx"),
    "de": _words(
        "hr, fr, dr, prof, z.b, z. b, d.h, d. h, u.a, u. a, bzw, ca, vgl, usw, evtl, ggf, "
        "inkl, nr, s"
    ),
    "fr": _words("m, mm, mme, mmes, mlle, dr, me, pr, p.ex, p. ex, cf, env, etc"),
    "cs": _words("dr, ing, mgr, prof, např, tzv, tj, apod, atd, resp, č, odst, písm, str, mj"),
}
NUMERIC = {
    "en": _words(
        "s, ss, art, arts, p, pp, para, paras, ch, sec, subs, vol, fig, no, nos, r, reg, sch"
    ),
    "de": _words("abs, art, nr, s, ziff, bd, kap, abschn, buchst, satz, rn"),
    "fr": _words("art, al, p, par, ch, n, no, vol, chap, r, ann, règl"),
    "cs": _words("č, odst, písm, odd, str, čl, s, obr"),
}
NO_SPACE = {"zh", "ja", "th", "lo", "km", "my"}  # target scripts written without word spaces
_LAST_WORD = re.compile(r"(?:^|[\s(\[«\"'„“‘])((?:\w+\.\s?)*\w+)\.$")
_FIRST_LETTER = re.compile(r"^[\"'«„“‘(\[]*([^\W\d_])")
_SPLIT_PUNCT = re.compile(r"[;:,]\s")


@dataclass(frozen=True)
class Pieces:
    """One input line as sentences: its leading and trailing whitespace kept aside."""

    lead: str
    sentences: list[str]
    trail: str
    cut: bool = False  # a sentence over the model's source limit was cut into pieces (`fit`)

    def join(self, translations: list[str], tgt_lang: str | None) -> str:
        """The output line: the translations joined with the target's separator."""
        sep = "" if tgt_lang in NO_SPACE else " "
        return self.lead + sep.join(t.strip() for t in translations if t.strip()) + self.trail


class Segmenter:
    """Splits lines of one language into sentences (see the module docstring)."""

    def __init__(self, lang: str | None) -> None:
        self.lang = (lang or "en").lower()
        self.titles = TITLES.get(self.lang, set())
        self.numeric = NUMERIC.get(self.lang, set())

    def sentences(self, text: str) -> list[str]:
        """The sentences of `text` (no empty ones; whitespace between them dropped)."""
        from sentencex import segment

        out: list[str] = []
        for raw in segment(self.lang, text):
            piece = raw.strip()
            if not piece:
                continue
            if out and self._continues(out[-1], piece):
                out[-1] = f"{out[-1]} {piece}"
            else:
                out.append(piece)
        return out

    def _continues(self, before: str, after: str) -> bool:
        """Whether a boundary between `before` and `after` is a false one."""
        first = _FIRST_LETTER.match(after)
        if before.endswith(".") and first is not None and first.group(1).islower():
            return True  # "... p.m. he left": a sentence does not start in lowercase
        match = _LAST_WORD.search(before)
        if match is None:
            return False
        word = match.group(1).lower()
        initial = len(word) == 1 and word.isalpha() and (len(before) == 2 or before[-3] in " (")
        if word in self.titles or initial:
            return True  # "M. Dupont", "z. B.", an initial "J. Smith"
        return word in self.numeric and after[:1].isdigit()  # "s. 12(1)", "Abs. 2"

    def split(self, line: str) -> Pieces:
        """A line as its sentences; a blank line has none."""
        body = line.strip()
        if not body:
            return Pieces(line, [], "")
        start = line.index(body[0])
        return Pieces(line[:start], self.sentences(body), line[start + len(body) :])


def fit(sentence: str, count: Callable[[str], int], limit: int) -> list[str]:
    """`sentence` as pieces of at most `limit` tokens (by `count`): cut at the punctuation
    nearest the middle, else at the space nearest the middle, else in the middle."""
    if count(sentence) <= limit or len(sentence) < 2:
        return [sentence]
    middle = len(sentence) / 2
    cuts = [m.end() for m in _SPLIT_PUNCT.finditer(sentence)]
    if not cuts:
        cuts = [m.start() for m in re.finditer(r"\s", sentence)]
    cut = min(cuts, key=lambda c: abs(c - middle)) if cuts else int(middle)
    if cut <= 0 or cut >= len(sentence):
        cut = int(middle)
    left, right = sentence[:cut].strip(), sentence[cut:].strip()
    if not left or not right:
        left, right = sentence[: int(middle)], sentence[int(middle) :]
    return fit(left, count, limit) + fit(right, count, limit)
