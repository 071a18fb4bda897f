"""`nmt serve`: the API through FastAPI's TestClient (shapes, order, n-best, one-line errors, limits,
loading, timeouts, concurrent requests decoded in fewer decoder calls), then a real server process
on 127.0.0.1 (same records as `nmt translate --format jsonl`, disconnects, SIGTERM)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import nmt

pytest.importorskip("fastapi")
import httpx  # noqa: E402

with warnings.catch_warnings():  # starlette's TestClient asks for httpx2, which is not needed
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient
from test_translate import build_tiny_model_dir  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from nmt.cli.app import app as cli  # noqa: E402
from nmt.decode.lines import format_translation  # noqa: E402
from nmt.decode.options import Sampling  # noqa: E402
from nmt.decode.rescore import rescore  # noqa: E402
from nmt.dirs import ModelDir
from nmt.engines.translator import Translator  # noqa: E402
from nmt.errors import NmtError  # noqa: E402
from nmt.serve import Settings, create_app  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LINES = [
    "a man in a blue shirt .",
    "",
    "zwei kinder spielen im park",
    "two dogs play in the snow .",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def translator(model_dir) -> Translator:
    return Translator.from_dir(ModelDir(model_dir), device="cpu")


class Counting:
    """A Translator wrapper that counts decoder calls and can hold the first one until released."""

    def __init__(self, real: Translator, hold: bool = False) -> None:
        self.real, self.calls, self.lines = real, 0, []  # type: ignore[var-annotated]
        self.gate, self.entered = threading.Event(), threading.Event()
        if not hold:
            self.gate.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def translate(self, lines: list[str], **kw: Any) -> Any:
        self.calls += 1
        self.lines.append(list(lines))
        self.entered.set()
        assert self.gate.wait(10)
        return self.real.translate(lines, **kw)


def client_for(factory: Any, **settings: Any) -> TestClient:
    return TestClient(create_app(factory, Settings(**settings)))


def wait_ready(client: TestClient) -> None:
    deadline = time.monotonic() + 20
    while client.get("/health").status_code != 200:
        assert time.monotonic() < deadline, "the model did not load"
        time.sleep(0.02)


def same_records(got: list[dict], want: list[dict]) -> bool:
    """Equal records, scores to 1e-4: a line decoded in another batch shape may differ in the
    last float digits (padding changes the matrix shapes), never in its tokens."""
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        if g["source"] != w["source"] or len(g["hypotheses"]) != len(w["hypotheses"]):
            return False
        for a, b in zip(g["hypotheses"], w["hypotheses"], strict=True):
            if (a["translation"], a["tokens"]) != (b["translation"], b["tokens"]):
                return False
            if abs(a["score"] - b["score"]) > 1e-4 or abs(a["log_prob"] - b["log_prob"]) > 1e-4:
                return False
    return True


def expected(translator: Translator, lines: list[str], nbest: int = 1, att: bool = False, **kw):
    out = translator.translate(lines, nbest=nbest, with_attention=att, **kw)
    return [json.loads(format_translation(tr, "jsonl", nbest, att)) for tr in out]


@pytest.fixture(scope="module")
def client(model_dir, translator):
    with client_for(lambda: translator, model_dir=str(model_dir), max_request_lines=5,
                    max_line_chars=60) as c:  # fmt: skip
        wait_ready(c)
        yield c


# ---- the API --------------------------------------------------------------------------------


def test_health_info_and_openapi(client):
    name = client.get("/health").json()["model"]
    assert client.get("/health").json() == {"status": "ready", "model": name}
    assert name.endswith("/model") and name.count("/") == 1
    info = client.get("/info").json()
    assert info["model"] == name and info["languages"] == {"source": "en", "target": "de"}
    assert info["nmt_version"] == nmt.__version__
    assert info["architecture"]["type"] == "transformer" and info["architecture"]["parameters"] > 0
    assert info["lowercase"] is False  # a cased model: input goes to SentencePiece as it is
    assert info["decoding"]["beam_size"] == 3 and info["limits"]["max_request_lines"] == 5
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/translate", "/score", "/attention", "/health", "/info"} <= set(paths)
    assert info["sampling"] == {"max_samples": 200}
    assert info["attention_kinds"] == ["cross", "self", "decoder"]
    assert "text" in json.dumps(paths["/translate"]["post"]["requestBody"])


def test_records_equal_translate_jsonl_in_order(client, translator):
    r = client.post("/translate", json={"text": LINES, "nbest": 2, "with_attention": True})
    assert r.status_code == 200
    body = r.json()
    assert body["translations"] == expected(translator, LINES, nbest=2, att=True)
    assert [t["source"] for t in body["translations"]] == LINES
    assert body["model"].endswith("/model") and body["elapsed_ms"] >= body["decode_ms"] >= 0
    first = body["translations"][0]
    hyp = first["hypotheses"][0]
    assert len(hyp["attention"]) == len(hyp["tokens"]) + 1  # eos row
    assert all(len(row) == len(first["source_tokens"]) for row in hyp["attention"])


def test_a_request_sets_the_length_limit_and_learns_what_it_cut(client, translator):
    """As `nmt translate --max-len-a 0 --max-len-b 2 --format jsonl`: the lines the limit
    stopped say so (`at_limit`), the empty one does not."""
    limits = {"max_len_a": 0, "max_len_b": 2}
    r = client.post("/translate", json={"text": LINES, "beam_size": 2, **limits})
    assert r.status_code == 200
    records = r.json()["translations"]
    assert records == expected(translator, LINES, beam_size=2, **limits)
    assert [rec["hypotheses"][0]["at_limit"] for rec in records] == [True, False, True, True]
    assert [len(rec["hypotheses"][0]["tokens"]) for rec in records] == [2, 0, 2, 2]


def test_a_request_bans_repeated_ngrams_as_nmt_translate_does(client, translator):
    """`no_repeat_ngram_size` reaches the search: the same records as the library's, and no
    subword twice in an output where the request bans 1-grams."""
    plain = client.post("/translate", json={"text": LINES, "beam_size": 2}).json()["translations"]
    r = client.post("/translate", json={"text": LINES, "beam_size": 2, "no_repeat_ngram_size": 1})
    records = r.json()["translations"]
    assert records == expected(translator, LINES, beam_size=2, no_repeat_ngram_size=1)
    tokens = [rec["hypotheses"][0]["tokens"] for rec in records]
    assert all(len(t) == len(set(t)) for t in tokens)
    assert any(len(t) > len(set(t)) for t in (rec["hypotheses"][0]["tokens"] for rec in plain))


def test_a_string_is_one_line_and_nbest_is_sorted(client, translator):
    r = client.post("/translate", json={"text": LINES[0], "nbest": 3, "beam_size": 3})
    (record,) = r.json()["translations"]
    scores = [h["score"] for h in record["hypotheses"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert "attention" not in record["hypotheses"][0]
    greedy = client.post("/translate", json={"text": LINES[0], "beam_size": 1}).json()
    assert greedy["translations"] == expected(translator, LINES[:1], beam_size=1)


ERRORS = [
    (b"{", 400, "the body is not valid JSON (Expecting property name enclosed in double quotes: "
     "line 1 column 2)"),
    (b"\xff", 400, "the body is not valid UTF-8"),
    (b'["a"]', 422, 'the body must be a JSON object like {"text": "..."}, got array'),
    (b"{}", 422, "'text' is required: a string or a list of strings"),
    (b'{"text": 3}', 422, "'text' must be a string or a list of strings, got number"),
    (b'{"text": ""}', 422, "'text' is empty"),
    (b'{"text": []}', 422, "'text' is empty"),
    (b'{"text": ["a", null]}', 422, "'text'[1] must be a string, got null"),
    (b'{"text": "a\\nb"}', 422, "'text' contains a line break; send one sentence per list item"),
    (b'{"text": "a", "src": "b"}', 422,
     "unknown field 'src' (expected text, beam_size, nbest, length_penalty, max_len_a, "
     "max_len_b, no_repeat_ngram_size, with_attention, sampling, split_sentences, constraints, "
     "glossary, target_lang)"),
    (b'{"text": "a", "constraints": "b"}', 422, "'constraints' must be a list of strings, got string"),
    (b'{"text": "a", "constraints": ["b", ""]}', 422,
     "'constraints'[1] must be a non-empty string, got an empty string"),
    (b'{"text": ["a", "b"], "constraints": [["c"]]}', 422,
     "'constraints' must be a list of strings for a string 'text', or one list of strings per "
     "line for a list"),
    (b'{"text": "a", "constraints": [["c"]]}', 422,
     "'constraints' must be a list of strings for a string 'text', or one list of strings per "
     "line for a list"),
    (b'{"text": "a", "constraints": ["b"], "beam_size": 1}', 422,
     "'constraints': constraints need beam search with a beam of 2 or more"),
    (b'{"text": "a", "glossary": [["a", "b"]], "sampling": true}', 422,
     "'glossary': constraints need beam search, not sampling"),
    ('{"text": ["a", "a man"], "constraints": [[], ["Straße"]]}'.encode(), 422,
     "line 2: the constraint 'Straße' holds characters the model's target vocabulary lacks "
     "(it could only be written as <unk>)"),
    (b'{"text": "a", "glossary": [["a", "zwei kinder zwei kinder zwei kinder"]]}', 422,
     "line 1: its constraints need 30 target subwords, more than the 6 its translation may "
     "hold (--max-len-a / --max-len-b, max_positions)"),
    (b'{"text": "a", "glossary": {"a": "b"}}', 422,
     "'glossary' must be a list of [source term, target term] pairs, got object"),
    (b'{"text": "a", "glossary": [["a", "b"], ["c"]]}', 422,
     "'glossary'[1] must be a [source term, target term] pair of non-empty strings"),
    (b'{"text": "a", "split_sentences": true, "nbest": 2}', 422,
     "'split_sentences' gives one translation per line: use nbest 1"),
    (b'{"text": "a", "beam_size": "5"}', 422, "'beam_size' must be an integer, got string"),
    (b'{"text": "a", "beam_size": true}', 422, "'beam_size' must be an integer, got boolean"),
    (b'{"text": "a", "beam_size": 0}', 422, "'beam_size' must be in [1, 200], got 0"),
    (b'{"text": "a", "nbest": 4}', 422, "'nbest' must be between 1 and the beam size (3), got 4"),
    (b'{"text": "a", "length_penalty": NaN}', 422,
     "'length_penalty' must be a finite number in [0, 10], got nan"),
    (b'{"text": "a", "max_len_a": -1}', 422, "'max_len_a' must be a finite number >= 0, got -1.0"),
    (b'{"text": "a", "max_len_b": "2"}', 422, "'max_len_b' must be a number, got string"),
    (b'{"text": "a", "no_repeat_ngram_size": -1}', 422,
     "'no_repeat_ngram_size' must be >= 0, got -1"),
    (b'{"text": "a", "no_repeat_ngram_size": 2.0}', 422,
     "'no_repeat_ngram_size' must be an integer, got number"),
    (b'{"text": "a", "length_penalty": 5000}', 422,
     "'length_penalty' must be a finite number in [0, 10], got 5000.0"),
    (b'{"text": "a", "length_penalty": 1' + b"0" * 400 + b"}", 422,
     "'length_penalty' must be a finite number in [0, 10], got an integer of 401 digits"),
    (b'{"text": "a", "sampling": {"temperature": 1' + b"0" * 400 + b"}}", 422,
     "'sampling.temperature' must be a finite number > 0, got an integer of 401 digits"),
    (b'{"text": ' + b"[" * 3000 + b"]" * 3000 + b"}", 400,
     "the body is not JSON this server reads (RecursionError)"),
    (b'{"text": "a", "beam_size": 1' + b"0" * 5000 + b"}", 400,
     "the body is not JSON this server reads (ValueError)"),
    (b'{"text": "ab\\ud800c"}', 422,
     "'text' is not valid Unicode (an unpaired surrogate escape)"),
    (b'{"text": ["ok", "\\udc00"]}', 422,
     "'text'[1] is not valid Unicode (an unpaired surrogate escape)"),
    (b'{"text": "a", "with_attention": 1}', 422, "'with_attention' must be true or false, got number"),
    (b'{"text": "a", "sampling": 1}', 422, "'sampling' must be true, false or an object like "
     '{"temperature": 0.8, "top_p": 0.9, "seed": 1}, got number'),
    (b'{"text": "a", "sampling": {"temp": 1}}', 422,
     "unknown field 'sampling.temp' (expected temperature, top_k, top_p, seed)"),
    (b'{"text": "a", "sampling": {"temperature": 0}}', 422,
     "'sampling.temperature' must be > 0, got 0.0"),
    (b'{"text": "a", "sampling": {"temperature": Infinity}}', 422,
     "'sampling.temperature' must be a finite number > 0, got inf"),
    (b'{"text": "a", "sampling": {"top_p": 1.5}}', 422, "'sampling.top_p' must be in (0, 1], got 1.5"),
    (b'{"text": "a", "sampling": {"top_k": 2.5}}', 422,
     "'sampling.top_k' must be an integer, got number"),
    (b'{"text": "a", "sampling": {"seed": -1}}', 422, "'sampling.seed' must be in [0, 2**63), got -1"),
    (b'{"text": "a", "sampling": true, "beam_size": 2}', 422,
     "'sampling' draws its own tokens: drop 'beam_size'"),
    (b'{"text": "a", "sampling": true, "nbest": 201}', 422,
     "'nbest' must be between 1 and 200 with 'sampling', got 201"),
    (b'{"text": ["1", "2", "3", "4", "5", "6"]}', 413,
     "'text' has 6 lines; the limit is 5 (--max-request-lines)"),
    (json.dumps({"text": ["ok", "x" * 61]}).encode(), 413,
     "'text'[1] has 61 characters; the limit is 60 (--max-line-chars)"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "detail"), ERRORS)
def test_bad_requests_get_one_line_and_the_server_keeps_serving(client, body, status, detail):
    r = client.post("/translate", content=body, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()) == (status, {"detail": detail})
    assert client.post("/translate", json={"text": "two dogs"}).status_code == 200


SAMPLING = {"temperature": 0.8, "top_k": 50, "seed": 7}


def sampled(translator: Translator, lines: list[str], nbest: int = 1, settings=SAMPLING):
    """`nmt translate --sampling` records of `lines` as one file (line i draws with key i)."""
    return expected(translator, lines, nbest=nbest, sampling=Sampling(**settings))


def test_sampling_draws_as_nmt_translate_sampling(client, translator):
    r = client.post("/translate", json={"text": LINES, "sampling": SAMPLING, "nbest": 3})
    assert r.status_code == 200, r.text
    got = r.json()["translations"]
    assert same_records(got, sampled(translator, LINES, nbest=3))
    assert len(got[0]["hypotheses"]) == 3
    again = client.post("/translate", json={"text": LINES, "sampling": SAMPLING, "nbest": 3})
    assert again.json()["translations"] == got  # same seed, same request: same samples
    other = client.post("/translate", json={"text": LINES, "sampling": {**SAMPLING, "seed": 8}})
    assert other.json()["translations"] != got
    plain = client.post("/translate", json={"text": LINES[0], "sampling": True}).json()
    assert same_records(plain["translations"], sampled(translator, LINES[:1], settings={}))


def test_sampled_requests_share_a_batch_and_draw_as_alone(translator):
    bodies = [{"text": [f"{w} dogs play in the snow .", "a man"], "sampling": SAMPLING}
              for w in ("one", "two", "three")] + [
             {"text": "one dogs play", "sampling": {**SAMPLING, "seed": 9}}]  # fmt: skip
    counting, answers = held_then_concurrent(translator, bodies)
    assert sorted(map(len, counting.lines[1:])) == [1, 6]  # equal settings together, seed 9 apart
    for body, r in zip(bodies, answers, strict=True):
        lines = body["text"] if isinstance(body["text"], list) else [body["text"]]
        want = sampled(translator, lines, settings=body["sampling"])
        assert same_records(r.json()["translations"], want)


def scored(translator: Translator, sources: list[str], targets: list[str]) -> list[dict]:
    return [s.to_json() for s in rescore(translator, sources, targets)]


TARGETS = ["ein mann in einem blauen hemd .", "", "zwei kinder", "zwei hunde spielen im schnee ."]


def test_score_answers_as_nmt_rescore(client, translator):
    r = client.post("/score", json={"source": LINES, "target": TARGETS})
    assert r.status_code == 200, r.text
    got = r.json()["scores"]
    want = scored(translator, LINES, TARGETS)
    assert len(got) == 4 and [g["tokens"] for g in got] == [w["tokens"] for w in want]
    for g, w in zip(got, want, strict=True):
        assert g["log_prob"] == pytest.approx(w["log_prob"], abs=1e-4)
        assert g["token_log_probs"] == pytest.approx(w["token_log_probs"], abs=1e-4)
    assert got[1]["tokens"] == ["</s>"]  # an empty target: eos alone
    one = client.post("/score", json={"source": LINES[0], "target": TARGETS[0]}).json()
    assert one["scores"][0]["log_prob"] == pytest.approx(want[0]["log_prob"], abs=1e-4)
    assert "/score" in client.get("/openapi.json").json()["paths"]


SCORE_ERRORS = [
    ({"source": "a"}, 422, "'target' is required: a string or a list of strings"),
    ({"source": ["a", "b"], "target": ["c"]}, 422,
     "'source' has 2 lines but 'target' has 1 (one target per source line)"),
    ({"source": "a", "target": ["c"]}, 422,
     "'source' and 'target' must both be strings or both be lists"),
    ({"source": "a", "target": "b", "text": "c"}, 422,
     "unknown field 'text' (expected source, target)"),
    ({"source": "a", "target": ["x"] * 6}, 413,
     "'target' has 6 lines; the limit is 5 (--max-request-lines)"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "detail"), SCORE_ERRORS)
def test_bad_score_requests_get_one_line(client, body, status, detail):
    r = client.post("/score", json=body)
    assert (r.status_code, r.json()) == (status, {"detail": detail})


def test_an_oversized_body_is_refused_before_parsing(client):
    r = client.post("/translate", content=b"[" * 2_000_000)
    assert r.status_code == 413 and r.json()["detail"].startswith("the body has 2000000 bytes;")


def test_bad_settings_name_the_option():
    with pytest.raises(NmtError, match=r"^--max-wait-ms must be at least 0, got -1$"):
        create_app(lambda: None, Settings(max_wait_ms=-1))
    msg = r"^--max-wait-ms must be below --timeout \(60 s = 60000 ms\), got inf$"
    with pytest.raises(NmtError, match=msg):  # a lone request would always time out
        create_app(lambda: None, Settings(max_wait_ms=float("inf")))


def test_requests_are_tokenised_off_the_event_loop(translator):
    on_loop: list[bool] = []

    class Tokenizer:
        def __getattr__(self, name: str) -> Any:
            return getattr(translator.src_tok, name)

        def encode_batch(self, lines: list[str], **kw: Any) -> Any:
            try:
                asyncio.get_running_loop()
                on_loop.append(True)
            except RuntimeError:
                on_loop.append(False)
            return translator.src_tok.encode_batch(lines, **kw)

    class Watched(Counting):
        src_tok = Tokenizer()

    with client_for(lambda: Watched(translator)) as c:
        wait_ready(c)
        assert c.post("/translate", json={"text": ["a man", "dogs"]}).status_code == 200
    assert on_loop == [False]


# ---- loading, failures, timeouts --------------------------------------------------------------


def test_health_says_loading_until_the_model_is_there(translator):
    loaded = threading.Event()

    def slow() -> Translator:
        assert loaded.wait(10)
        return translator

    with client_for(slow) as c:
        assert (c.get("/health").status_code, c.get("/health").json()["status"]) == (503, "loading")
        r = c.post("/translate", json={"text": "a"})
        assert r.status_code == 503
        assert r.json()["detail"] == "the model is still loading; retry when GET /health is ready"
        loaded.set()
        wait_ready(c)
        assert c.post("/translate", json={"text": "a"}).status_code == 200


def test_a_model_that_fails_to_load_is_reported():
    def broken() -> Translator:
        raise NmtError("/nowhere: model directory not found")

    with client_for(broken) as c:
        deadline = time.monotonic() + 10
        while c.get("/health").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.02)
        h = c.get("/health")
        detail = "the model failed to load: /nowhere: model directory not found"
        assert (h.status_code, h.json()) == (503, {"status": "failed", "detail": detail})
        assert c.post("/translate", json={"text": "a"}).json() == {"detail": detail}


def test_a_failure_after_loading_is_reported_and_closes_the_translator(translator):
    class Described(Counting):
        closed = False

        def describe(self):
            raise RuntimeError("no description")

        def close(self):
            Described.closed = True

    with client_for(lambda: Described(translator)) as c:
        deadline = time.monotonic() + 10
        while c.get("/health").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.02)
        detail = "the model failed to load: no description"
        assert c.get("/health").json() == {"status": "failed", "detail": detail}
    assert Described.closed


def test_timeout_gives_504_and_drops_the_waiting_lines(translator):
    counting = Counting(translator, hold=True)
    with client_for(lambda: counting, timeout=0.3) as c, ThreadPoolExecutor(2) as pool:
        wait_ready(c)
        first = pool.submit(c.post, "/translate", json={"text": "held"})
        assert counting.entered.wait(10)
        second = c.post("/translate", json={"text": "never decoded"})
        assert second.status_code == 504
        assert second.json() == {
            "detail": "no translation within 0.3 s (--timeout); the server is busy"
        }
        assert first.result().status_code == 504
        counting.gate.set()
        assert c.post("/translate", json={"text": "after"}).status_code == 200
        assert counting.lines == [["held"], ["after"]]


# ---- batching ---------------------------------------------------------------------------------


def held_then_concurrent(translator, bodies: list[dict], **settings: Any):
    """Hold the decoder on a first request, queue `bodies` concurrently, release; returns
    (wrapper, responses of bodies in order)."""
    counting = Counting(translator, hold=True)
    with client_for(lambda: counting, max_wait_ms=5, **settings) as c:
        wait_ready(c)
        with ThreadPoolExecutor(len(bodies) + 1) as pool:
            first = pool.submit(c.post, "/translate", json={"text": "first"})
            assert counting.entered.wait(10)
            futures = [pool.submit(c.post, "/translate", json=b) for b in bodies]
            deadline = time.monotonic() + 10
            while c.app.state.nmt.batcher.pending() < len(bodies):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            counting.gate.set()
            assert first.result().status_code == 200
            return counting, [f.result() for f in futures]


def test_concurrent_requests_share_one_decoder_call(translator):
    lines = [f"{w} a man in the park" for w in ("one", "two", "three", "four", "five", "six")]
    bodies = [{"text": [line, "dogs"]} for line in lines]
    counting, answers = held_then_concurrent(translator, bodies)
    assert counting.calls == 2  # the held request, then all six together
    assert sorted(counting.lines[1]) == sorted(x for b in bodies for x in b["text"])
    for body, r in zip(bodies, answers, strict=True):
        assert r.status_code == 200
        assert same_records(r.json()["translations"], expected(translator, body["text"]))
        assert r.json()["batch"] == {"lines": 12, "requests": 6}


def test_different_options_are_decoded_apart(translator):
    bodies = [{"text": "a", "beam_size": 1}, {"text": "b", "beam_size": 2},
              {"text": "c", "beam_size": 1}, {"text": "d", "beam_size": 2, "nbest": 2}]  # fmt: skip
    counting, answers = held_then_concurrent(translator, bodies)
    assert sorted(map(sorted, counting.lines[1:])) == [["a", "c"], ["b"], ["d"]]
    assert [len(r.json()["translations"][0]["hypotheses"]) for r in answers] == [1, 1, 1, 2]


def test_the_token_budget_splits_batches(translator):
    bodies = [{"text": "two dogs play in the snow ."} for _ in range(4)]
    size = len(translator.src_tok.encode(bodies[0]["text"])) + 1
    counting, answers = held_then_concurrent(translator, bodies, max_batch_tokens=2 * size)
    assert [len(x) for x in counting.lines[1:]] == [2, 2]
    assert all(r.status_code == 200 for r in answers)


def test_two_slots_decode_side_by_side_and_split_only_large_batches():
    """With 2 slots a batch decodes while another is held; a batch of SPLIT_LINES lines per
    slot takes both free slots, a smaller one takes one."""
    from nmt.serve.batcher import SPLIT_LINES, MicroBatcher

    calls: list[tuple[list[str], int]] = []
    gate = threading.Event()

    def decode(items: list[Any], options: Any, keys: list[int], slots: int) -> list[Any]:
        calls.append((list(items), slots))
        if items == ["held"]:
            assert gate.wait(10)
        return [f"<{x}>" for x in items]

    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        batcher = MicroBatcher(decode, 10_000, 5, slots=2)
        batcher.start()
        held = asyncio.ensure_future(batcher.submit(["held"], "o", [1]))
        while not calls:
            await asyncio.sleep(0.005)
        small = await asyncio.wait_for(batcher.submit(["a", "b"], "o", [1, 1]), 10)
        gate.set()
        first = await asyncio.wait_for(held, 10)
        big_lines = [f"l{i}" for i in range(2 * SPLIT_LINES)]
        big = await asyncio.wait_for(batcher.submit(big_lines, "o", [1] * len(big_lines)), 10)
        await batcher.stop()
        return first.results, small.results, big.results

    first, small, big = asyncio.run(scenario())
    assert small == ["<a>", "<b>"] and first == ["<held>"]  # decoded while "held" was held
    assert [n for _, n in calls] == [1, 1, 2]
    assert big == [f"<l{i}>" for i in range(2 * SPLIT_LINES)]


def test_served_batches_use_free_workers_only(model_dir):
    """A server translator with 2 worker processes offers 2 slots, and a batch given one slot
    is decoded as one batch with the same translations as the whole call."""
    lines = [f"{w} dogs play in the snow ." for w in ("one", "two", "three", "four")]
    with Translator.from_dir(ModelDir(model_dir), device="cpu", workers=2) as tr:
        tr.start_workers()
        assert tr.capabilities.slots == 2
        opts = tr.resolve_options(beam_size=2)
        encoded = tr.encode_sources(lines, 1, lambda m: None)
        assert len(tr._batches(encoded, [0, 1, 2, 3], opts, parts=1)) == 1
        assert len(tr._batches(encoded, [0, 1, 2, 3], opts)) == 2
        one = [t.text for t in tr.translate(lines, beam_size=2, parts=1)]
        assert one == [t.text for t in tr.translate(lines, beam_size=2)]


# ---- a real server process --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """`python -m nmt serve` on a free port, once /health is ready (bounded wait)."""
    port = free_port()
    cmd = [sys.executable, "-m", "nmt", "serve", "-m", str(model_dir), "--port", str(port),
           "--device", "cpu", "--quiet", *args]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stdout.read().decode()}")  # type: ignore[union-attr]
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("server not ready within 60 s")
        time.sleep(0.1)


def stop_server(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


@pytest.fixture(scope="module")
def served(model_dir):
    proc, url = start_server(model_dir, "--max-wait-ms", "20")
    yield proc, url
    if proc.poll() is None:
        stop_server(proc)


@pytest.fixture
def server(served) -> str:
    return served[1]


@pytest.mark.slow
def test_server_answers_as_nmt_translate_jsonl(server, model_dir, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    out = CliRunner().invoke(cli, ["translate", str(src), "-m", str(model_dir), "--device", "cpu",
                                   "-q", "--format", "jsonl", "--nbest", "2", "--with-attention"])  # fmt: skip
    assert out.exit_code == 0, out.output
    want = [json.loads(line) for line in out.stdout.splitlines()]
    r = httpx.post(server + "/translate", json={"text": LINES, "nbest": 2, "with_attention": True})
    assert r.json()["translations"] == want


def test_server_splits_sentences_as_nmt_translate(server, model_dir, tmp_path):
    """A real server process: `split_sentences` gives one entry per line, the same as
    `nmt translate --split-sentences --format jsonl`, pieces included."""
    lines = ["A man rides. Two dogs play.", "", "  The child plays.  "]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    out = CliRunner().invoke(cli, ["translate", str(src), "-m", str(model_dir), "--device", "cpu",
                                   "-q", "--format", "jsonl", "--split-sentences"])  # fmt: skip
    assert out.exit_code == 0, out.output
    want = [json.loads(line) for line in out.stdout.splitlines()]
    r = httpx.post(server + "/translate", json={"text": lines, "split_sentences": True})
    got = r.json()["translations"]
    assert got == want and len(got) == 3
    assert [s["source"] for s in got[0]["sentences"]] == ["A man rides.", "Two dogs play."]


def test_server_applies_constraints_and_glossaries_as_nmt_translate(server, model_dir, tmp_path):
    """A real server process: per-line constraints and a glossary give the records of `nmt
    translate --input-format jsonl` / `--glossary`; unconstrained lines are unchanged."""
    phrases = [["roten hut"], [], [], ["park", "zwei"]]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t, "constraints": c}) + "\n"
                           for t, c in zip(LINES, phrases, strict=True)))  # fmt: skip
    base = ["-m", str(model_dir), "--device", "cpu", "-q", "--format", "jsonl"]
    out = CliRunner().invoke(cli, ["translate", str(src), "--input-format", "jsonl", *base])
    assert out.exit_code == 0, out.output
    want = [json.loads(line) for line in out.stdout.splitlines()]
    r = httpx.post(server + "/translate", json={"text": LINES, "constraints": phrases})
    assert r.json()["translations"] == want
    assert "roten hut" in want[0]["hypotheses"][0]["translation"]
    free = httpx.post(server + "/translate", json={"text": LINES}).json()["translations"]
    assert same_records(free[1:3], want[1:3])  # batched apart: equal up to float digits
    gloss = tmp_path / "g.tsv"
    gloss.write_text("dogs\tkinder spielen\n")
    plain = tmp_path / "in.txt"
    plain.write_text("\n".join(LINES) + "\n")
    out = CliRunner().invoke(cli, ["translate", str(plain), "--glossary", str(gloss), *base])
    want = [json.loads(line) for line in out.stdout.splitlines()]
    body = {"text": LINES, "glossary": [["dogs", "kinder spielen"]]}
    assert httpx.post(server + "/translate", json=body).json()["translations"] == want
    assert "kinder spielen" in want[3]["hypotheses"][0]["translation"]


def test_server_scores_and_samples_as_the_cli(server, model_dir, tmp_path):
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("\n".join(LINES) + "\n")
    tgt.write_text("\n".join(TARGETS) + "\n")
    base = ["-m", str(model_dir), "--device", "cpu", "-q", "--format", "jsonl"]
    out = CliRunner().invoke(cli, ["rescore", str(src), str(tgt), *base])
    assert out.exit_code == 0, out.output
    r = httpx.post(server + "/score", json={"source": LINES, "target": TARGETS})
    assert r.json()["scores"] == [json.loads(line) for line in out.stdout.splitlines()]
    out = CliRunner().invoke(cli, ["translate", str(src), *base, "--sampling", "--seed", "7",
                                   "--temperature", "0.8", "--sampling-topk", "50", "--nbest", "2"])  # fmt: skip
    assert out.exit_code == 0, out.output
    r = httpx.post(server + "/translate", json={"text": LINES, "sampling": SAMPLING, "nbest": 2})
    assert r.json()["translations"] == [json.loads(line) for line in out.stdout.splitlines()]


def test_disconnecting_clients_do_not_hurt_others(server):
    host, port = server.removeprefix("http://").split(":")
    body = json.dumps({"text": ["a man in a blue shirt ."] * 3}).encode()
    head = (f"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    for payload in (head + body, head + body[:5], b"POST /transl"):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(payload)  # and hang up without reading
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: httpx.post(server + "/translate",
                                                     json={"text": f"dogs {i}"}, timeout=30),
                                range(8)))  # fmt: skip
    assert [r.status_code for r in answers] == [200] * 8
    assert [r.json()["translations"][0]["source"] for r in answers] == [
        f"dogs {i}" for i in range(8)
    ]
    assert httpx.get(server + "/").text.count("<canvas") == 1


def test_cli_errors_are_one_line(model_dir, tmp_path):
    runner = CliRunner()
    r = runner.invoke(cli, ["serve", "-m", str(tmp_path / "none")])
    assert (r.exit_code, r.output) == (
        2,
        f"error: {tmp_path / 'none'}: model directory not found\n",
    )
    r = runner.invoke(cli, ["serve", "-m", str(model_dir), "--timeout", "0"])
    assert (r.exit_code, r.output) == (2, "error: --timeout must be above 0, got 0.0\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = runner.invoke(cli, ["serve", "-m", str(model_dir), "--port", str(port)])
    assert (r.exit_code, r.output) == (2, f"error: 127.0.0.1:{port}: address already in use\n")


@pytest.fixture(scope="module")
def export_dir(model_dir, tmp_path_factory) -> Path:
    pytest.importorskip("ctranslate2")
    from nmt.export.ctranslate2 import export_ctranslate2

    return export_ctranslate2(
        ModelDir(model_dir), tmp_path_factory.mktemp("export") / "ct2", quiet=True
    )


def test_an_export_is_served_by_ctranslate2(export_dir, tmp_path):
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("\n".join(LINES) + "\n")
    tgt.write_text("\n".join(TARGETS) + "\n")
    base = ["-m", str(export_dir), "-q", "--format", "jsonl"]
    translated = CliRunner().invoke(cli, ["translate", str(src), *base, "--nbest", "2"])
    rescored = CliRunner().invoke(cli, ["rescore", str(src), str(tgt), *base])
    assert translated.exit_code == rescored.exit_code == 0, translated.output + rescored.output
    proc, url = start_server(export_dir)
    try:
        info = httpx.get(url + "/info").json()
        assert (info["engine"], info["sampling"], info["precision"]) == (
            "ctranslate2",
            None,
            "float32",
        )
        assert info["languages"] == {"source": "en", "target": "de"}
        assert info["architecture"]["type"] == "transformer"
        r = httpx.post(url + "/translate", json={"text": LINES, "nbest": 2})
        assert r.json()["translations"] == [json.loads(x) for x in translated.stdout.splitlines()]
        r = httpx.post(url + "/score", json={"source": LINES, "target": TARGETS})
        assert r.json()["scores"] == [json.loads(x) for x in rescored.stdout.splitlines()]
        r = httpx.post(url + "/translate", json={"text": "a", "sampling": True})
        assert (r.status_code, r.json()["detail"]) == (
            422,
            "'sampling' needs a model directory: this server runs an `nmt export` "
            "(CTranslate2 does not draw nmt's keyed samples)",
        )
        for body in ({"text": "a", "constraints": ["b"]}, {"text": "a", "glossary": [["a", "b"]]}):
            r = httpx.post(url + "/translate", json=body)
            field = "constraints" if "constraints" in body else "glossary"
            assert (r.status_code, r.json()["detail"]) == (
                422,
                f"'{field}': constraints need a model directory: an `nmt export` decodes with "
                "CTranslate2, which cannot apply them",
            )
        assert info["attention_kinds"] == []
        r = httpx.post(url + "/attention", json={"text": "a", "kind": "cross"})
        assert (r.status_code, r.json()["detail"]) == (
            400,
            "POST /attention needs a model directory: this server runs an `nmt export` "
            "(CTranslate2 gives only the cross attention of POST /translate's with_attention)",
        )
    finally:
        stop_server(proc)
    r = CliRunner().invoke(cli, ["serve", "-m", str(export_dir), "--precision", "bf16"])
    assert (r.exit_code, r.output) == (
        2,
        f"error: --precision does not apply to {export_dir}: an export's compute type is its "
        "`nmt export --quantization`\n",
    )


def test_sigterm_stops_the_server_after_answering(served):
    proc, url = served
    with ThreadPoolExecutor(1) as pool:
        late = pool.submit(httpx.post, url + "/translate", json={"text": ["dogs"] * 50}, timeout=30)
        time.sleep(0.2)
        code = stop_server(proc)  # uvicorn re-raises the signal once it has shut down
        assert code in (0, -signal.SIGTERM)
        assert late.result().status_code == 200  # the request in flight was answered


def test_answers_are_what_the_openapi_models_describe(client):
    """Every field of a real answer is one its OpenAPI model names, with its type: translate with
    attention, split sentences, constraints, sampling; score; attention; an error."""
    from nmt.serve.schema import AttentionAnswer, Problem, ScoreAnswer, TranslateAnswer

    bodies = [
        {"text": LINES[:3], "nbest": 2, "with_attention": True},
        {"text": ["A man rides. Two dogs play.", "x"], "split_sentences": True},
        {"text": "two dogs", "constraints": ["park"]},
        {"text": "two dogs", "sampling": True, "nbest": 2},
    ]
    for body in bodies:
        r = client.post("/translate", json=body)
        assert r.status_code == 200, r.text
        TranslateAnswer.model_validate(r.json())
    assert client.post("/translate", json=bodies[1]).json()["translations"][0]["sentences"]
    r = client.post("/score", json={"source": LINES[:2], "target": TARGETS[:2]})
    ScoreAnswer.model_validate(r.json())
    r = client.post("/attention", json={"text": "two dogs", "kind": "self", "head": 0})
    AttentionAnswer.model_validate(r.json())
    Problem.model_validate(client.post("/translate", json={}).json())
