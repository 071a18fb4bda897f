"""Every command on an imported OPUS-MT model, through the real command line: `nmt import` (from a
directory, and from a hub id resolved offline from a cache), `nmt translate` (greedy, beam,
n-best, sampling, sentence splitting, a glossary, an ensemble, stdin, a multilingual model's
`--target-lang`), `nmt attention`, `nmt rescore`, `nmt evaluate` and `nmt serve`.

The model is opus-mt-en-mg's real tokenizer and config, shrunk to 2+2 layers with random weights
(tests/marian_fixtures.py): its outputs mean nothing, so the tests compare commands with each
other and with the library. The multilingual copy renames two rare pieces of its vocabulary to
`>>deu<<` and `>>fra<<` (the size the embeddings need is kept)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import require
from marian_fixtures import small_marian
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.dirs import ModelDir

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
HUB_ID = "Helsinki-NLP/opus-mt-en-mg"
LINES = [
    "A dog runs in the park.",
    "Two men are playing football on the beach.",
    "",
    "  A woman in a red hat reads a book.  ",
    "The child plays with a ball.",
]
SHORT = ["--max-len-b", "16", "-q"]  # random weights seldom end a line: keep the searches short
SNOWMAN = "\u2603"  # a character opus-mt-en-mg's vocabulary lacks


@dataclass(frozen=True)
class Imported:
    """The Hugging Face directories and their imports."""

    hf: Path  # the shrunk random Marian directory
    model: Path  # its import
    twin: Path  # a second import of it: an ensemble's other member
    multi_hf: Path  # a copy with >>deu<< and >>fra<< in its vocabulary
    multi: Path  # its import


@pytest.fixture(scope="module")
def imported(pretrained_root, tmp_path_factory) -> Imported:
    require("transformers")
    from nmt.pretrained.importer import import_marian

    root = tmp_path_factory.mktemp("imported")
    hf = small_marian(pretrained_root / "opus-mt-en-mg", root / "hf")
    multi_hf = root / "hf-multi"
    shutil.copytree(hf, multi_hf)
    vocab = json.loads((multi_hf / "vocab.json").read_text(encoding="utf-8"))
    rare = sorted(vocab, key=vocab.__getitem__)[-3:-1]  # the last pieces before <pad>
    for piece, code in zip(rare, (">>deu<<", ">>fra<<"), strict=True):
        vocab[code] = vocab.pop(piece)
    (multi_hf / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    return Imported(
        hf,
        import_marian(str(hf), root / "model").path,
        import_marian(str(hf), root / "twin").path,
        multi_hf,
        import_marian(str(multi_hf), root / "multi").path,
    )


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "in.en"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def _nmt(
    *args: str, stdin: str | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`python -m nmt ARGS` as a user runs it; the test fails with its stderr when it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "nmt", *args],
        cwd=REPO,
        env={**(env or os.environ), "OMP_NUM_THREADS": "1"},
        input=stdin,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"nmt {' '.join(args)} failed:\n{proc.stderr}"
    return proc


def _cli(*args: str | Path, code: int = 0):
    """`nmt ARGS` in this process (typer's runner), checked to exit with `code`."""
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == code, r.output
    return r


def _translate(*args: str | Path) -> list[str]:
    """The stdout lines of `nmt translate ARGS`."""
    return _cli("translate", *args).stdout.splitlines()


def _records(*args: str | Path) -> list[dict]:
    """The JSONL records of `nmt translate ARGS --format jsonl`."""
    return [json.loads(line) for line in _translate(*args, "--format", "jsonl")]


def _library(model: Path, lines: list[str], **options) -> list[str]:
    """What the library gives for `lines` (one line each, as the command writes them)."""
    from nmt.engines.translator import Translator

    with Translator.from_dir(ModelDir(model), device="cpu", workers=1) as tr:
        return [t.text for t in tr.translate(lines, max_len_b=16, **options)]


# ---- nmt import -------------------------------------------------------------------------------


def test_import_prints_one_line_and_the_directory_opens(imported, tmp_path):
    from nmt.data.marian_vocab import VocabTokenizer
    from nmt.dirs.model import ModelDir

    out = tmp_path / "model"
    r = _nmt("import", str(imported.hf), "-o", str(out))
    assert r.stderr == f"imported {imported.hf} (en -> mg, 2+2 layers, d_model 64) into {out}\n"
    opened = ModelDir(out)
    assert opened.languages == ("en", "mg")
    assert (opened.vocab.eos_id, opened.vocab.pad_id, opened.vocab.bos_id) == (0, 54687, 54687)
    src_tok, _ = opened.tokenizers
    assert isinstance(src_tok, VocabTokenizer) and src_tok.languages == []
    multi_tok, _ = ModelDir(imported.multi).tokenizers
    assert isinstance(multi_tok, VocabTokenizer)
    assert multi_tok.languages == [">>deu<<", ">>fra<<"]


def _hub_cache(hf: Path, cache: Path) -> None:
    """`hf` laid out as huggingface_hub caches HUB_ID: blobs named by their SHA-256, a snapshot
    of links to them named by a commit hash, and refs/main holding that hash (no newline)."""
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    commit = hashlib.sha1(b"a snapshot of the test").hexdigest()
    blobs, snapshot = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in hf.iterdir():
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copy(f, blobs / digest)
        (snapshot / f.name).symlink_to(Path("../../blobs") / digest)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


def test_import_a_hub_id_offline_from_the_cache(imported, tmp_path):
    require("huggingface_hub")
    from safetensors.torch import load_file

    _hub_cache(imported.hf, tmp_path / "cache")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "model"
    r = _nmt("import", HUB_ID, "-o", str(out), env=env)
    assert r.stderr == f"imported {HUB_ID} (en -> mg, 2+2 layers, d_model 64) into {out}\n"
    ours = load_file(out / "checkpoints/best.safetensors")
    theirs = load_file(imported.model / "checkpoints/best.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(ours[k].equal(theirs[k]) for k in ours)
    assert (out / "pieces.json").read_bytes() == (imported.model / "pieces.json").read_bytes()


# ---- nmt translate ----------------------------------------------------------------------------


@pytest.mark.parametrize("beam", ["1", "3"])
def test_greedy_and_beam_search_as_the_library(imported, src, beam):
    got = _translate(src, "-m", imported.model, "-b", beam, *SHORT)
    assert got == _library(imported.model, LINES, beam_size=int(beam))
    assert got[2] == "" and len(set(got)) == len(LINES)


def test_nbest_lists(imported, src):
    records = _records(src, "-m", imported.model, "-b", "3", "--nbest", "2", *SHORT)
    assert len(records) == len(LINES)
    for record in records[:2] + records[3:]:
        scores = [h["score"] for h in record["hypotheses"]]
        assert len(scores) == 2 and scores[0] >= scores[1]
    text = _translate(src, "-m", imported.model, "-b", "3", "--nbest", "2", *SHORT)
    assert text[::2] == [r["hypotheses"][0]["translation"] for r in records]


def test_sampling_draws_by_seed(imported, src):
    args = [src, "-m", imported.model, "--sampling", "--nbest", "2", *SHORT]
    first = _translate(*args, "--seed", "3")
    assert len(first) == 2 * len(LINES)
    assert _translate(*args, "--seed", "3") == first
    assert _translate(*args, "--seed", "4") != first


def test_split_sentences_translates_each_sentence(imported, tmp_path):
    lines = ["A man rides a horse. Two dogs play in the snow.", "The sun shines. It is warm."]
    path = tmp_path / "in.en"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got = _translate(path, "-m", imported.model, "-b", "1", "--split-sentences", *SHORT)
    sentences = [s for line in lines for s in line.replace(". ", ".\n").split("\n")]
    alone = _library(imported.model, sentences, beam_size=1)
    assert got == [f"{alone[0]} {alone[1]}", f"{alone[2]} {alone[3]}"]


def test_a_glossary_term_is_in_the_translation(imported, src, tmp_path):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("dog\talika\n", encoding="utf-8")
    got = _translate(src, "-m", imported.model, "-b", "3", "--glossary", glossary, *SHORT)
    assert len(got) == len(LINES) and "alika" in got[0]
    assert got[1:] == _library(imported.model, LINES[1:], beam_size=3)


def test_an_ensemble_of_two_imports(imported, src):
    one = _translate(src, "-m", imported.model, "-b", "1", *SHORT)
    assert _translate(src, "-m", imported.model, "-m", imported.twin, "-b", "1", *SHORT) == one


def test_stdin_is_translated_as_a_file(imported, src):
    args = ["translate", "-m", str(imported.model), "-b", "1", *SHORT]
    piped = _nmt(*args, stdin="\n".join(LINES) + "\n").stdout.splitlines()
    assert piped == _nmt(*args, str(src)).stdout.splitlines()


def test_lines_with_pieces_the_vocabulary_lacks_are_named(imported, tmp_path):
    path = tmp_path / "in.en"
    lines = ["A dog.", f"A {SNOWMAN} melts.", "", f"{SNOWMAN}{SNOWMAN}", "The end."]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = _cli("translate", path, "-m", imported.model, "-b", "1", "--max-len-b", "4", "-q")
    assert len(r.stdout.splitlines()) == len(lines)
    warning = (
        f"warning: {path}: 2 of 5 lines hold pieces the model's vocabulary lacks "
        "(written as <unk>): lines 2 and 4\n"
    )
    assert warning in r.stderr
    r = _cli(
        "translate",
        path,
        "-m",
        imported.model,
        "-b",
        "1",
        "--max-len-b",
        "4",
        "-q",
        "--format",
        "jsonl",
        "--with-attention",
    )
    assert "<unk>" in json.loads(r.stdout.splitlines()[1])["source_tokens"]


# ---- a multilingual model: --target-lang -----------------------------------------------------


def test_target_lang_starts_every_line(imported, src):
    fra = _translate(src, "-m", imported.multi, "-b", "1", "--target-lang", "fra", *SHORT)
    assert fra == _library(imported.multi, LINES, beam_size=1, target_lang="fra")
    deu = _translate(src, "-m", imported.multi, "-b", "1", "--target-lang", ">>deu<<", *SHORT)
    assert len(deu) == len(LINES) and deu != fra
    records = _records(
        src, "-m", imported.multi, "-b", "1", "--target-lang", "fra", "--with-attention", *SHORT
    )
    assert [r["source"] for r in records] == LINES
    assert records[0]["source_tokens"][0] == ">>fra<<"


def test_target_lang_starts_every_sentence_and_piece(imported, tmp_path):
    sentences = ["A man rides a horse.", "Two dogs play in the snow."]
    path = tmp_path / "in.en"
    path.write_text(" ".join(sentences) + "\n", encoding="utf-8")
    multi = ["-m", imported.multi, "-b", "1", "--target-lang", "fra", *SHORT]
    got = _translate(path, "--split-sentences", *multi)
    alone = _library(imported.multi, sentences, beam_size=1, target_lang="fra")
    assert got == [" ".join(alone)]
    long = "A dog runs in the park, and the cat sleeps on the warm red chair; " * 60
    path.write_text(long + "\n", encoding="utf-8")
    r = _cli("translate", path, *multi, "--format", "jsonl", "--with-attention")
    (record,) = [json.loads(line) for line in r.stdout.splitlines()]
    pieces = record["sentences"]
    assert len(pieces) >= 2 and all(p["source_tokens"][0] == ">>fra<<" for p in pieces)
    assert record["source"] == long and "translated in" in r.stderr


def test_target_lang_in_evaluate_and_attention(imported, src, tmp_path):
    hyp = tmp_path / "hyp.mg"
    _cli(
        "evaluate",
        "-m",
        imported.multi,
        "--src",
        src,
        "-r",
        src,
        "-b",
        "1",
        "-o",
        hyp,
        "--target-lang",
        "fra",
        "--json",
        *SHORT,
    )
    fra = _translate(src, "-m", imported.multi, "-b", "1", "--target-lang", "fra", *SHORT)
    assert hyp.read_text(encoding="utf-8").splitlines() == fra
    r = _cli("evaluate", "-m", imported.multi, "--src", src, "-r", src, *SHORT, code=2)
    assert r.stderr == (
        f"error: {imported.multi} is multilingual: choose the target language with "
        "--target-lang (one of: deu, fra)\n"
    )
    png = tmp_path / "att.png"
    r = _cli(
        "attention",
        "A dog runs.",
        "-m",
        imported.multi,
        "--target",
        "Alika.",
        "--target-lang",
        "fra",
        "-o",
        png,
    )
    assert png.read_bytes().startswith(b"\x89PNG")


def test_target_lang_is_refused_by_other_models(imported, src):
    r = _cli("translate", src, "-m", imported.model, "--target-lang", "fra", *SHORT, code=2)
    assert r.stderr == (
        f"error: --target-lang 'fra': {imported.model} is not multilingual (its vocabulary "
        "holds no >>xx<< target-language tokens)\n"
    )
    r = _cli("serve", "-m", imported.model, "--target-lang", "fra", "--port", "0", code=2)
    assert r.stderr.startswith("error: --target-lang 'fra': ") and r.stderr.count("\n") == 1


# ---- nmt attention, rescore, evaluate ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["cross", "self"])
def test_attention_maps(imported, tmp_path, kind):
    png = tmp_path / f"{kind}.png"
    r = _cli(
        "attention",
        "A dog runs in the park.",
        "-m",
        imported.model,
        "--kind",
        kind,
        "--target",
        "Alika mihazakazaka.",
        "-o",
        png,
    )
    assert r.stdout.endswith(f"wrote {png}\n")
    assert png.read_bytes().startswith(b"\x89PNG")


def test_rescore_gives_one_score_per_pair(imported, src, tmp_path):
    from nmt.decode.rescore import rescore
    from nmt.engines.translator import Translator

    targets = ["Alika.", "Lehilahy roa.", "", "Vehivavy.", "Zaza."]
    tgt = tmp_path / "tgt.mg"
    tgt.write_text("\n".join(targets) + "\n", encoding="utf-8")
    r = _cli("rescore", src, tgt, "-m", imported.model, "-q")
    scores = [float(x) for x in r.stdout.splitlines()]
    assert len(scores) == len(LINES) and all(s < 0 for s in scores)
    with Translator.from_dir(ModelDir(imported.model), device="cpu", workers=1) as tr:
        want = [s.log_prob for s in rescore(tr, LINES, targets)]
    assert scores == pytest.approx(want, abs=1e-5)


def test_evaluate_scores_what_translate_writes(imported, src, tmp_path):
    ref, hyp = tmp_path / "ref.mg", tmp_path / "hyp.mg"
    ref.write_text("\n".join(["Alika.", "Lehilahy roa.", "", "Vehivavy.", "Zaza."]) + "\n")
    r = _cli(
        "evaluate",
        "-m",
        imported.model,
        "--src",
        src,
        "-r",
        ref,
        "-b",
        "1",
        "-o",
        hyp,
        "--json",
        "--metric",
        "chrf",
        *SHORT,
    )
    (result,) = json.loads(r.stdout)
    hyps = hyp.read_text(encoding="utf-8").splitlines()
    assert hyps == _translate(src, "-m", imported.model, "-b", "1", *SHORT)
    scored = json.loads(_cli("score", hyp, "-r", ref, "--metric", "chrf", "--json").stdout)
    assert result["score"] == scored[0]["score"]


def test_evaluate_names_lines_with_pieces_the_vocabulary_lacks(imported, tmp_path):
    path = tmp_path / "in.en"
    path.write_text(f"A dog.\nA {SNOWMAN}.\n", encoding="utf-8")
    r = _cli(
        "evaluate",
        "-m",
        imported.model,
        "--src",
        path,
        "-r",
        path,
        "-b",
        "1",
        "--max-len-b",
        "4",
        "-q",
    )
    assert (
        f"warning: {path}: 1 of 2 lines holds pieces the model's vocabulary lacks "
        "(written as <unk>): line 2\n"
    ) in r.stderr


# ---- nmt serve --------------------------------------------------------------------------------


def test_serve_answers_as_translate(imported, src):
    httpx = pytest.importorskip("httpx")
    from test_serve import start_server, stop_server

    want = _records(src, "-m", imported.model, "-b", "1", *SHORT)
    proc, url = start_server(imported.model, "--max-wait-ms", "5")
    try:
        r = httpx.post(
            url + "/translate", json={"text": LINES, "beam_size": 1, "max_len_b": 16}, timeout=60
        )
    finally:
        assert stop_server(proc) in (0, -15)
    assert r.status_code == 200, r.text
    assert r.json()["translations"] == want


def test_serve_takes_a_target_language_per_request(imported, src):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmt.engines.translator import Translator
    from nmt.serve import Settings, create_app

    want = _records(src, "-m", imported.multi, "-b", "1", "--target-lang", "fra", *SHORT)
    factory = lambda: Translator.from_dir(ModelDir(imported.multi), device="cpu", workers=1)  # noqa: E731
    with TestClient(create_app(factory, Settings(model_dir=str(imported.multi)))) as client:
        deadline = time.monotonic() + 30
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "the model did not load"
            time.sleep(0.05)
        assert client.get("/info").json()["target_languages"] == ["deu", "fra"]
        body = {"text": LINES, "beam_size": 1, "max_len_b": 16}
        r = client.post("/translate", json=body)
        assert (r.status_code, r.json()["detail"]) == (
            422,
            "the model is multilingual: choose the target language with 'target_lang' "
            "(one of: deu, fra)",
        )
        r = client.post("/translate", json=body | {"target_lang": "fra"})
        assert r.status_code == 200 and r.json()["translations"] == want
        r = client.post("/translate", json=body | {"target_lang": 3})
        assert (r.status_code, r.json()["detail"]) == (
            422,
            "'target_lang' must be a string such as \"fra\", got number",
        )


def test_rescore_of_the_search_output_is_its_log_prob(imported):
    """Forced decoding uses the model's own ids (eos, pad, the decoder's start token): scoring
    greedy search's output ids gives the log-probability the search found."""
    from nmt.engines.translator import Translator

    with Translator.from_dir(ModelDir(imported.model), device="cpu", workers=1) as tr:
        found = [
            t.hypotheses[0] for t in tr.translate(LINES, greedy=True, max_len_a=0, max_len_b=30)
        ]
        src = [tr.src_tok.encode(line) for line in LINES]
        tgt = [[tr.tgt_tok.piece_to_id(p) for p in h.tokens] for h in found]
        scored = tr.score_ids(src, tgt)
    ended = [
        (h, lp)
        for h, lp, ids in zip(found, scored, src, strict=True)
        if ids and not h.at_limit  # a blank line is not translated
    ]
    assert ended
    for h, lp in ended:
        assert sum(lp) == pytest.approx(h.log_prob, abs=1e-3)
