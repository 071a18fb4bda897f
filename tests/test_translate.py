"""Translator and `nmt translate` / `nmt attention`: one line out per line in, order kept, empty and
over-long lines, JSONL schema, invalid UTF-8, streaming stdin, heatmap PNG."""

from __future__ import annotations

import json
import os
import queue
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.config import Config, model_config
from nmt.data.vocab import EOS_ID, VocabInfo
from nmt.decode.lines import format_translation, one_line
from nmt.decode.options import Sampling
from nmt.decode.translate_files import translate_files
from nmt.dirs import ModelDir
from nmt.engines.translator import Translator
from nmt.engines.workers import decode_workers
from nmt.errors import NmtError

WORDS = "a man in a blue shirt is riding his bike down the street two dogs play in the snow".split()
WORDS += "eine frau mit einem roten hut sitzt auf der bank zwei kinder spielen im park".split()


LIMIT_WARNING = "translations stopped at the length limit"


def synthetic_lines(n: int, seed: int = 0) -> list[str]:
    """Short sentences over a small lexicon (enough to train a tiny SentencePiece model)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(3, 12, (1,), generator=g))
        idx = torch.randint(0, len(WORDS), (k,), generator=g).tolist()
        out.append(" ".join(WORDS[i] for i in idx) + " .")
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A randomly initialised tiny Transformer model directory, as `nmt train` would write it."""
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny"))


def build_tiny_model_dir(root: Path, d_model: int = 32) -> Path:
    """Write ROOT/model: a tiny random Transformer with its SentencePiece model (shared by tests)."""
    from nmt.data.vocab import Tokenizer, train_spm
    from nmt.dirs.model import ModelDir
    from nmt.dirs.weights import save_weights
    from nmt.models import build

    spm = train_spm(synthetic_lines(300), root / "spm", vocab_size=200)
    tok = Tokenizer.load(spm)
    vocab = VocabInfo(tok.vocab_size, tok.vocab_size, joint=True)
    cfg = Config()
    cfg.model = model_config(
        type="transformer", d_model=d_model, heads=2, ff_dim=64, encoder_layers=1, decoder_layers=2,
        max_positions=64, dropout=0.0,
    )  # fmt: skip
    cfg.decoding.beam_size = 3
    cfg.decoding.max_len_b = 5
    torch.manual_seed(0)
    model = build(cfg.model, vocab)
    model_dir = root / "model"
    ModelDir.at(model_dir).write_meta(cfg, ("en", "de"), (spm, spm), vocab)
    save_weights(model, model_dir / "checkpoints" / "best.safetensors")
    return model_dir


class Echo:
    """Implements the contract by copying its source (eos included): the translation of a line
    is its own SentencePiece round trip, so any mix-up of lines shows in the output."""

    def __init__(self, vocab_size: int, max_positions: int) -> None:
        self.vocab = VocabInfo(vocab_size, vocab_size)
        self.max_positions = max_positions

    def encode(self, src, src_lengths):
        return src

    def init_state(self, src):
        return torch.zeros(src.size(0), dtype=torch.long)  # (B,) position

    def decode_step(self, prev, src, pos, need_attn=False, normalize=True):
        nxt = src.gather(1, pos.clamp(max=src.size(1) - 1).unsqueeze(1)).squeeze(1)  # (B,)
        logits = torch.full((src.size(0), self.vocab.tgt_size), -30.0)
        logits.scatter_(1, nxt.unsqueeze(1), 0.0)
        attn = None
        if need_attn:
            attn = torch.nn.functional.one_hot(pos.clamp(max=src.size(1) - 1), src.size(1))
            attn = attn.float()[:, None, None]  # (B, 1, 1, S)
        return torch.log_softmax(logits, -1) if normalize else logits, pos + 1, attn

    def reorder_encoder_out(self, src, order):
        return src.index_select(0, order)

    def repeat_encoder_out(self, src, k):
        return src.repeat_interleave(k, 0)

    def reorder_state(self, pos, order):
        return pos.index_select(0, order)


@pytest.fixture(scope="module")
def echo(tiny_model_dir) -> Translator:
    real = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu")
    model = Echo(real.src_tok.vocab_size, max_positions=21)
    return Translator(model, real.cfg, real.src_tok, real.tgt_tok, "cpu")


