"""Beam search under transformers' rule on an imported OPUS-MT model is token for token what
transformers' `generate` gives: 4 beams at alpha 0.6, 1.0 and 2.0 and 6 beams (uk-en's default),
each on 100 real lines of a shrunk random model (test_import_parity holds the models' logits and
greedy search, and that they are not degenerate)."""

from __future__ import annotations

import pytest
import torch
from conftest import require
from marian_fixtures import parity_lines, small_marian
from test_import_parity import _generate, _ours

from nmt.dirs import ModelDir

BEAM_LINES = 100  # beam search in transformers is slow: half of the parity lines

pytestmark = pytest.mark.slow
NEW_TOKENS = 24
SETTINGS = [  # (model, beams, alpha): each setting once, the models taking turns
    ("opus-mt-en-mg", 4, 0.6),
    ("opus-mt-tc-big-fr-en", 4, 1.0),
    ("opus-mt-en-mg", 4, 2.0),
    ("opus-mt-uk-en", 6, 1.0),
]


@pytest.fixture(scope="module")
def models(pretrained_root, repo_root, tmp_path_factory):
    """Per model name, (transformers model, nmt Translator, its 100 lines), built when asked."""
    require("transformers")
    from transformers import MarianMTModel

    from nmt.engines.translator import Translator
    from nmt.pretrained.importer import import_marian

    built: dict = {}

    def get(name: str):
        if name not in built:
            work = tmp_path_factory.mktemp(name)
            hf_dir = small_marian(pretrained_root / name, work / "hf")
            imported = import_marian(str(hf_dir), work / "nmt")
            hf = MarianMTModel.from_pretrained(hf_dir, dtype=torch.float32).eval()
            lines = parity_lines(repo_root.parent / "shared/corpora", name)[0][:BEAM_LINES]
            built[name] = (hf, Translator.from_dir(ModelDir(imported.path), workers=1), lines)
        return built[name]

    yield get
    for _, tr, _ in built.values():
        tr.close()


@pytest.mark.parametrize("name,beams,alpha", SETTINGS)
def test_beam_matches_generate(models, name, beams, alpha):
    hf, tr, lines = models(name)
    theirs = _generate(
        hf, tr, lines, num_beams=beams, length_penalty=alpha, max_new_tokens=NEW_TOKENS
    )
    ours = _ours(
        tr,
        lines,
        beam_size=beams,
        length_penalty=alpha,
        stop="transformers",
        max_len_a=0,
        max_len_b=NEW_TOKENS - 1,
    )
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    ended = sum(len(o) < NEW_TOKENS - 1 for o in ours)
    print(f"{name} beam {beams} alpha {alpha}: {same}/{len(lines)} identical, {ended} ended")
    assert same == len(lines), f"{name}: beam {beams} alpha {alpha}: {same}/{len(lines)}"
