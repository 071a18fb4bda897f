"""Ensembles (`nmt.models.ensemble`, `nmt translate -m A -m B`): the averaged distribution, its
incremental decoding against teacher forcing, mixed architectures, and the refusals."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
import torch
from test_translate import build_tiny_model_dir, run_cli, synthetic_lines

from nmt.config import model_config
from nmt.data.vocab import VocabInfo
from nmt.dirs.export import EXPORT_MANIFEST
from nmt.dirs.model import ModelDir
from nmt.dirs.weights import save_weights
from nmt.engines.translator import Translator
from nmt.errors import NmtError
from nmt.models import build
from nmt.models.ensemble import Ensemble


def member_dir(base: Path, root: Path, seed: int, **model: object) -> Path:
    """A copy of model directory `base` (same SentencePiece model) with other random weights,
    and another architecture when `model` gives one."""
    out = root / f"member-{seed}"
    shutil.copytree(base, out)
    cfg, vocab = ModelDir(out).config, ModelDir(out).vocab
    if model:
        cfg.model = model_config(**model)
        cfg.save(out / "config.yaml")
    torch.manual_seed(seed)
    save_weights(build(cfg.model, vocab), out / "checkpoints" / "best.safetensors")
    return out


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ensemble")
    base = build_tiny_model_dir(root)
    return {
        "a": base,
        "b": member_dir(base, root, seed=1),
        "rnn": member_dir(base, root, seed=2, type="seq2seq", embed_dim=16, hidden_size=16),
    }


def hyps(tr: Translator, lines: list[str], k: int) -> list[list[tuple[list[str], float]]]:
    out = tr.translate(lines, beam_size=k, nbest=k)
    return [[(h.tokens, h.score) for h in t.hypotheses] for t in out]


def test_one_member_is_the_model_itself(dirs):
    """An ensemble of one decodes exactly as its member: same tokens, same scores."""
    lines = synthetic_lines(12, seed=3)
    alone = Translator.from_dir(ModelDir(dirs["a"]), device="cpu")
    one = Translator.from_dir(ModelDir(dirs["a"]), device="cpu")
    one.model = Ensemble([one.model])
    for k in (1, 3):
        assert hyps(one, lines, k) == hyps(alone, lines, k)


def test_a_model_twice_gives_its_own_translations(dirs):
    """log(mean(p, p)) = log p: the same tokens, scores equal up to rounding."""
    lines = synthetic_lines(12, seed=4)
    alone = Translator.from_dir(ModelDir(dirs["a"]), device="cpu")
    twice = Translator.from_dir([ModelDir(dirs["a"]), ModelDir(dirs["a"])], device="cpu")
    assert isinstance(twice.model, Ensemble) and not twice.model.training
    for k in (1, 3):
        got, want = hyps(twice, lines, k), hyps(alone, lines, k)
        assert [[t for t, _ in s] for s in got] == [[t for t, _ in s] for s in want]
        for s, w in zip(got, want, strict=True):
            assert [x for _, x in s] == pytest.approx([x for _, x in w], abs=1e-5)


def _batch(vocab: int, n: int = 3, s: int = 6, t: int = 5):
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (n, s), generator=g)
    lengths = torch.tensor([s, s - 2, s - 3][:n])
    for i, n_i in enumerate(lengths.tolist()):
        src[i, n_i - 1] = 3  # eos
        src[i, n_i:] = 0  # pad
    tgt = torch.randint(4, vocab, (n, t), generator=g)
    tgt[:, 0] = 2  # bos
    return src, lengths, tgt


@pytest.mark.parametrize("other", ["b", "rnn"])
def test_steps_average_probabilities_and_match_teacher_forcing(dirs, other):
    """Each step's log-probs are log((p_a + p_b) / 2) of the members' own steps, they sum to
    one, and step by step (with a reorder midway) they equal the teacher-forced pass."""
    a = Translator.from_dir(ModelDir(dirs["a"]), device="cpu").model
    b = Translator.from_dir(ModelDir(dirs[other]), device="cpu").model
    ens = Ensemble([a, b])
    src, lengths, tgt = _batch(a.vocab.tgt_size)
    with torch.inference_mode():
        full = ens(src, lengths, tgt)  # (B, T, V)
        want = torch.log(
            (torch.log_softmax(a(src, lengths, tgt), -1).exp()
             + torch.log_softmax(b(src, lengths, tgt), -1).exp()) / 2
        )  # fmt: skip
        torch.testing.assert_close(full, want, atol=1e-5, rtol=1e-5)
        enc = ens.encode(src, lengths)
        state = ens.init_state(enc)
        order = torch.tensor([2, 0, 1])
        rows = torch.arange(3)
        for t in range(tgt.size(1)):
            if t == 2:  # the search's reorder: rows follow `order` from here on
                enc, state = ens.reorder_encoder_out(enc, order), ens.reorder_state(state, order)
                rows = rows[order]
            lp, state, _ = ens.decode_step(tgt[rows, t], enc, state)
            assert lp.exp().sum(-1) == pytest.approx(torch.ones(3), abs=1e-4)
            torch.testing.assert_close(lp, full[rows, t], atol=1e-4, rtol=1e-4)
            raw, _, _ = ens.decode_step(tgt[rows, t], *_fresh(ens, src, lengths, tgt, t, rows))
            assert torch.equal(raw.argmax(-1), lp.argmax(-1))


def _fresh(ens: Ensemble, src, lengths, tgt, t: int, rows):
    """Encoder output and state after steps 0..t-1 of rows `rows`, for a normalize=False step."""
    enc = ens.reorder_encoder_out(ens.encode(src, lengths), rows)
    state = ens.init_state(enc)
    for u in range(t):
        _, state, _ = ens.decode_step(tgt[rows, u], enc, state, normalize=False)
    return enc, state


def test_mixed_architectures_translate_every_line(dirs):
    """A Transformer and a Seq2Seq decode together: one result per line, n-best in order, and
    the attention is the first member's where the shapes differ."""
    lines = synthetic_lines(10, seed=5) + ["", "two dogs ."]
    tr = Translator.from_dir([ModelDir(dirs["a"]), ModelDir(dirs["rnn"])], device="cpu", workers=2)
    assert tr.max_source == 63  # the Transformer's limit; the Seq2Seq has none
    out = tr.translate(lines, beam_size=3, nbest=2, with_attention=True, batch_tokens=30)
    assert len(out) == len(lines) and out[-2].text == ""
    for t in out[:-2]:
        assert len(t.hypotheses) == 2 and t.hypotheses[0].score >= t.hypotheses[1].score
        att = t.hypotheses[0].attention
        assert att is not None and att.shape[1:] == (2, 2, len(t.source_tokens))


