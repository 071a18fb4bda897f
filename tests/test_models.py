"""Both architectures against the decoding contract: causality, padding invariance,
incremental decoding == teacher forcing (also after reordering), tied weights, registry,
presets, and that each can fit a small batch."""

from __future__ import annotations

from importlib import resources

import pytest
import torch
import torch.nn.functional as F

from nmt.config import load_config, model_config, preset_names
from nmt.errors import NmtError
from nmt.models import MODELS, VocabInfo, build, count_parameters
from nmt.models.base import step_scores

V = 50
VOCAB = VocabInfo(V, V)

LSTM_2LAYER = dict(
    type="seq2seq",
    rnn_type="lstm",
    embed_dim=24,
    hidden_size=32,
    encoder_layers=2,
    decoder_layers=2,
)
TINY = {
    "transformer": dict(
        type="transformer", d_model=32, heads=4, ff_dim=64, encoder_layers=2, decoder_layers=2
    ),
    "transformer-post-learned-gelu": dict(
        type="transformer",
        d_model=32,
        heads=4,
        ff_dim=64,
        encoder_layers=2,
        decoder_layers=2,
        norm="post",
        positions="learned",
        activation="gelu",
        tie_embeddings=False,
    ),
    "seq2seq": dict(type="seq2seq", embed_dim=24, hidden_size=32, attention="bahdanau"),
    "seq2seq-lstm-2layer-dot": {**LSTM_2LAYER, "attention": "dot"},
    "seq2seq-general-untied": dict(
        type="seq2seq", embed_dim=24, hidden_size=32, attention="general", tie_embeddings=False
    ),
    "seq2seq-noattn": dict(type="seq2seq", embed_dim=24, hidden_size=32, attention="none"),
    "seq2seq-noattn-lstm-2layer-untied": {
        **LSTM_2LAYER,
        "attention": "none",
        "tie_embeddings": False,
    },
}
ARCHS = ["transformer", "seq2seq"]
ATTENTIONAL = [name for name, cfg in TINY.items() if cfg.get("attention") != "none"]


def make(name: str, vocab: VocabInfo = VOCAB, **over) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = model_config(**{**TINY[name], **over})
    return build(cfg, vocab).eval()


