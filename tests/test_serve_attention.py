"""`POST /attention` of a real `nmt serve` process on 127.0.0.1: the three kinds' shapes and
labels (cross: target + eos x source + eos; self: source x source; decoder: bos + target x the
same, exactly 0 above the diagonal), rows that are distributions, layer and head selection, cross
equal to /translate's attention, and one-line refusals (a bad field, a kind Seq2Seq does not
have, a model without attention)."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402

with warnings.catch_warnings():  # starlette's TestClient asks for httpx2, which is not needed
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient
from test_ensemble import member_dir  # noqa: E402
from test_serve import start_server, stop_server  # noqa: E402
from test_translate import build_tiny_model_dir  # noqa: E402

from nmt.dirs import ModelDir  # noqa: E402
from nmt.engines.translator import Translator  # noqa: E402
from nmt.serve import Settings, create_app  # noqa: E402

SOURCE = "a man in a blue shirt ."
TARGET = "ein mann im blauen hemd ."


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("serve_attention")
    base = build_tiny_model_dir(root)
    return {
        "transformer": base,
        "seq2seq": member_dir(base, root, seed=2, type="seq2seq", embed_dim=16, hidden_size=16),
    }


@pytest.fixture(scope="module")
def server(dirs):
    proc, url = start_server(dirs["transformer"])
    yield url
    stop_server(proc)


def attention(url: str, **body: object) -> dict:
    r = httpx.post(url + "/attention", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def assert_distributions(weights: list[list[float]]) -> None:
    """Every row sums to 1 (up to /translate's 4-decimal rounding) with no negative weight."""
    for row in weights:
        assert min(row) >= 0 and sum(row) == pytest.approx(1, abs=1e-3)


@pytest.mark.slow
def test_decoder_attention_is_square_causal_and_labelled_by_its_inputs(server):
    got = attention(server, text=SOURCE, target=TARGET, kind="decoder")
    cross = attention(server, text=SOURCE, target=TARGET)
    n = len(got["rows"])
    assert got["columns"] == got["rows"] == ["<s>", *cross["rows"][:-1]]  # bos + target pieces
    assert len(got["weights"]) == n and all(len(row) == n for row in got["weights"])
    assert all(got["weights"][r][c] == 0 for r in range(n) for c in range(r + 1, n))
    assert got["weights"][0][0] == 1  # bos sees only itself
    assert_distributions(got["weights"])
    assert (got["kind"], got["layer"], got["head"], got["layers"], got["heads"]) == (
        "decoder", 1, "mean", 2, 2,
    )  # fmt: skip
    assert got["translation"] == TARGET


def test_encoder_self_attention_is_source_by_source(server):
    got = attention(server, text=SOURCE, kind="self")
    cross = attention(server, text=SOURCE, target=TARGET)
    n = len(cross["columns"])
    assert got["rows"] == got["columns"] == cross["columns"] and got["columns"][-1] == "</s>"
    assert len(got["weights"]) == n and all(len(row) == n for row in got["weights"])
    assert_distributions(got["weights"])
    assert (got["layer"], got["layers"], got["heads"]) == (0, 1, 2)  # the encoder's one layer


def test_cross_attention_is_target_and_eos_by_source_and_eos(server):
    forced = attention(server, text=SOURCE, target=TARGET)
    assert forced["rows"][-1] == forced["columns"][-1] == "</s>"
    assert len(forced["weights"]) == len(forced["rows"])
    assert all(len(row) == len(forced["columns"]) for row in forced["weights"])
    assert_distributions(forced["weights"])
    searched = attention(server, text=SOURCE)  # no target: the search's translation, as /translate
    body = {"text": SOURCE, "with_attention": True}
    (record,) = httpx.post(server + "/translate", json=body, timeout=30).json()["translations"]
    hyp = record["hypotheses"][0]
    assert searched["translation"] == hyp["translation"]
    assert searched["rows"] == [*hyp["tokens"], "</s>"]
    assert searched["columns"] == record["source_tokens"]
    flat = [w for row in hyp["attention"] for w in row]  # float32 values rounded to 4 decimals
    assert len(searched["weights"]) == len(hyp["attention"])
    assert [w for row in searched["weights"] for w in row] == pytest.approx(flat, abs=1e-6)


def test_a_head_and_a_layer_are_chosen_and_the_mean_is_over_the_heads(server):
    body = {"text": SOURCE, "target": TARGET, "kind": "decoder"}
    mean = attention(server, **body)
    heads = [attention(server, **body, head=h)["weights"] for h in (0, -1)]
    assert heads[0] != heads[1]
    for r, row in enumerate(mean["weights"]):
        for c, w in enumerate(row):
            assert w == pytest.approx((heads[0][r][c] + heads[1][r][c]) / 2, abs=1e-4)
    first = attention(server, **body, layer=0)
    assert first["layer"] == 0 and first["weights"] != mean["weights"]
    assert attention(server, **body, layer=-1)["weights"] == mean["weights"]


BAD = [
    ({"text": SOURCE, "kind": "encoder"}, 422, "'kind' must be cross, self or decoder, got 'encoder'"),
    ({"text": SOURCE, "kind": 2}, 422, "'kind' must be cross, self or decoder, got number"),
    ({"text": SOURCE, "layer": 2}, 422,
     "'layer' 2 is out of range: the model's decoder has 2 layers (0 to 1, or negative from the end)"),
    ({"text": SOURCE, "kind": "self", "layer": 1}, 422,
     "'layer' 1 is out of range: the model's encoder has 1 layer (0 to 0, or negative from the end)"),
    ({"text": SOURCE, "head": -3}, 422,
     "'head' -3 is out of range: each layer has 2 heads (0 to 1, or negative from the end)"),
    ({"text": SOURCE, "head": "max"}, 422, "'head' must be an integer or 'mean', got 'max'"),
    ({"text": SOURCE, "layer": "last"}, 422, "'layer' must be an integer, got string"),
    ({"text": [SOURCE]}, 422, "'text' must be a string, got array"),
    ({"text": SOURCE, "target": ""}, 422, "'target' is empty"),
    ({"kind": "self"}, 422, "'text' is required: a string"),
    ({"text": SOURCE, "src": "b"}, 422,
     "unknown field 'src' (expected text, target, kind, layer, head, beam_size)"),
    ({"text": " "}, 400, "the source sentence is empty"),
]  # fmt: skip


def test_bad_requests_get_one_line(server):
    for body, status, detail in BAD:
        r = httpx.post(server + "/attention", json=body, timeout=30)
        assert (r.status_code, r.json()) == (status, {"detail": detail}), body
    assert httpx.get(server + "/info").json()["attention_kinds"] == ["cross", "self", "decoder"]


@pytest.mark.slow
def test_seq2seq_has_cross_attention_only(dirs):
    proc, url = start_server(dirs["seq2seq"])
    try:
        assert httpx.get(url + "/info").json()["attention_kinds"] == ["cross"]
        got = attention(url, text=SOURCE, target=TARGET)
        assert (got["layers"], got["heads"], got["layer"]) == (1, 1, 0)
        assert len(got["weights"]) == len(got["rows"]) and got["rows"][-1] == "</s>"
        assert_distributions(got["weights"])
        for kind in ("self", "decoder"):
            r = httpx.post(url + "/attention", json={"text": SOURCE, "kind": kind}, timeout=30)
            assert (r.status_code, r.json()["detail"]) == (
                400,
                "a seq2seq model has only source-target attention (kind 'cross'), "
                f"no {kind!r} attention",
            )
    finally:
        stop_server(proc)


def test_a_model_without_attention_has_none_to_show(dirs, tmp_path):
    plain = member_dir(dirs["transformer"], tmp_path, seed=3, type="seq2seq", embed_dim=16,
                       hidden_size=16, attention="none")  # fmt: skip
    translator = Translator.from_dir(ModelDir(plain), device="cpu")
    with TestClient(create_app(lambda: translator, Settings(model_dir=str(plain)))) as client:
        deadline = time.monotonic() + 20
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "the model did not load"
            time.sleep(0.02)
        assert client.get("/info").json()["attention_kinds"] == []
        r = client.post("/attention", content=json.dumps({"text": SOURCE}))
        assert (r.status_code, r.json()) == (
            400,
            {"detail": "this model has no attention (model.attention: none)"},
        )