def expected_echo(tr: Translator, line: str) -> str:
    return "" if not line.strip() else tr.tgt_tok.decode(tr.src_tok.encode(line)[:20])


# ---- library --------------------------------------------------------------------------------

line_st = st.one_of(
    st.sampled_from(["", " ", "\t  ", "\u3000"]),  # empty / whitespace-only
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join),
    st.lists(st.sampled_from(WORDS), min_size=30, max_size=60).map(" ".join),  # too long
    st.text(alphabet="Привет мир こんにちは 世界 مرحبا", min_size=1, max_size=15),  # non-Latin
    st.text(min_size=0, max_size=20).map(lambda s: s.replace("\n", " ").replace("\r", " ")),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(line_st, min_size=0, max_size=12), beam=st.sampled_from([1, 2]))
@pytest.mark.slow
def test_one_result_per_line_in_order(echo, lines, beam):
    warned = []
    out = echo.translate(lines, beam_size=beam, batch_tokens=40, on_warning=warned.append)
    assert len(out) == len(lines)
    for line, tr in zip(lines, out, strict=True):
        assert tr.source == line
        assert tr.text == expected_echo(echo, line)
    too_long = [i + 1 for i, x in enumerate(lines) if len(echo.src_tok.encode(x)) > 20]
    assert [int(w.split(":")[0].split()[1]) for w in warned] == too_long


def test_empty_lines_do_not_run_the_model(echo, monkeypatch):
    calls = []
    monkeypatch.setattr(echo.model, "encode", lambda *a: calls.append(1))
    out = echo.translate(["", "   ", "\t"])
    assert [t.text for t in out] == ["", "", ""] and not calls


def test_truncation_warning_names_the_line(echo):
    long = " ".join(WORDS)
    with pytest.warns(
        UserWarning, match=r"^line 12: source has \d+ subword tokens, truncated to 20"
    ):
        (tr,) = echo.translate([long], first_line=12)
    assert tr.text == expected_echo(echo, long) and len(tr.source_tokens) == 21


@pytest.mark.parametrize("limits", [dict(max_len_a=1e300), dict(max_len_b=1e30)])
def test_huge_length_limits_cap_at_the_model_not_at_one_token(echo, limits):
    lines = synthetic_lines(4, seed=6)
    out = echo.translate(lines, beam_size=2, on_warning=lambda _: None, **limits)
    assert [t.text for t in out] == [expected_echo(echo, x) for x in lines]


@pytest.mark.parametrize("beam", [1, 2])
def test_at_limit_marks_the_translations_the_length_limit_stopped(echo, beam):
    """Echo ends each line by itself (its source's eos) unless the limit comes first."""
    lines = ["a", "a man .", "two dogs play .", "a man in a blue shirt ."]  # under 20 subwords
    free = echo.translate(lines, beam_size=beam)
    assert [t.text for t in free] == [expected_echo(echo, x) for x in lines]
    assert not any(t.at_limit for t in free)
    cut = echo.translate(lines, beam_size=beam, max_len_a=0.0, max_len_b=3)
    n = [len(echo.src_tok.encode(x)) for x in lines]
    assert [t.at_limit for t in cut] == [k >= 3 for k in n] and n[0] < 3 <= n[1]
    assert [len(t.hypotheses[0].tokens) for t in cut] == [min(k, 3) for k in n]


def test_limit_warning_names_the_lines():
    from nmt.decode.lines import limit_warning
    from nmt.decode.options import ResolvedOptions

    assert limit_warning([7], 9, ResolvedOptions(max_len_a=1.2, max_len_b=10)) == (
        "1 of 9 translations stopped at the length limit (1.2 x source subwords + 10) before "
        "their end and may be cut short: line 7 (--max-len-a and --max-len-b raise the limit)"
    )
    limits = ResolvedOptions(max_len_a=1.0, max_len_b=50)
    assert limit_warning([2, 3, 5, 8, 13, 21, 1234], 2000, limits).endswith(
        "(1 x source subwords + 50) before their end and may be cut short: lines 2, 3, 5, 8, 13 "
        "and 2 more (--max-len-a and --max-len-b raise the limit)"
    )


