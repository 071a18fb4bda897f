"""The attention-free Seq2Seq (`model.attention: none`) against the decoding contract: causality,
padding invariance, incremental decoding == teacher forcing (after reordering too), search and
translate work unchanged, and asking for its attention is one clear line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from nmt.cli import app
from nmt.config import Config, load_config, model_config
from nmt.errors import NmtError
from nmt.models import VocabInfo, build
from nmt.search import beam_search, greedy_search

V = 50
VOCAB = VocabInfo(V, V)
TINY = {
    "gru": dict(type="seq2seq", embed_dim=24, hidden_size=32, attention="none"),
    "lstm-2layer-untied": dict(
        type="seq2seq",
        rnn_type="lstm",
        embed_dim=24,
        hidden_size=32,
        encoder_layers=2,
        decoder_layers=2,
        attention="none",
        tie_embeddings=False,
    ),  # fmt: skip
}


def make(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build(model_config(**TINY[name]), VOCAB).eval()


def batch(lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources ending with eos, zero padded: (B, S), (B,)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (len(lengths), max(lengths)), generator=g)
    for i, n in enumerate(lengths):
        src[i, n - 1] = 3
        src[i, n:] = 0
    return src, torch.tensor(lengths)


def targets(b: int, t: int, seed: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    tgt = torch.randint(4, V, (b, t), generator=g)
    tgt[:, 0] = 2
    return tgt


@pytest.mark.parametrize("name", list(TINY))
def test_causality(name):
    model = make(name)
    src, lengths = batch([6, 4, 5])
    tgt = targets(3, 7)
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(4, V, (3, 3))
    with torch.no_grad():
        a, b = model(src, lengths, tgt), model(src, lengths, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("name", list(TINY))
def test_padding_invariance(name):
    model = make(name)
    src, lengths = batch([9, 3, 6])
    tgt = targets(3, 8)
    with torch.no_grad():
        together = model(src, lengths, tgt)
        for i in range(3):
            n = int(lengths[i])
            alone = model(src[i : i + 1, :n], lengths[i : i + 1], tgt[i : i + 1])
            torch.testing.assert_close(together[i : i + 1], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(TINY))
def test_incremental_decoding_equals_teacher_forcing_with_reordering(name):
    model = make(name)
    src, lengths = batch([7, 3, 5, 6])
    tgt = targets(4, 9)
    with torch.no_grad():
        full = F.log_softmax(model(src, lengths, tgt).float(), -1)  # (B, T, V)
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        rows = torch.arange(4)
        for t in range(tgt.size(1)):
            if t in (3, 6):  # a permutation, then a subset with repeats (beam-like)
                order = torch.tensor([3, 1, 0, 2]) if t == 3 else torch.tensor([2, 2, 0, 3, 0])
                rows = rows[order]
                enc = model.reorder_encoder_out(enc, order)
                state = model.reorder_state(state, order)
            log_probs, state, attn = model.decode_step(tgt[rows, t], enc, state, need_attn=True)
            assert attn is None  # no attention weights exist, even when asked for
            assert log_probs.dtype == torch.float32 and log_probs.shape == (len(rows), V)
            torch.testing.assert_close(log_probs, full[rows, t], atol=1e-5, rtol=0)


def test_the_decoder_sees_only_a_fixed_summary():
    """With the summary held fixed, the encoder states of other positions cannot matter: the
    encoder output carries one vector per sentence, and no attention parameters exist."""
    model = make("gru")
    src, lengths = batch([7, 4])
    enc = model.encode(src, lengths)
    assert enc.memory.shape == (2, 1, 64) and bool(enc.mask.all())
    assert model.attention is None and not model.has_attention
    assert not any("attention" in n for n, _ in model.named_parameters())
    bahdanau = build(model_config(**{**TINY["gru"], "attention": "bahdanau"}), VOCAB)
    extra = sum(p.numel() for p in bahdanau.attention.parameters())
    count = sum(p.numel() for p in model.parameters())
    assert count + extra == sum(p.numel() for p in bahdanau.parameters())


def test_forward_with_attention_is_a_user_error():
    model = make("gru")
    src, lengths = batch([5])
    with pytest.raises(NmtError, match=r"^this model has no attention \(model.attention: none\)$"):
        model.forward_with_attention(src, lengths, targets(1, 3))


def test_search_runs_and_greedy_equals_beam_1():
    model = make("gru")
    src, lengths = batch([6, 4, 5])
    with torch.no_grad():
        greedy = greedy_search(model, src, lengths, max_len_b=6, need_attn=True)
        beams = beam_search(model, src, lengths, beam_size=3, nbest=2, max_len_b=6, need_attn=True)
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
    from nmt.modeldir import save_weights, write_meta
    from nmt.vocab import Tokenizer, train_spm

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
    cfg.model = model_config(**TINY["gru"])
    cfg.decoding.max_len_b = 4
    torch.manual_seed(0)
    model_dir = root / "model"
    write_meta(model_dir, cfg, "en", "de", spm, spm, vocab)
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
