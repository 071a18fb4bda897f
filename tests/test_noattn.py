"""The attention-free Seq2Seq (`model.attention: none`): the decoder sees one fixed summary, search and
translate work unchanged, and asking for its attention is one clear line. The decoding contract
(causality, padding invariance, incremental == teacher forcing) runs in test_models over its configs."""

from __future__ import annotations

import pytest
import torch
from test_models import TINY as MODEL_CONFIGS
from test_models import VOCAB, batch, targets
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.config import Config, load_config, model_config
from nmt.decode.options import ResolvedOptions
from nmt.decode.search.beam import beam_search
from nmt.decode.search.greedy import greedy_search
from nmt.dirs import ModelDir
from nmt.errors import NmtError
from nmt.models import VocabInfo, build

NOATTN = MODEL_CONFIGS["seq2seq-noattn"]


def make() -> torch.nn.Module:
    """The tiny GRU without attention, seeded like test_models' configs."""
    torch.manual_seed(0)
    return build(model_config(**NOATTN), VOCAB).eval()


def test_the_decoder_sees_only_a_fixed_summary():
    """With the summary held fixed, the encoder states of other positions cannot matter: the
    encoder output carries one vector per sentence, and no attention parameters exist."""
    model = make()
    src, lengths = batch([7, 4])
    enc = model.encode(src, lengths)
    assert enc.memory.shape == (2, 1, 64) and bool(enc.mask.all())
    assert model.attention is None and not model.has_attention
    assert not any("attention" in n for n, _ in model.named_parameters())
    bahdanau = build(model_config(**{**NOATTN, "attention": "bahdanau"}), VOCAB)
    extra = sum(p.numel() for p in bahdanau.attention.parameters())
    count = sum(p.numel() for p in model.parameters())
    assert count + extra == sum(p.numel() for p in bahdanau.parameters())


def test_forward_with_attention_is_a_user_error():
    model = make()
    src, lengths = batch([5])
    with pytest.raises(NmtError, match=r"^this model has no attention \(model.attention: none\)$"):
        model.forward_with_attention(src, lengths, targets(1, 3))


def test_search_runs_and_greedy_equals_beam_1():
    model = make()
    src, lengths = batch([6, 4, 5])
    with torch.no_grad():
        opts = ResolvedOptions(beam_size=3, nbest=2, max_len_b=6, with_attention=True)
        greedy = greedy_search(model, src, lengths, opts)
        beams = beam_search(model, src, lengths, opts)
    assert len(greedy) == 3 and all(h.attention is None for h in greedy)
    assert [len(b) for b in beams] == [2, 2, 2]
    assert all(b[0].score >= b[1].score for b in beams)


def test_preset_matches_bahdanau_but_attention():
    noattn, bahdanau = load_config(preset="seq2seq-noattn"), load_config(preset="seq2seq-bahdanau")
    assert noattn.model.attention == "none" and bahdanau.model.attention == "bahdanau"
    noattn.model.attention = "bahdanau"
    assert noattn == bahdanau  # same sizes, training recipe and decoding: one variable changed


@pytest.fixture(scope="module")
def noattn_dir(tmp_path_factory):
    """A randomly initialised tiny no-attention model directory, as `nmt train` would write it."""
    from nmt.data.vocab import Tokenizer, train_spm
    from nmt.dirs.model import ModelDir
    from nmt.dirs.weights import save_weights

    root = tmp_path_factory.mktemp("noattn")
    words = "a man in a blue shirt rides his bike down the street two dogs play".split()
    g = torch.Generator().manual_seed(0)
    lines = [
        " ".join(words[i] for i in torch.randint(0, len(words), (6,), generator=g).tolist())
        for _ in range(200)
    ]
    spm = train_spm(lines, root / "spm", vocab_size=60)
    tok = Tokenizer.load(spm)
    vocab = VocabInfo(tok.vocab_size, tok.vocab_size, joint=True)
    cfg = Config()
    cfg.model = model_config(**NOATTN)
    cfg.decoding.max_len_b = 4
    torch.manual_seed(0)
    model_dir = root / "model"
    ModelDir.at(model_dir).write_meta(cfg, ("en", "de"), (spm, spm), vocab)
    save_weights(build(cfg.model, vocab), model_dir / "checkpoints" / "best.safetensors")
    return model_dir


def test_cli_translate_works_and_attention_is_one_line(noattn_dir, tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["translate", "-m", str(noattn_dir), "-q", "-b", "2"],
                      input=b"a man in a blue shirt\ntwo dogs\n")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert len(r.stdout.splitlines()) == 2
    expected = f"error: {noattn_dir}: this model has no attention (model.attention: none)\n"
    out = tmp_path / "att.png"
    r = runner.invoke(app, ["attention", "-m", str(noattn_dir), "a man", "-o", str(out)])
    assert r.exit_code == 2 and r.output == expected and not out.exists()
    r = runner.invoke(app, ["translate", "-m", str(noattn_dir), "-f", "jsonl", "--with-attention"],
                      input=b"a man\n")  # fmt: skip
    assert r.exit_code == 2 and r.output == expected


def test_capabilities_say_what_each_model_gives_without_asking_its_architecture(noattn_dir):
    """The engine contract's capabilities: a model without attention refuses --with-attention
    and attention queries; a Transformer gives all three kinds; an ensemble the shared ones."""
    from test_models import TINY

    from nmt.engines.translator import Translator
    from nmt.models.ensemble import Ensemble

    with Translator.from_dir(ModelDir(noattn_dir), workers=1) as tr:
        caps = tr.capabilities
        assert (caps.sampling, caps.attention, caps.with_attention, caps.slots) == (
            True,
            (),
            False,
            1,
        )
    transformer = build(model_config(**TINY["transformer"]), VOCAB)
    bahdanau = build(model_config(**TINY["seq2seq"]), VOCAB)
    assert transformer.attention_kinds == ("cross", "self", "decoder")
    assert bahdanau.attention_kinds == ("cross",) and make().attention_kinds == ()
    assert Ensemble([transformer, bahdanau]).attention_kinds == ("cross",)
    assert Ensemble([transformer, make()]).attention_kinds == ()