@pytest.mark.slow
def test_cli_names_the_translations_cut_at_the_length_limit(tiny_model_dir, tmp_path):
    """Even with --quiet: a translation missing its end is never silent; the output keeps one
    line per input line."""
    src = tmp_path / "in.en"
    src.write_text("a man .\n\ntwo dogs play in the park .\n")
    limits = ["--max-len-a", "0", "--max-len-b", "2"]
    cmd = [sys.executable, "-m", "nmt", "translate", "-m", str(tiny_model_dir), str(src), "-q"]
    r = subprocess.run(cmd + limits, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.count("\n") == 3
    assert r.stderr == (
        f"warning: {src}: 2 of 3 translations stopped at the length limit (0 x source subwords + "
        "2) before their end and may be cut short: lines 1, 3 (--max-len-a and --max-len-b raise "
        "the limit)\n"
    )
    jsonl = subprocess.run(cmd + limits + ["-f", "jsonl"], capture_output=True, text=True)
    records = [json.loads(x) for x in jsonl.stdout.splitlines()]
    assert [r["hypotheses"][0]["at_limit"] for r in records] == [True, False, True]


@pytest.mark.slow
def test_evaluate_takes_the_length_limit_and_names_the_translations_it_cut(
    tiny_model_dir, tmp_path
):
    src = tmp_path / "in.en"
    src.write_text("a man .\ntwo dogs play in the park .\n")
    cmd = [sys.executable, "-m", "nmt", "evaluate", "-m", str(tiny_model_dir), "--src", str(src)]
    cmd += ["-r", str(src), "-q", "--json"]
    cut = subprocess.run(cmd + ["--max-len-a", "0", "--max-len-b", "1"], capture_output=True)
    assert cut.returncode == 0, cut.stderr
    assert cut.stderr.decode() == (
        f"warning: {src}: 2 of 2 translations stopped at the length limit (0 x source subwords + "
        "1) before their end and may be cut short: lines 1, 2 (--max-len-a and --max-len-b raise "
        "the limit)\n"
    )


def test_translate_files_checks_nbest_before_reading_input(echo, tmp_path):
    # An empty file, or a pipe with nothing yet, used to pass: --nbest was checked per batch.
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    out = tmp_path / "out.txt"
    with pytest.raises(NmtError, match=r"^nbest must be between 1 and the beam size \(3\), got 4$"):
        translate_files(echo, [str(empty)], str(out), nbest=4)
    with pytest.raises(NmtError, match=r"^nbest must be between 1 and the beam size \(1\), got 2$"):
        translate_files(echo, [str(empty)], str(out), nbest=2, greedy=True)
    with pytest.raises(NmtError, match=r"^nbest must be between 1 and 200 with sampling, got 201$"):
        translate_files(echo, [str(empty)], str(out), nbest=201, sampling=Sampling())
    assert not out.exists()


def test_stream_matches_batch_and_bounds_chunks(echo):
    lines = synthetic_lines(23, seed=3) + [""] + synthetic_lines(5, seed=4)
    seen = []

    def counting():
        for x in lines:
            seen.append(x)
            yield x

    got = []
    for tr in echo.translate_stream(counting(), buffer_size=4, beam_size=2, on_warning=print):
        got.append(tr.text)
        assert len(seen) - len(got) < 4  # never more than one chunk read ahead
    assert got == [t.text for t in echo.translate(lines, beam_size=2, on_warning=print)]


def test_real_model_batched_equals_one_at_a_time(tiny_model_dir):
    tr = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu")
    lines = synthetic_lines(7, seed=5)
    batched = tr.translate(lines, nbest=2)
    for line, b in zip(lines, batched, strict=True):
        (one,) = tr.translate([line], nbest=2)
        assert [h.tokens for h in one.hypotheses] == [h.tokens for h in b.hypotheses]
        assert len(b.hypotheses) == 2 and b.hypotheses[0].score >= b.hypotheses[1].score
    assert [t.text for t in tr.translate(lines, beam_size=1)] == [
        t.text for t in tr.translate(lines, greedy=True)
    ]


def test_greedy_without_scores_same_text_nan_scores(tiny_model_dir, tmp_path):
    """Text output asks greedy search for no scores: the same lines; JSONL keeps its scores."""
    tr = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu")
    lines = synthetic_lines(9, seed=3) + [""]
    scored = tr.translate(lines, greedy=True)
    bare = tr.translate(lines, greedy=True, scores=False)
    assert [t.text for t in bare] == [t.text for t in scored]
    assert all(h.score != h.score for t in bare[:-1] for h in t.hypotheses)  # NaN
    assert all(h.score == h.score for t in scored for h in t.hypotheses)
    src = tmp_path / "in.txt"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    r = run_cli("translate", "-m", str(tiny_model_dir), str(src), "--greedy", "-q")
    assert r.exit_code == 0 and r.stdout.splitlines() == [t.text for t in scored]
    r = run_cli("translate", "-m", str(tiny_model_dir), str(src), "--greedy", "-q",
                "--format", "jsonl")  # fmt: skip
    records = [json.loads(x) for x in r.stdout.splitlines()]
    assert [rec["hypotheses"][0]["score"] for rec in records] == [
        round(t.hypotheses[0].score, 6) for t in scored
    ]


@pytest.mark.slow
def test_worker_threads_same_output_in_order_and_threads_restored(tiny_model_dir):
    """Batches decoded on two worker threads: the same translations and scores in input order,
    progress for every line, and the caller's intra-op thread count back afterwards."""
    one = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=1)
    two = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=2, processes=False)
    names: set[str] = set()
    search = two._search

    def recording(*args, **kwargs):
        names.add(threading.current_thread().name)
        return search(*args, **kwargs)

    two._search = recording  # type: ignore[method-assign]
    lines = synthetic_lines(40, seed=7) + ["", "two dogs ."]
    before, done = torch.get_num_threads(), []
    for k in (1, 3):
        a = one.translate(lines, beam_size=k, nbest=k, batch_tokens=40)
        b = two.translate(lines, beam_size=k, nbest=k, batch_tokens=40, progress=done.append)
        assert [[(h.tokens, h.score) for h in t.hypotheses] for t in a] == [
            [(h.tokens, h.score) for h in t.hypotheses] for t in b
        ]
    assert names and all(n.startswith("nmt-decode") for n in names)
    assert sum(done) == 2 * len(lines) and torch.get_num_threads() == before
    assert two.worker_peak_mb() == 0


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes are forked on Linux only")
@pytest.mark.slow
def test_worker_processes_same_output_attention_and_sampling(tiny_model_dir):
    """Batches decoded on two forked processes (the Linux default): the same translations,
    scores, attention and samples as one process, progress for every line, and the processes
    are other processes that stop on close."""
    from nmt.decode.options import Sampling

    one = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=1)
    two = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=2)
    assert two.worker_processes and two._pool is None  # forked at the first batches, not before
    lines = synthetic_lines(40, seed=7) + ["", "two dogs ."]
    done: list[int] = []

    def same(**kwargs):
        a = one.translate(lines, batch_tokens=40, **kwargs)
        b = two.translate(lines, batch_tokens=40, progress=done.append, **kwargs)
        assert [t.source_tokens for t in a] == [t.source_tokens for t in b]
        for x, y in zip(a, b, strict=True):
            assert [(h.text, h.tokens, repr(h.score)) for h in x.hypotheses] == [
                (h.text, h.tokens, repr(h.score)) for h in y.hypotheses
            ]  # repr: greedy without scores reports NaN
            for hx, hy in zip(x.hypotheses, y.hypotheses, strict=True):
                assert (hx.attention is None) == (hy.attention is None)
                if hx.attention is not None:
                    assert np.array_equal(hx.attention, hy.attention)

    same(beam_size=3, nbest=2, with_attention=True)
    same(greedy=True, scores=False)
    same(sampling=Sampling(temperature=0.8, seed=3), nbest=2)
    assert sum(done) == 3 * len(lines)
    pids = two._pool.pids() if two._pool else []
    assert len(pids) == 2 and os.getpid() not in pids
    assert two.worker_peak_mb() >= 0
    two.close()
    assert two._pool is None and all(not Path(f"/proc/{p}").exists() for p in pids)
    assert two.translate(lines[:3])[0].text == one.translate(lines[:3])[0].text  # reopens
    with two:  # as `nmt translate` uses it: the processes end with the block
        two.translate(lines, batch_tokens=40)
        pids = two._pool.pids() if two._pool else []
    assert len(pids) == 2 and all(not Path(f"/proc/{p}").exists() for p in pids)


