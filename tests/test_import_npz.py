"""`nmt import` of an original Marian release (an OPUS-MT zip unzipped: the .npz under Marian's
tensor names with its config in `special:model.yml`, decoder.yml, the vocabulary as YAML and the
SentencePiece models). A synthetic release (2+2 layers, d 64, random weights, opus-mt-en-mg's real
tokenizer and all its 54,687 pieces) is imported by nmt and converted by CTranslate2's own
`MarianConverter`: both translate 200 real lines identically, greedy, token for token (so the
tensor names, the zero start embedding and the added <pad> are what Marian means). A release
with a missing tensor or an SSRU decoder is refused in one line naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import require
from marian_fixtures import parity_lines
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.dirs import ModelDir

pytestmark = pytest.mark.slow
D, FFN, HEADS, LAYERS, NEW_TOKENS = 64, 128, 4, 2, 32
SEED, LIFT = 1, 3.3  # a draw whose greedy outputs mostly end (85%) and differ (94%)
MODEL = "opus.spm32k-spm32k.transformer-align.model1.npz.best-perplexity.npz"
VOCAB = "opus.spm32k-spm32k.vocab.yml"
MODEL_YML = {
    "type": "transformer",
    "dim-vocabs": [0, 0],
    "dim-emb": D,
    "enc-depth": LAYERS,
    "dec-depth": LAYERS,
    "dec-cell": "gru",
    "transformer-heads": HEADS,
    "transformer-dim-ffn": FFN,
    "transformer-ffn-depth": 2,
    "transformer-ffn-activation": "swish",
    "transformer-decoder-autoreg": "self-attention",
    "transformer-preprocess": "",
    "transformer-postprocess": "dan",
    "transformer-postprocess-emb": "d",
    "transformer-postprocess-top": "",
    "transformer-guided-alignment-layer": "last",
    "transformer-no-projection": False,
    "transformer-train-position-embeddings": False,
    "tied-embeddings-all": True,
    "tied-embeddings-src": False,
    "tied-embeddings": False,
    "max-length": 500,
}


def _pieces(real: Path) -> list[str]:
    """opus-mt-en-mg's pieces in id order, without the <pad> transformers' conversion added."""
    vocab = json.loads((real / "vocab.json").read_text(encoding="utf-8"))
    return [p for p, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if p != "<pad>"]


def _write_vocab_yml(pieces: list[str], path: Path) -> None:
    """Marian's piece -> id YAML, every piece double-quoted (backslash and quote escaped)."""
    quoted = (p.replace("\\", "\\\\").replace('"', '\\"') for p in pieces)
    lines = (f'"{q}": {i}' for i, q in enumerate(quoted))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _scale(name: str) -> float:
    """As tests/marian_fixtures.py draws them: small embeddings, peaked cross-attention, a quiet
    decoder history, sign-drawn norms, sizeable projections, small biases."""
    if name == "Wemb":
        return 0.15
    if name == "decoder_ff_logit_out_b":
        return 0.002
    if "_context_Wq" in name or "_context_Wk" in name:
        return 1.0
    if name.startswith("decoder") and "_self_Wv" in name:
        return 0.005
    if "_ln_scale" in name:
        return 1.0
    return 0.05 if name.rsplit("_", 1)[-1].startswith("b") else 0.125  # biases, ln_bias


def _attention(scope: str) -> dict[str, tuple[int, ...]]:
    shapes = {f"{scope}_W{x}": (D, D) for x in "qkvo"} | {f"{scope}_b{x}": (1, D) for x in "qkvo"}
    return shapes | {f"{scope}_Wo_ln_scale": (1, D), f"{scope}_Wo_ln_bias": (1, D)}


def _shapes(vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Marian post-norm transformer with tied embeddings, by name."""
    shapes: dict[str, tuple[int, ...]] = {"Wemb": (vocab, D), "decoder_ff_logit_out_b": (1, vocab)}
    for side in ("encoder", "decoder"):
        for i in range(1, LAYERS + 1):
            scope = f"{side}_l{i}"
            shapes |= _attention(f"{scope}_self")
            if side == "decoder":
                shapes |= _attention(f"{scope}_context")
            shapes |= {f"{scope}_ffn_W1": (D, FFN), f"{scope}_ffn_b1": (1, FFN)}
            shapes |= {f"{scope}_ffn_W2": (FFN, D), f"{scope}_ffn_b2": (1, D)}
            shapes |= {f"{scope}_ffn_ffn_ln_scale": (1, D), f"{scope}_ffn_ffn_ln_bias": (1, D)}
    return shapes


def _model_yml(config: dict) -> np.ndarray:
    """special:model.yml as Marian stores it: the YAML's bytes and a NUL."""
    return np.frombuffer(yaml.safe_dump(config).encode() + b"\0", dtype=np.int8)


def write_release(real: Path, out: Path, drop: str = "", **config: object) -> Path:
    """A synthetic Marian release of opus-mt-en-mg's tokenizer: random weights, `drop` left out,
    model.yml keys `config` changed."""
    out.mkdir(parents=True)
    pieces = _pieces(real)
    rng = np.random.default_rng(SEED)
    arrays = {
        name: (rng.standard_normal(shape) * _scale(name)).astype(np.float32)
        for name, shape in _shapes(len(pieces)).items()
        if name != drop
    }
    arrays["decoder_ff_logit_out_b"][0, pieces.index("</s>")] += LIFT
    cfg = MODEL_YML | {"dim-vocabs": [len(pieces)] * 2} | config
    np.savez(out / MODEL, **arrays, **{"special:model.yml": _model_yml(cfg)})
    _write_vocab_yml(pieces, out / VOCAB)
    decoder = {"models": [MODEL], "vocabs": [VOCAB, VOCAB], "beam-size": 6, "normalize": 0.6}
    (out / "decoder.yml").write_text(yaml.safe_dump(decoder), encoding="utf-8")
    for name in ("source.spm", "target.spm"):
        shutil.copy(real / name, out / name)
    return out


@pytest.fixture(scope="module")
def release(pretrained_root: Path, tmp_path_factory) -> Path:
    return write_release(pretrained_root / "opus-mt-en-mg", tmp_path_factory.mktemp("npz") / "r")


TIE = 1e-3  # log-probabilities closer than this are a tie to float rounding


def tie_gap(tr, src: list[int], ours: list[str], theirs: list[str], eos: str) -> float:
    """nmt's log-probability gap between the two tokens where two outputs first differ."""
    k = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b)
    prefix = [tr.tgt_tok.piece_to_id(p) for p in ours[:k]]
    lps = [
        tr.score_ids([src], [prefix + ([] if tok == eos else [tr.tgt_tok.piece_to_id(tok)])])[0][k]
        for tok in (ours[k], theirs[k])
    ]
    return abs(lps[0] - lps[1])