def batch(lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources ending with eos, zero padded: (B, S), (B,)."""
    g = torch.Generator().manual_seed(seed)
    s = max(lengths)
    src = torch.randint(4, V, (len(lengths), s), generator=g)
    for i, n in enumerate(lengths):
        src[i, n - 1] = 3
        src[i, n:] = 0
    return src, torch.tensor(lengths)


def targets(b: int, t: int, seed: int = 2) -> torch.Tensor:
    """Target inputs starting with bos: (B, T)."""
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
    tgt[1, 5:] = 0  # the short sentence also has a padded target
    with torch.no_grad():
        together = model(src, lengths, tgt)
        for i in range(3):
            n = int(lengths[i])
            alone = model(src[i : i + 1, :n], lengths[i : i + 1], tgt[i : i + 1])
            torch.testing.assert_close(together[i : i + 1], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(TINY))
def test_incremental_decoding_equals_teacher_forcing_with_reordering(name):
    model = make(name)
    attentional = name in ATTENTIONAL
    src, lengths = batch([7, 3, 5, 6])
    tgt = targets(4, 9)
    with torch.no_grad():
        if attentional:
            logits, full_attn = model.forward_with_attention(src, lengths, tgt)
            torch.testing.assert_close(model(src, lengths, tgt), logits, atol=1e-5, rtol=0)
        else:
            logits = model(src, lengths, tgt)
        full = F.log_softmax(logits.float(), -1)  # (B, T, V)
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        rows = torch.arange(4)
        g = torch.Generator().manual_seed(3)
        for t in range(tgt.size(1)):
            if t in (3, 6):  # a random permutation, then a subset with repeats (beam-like)
                order = torch.randperm(len(rows), generator=g)
                if t == 6:
                    order = torch.tensor([2, 2, 0, 3, 0])
                rows = rows[order]
                enc = model.reorder_encoder_out(enc, order)
                state = model.reorder_state(state, order)
            log_probs, state, attn = model.decode_step(tgt[rows, t], enc, state, need_attn=True)
            assert log_probs.dtype == torch.float32 and log_probs.shape == (len(rows), V)
            torch.testing.assert_close(log_probs, full[rows, t], atol=1e-5, rtol=0)
            if attentional:
                torch.testing.assert_close(attn, full_attn[rows, :, :, t], atol=1e-5, rtol=0)
            else:
                assert attn is None  # no attention weights exist, even when asked for
        plain, _, none = model.decode_step(tgt[rows, 0], enc, model.init_state(enc))
        assert none is None
        raw, _, _ = model.decode_step(tgt[rows, 0], enc, model.init_state(enc), normalize=False)
        # normalize=False: the teacher-forced logits themselves, whose log-softmax is `plain`
        assert raw.dtype == torch.float32
        torch.testing.assert_close(raw, logits[rows, 0].float(), atol=1e-5, rtol=0)
        torch.testing.assert_close(F.log_softmax(raw, -1), plain, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", [n for n in TINY if not n.startswith("transformer")])
def test_teacher_forcing_trains_what_step_by_step_decoding_computes(name):
    """The RNN's gradients of a loss on the teacher-forced logits (its own step loop) equal those
    of the same loss built from decode_step one step at a time: training fits the network that
    search runs. (A Transformer's decode_step fills its cache in place, outside autograd.)"""
    model = make(name)
    src, lengths = batch([7, 3, 5])
    tgt = targets(3, 8)
    picked = tgt.roll(-1, 1)  # any fixed target tokens

    def grads(logits: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad()
        F.log_softmax(logits.float(), -1).gather(-1, picked[..., None]).sum().backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    forced = grads(model(src, lengths, tgt))
    enc, steps = model.encode(src, lengths), []
    state = model.init_state(enc)
    for t in range(tgt.size(1)):
        logits, state, _ = model.decode_step(tgt[:, t], enc, state, normalize=False)
        steps.append(logits)
    stepped = grads(torch.stack(steps, 1))
    assert len(forced) == len(stepped) == len(list(model.parameters()))
    for a, b in zip(forced, stepped, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_step_scores_normalize_in_place_only_outside_autograd():
    x = torch.randn(3, 7)
    ref = F.log_softmax(x, -1)
    assert step_scores(x, False) is x
    y = x.clone()
    out = step_scores(y, True)  # in place: no second (B, V) tensor
    assert out.data_ptr() == y.data_ptr()
    torch.testing.assert_close(out, ref)
    z = x.clone().requires_grad_()
    out = step_scores(z, True)  # autograd: a new tensor, gradients flow
    out[:, 0].sum().backward()
    torch.testing.assert_close(out.detach(), ref)
    assert z.grad is not None and torch.allclose(z.grad.sum(-1), torch.zeros(3), atol=1e-6)


@pytest.mark.parametrize("name", list(TINY))
def test_repeat_encoder_out_equals_repeating_rows(name):
    """Beam expansion may share one encoder copy among k rows: steps, attention and later
    reorders (whole groups as beam search drops sentences, or any rows) match plain copies."""
    model, k = make(name), 3
    src, lengths = batch([7, 3, 5])
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        enc = model.encode(src, lengths)
        shared = model.repeat_encoder_out(enc, k)
        copied = model.reorder_encoder_out(enc, torch.arange(3).repeat_interleave(k))
        states = [model.init_state(shared), model.init_state(copied)]
        whole_groups = torch.tensor([0, 1, 2, 6, 7, 8])  # sentence 1 dropped
        for order in [torch.arange(9), whole_groups, torch.tensor([5, 0, 0, 3, 1])]:
            shared = model.reorder_encoder_out(shared, order)
            copied = model.reorder_encoder_out(copied, order)
            states = [model.reorder_state(s, order) for s in states]
            if name.startswith("transformer") and order is whole_groups:
                assert shared.group == k and shared.cross_kv[0][0].size(0) == 2  # still shared
            prev = torch.randint(4, V, (len(order),), generator=g)
            (a, sa, wa), (b, sb, wb) = (
                model.decode_step(prev, e, s, need_attn=True)
                for e, s in zip((shared, copied), states, strict=True)
            )
            states = [sa, sb]
            assert a.shape == (len(order), V)
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
            if name in ATTENTIONAL:
                torch.testing.assert_close(wa, wb, atol=1e-6, rtol=0)
        if name.startswith("transformer"):  # whole groups stayed shared; any other order copies
            assert shared.cross_kv[0][0].size(0) == 5 and shared.group == 1


@pytest.mark.parametrize("name", ATTENTIONAL)
def test_attention_is_a_distribution_over_the_real_source(name):
    model = make(name)
    src, lengths = batch([7, 2, 5])
    with torch.no_grad():
        _, attn = model.forward_with_attention(src, lengths, targets(3, 4))  # (B, L, H, T, S)
    layers, heads = (2, 4) if name.startswith("transformer") else (1, 1)
    assert attn.shape == (3, layers, heads, 4, 7)
    real = (torch.arange(7) < lengths.unsqueeze(1))[:, None, None, None]  # (B, 1, 1, 1, S)
    assert (attn.masked_select(~real) == 0).all()
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, layers, heads, 4))


TRANSFORMERS = [name for name in TINY if name.startswith("transformer")]


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_decoder_self_attention_is_causal_and_row_stochastic(name):
    """The decoder's masked self-attention: (B, L, H, T, T), exactly 0 above the diagonal,
    each row a distribution; the logits are the plain forward's."""
    model = make(name)
    src, lengths = batch([7, 2, 5])
    tgt = targets(3, 6)
    with torch.no_grad():
        logits, attn = model.forward_with_attention(src, lengths, tgt, kind="decoder")
        torch.testing.assert_close(logits, model(src, lengths, tgt), atol=1e-5, rtol=0)
    assert attn.shape == (3, 2, 4, 6, 6) and attn.dtype == torch.float32
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert (attn[..., future] == 0).all()
    assert (attn[..., ~future] > 0).all()
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 2, 4, 6))


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_encoder_self_attention_is_a_distribution_over_the_real_source(name):
    """The encoder's self-attention: (B, L_enc, H, S, S), zero on padded keys, rows summing to 1;
    a padded sentence's real rows are those of the sentence alone."""
    model = make(name, encoder_layers=3)
    src, lengths = batch([7, 2, 5])
    with torch.no_grad():
        _, attn = model.forward_with_attention(src, lengths, targets(3, 4), kind="self")
        _, alone = model.forward_with_attention(src[1:2, :2], lengths[1:2], targets(1, 4), "self")
    assert attn.shape == (3, 3, 4, 7, 7)
    real = (torch.arange(7) < lengths.unsqueeze(1))[:, None, None, None]  # (B, 1, 1, 1, S)
    assert (attn.masked_select(~real) == 0).all()
    assert (attn.masked_select(real.expand_as(attn)) > 0).all()
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 3, 4, 7))
    assert alone.shape == (1, 3, 4, 2, 2)
    torch.testing.assert_close(attn[1:2, :, :, :2, :2], alone, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="unknown attention kind 'encoder'"):
        model.forward_with_attention(src, lengths, targets(3, 4), kind="encoder")