@pytest.mark.parametrize("processes", [False, sys.platform == "linux"])
def test_worker_error_reaches_the_caller(tiny_model_dir, processes):
    two = Translator.from_dir(
        ModelDir(tiny_model_dir), device="cpu", workers=2, processes=processes
    )

    def failing(batch, *args, **kwargs):
        raise NmtError(f"batch of {len(batch)} failed")

    two._search = failing  # type: ignore[method-assign]
    before = torch.get_num_threads()
    with pytest.raises(NmtError, match=r"batch of \d+ failed"):
        two.translate(synthetic_lines(30, seed=2), batch_tokens=30)
    assert torch.get_num_threads() == before
    two.close()


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes are forked on Linux only")
def test_a_worker_process_that_dies_while_starting_is_one_error(monkeypatch):
    from nmt.engines import workers

    def dying(target, threads):
        os._exit(3)  # killed while forked or set up

    monkeypatch.setattr(workers, "_start_worker", dying)
    pool = workers.DecodePool(abs, 2)
    with pytest.raises(
        NmtError, match=r"^a decoding worker process died \(out of memory\? try --workers 1\)$"
    ):
        list(pool.map([1, -2]))
    assert pool.pids() == []  # the broken pool is not kept for the next call
    monkeypatch.undo()
    assert sorted(r for _, r in pool.map([1, -2])) == [1, 2]
    pool.close()


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes are forked on Linux only")
@pytest.mark.slow
def test_a_worker_process_that_dies_is_one_error(tiny_model_dir):
    two = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=2)

    def dying(batch, *args, **kwargs):
        os._exit(3)  # as the OOM killer would

    two._search = dying  # type: ignore[method-assign]
    with pytest.raises(
        NmtError, match=r"^a decoding worker process died \(out of memory\? try --workers 1\)$"
    ):
        two.translate(synthetic_lines(30, seed=2), batch_tokens=30)
    assert two._pool is not None and two._pool.pids() == []  # stopped
    del two._search  # the next batches fork new processes, which work
    lines = synthetic_lines(30, seed=2)
    one = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=1)
    assert [t.text for t in two.translate(lines, batch_tokens=30)] == [
        t.text for t in one.translate(lines, batch_tokens=30)
    ]
    two.close()


