"""`nmt export` of an imported OPUS-MT model (shrunk, random, as test_import_parity's):

- a third party agrees: CTranslate2's own converter of the same Hugging Face directory and our
  export translate the 200 real lines token for token, greedy and beam 4, fed the same source
  pieces and settings (so the weights, special tokens, position table, activation, embedding
  scale, output bias and banned <pad> are what CTranslate2 itself makes of the model);
- `nmt translate -m EXPORT_DIR` is `nmt translate -m MODEL_DIR`: greedy token for token; beam
  search under the model's rule (transformers' generate, early_stopping=False: it searches on
  while a live hypothesis might still win) wherever CTranslate2's one stopping rule (a sentence
  ends once beam_size hypotheses are finished: early_stopping=True) sees the same best
  hypothesis. Where it does not, the model directory's best finished after CTranslate2 stopped
  and scores higher: the rule, not the model, differs (nmt.engines.ct2);
- the command line translates an imported model's export without torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import require
from marian_fixtures import parity_lines, small_marian

from nmt.dirs import ModelDir, open_model

pytestmark = pytest.mark.slow
MODELS = ("opus-mt-en-mg", "opus-mt-tc-big-fr-en")
NEW_TOKENS = 32  # tokens generated at most, eos included (as test_import_parity's 64, halved)


@dataclass
class Built:
    """One shrunk model: its Hugging Face directory, import, export, CTranslate2's own
    conversion, and its 200 real lines."""

    name: str
    hf: Path
    model: Path
    export: Path
    theirs: Path
    lines: list[str]


@pytest.fixture(scope="module", params=MODELS)
def built(request, pretrained_root, repo_root, tmp_path_factory) -> Built:
    require("ctranslate2")
    require("transformers")
    from ctranslate2.converters import TransformersConverter

    from nmt.export.ctranslate2 import export_ctranslate2
    from nmt.pretrained.importer import import_marian

    name = request.param
    work = tmp_path_factory.mktemp(name)
    hf = small_marian(pretrained_root / name, work / "hf")
    # the weights are float32, but the real config's torch_dtype (float16 for tc-big) is what
    # CTranslate2's converter would load them as
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "torch_dtype": "float32"}))
    model = import_marian(str(hf), work / "model").path
    export = export_ctranslate2(ModelDir(model), work / "export", quiet=True)
    theirs = Path(TransformersConverter(str(hf)).convert(str(work / "theirs")))
    lines = parity_lines(repo_root.parent / "shared/corpora", name)[0]
    return Built(name, hf, model, export, theirs, lines)


def _translator(path: Path):
    import ctranslate2

    return ctranslate2.Translator(str(path), device="cpu", intra_threads=1)


@pytest.mark.parametrize("beam", [1, 4])
def test_ctranslate2s_own_converter_agrees(built, beam):
    from nmt.dirs.export import ExportDir

    src_tok, tgt_tok = ExportDir(built.export).tokenizers
    eos, pad = tgt_tok.eos_piece, tgt_tok.specials.pad
    sources = [
        [src_tok.id_to_piece(i) for i in ids] + [eos] for ids in src_tok.encode_batch(built.lines)
    ]
    # their vocabulary drops <pad> (the last id), so nothing there can emit it; ours bans it
    assert pad not in json.loads((built.theirs / "shared_vocabulary.json").read_text())
    settings = {
        "beam_size": beam,
        "max_decoding_length": NEW_TOKENS,
        "length_penalty": 1.0,
        "end_token": eos,
        "max_input_length": 0,
        "return_scores": True,
        "return_end_token": True,
        "max_batch_size": 16,  # smaller batches shed their finished lines sooner
    }
    ours = _translator(built.export).translate_batch(
        sources, suppress_sequences=[[pad]], **settings
    )
    theirs = _translator(built.theirs).translate_batch(sources, **settings)
    same = sum(a.hypotheses == b.hypotheses for a, b in zip(ours, theirs, strict=True))
    assert same == len(sources), f"{built.name} beam {beam}: {same}/{len(sources)} identical"
    assert max(abs(a.scores[0] - b.scores[0]) for a, b in zip(ours, theirs, strict=True)) < 1e-4
    _not_degenerate([a.hypotheses[0] for a in ours], eos)


def _not_degenerate(outputs: list[list[str]], eos: str) -> None:
    """Many lines end before the limit, outputs are distinct, few are one token repeated (a
    random model's beam finds a few)."""
    ended = sum(out[-1] == eos for out in outputs)
    assert ended >= 0.4 * len(outputs), f"only {ended} of {len(outputs)} lines ended in eos"
    assert len({tuple(out) for out in outputs}) >= 0.9 * len(outputs)
    assert sum(len(out) > 2 and len(set(out[:-1])) == 1 for out in outputs) <= 0.02 * len(outputs)


@pytest.fixture(scope="module")
def engines(built):
    """(the export's CTranslate2 engine, the model directory's PyTorch one)."""
    from nmt.engines.loading import open_translator

    exported = open_translator(open_model(built.export), device="cpu", workers=1)
    own = open_translator(open_model(built.model), device="cpu", workers=1)
    yield exported, own
    own.close()


def test_the_export_decodes_with_the_models_defaults(built, engines):
    exported, own = engines
    assert exported.decoding == own.decoding  # stop: transformers, forced_eos, beam 4, ...
    assert (exported.decoding.stop, exported.decoding.forced_eos) == ("transformers", True)
    assert exported.tgt_pieces == [
        own.tgt_tok.id_to_piece(i) for i in range(own.tgt_tok.vocab_size)
    ]
    pad = own.model.vocab.pad_id
    assert exported.suppress == [[own.tgt_tok.id_to_piece(pad)]]


def test_greedy_export_is_the_model_dir(built, engines):
    exported, own = engines
    limit = dict(greedy=True, max_len_a=0, max_len_b=NEW_TOKENS - 1)  # a forced eos the last
    theirs, ours = exported.translate(built.lines, **limit), own.translate(built.lines, **limit)
    for a, b in zip(theirs, ours, strict=True):
        assert a.hypotheses[0].tokens == b.hypotheses[0].tokens
        assert (a.text, a.source_tokens) == (b.text, b.source_tokens)
        # CTranslate2 renormalizes around the banned <pad> (about 1e-5 a step)
        assert a.hypotheses[0].score == pytest.approx(b.hypotheses[0].score, abs=1e-3)
    assert sum(not t.hypotheses[0].at_limit for t in ours) >= len(ours) / 2


@pytest.mark.parametrize("built", MODELS[:1], indirect=True)  # the slowest test: one model
def test_beam_export_is_the_model_dir_where_its_rule_allows(built, engines):
    exported, own = engines
    limit = dict(max_len_a=0, max_len_b=NEW_TOKENS - 1)  # the model's beam 4 and rule
    theirs, ours = (
        exported.translate(built.lines, nbest=4, **limit),
        own.translate(built.lines, **limit),
    )
    same = 0
    for a, b in zip(theirs, ours, strict=True):
        best, mine = a.hypotheses[0], b.hypotheses[0]
        if best.tokens == mine.tokens:
            same += 1
            assert best.score == pytest.approx(mine.score, abs=1e-3)
            continue
        # ours finished after CTranslate2's search had stopped, and is better than its best
        assert len(mine.tokens) > max(len(h.tokens) for h in a.hypotheses)
        assert mine.score > best.score
    print(f"{built.name}: beam 4 under transformers' rule, {same}/{len(ours)} identical")
    assert same >= 0.6 * len(ours)


def test_the_command_line_translates_the_export_without_torch(built, engines, repo_root):
    lines = built.lines[:5]
    command = [sys.executable, "-X", "importtime", "-m", "nmt", "translate"]
    options = ["--device", "cpu", "--greedy", "--max-len-a", "0", "--max-len-b", "20"]
    out = subprocess.run(
        [*command, "-m", str(built.export), *options],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
        cwd=repo_root,
    )
    texts = [t.text for t in engines[1].translate(lines, greedy=True, max_len_a=0, max_len_b=20)]
    assert out.stdout.splitlines() == texts
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in out.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "nmt.data.marian_vocab" in imported
    assert not {m for m in imported if m.partition(".")[0] in ("torch", "safetensors")}