def test_members_must_share_the_vocabulary(dirs, tmp_path):
    other = build_tiny_model_dir(tmp_path, d_model=16)
    from nmt.data.vocab import train_spm

    spm = train_spm(synthetic_lines(300, seed=9), tmp_path / "other", vocab_size=150)
    shutil.copy(spm, other / "spm.model")
    (other / "checkpoints" / "best.safetensors").write_bytes(b"not weights")  # never read
    with pytest.raises(NmtError) as e:
        Translator.from_dir([ModelDir(dirs["a"]), ModelDir(other)], device="cpu")
    assert str(e.value) == (
        f"{other}: its source vocabulary differs from {dirs['a']}'s (the models of an ensemble "
        "must share their SentencePiece models)"
    )
    a = Translator.from_dir(ModelDir(dirs["a"]), device="cpu").model
    cfg = ModelDir(dirs["a"]).config
    small = build(cfg.model, VocabInfo(150, 150))
    with pytest.raises(NmtError) as e:
        Ensemble([a, small])
    size = a.vocab.tgt_size
    assert str(e.value) == (
        "the models of an ensemble must share one vocabulary, got (source, target) sizes "
        f"({size}, {size}), (150, 150)"
    )


def test_cli_ensemble_lines_and_refusals(dirs, tmp_path):
    src = tmp_path / "in.txt"
    lines = synthetic_lines(7, seed=6) + [""]
    src.write_text("\n".join(lines) + "\n")
    res = run_cli("translate", "-m", str(dirs["a"]), "-m", str(dirs["b"]), str(src), "-q")
    assert res.exit_code == 0 and len(res.stdout.splitlines()) == len(lines)
    res = run_cli("translate", "-m", str(dirs["a"]), "-m", str(tmp_path / "nope"), str(src))
    assert res.exit_code != 0 and f"{tmp_path / 'nope'}: model directory not found" in res.output
    export = tmp_path / "export"
    export.mkdir()
    (export / EXPORT_MANIFEST).write_text("{}")  # what marks an `nmt export` directory
    res = run_cli("translate", "-m", str(dirs["a"]), "-m", str(export), str(src))
    assert res.exit_code == 2 and res.output.strip().endswith(
        f"{export}: an ensemble takes model directories, not `nmt export` directories"
    )
    res = run_cli("translate", "-m", str(export), "--checkpoint", "last", str(src))
    assert res.exit_code == 2 and res.output.strip().endswith(
        f"--checkpoint does not apply to {export}: an export holds one checkpoint"
    )  # the one directory named as given, not as the list that -m collects
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(lines) + "\n")
    res = run_cli(
        "evaluate", "-m", str(dirs["a"]), "-m", str(dirs["b"]), "--src", str(src),
        "--ref", str(ref), "--json", "-q",
    )  # fmt: skip
    assert res.exit_code == 0 and '"score"' in res.stdout


@pytest.mark.slow
def test_serve_an_ensemble(dirs):
    """`nmt serve -m A -m B` as a real process: /info names the members, /translate answers with
    the ensemble's translations (those of `nmt translate` with the same two models)."""
    pytest.importorskip("fastapi")
    import httpx
    from test_serve import start_server, stop_server

    proc, url = start_server(dirs["a"], "-m", str(dirs["rnn"]), "--checkpoint", "best")
    try:
        info = httpx.get(url + "/info", timeout=10).json()
        assert info["ensemble"] == [
            "/".join(Path(d).resolve().parts[-2:]) for d in (dirs["a"], dirs["rnn"])
        ]
        lines = synthetic_lines(5, seed=8)
        r = httpx.post(url + "/translate", json={"text": lines, "beam_size": 3}, timeout=30)
        assert r.status_code == 200
        got = [t["hypotheses"][0]["translation"] for t in r.json()["translations"]]
    finally:
        assert stop_server(proc) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    local = Translator.from_dir(
        [ModelDir(dirs["a"]), ModelDir(dirs["rnn"])], device="cpu", checkpoint="best"
    )
    assert got == [t.text for t in local.translate(lines, beam_size=3)]