def test_decode_workers_rule(tiny_model_dir):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        assert decode_workers(0, cpu, 10) == 3 and decode_workers(0, gpu, 10) == 1
        torch.set_num_threads(8)
        assert decode_workers(0, cpu, 10) == 4  # MAX_AUTO_WORKERS
        assert decode_workers(0, cpu, 2) == 2 and decode_workers(6, cpu, 10) == 6
        assert decode_workers(6, cpu, 1) == 1 and decode_workers(1, cpu, 10) == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(NmtError, match=r"^--workers must be 0 \(auto\) or more, got -1$"):
        Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=-1)


def test_options_default_to_model_config_and_are_checked(tiny_model_dir):
    tr = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu")
    assert tr.resolve_options().beam_size == 3 and tr.resolve_options(beam_size=7).beam_size == 7
    with pytest.raises(Exception, match=r"^nbest must be between 1 and the beam size \(3\)"):
        tr.translate(["a man"], nbest=4)


def test_one_line_removes_every_line_break():
    assert one_line("a\nb\rc\u2028d\x85e") == "a b c d e"
    assert len(one_line("x\u2029y\x0b\x0c").splitlines()) == 1


# ---- CLI ------------------------------------------------------------------------------------

runner = CliRunner()


def without_limit_warning(stderr: str | bytes) -> str:
    """stderr less the warning naming translations stopped at the length limit, which most of an
    untrained model's translations reach."""
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    return "".join(line for line in text.splitlines(keepends=True) if LIMIT_WARNING not in line)


def run_cli(*args: str, input: bytes | None = None):
    return runner.invoke(app, list(args), input=input, catch_exceptions=False)


def test_cli_files_text_nbest_and_output(tiny_model_dir, tmp_path):
    src = tmp_path / "in.txt"
    lines = ["a man in a blue shirt .", "", "   ", "zwei kinder spielen im park .", "日本語"]
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    r = run_cli("translate", "-m", str(tiny_model_dir), str(src), "-o", str(out), "--quiet")
    assert r.exit_code == 0, r.output
    got = out.read_text(encoding="utf-8").split("\n")
    assert len(got) == len(lines) + 1 and got[-1] == "" and got[1] == got[2] == ""
    r = run_cli("translate", "-m", str(tiny_model_dir), str(src), "--nbest", "2", "-q")
    assert r.exit_code == 0 and len(r.stdout.split("\n")) == 2 * len(lines) + 1
    r = run_cli("translate", "-m", str(tiny_model_dir), "--nbest", "4", "-q", input=b"a man\n")
    assert r.exit_code == 2 and "error: --nbest must be between 1 and the beam size (3)" in r.output