@pytest.mark.parametrize("arch", ARCHS)
def test_tied_embeddings_are_one_tensor(arch):
    joint = make(arch, tie_embeddings=True)
    assert joint.src_embed.weight is joint.tgt_embed.weight is joint.output.weight
    separate = make(arch, VocabInfo(40, V, joint=False), tie_embeddings=True)
    assert separate.tgt_embed.weight is separate.output.weight
    assert separate.src_embed.weight is not separate.tgt_embed.weight
    assert separate.src_embed.weight.shape[0] == 40
    untied = make(arch, tie_embeddings=False)
    ptrs = {untied.src_embed.weight.data_ptr(), untied.tgt_embed.weight.data_ptr()}
    assert len(ptrs | {untied.output.weight.data_ptr()}) == 3
    # A shared matrix is one parameter: counted once, and both lookups see an update to it.
    dim = joint.tgt_embed.weight.shape[1]
    assert count_parameters(untied) - count_parameters(joint) == 2 * V * dim
    with torch.no_grad():
        joint.output.weight[7].fill_(0.5)
    assert (joint.src_embed.weight[7] == 0.5).all()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.slow
def test_overfits_a_small_batch(arch):
    torch.manual_seed(0)
    cfg = model_config(**{**TINY[arch], "dropout": 0.0})
    model = build(cfg, VOCAB).train()
    src, lengths = batch([6, 5, 7, 4, 6, 8, 5, 7], seed=5)
    g = torch.Generator().manual_seed(6)
    tgt = torch.randint(4, V, (8, 8), generator=g)
    tgt_in = torch.cat([torch.full((8, 1), 2), tgt], 1)
    tgt_out = torch.cat([tgt, torch.full((8, 1), 3)], 1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss = F.cross_entropy(model(src, lengths, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.01:
            break
    assert loss.item() < 0.05
    model.eval()
    with torch.no_grad():  # and greedy incremental decoding reproduces the targets
        enc = model.encode(src, lengths)
        state, prev, out = model.init_state(enc), tgt_in[:, 0], []
        for _ in range(tgt_out.size(1)):
            log_probs, state, _ = model.decode_step(prev, enc, state)
            prev = log_probs.argmax(-1)
            out.append(prev)
    assert torch.equal(torch.stack(out, 1), tgt_out)


def test_build_registry_and_unknown_type():
    assert set(MODELS) == {"seq2seq", "transformer"}
    for arch in ARCHS:
        model = make(arch)
        assert type(model) is MODELS[arch]
        assert model.vocab == VOCAB
        assert model.max_positions == (512 if arch == "transformer" else 0)  # an RNN has no limit
    with pytest.raises(
        NmtError, match=r"unknown model.type 'rnn' \(choices: seq2seq, transformer\)"
    ):
        build(model_config(type="rnn"), VOCAB)


def test_parameter_count_of_transformer_matches_formula():
    d, ff, heads = 32, 64, 4
    model = make("transformer")
    attn = 4 * d * d + 4 * d
    ffn = 2 * d * ff + ff + d
    enc_layer = attn + ffn + 2 * 2 * d
    dec_layer = 2 * attn + ffn + 3 * 2 * d
    expected = V * d + 2 * enc_layer + 2 * dec_layer + 2 * 2 * d
    assert count_parameters(model) == expected
    assert heads == model.cfg.heads


def test_bad_sizes_are_user_errors():
    with pytest.raises(NmtError, match="d_model 30 is not divisible by model.heads 4"):
        make("transformer", d_model=30)
    with pytest.raises(NmtError, match="joint vocabulary needs equal sizes"):
        make("transformer", VocabInfo(40, 50, joint=True))
    model = make("transformer", max_positions=8)
    src, lengths = batch([5])
    with pytest.raises(NmtError, match="sequence of 9 tokens exceeds model.max_positions 8"):
        model(src, lengths, targets(1, 9))


@pytest.mark.parametrize("name", preset_names())
def test_presets_load_build_and_comment_every_key(name):
    cfg = load_config(preset=name)
    assert cfg.model.type in MODELS
    text = (resources.files("nmt") / "presets" / f"{name}.yaml").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert "#" in line, f"{name}: uncommented key: {line}"
    if name.endswith("tiny"):
        model = build(cfg.model, VocabInfo(100, 100))
        assert count_parameters(model) > 0


def test_required_presets_exist_with_their_sizes():
    assert {
        "seq2seq-tiny",
        "transformer-tiny",
        "seq2seq-bahdanau",
        "transformer-small",
        "transformer-base",
    } <= set(preset_names())
    small = load_config(preset="transformer-small").model
    assert (small.d_model, small.encoder_layers, small.decoder_layers) == (256, 3, 3)
    assert (small.heads, small.ff_dim, small.dropout, small.tie_embeddings) == (4, 1024, 0.1, True)
    base = load_config(preset="transformer-base").model
    assert (base.d_model, base.encoder_layers, base.heads, base.ff_dim) == (512, 6, 8, 2048)
    rnn = load_config(preset="seq2seq-bahdanau").model
    assert rnn.type == "seq2seq"
    assert (rnn.embed_dim, rnn.hidden_size, rnn.encoder_layers, rnn.decoder_layers) == (
        256,
        256,
        1,
        1,
    )
    assert (rnn.rnn_type, rnn.attention) == ("gru", "bahdanau")


@pytest.mark.parametrize("name", ["transformer", "seq2seq", "seq2seq-lstm-2layer-dot"])
def test_bf16_autocast_runs_and_stays_close_to_fp32(name):
    model = make(name)
    src, lengths = batch([6, 4, 2])
    tgt = targets(3, 5)
    with torch.no_grad():
        ref = model(src, lengths, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, lengths, tgt)
        logits.float().sum().backward()
        enc = model.encode(src, lengths)
        log_probs, _, _ = model.decode_step(tgt[:, 0], enc, model.init_state(enc))
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3))
    torch.testing.assert_close(logits.float(), ref, atol=0.1, rtol=0.05)