def test_import_translates_as_ctranslate2s_marian_converter(release, repo_root, tmp_path):
    ctranslate2 = require("ctranslate2")
    from ctranslate2.converters import MarianConverter

    from nmt.engines.translator import Translator
    from nmt.pretrained.importer import import_marian

    lines = parity_lines(repo_root.parent / "shared/corpora", "opus-mt-en-mg")[0]
    model = import_marian(str(release), tmp_path / "model").path
    vocab = str(release / VOCAB)
    theirs = MarianConverter(str(release / MODEL), [vocab, vocab]).convert(str(tmp_path / "ct2"))
    with Translator.from_dir(ModelDir(model), workers=1) as tr:
        ours = tr.translate(lines, greedy=True, max_len_a=0, max_len_b=NEW_TOKENS, forced_eos=False)
        eos = "</s>"
        # nmt's source pieces end in </s>; the converted model adds it itself (add_source_eos)
        assert all(t.source_tokens[-1] == eos for t in ours)
        sources = [t.source_tokens[:-1] for t in ours]
        ct2 = ctranslate2.Translator(theirs, device="cpu", intra_threads=1)
        results = ct2.translate_batch(
            sources,
            beam_size=1,
            max_decoding_length=NEW_TOKENS,
            min_decoding_length=0,  # nmt's min_len: an eos first is allowed
            return_end_token=True,
        )
        outputs = [r.hypotheses[0] for r in results]
        expected = [
            t.hypotheses[0].tokens + ([] if t.hypotheses[0].at_limit else [eos]) for t in ours
        ]
        differ = [i for i, (a, b) in enumerate(zip(outputs, expected, strict=True)) if a != b]
        src_ids = tr.encode_sources(lines, 1, lambda message: None)
        gaps = [tie_gap(tr, src_ids[i], expected[i], outputs[i], eos) for i in differ]
    # identical but where two tokens tie to float rounding (random weights make some steps'
    # top two logits close, and the two engines' kernels round differently)
    assert len(differ) <= 0.02 * len(lines), f"{len(differ)}/{len(lines)} differ"
    assert all(gap < TIE for gap in gaps), f"not ties: nmt's log-prob gaps {gaps}"
    ended = sum(out[-1] == eos for out in outputs)
    assert ended >= 0.4 * len(outputs), f"only {ended} of {len(outputs)} lines ended in eos"
    assert len({tuple(out) for out in outputs}) >= 0.9 * len(outputs)


def test_the_imported_model_keeps_marians_ids(release, tmp_path):
    from nmt.pretrained.importer import import_marian

    model = import_marian(str(release), tmp_path / "model")
    meta = json.loads((model.path / "vocab.json").read_text(encoding="utf-8"))
    pieces = json.loads((model.path / "pieces.json").read_text(encoding="utf-8"))
    pad = len(pieces) - 1
    assert (pieces["</s>"], pieces["<unk>"], pieces["<pad>"]) == (0, 1, pad)
    assert (meta["eos_id"], meta["unk_id"], meta["pad_id"], meta["bos_id"]) == (0, 1, pad, pad)
    assert meta["never"] == [pad]


def _refused(source: Path, out: Path) -> str:
    r = CliRunner().invoke(app, ["import", str(source), "-o", str(out)])
    assert r.exit_code == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert not out.exists()
    return r.stderr


def test_a_missing_tensor_is_named(pretrained_root, tmp_path):
    bad = write_release(
        pretrained_root / "opus-mt-en-mg", tmp_path / "r", drop="decoder_l2_context_Wk"
    )
    err = _refused(bad, tmp_path / "model")
    assert err == f"error: {bad / MODEL}: tensor decoder_l2_context_Wk is missing\n"


def test_an_ssru_decoder_is_refused(pretrained_root, tmp_path):
    real = pretrained_root / "opus-mt-en-mg"
    bad = write_release(
        real, tmp_path / "r", **{"transformer-decoder-autoreg": "rnn", "dec-cell": "ssru"}
    )
    err = _refused(bad, tmp_path / "model")
    assert "transformer-decoder-autoreg = rnn, dec-cell ssru is not supported" in err