def test_cli_jsonl_schema(tiny_model_dir):
    lines = "a man in a blue shirt .\n\ntwo dogs play in the snow .\n"
    r = run_cli(
        "translate", "-m", str(tiny_model_dir), "--format", "jsonl", "--nbest", "2",
        "--with-attention", "-q", input=lines.encode(),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    records = [json.loads(x) for x in r.stdout.splitlines()]
    assert [rec["source"] for rec in records] == lines.splitlines()
    for rec in records:
        assert set(rec) == {"source", "source_tokens", "hypotheses"}
        scores = [h["score"] for h in rec["hypotheses"]]
        assert scores == sorted(scores, reverse=True)
        for h in rec["hypotheses"]:
            assert set(h) == {"translation", "score", "log_prob", "tokens", "at_limit", "attention"}
            assert isinstance(h["translation"], str) and all(
                isinstance(t, str) for t in h["tokens"]
            )
            if rec["source"]:
                assert len(h["attention"]) == len(h["tokens"]) + 1
                assert all(len(row) == len(rec["source_tokens"]) for row in h["attention"])
                assert all(abs(sum(row) - 1) < 1e-2 for row in h["attention"])
    assert len(records[0]["hypotheses"]) == 2


def test_cli_jsonl_escapes_unicode_line_breaks(tiny_model_dir):
    """JSON leaves U+2028, U+2029 and U+0085 raw; readers splitting on them would see more records."""
    lines = ["a\u2028man\u2029in\x85blue .", "two dogs ."]
    data = "".join(x + "\n" for x in lines).encode()
    r = run_cli("translate", "-m", str(tiny_model_dir), "--format", "jsonl", "-q", input=data)
    assert r.exit_code == 0, r.output
    records = r.stdout.splitlines()
    assert len(records) == 2 and [json.loads(x)["source"] for x in records] == lines
    assert "\\u2028" in records[0] and "\\u2029" in records[0] and "\\u0085" in records[0]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--beam-size", "500"], "--beam-size must be in [1, 200], got 500"),
        (["--beam-size", "0"], "--beam-size must be in [1, 200], got 0"),
        (["--length-penalty", "-1"], "--length-penalty must be in [0, 10], got -1.0"),
        (["--max-len-a", "-1"], "--max-len-a must be >= 0, got -1.0"),
        (["--max-len-a", "inf"], "--max-len-a must be a finite number >= 0, got inf"),
        (["--max-len-b", "nan"], "--max-len-b must be a finite number >= 0, got nan"),
        (["--max-len-b", "-2"], "--max-len-b must be >= 0, got -2.0"),
        (["--min-len", "-1"], "--min-len must be >= 0, got -1"),
        (["--batch-tokens", "0"], "--batch-tokens must be >= 1, got 0"),
        (["--stop", "late"], "--stop must be early or exact or transformers, got 'late'"),
        (["--nbest", "0"], "--nbest must be at least 1, got 0"),
        (["--workers", "-1"], "--workers must be 0 (auto) or more, got -1"),
    ],
)
def test_cli_out_of_range_decoding_options(tiny_model_dir, args, message):
    r = run_cli("translate", "-m", str(tiny_model_dir), *args, input=b"a man .\n")
    assert r.exit_code == 2 and r.output == f"error: {message}\n"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--nbest", "4"], "--nbest must be between 1 and the beam size (3), got 4"),  # its config's
        (["--greedy", "--nbest", "2"], "--nbest must be between 1 and the beam size (1), got 2"),
        (["-b", "2", "--nbest", "3"], "--nbest must be between 1 and the beam size (2), got 3"),
        (["--sampling", "--nbest", "201"], "--nbest must be between 1 and 200 with --sampling, got 201"),
        (["--max-len-a", "inf"], "--max-len-a must be a finite number >= 0, got inf"),
    ],
)  # fmt: skip
def test_cli_search_options_fail_before_the_model_loads(tiny_model_dir, monkeypatch, args, message):
    # Checked per batch, they waited for a pipe's first line, and an empty input exited 0.
    def load(*a, **k):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr("nmt.engines.loading.open_translator", load)
    r = runner.invoke(app, ["translate", "-m", str(tiny_model_dir), *args], input=b"")
    assert (r.exit_code, r.output) == (2, f"error: {message}\n")


def test_cli_invalid_utf8_names_the_line(tiny_model_dir, tmp_path):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"a man .\ntwo dogs .\nbad \xff byte\n")
    out = tmp_path / "out.txt"
    r = run_cli("translate", "-m", str(tiny_model_dir), str(src), "-o", str(out), "-q")
    assert r.exit_code == 2
    assert f"error: {src}:3: invalid UTF-8" in r.output and "Traceback" not in r.output
    assert not out.exists() and list(tmp_path.iterdir()) == [src]  # nothing half-written
    r = run_cli("translate", "-m", str(tiny_model_dir), str(src), "--errors", "replace", "-q")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 3


def test_cli_bad_options(tiny_model_dir, tmp_path):
    m = str(tiny_model_dir)
    cases = {
        ("--format", "xml"): "error: --format must be text or jsonl, got 'xml'",
        ("--with-attention",): "error: --with-attention needs --format jsonl",
        (str(tmp_path / "nope.txt"),): f"error: {tmp_path / 'nope.txt'}: file not found",
        ("--checkpoint", "last"): "checkpoints/last.safetensors: checkpoint not found",
    }
    for args, message in cases.items():
        r = run_cli("translate", "-m", m, *args, input=b"")
        assert r.exit_code == 2 and message in r.output, (args, r.output)


def start_translate(*args: str) -> tuple[subprocess.Popen, queue.Queue[bytes]]:
    """`nmt translate ARGS` in a subprocess fed through a pipe; its output lines in a queue."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nmt", "translate", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    return proc, lines


@pytest.mark.slow
def test_cli_streams_stdin_line_by_line(tiny_model_dir):
    """A subprocess gets each translation back before it sends the next line."""
    proc, lines = start_translate("-m", str(tiny_model_dir), "--buffer-size", "1")
    try:
        for sentence in [b"a man in a blue shirt .\n", b"\n", b"two dogs play .\n"]:
            proc.stdin.write(sentence)
            proc.stdin.flush()
            got = lines.get(timeout=60)  # blocks until this line's translation arrives
            assert got.endswith(b"\n") and (got == b"\n") == (sentence == b"\n")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        assert lines.empty() and without_limit_warning(proc.stderr.read()) == ""  # no progress bar
    finally:
        proc.kill()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_cli_attention_png(tiny_model_dir, tmp_path):
    from nmt.plots.heatmaps import DPI, figure_size

    out = tmp_path / "att.png"
    sentence = "a man in a blue shirt is riding his bike ."
    r = run_cli("attention", "-m", str(tiny_model_dir), sentence, "-o", str(out))
    assert r.exit_code == 0, r.output
    tr = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu")
    weights, src, tgt, text = tr.attention(sentence)
    assert weights.shape == (2, 2, len(tgt), len(src)) and src[-1] == tgt[-1] == "</s>"
    w, h = figure_size(src, tgt)
    assert png_size(out) == pytest.approx((w * DPI, h * DPI), abs=2)
    assert text in r.stdout
    # force-decoding a given target, and the layer x head grid
    grid = tmp_path / "grid.png"
    target = "zwei kinder spielen im park ."
    r = run_cli("attention", "-m", str(tiny_model_dir), sentence, "-o", str(grid),
                "--layer", "all", "--target", target, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    weights, src, tgt, text = tr.attention(sentence, target=target)
    assert text == target and weights.shape[2] == len(tgt)
    w, h = figure_size(src, tgt, rows=2, cols=2)
    assert png_size(grid) == pytest.approx((w * DPI, h * DPI), abs=2)
    r = run_cli("attention", "-m", str(tiny_model_dir), sentence, "-o", str(grid), "--layer", "5")
    assert r.exit_code == 2 and "layer 5 is out of range" in r.output
    # to stdout: the image alone there, the translation on stderr; SVG and PDF by name
    r = run_cli("attention", "-m", str(tiny_model_dir), sentence, "-o", "-")
    assert r.exit_code == 0 and r.stdout_bytes.startswith(b"\x89PNG\r\n\x1a\n")
    assert r.stderr.endswith("\nwrote -\n")
    for name, magic in (("att.svg", b"<?xml"), ("att.PDF", b"%PDF")):
        r = run_cli("attention", "-m", str(tiny_model_dir), sentence, "-o", str(tmp_path / name))
        assert r.exit_code == 0 and (tmp_path / name).read_bytes().startswith(magic), name
    # bytes that are not UTF-8 reach argv as lone surrogates
    r = run_cli("attention", "-m", str(tiny_model_dir), "caf\udce9 .", "-o", str(out))
    assert (r.exit_code, r.stderr) == (
        2, "error: the source sentence is not valid UTF-8 (byte 0xe9 at character 4)\n"
    )  # fmt: skip


def test_seq2seq_force_decodes_the_whole_target_and_an_empty_source_is_refused(tmp_path):
    # Seq2Seq has no position limit (max_positions 0): a given target is not cut.
    from nmt.config import load_config
    from nmt.data.vocab import Tokenizer, train_spm
    from nmt.dirs.model import ModelDir
    from nmt.dirs.weights import save_weights
    from nmt.models import build

    spm = train_spm(synthetic_lines(300), tmp_path / "spm", vocab_size=200)
    tok = Tokenizer.load(spm)
    vocab = VocabInfo(tok.vocab_size, tok.vocab_size, joint=True)
    cfg = load_config(preset="seq2seq-tiny")
    torch.manual_seed(0)
    model_dir = tmp_path / "model"
    ModelDir.at(model_dir).write_meta(cfg, ("en", "de"), (spm, spm), vocab)
    save_weights(build(cfg.model, vocab), model_dir / "checkpoints" / "best.safetensors")
    tr = Translator.from_dir(ModelDir(model_dir), device="cpu")
    target = "zwei kinder spielen im park mit einem roten ball ."
    weights, src, tgt, text = tr.attention("a man rides a bike .", target=target)
    assert text == target and tgt == tok.pieces(target) + ["</s>"]
    assert weights.shape[2] == len(tgt) > 3
    for blank in ("  ", "\x01\x02"):  # nothing left once normalised
        with pytest.raises(NmtError, match="^the source sentence is empty$"):
            tr.attention(blank)


def test_format_translation_pads_nbest(echo):
    (tr,) = echo.translate(["a man"], beam_size=2, nbest=1)
    assert format_translation(tr, "text", nbest=3).count("\n") == 3
    assert json.loads(format_translation(tr, "jsonl"))["hypotheses"][0]["translation"] == "a man"


def test_source_gets_eos(echo):
    (tr,) = echo.translate(["a man"], with_attention=True, beam_size=2)
    h = tr.hypotheses[0]
    assert tr.source_tokens[-1] == "</s>" and EOS_ID == 3
    assert h.attention.shape == (len(h.tokens) + 1, 1, 1, len(tr.source_tokens))


def test_translate_opens_each_model_directory_once(tiny_model_dir, tmp_path, monkeypatch):
    """`nmt translate` (an ensemble of two: each member is its own directory) reads each
    config.yaml and vocab.json once and each SentencePiece model once, checks before the model
    loads included."""
    import nmt.dirs.model as modeldir
    from nmt.data.vocab import Tokenizer

    reads: list[str] = []
    config, meta = modeldir.read_saved_config, modeldir.read_json_object
    load = Tokenizer.load.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(modeldir, "read_saved_config", lambda p: reads.append(str(p)) or config(p))
    monkeypatch.setattr(modeldir, "read_json_object", lambda p: reads.append(str(p)) or meta(p))
    monkeypatch.setattr(
        Tokenizer, "load", classmethod(lambda c, p, *a: reads.append(str(p)) or load(c, p, *a))
    )
    other = tmp_path / "other"
    import shutil

    shutil.copytree(tiny_model_dir, other)
    src = tmp_path / "in.txt"
    src.write_text("a man in a blue shirt .\n", encoding="utf-8")
    args = ["translate", "-m", str(tiny_model_dir), "-m", str(other), "-q", str(src)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    names = sorted(str(Path(p).relative_to(Path(p).parents[1])) for p in reads)
    want = [
        f"{d.name}/{f}"
        for d in (tiny_model_dir, other)
        for f in ("config.yaml", "spm.model", "vocab.json")
    ]
    assert names == sorted(want)
