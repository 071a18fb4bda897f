"""`nmt score` / `nmt evaluate` through the CLI: same printed digits as the `sacrebleu` command,
stdin, JSON / JSONL schemas, paired tests, and every bad input as a one-line error with exit 2."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU, CHRF
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.decode.options import DecodeOptions

SACREBLEU = Path(sys.executable).parent / "sacrebleu"


def _val_de(repo_root: Path) -> Path:
    """Multi30k val.de.gz from the local mirror (NMT_CORPUS_MIRROR or ../shared beside the repo)."""
    env = os.environ.get("NMT_CORPUS_MIRROR")
    mirror = Path(env) if env else repo_root.parent / "shared/corpora/multi30k"
    return mirror / "val.de.gz"


runner = CliRunner()


def _perturb(lines: list[str], seed: int) -> list[str]:
    """Drop, duplicate and re-case words so that every metric lands strictly between 0 and 100."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        if len(words) > 3 and rng.random() < 0.6:
            words.pop(rng.randrange(len(words)))
        if rng.random() < 0.3:
            i = rng.randrange(len(words))
            words.insert(i, words[i].lower())
        if rng.random() < 0.3:
            words[0] = words[0].upper()
        out.append(" ".join(words))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory, repo_root) -> dict[str, Path]:
    """Real Multi30k val references (200 lines), a second reference and two systems, on disk."""
    d = tmp_path_factory.mktemp("score")
    val_de = _val_de(repo_root)
    if val_de.exists():
        with gzip.open(val_de, "rt", encoding="utf-8") as f:
            ref = [next(f).rstrip("\n") for _ in range(200)]
    else:
        ref = [f"Ein Mann mit Hut {i} läuft über die Straße ." for i in range(200)]
    texts = {
        "ref": ref,
        "ref2": _perturb(ref, 11),
        "hyp": _perturb(ref, 1),
        "hyp2": _perturb(ref, 2),
    }
    paths = {}
    for name, lines in texts.items():
        paths[name] = d / f"{name}.de"
        paths[name].write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return paths


def nmt(*args: str, input: bytes | None = None):
    """Run `nmt ARGS` in-process; stdout is not a terminal, so plain lines are printed."""
    return runner.invoke(app, [str(a) for a in args], input=input)


def sacrebleu(*args: str) -> str:
    """The `sacrebleu` command's stdout (no colours)."""
    cmd = [str(SACREBLEU), "--no-color", *[str(a) for a in args]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.parametrize(
    "nmt_opts,sb_opts,nrefs",
    [
        ([], [], 1),
        (
            ["-m", "bleu", "-m", "chrf", "-m", "ter", "-w", "2"],
            ["-m", "bleu", "chrf", "ter", "-w", "2"],
            1,
        ),
        (["--tokenize", "intl", "--lowercase"], ["--tokenize", "intl", "-lc"], 2),
        (["-m", "chrf++", "-w", "3"], ["-m", "chrf", "--chrf-word-order", "2", "-w", "3"], 2),
        (["-m", "bleu,ter", "--tokenize", "char"], ["-m", "bleu", "ter", "--tokenize", "char"], 1),
        (["-m", "ter", "-m", "chrf,bleu"], ["-m", "ter", "chrf", "bleu"], 1),  # printed sorted
    ],
)
def test_printed_lines_equal_the_sacrebleu_command(files, nmt_opts, sb_opts, nrefs):
    """`nmt score` prints exactly what `sacrebleu -f text` prints, to every digit and space."""
    refs = [files["ref"], files["ref2"]][:nrefs]
    r_opts = [x for ref in refs for x in ("-r", ref)]
    ours = nmt("score", files["hyp"], *r_opts, *nmt_opts)
    assert ours.exit_code == 0, ours.output
    theirs = sacrebleu(*refs, "-i", files["hyp"], "-f", "text", *sb_opts)
    assert ours.stdout == theirs
    assert "version:" in ours.stdout and f"nrefs:{nrefs}" in ours.stdout


def test_stdin_is_the_default_and_dash(files):
    """No HYP or '-' reads stdin; the result equals the file's."""
    data = files["hyp"].read_bytes()
    from_file = nmt("score", files["hyp"], "-r", files["ref"])
    assert nmt("score", "-r", files["ref"], input=data).stdout == from_file.stdout
    assert nmt("score", "-", "-r", files["ref"], input=data).stdout == from_file.stdout


def test_json_schema_and_values(files):
    """--json: a list of objects with name, score, signature and BLEU's verbose fields."""
    res = nmt("score", files["hyp"], "-r", files["ref"], "-m", "bleu", "-m", "chrf", "--json")
    assert res.exit_code == 0, res.output
    objs = json.loads(res.stdout)
    assert [o["name"] for o in objs] == ["BLEU", "chrF2"]
    bleu = objs[0]
    for key, typ in [
        ("score", float),
        ("signature", str),
        ("precisions", list),
        ("bp", float),
        ("ratio", float),
        ("hyp_len", int),
        ("ref_len", int),
        ("system", str),
    ]:
        assert isinstance(bleu[key], typ), key
    hyps = files["hyp"].read_text(encoding="utf-8").splitlines()
    refs = files["ref"].read_text(encoding="utf-8").splitlines()
    s = BLEU().corpus_score(hyps, [refs])
    assert bleu["score"] == round(s.score, 1) and bleu["precisions"] == s.precisions
    assert (bleu["hyp_len"], bleu["ref_len"]) == (s.sys_len, s.ref_len)
    # Every key of sacrebleu's own JSON object is there with the same value.
    theirs = json.loads(sacrebleu(files["ref"], "-i", files["hyp"], "-m", "bleu", "chrf"))
    for ours_obj, their_obj in zip(objs, theirs, strict=True):
        assert {k: ours_obj[k] for k in their_obj} == their_obj


def test_sentence_jsonl(files):
    """--sentence: one JSON object per hypothesis line with each metric's sentence score."""
    res = nmt("score", files["hyp"], "-r", files["ref"], "--sentence", "-m", "bleu,chrf", "-w", "4")
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    hyps = files["hyp"].read_text(encoding="utf-8").splitlines()
    refs = files["ref"].read_text(encoding="utf-8").splitlines()
    assert len(rows) == len(hyps) == 200
    assert [r["line"] for r in rows] == list(range(1, 201))
    bleu, chrf = BLEU(effective_order=True), CHRF()
    for i in (0, 17, 199):
        assert rows[i]["BLEU"] == round(bleu.sentence_score(hyps[i], [refs[i]]).score, 4)
        assert rows[i]["chrF2"] == round(chrf.sentence_score(hyps[i], [refs[i]]).score, 4)
    assert "signature: BLEU|nrefs:1|case:mixed|eff:yes" in res.stderr


def test_several_systems_without_a_test(files):
    """Several HYP files: one line per system and metric, prefixed by the file name."""
    res = nmt("score", files["hyp"], files["hyp2"], "-r", files["ref"])
    lines = res.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{files['hyp']}\tBLEU|nrefs:1|")
    assert lines[1].startswith(f"{files['hyp2']}\tBLEU|nrefs:1|")


@pytest.mark.parametrize("test,n", [("bs", 300), ("ar", 500)])
def test_paired_json_equals_the_sacrebleu_command(files, test, n):
    """--paired-bs/-ar: score, mean, 95% CI, p-value per system; sacrebleu's numbers exactly."""
    systems = [files["hyp"], files["hyp2"], files["ref2"]]
    res = nmt("score", *systems, "-r", files["ref"], f"--paired-{test}", "--paired-n", n, "--json")
    assert res.exit_code == 0, res.output
    objs = json.loads(res.stdout)
    assert [o["system"] for o in objs] == [str(s) for s in systems]
    assert [o["baseline"] for o in objs] == [True, False, False]
    for o in objs:
        assert set(o) >= {"name", "score", "mean", "ci", "p_value", "signature", "test"}
        assert o["test"] == test and o["n_samples"] == n and o["mean"] is not None
        assert f"{test}:{n}|" in o["signature"]
    assert objs[0]["p_value"] is None and 0 < objs[1]["p_value"] <= 1
    theirs = json.loads(
        sacrebleu(files["ref"], "-i", *systems, f"--paired-{test}", f"--paired-{test}-n", n)
    )
    for o, t in zip(objs, theirs, strict=True):
        assert o["score"] == round(t["BLEU"]["score"], 1)
        assert o["p_value"] == t["BLEU"]["p_value"]
        if test == "bs":  # sacrebleu's command estimates the CI only for the bootstrap test
            assert (o["mean"], o["ci"]) == (t["BLEU"]["mean"], t["BLEU"]["ci"])


def test_paired_plain_lines(files):
    """Plain paired output: baseline marked, p-values with '*' under 0.05, signature line."""
    res = nmt(
        "score", files["hyp"], files["ref"], "-r", files["ref"], "--paired-bs", "--paired-n", 200
    )
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"Baseline: {files['hyp']}\tBLEU = ")
    assert lines[1].startswith(f"{files['ref']}\tBLEU = 100.0 (100.0 ± 0.0) (p = ")
    assert lines[1].endswith(")*")
    assert lines[2].startswith("signature\tBLEU|nrefs:1|bs:200|seed:12345|")


def _bad_utf8(tmp_path: Path) -> Path:
    p = tmp_path / "bad.txt"
    p.write_bytes(b"ok line\nsecond \xff line\nthird\n")
    return p


@pytest.mark.parametrize(
    "args,stdin,message",
    [
        (
            ["{hyp}", "-r", "{short}"],
            None,
            "line counts differ: {hyp} has 200 lines, {short} has 3 lines",
        ),
        (
            ["{short}", "-r", "{ref}", "-r", "{ref2}"],
            None,
            "{short} has 3 lines, {ref} has 200 lines",
        ),
        (["{empty}", "-r", "{ref}"], None, "{empty}: empty hypothesis file"),
        (["-r", "{ref}"], b"", "<stdin>: empty hypothesis file"),
        (["{missing}", "-r", "{ref}"], None, "{missing}: file not found"),
        (["{hyp}", "-r", "{missing}"], None, "{missing}: file not found"),
        (["{bad}", "-r", "{short}"], None, "{bad}:2: invalid UTF-8"),
        (["{short}", "-r", "{bad}"], None, "{bad}:2: invalid UTF-8"),
        (["-r", "{short}"], b"a\nb\n\xc3\x28\n", "<stdin>:3: invalid UTF-8"),
        (["{hyp}", "-r", "{dir}"], None, "is a directory"),
        (["{hyp}", "-r", "{ref}", "-m", "bleurt"], None, "unknown metric 'bleurt'"),
        (["{hyp}", "-r", "{ref}", "--tokenize", "moses"], None, "unknown tokenizer 'moses'"),
        (["{hyp}", "-r", "{ref}", "--paired-bs"], None, "at least two systems"),
        (
            ["{hyp}", "{hyp2}", "-r", "{ref}", "--paired-bs", "--paired-ar"],
            None,
            "mutually exclusive",
        ),
        (["{hyp}", "{hyp2}", "-r", "{ref}", "--sentence"], None, "one system at a time"),
        (["-", "-", "-r", "{ref}"], b"x\n", "stdin ('-') can be given only once"),
        (
            ["{hyp}", "-r", "{ref}", "-m", "chrf", "--chrf-word-order", "-1"],
            None,
            "--chrf-word-order must be >= 0, got -1",
        ),
        (  # chrf++ fixes word order 2: 0 was ignored, and chrf + 2 printed one line twice
            ["{hyp}", "-r", "{ref}", "-m", "chrf++", "--chrf-word-order", "0"],
            None,
            "--chrf-word-order 0 goes with -m chrf; chrf++ is chrF with word order 2",
        ),
        (
            ["{hyp}", "-r", "{ref}", "-m", "chrf,chrf++", "--chrf-word-order", "2"],
            None,
            "--chrf-word-order 2 goes with -m chrf; chrf++ is chrF with word order 2",
        ),
        (
            ["{hyp}", "{hyp2}", "-r", "{ref}", "--paired-bs", "--paired-n", "-1"],
            None,
            "--paired-n must be >= 0 (0: sacrebleu's default), got -1",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(files, tmp_path, args, stdin, message):
    """Each bad input: exit 2, exactly one stderr line `error: ...` naming what is wrong."""
    (tmp_path / "short.txt").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    names = {
        **{k: str(v) for k, v in files.items()},
        "short": str(tmp_path / "short.txt"),
        "empty": str(tmp_path / "empty.txt"),
        "missing": str(tmp_path / "missing.txt"),
        "bad": str(_bad_utf8(tmp_path)),
        "dir": str(tmp_path),
    }
    res = nmt("score", *[a.format(**names) for a in args], input=stdin)
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: ") and message.format(**names) in res.stderr


def test_bad_input_through_a_real_process(files, tmp_path):
    """The installed entry point, not just CliRunner: exit 2, one line, no traceback."""
    short = tmp_path / "short.txt"
    short.write_text("a\n", encoding="utf-8")
    nmt_bin = Path(sys.executable).parent / "nmt"
    cmd = [str(nmt_bin), "score", str(files["hyp"]), "-r", str(short)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert (
        out.stderr
        == f"error: line counts differ: {files['hyp']} has 200 lines, {short} has 1 lines\n"
    )


# ---- nmt evaluate ------------------------------------------------------------------------------


def _hyp(text: str):
    """What an engine returns for a line: its text as the one hypothesis."""
    from nmt.decode.engine import TextHypothesis, Translation

    return Translation(text, [TextHypothesis(text, text.split(), 0.0, 0.0)])


@pytest.fixture
def fake_translator(monkeypatch):
    """Stand-in for nmt.engines.translator.Translator: copies the source, records how it was called
    (its model directories, empty ones, opened without being read)."""
    import nmt.dirs
    from nmt.dirs import ModelDir

    monkeypatch.setattr(nmt.dirs, "open_dirs", lambda paths: [ModelDir.at(p) for p in paths])
    calls: dict = {}

    class Translator:
        tgt_tok = types.SimpleNamespace(lowercase=False)  # a cased model: BLEU stays cased
        # a source vocabulary of no target languages that names no unknown pieces
        src_tok = types.SimpleNamespace(languages=[], lowercase=False, unknown_indices=lambda t: [])
        languages, max_source = ("en", "de"), 0  # an RNN's: no source limit

        @classmethod
        def from_dir(cls, model_dir, device="auto", checkpoint="best", precision="auto", workers=0):
            calls["from_dir"] = (str(model_dir.path), device, checkpoint, precision)
            return cls()

        def translate(
            self, lines, options=None, *, progress=None, on_warning=None, first_line=1, keys=None
        ):
            calls["translate"], calls["on_warning"] = options, on_warning
            if progress is not None:
                progress(len(lines))
            return [_hyp(x) for x in lines]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls["closed"] = True

    module = types.ModuleType("nmt.engines.translator")
    module.Translator = Translator
    monkeypatch.setitem(sys.modules, "nmt.engines.translator", module)
    return calls


def test_evaluate_translates_writes_and_scores(files, tmp_path, fake_translator):
    """evaluate = translate + score: the hypotheses land in -o and the scores equal `nmt score`."""
    model = tmp_path / "model"
    model.mkdir()
    out = tmp_path / "out" / "hyp.de"
    res = nmt(
        "evaluate", "-m", model, "--src", files["hyp"], "-r", files["ref"], "-o", out,
        "--beam-size", "3", "--length-penalty", "0.6", "--batch-tokens", "100",
        "--checkpoint", "last", "--device", "cpu", "--metric", "bleu", "--metric", "chrf",
        "--precision", "bf16", "--stop", "exact",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert out.read_text(encoding="utf-8") == files["hyp"].read_text(encoding="utf-8")
    assert fake_translator["from_dir"] == (str(model), "cpu", "last", "bf16")
    assert fake_translator["closed"]  # its worker processes do not outlive the evaluation
    assert fake_translator["translate"] == DecodeOptions(
        beam_size=3,
        greedy=False,
        length_penalty=0.6,
        stop="exact",
        batch_tokens=100,
        scores=False,  # only the text is scored
    )
    expected = nmt("score", files["hyp"], "-r", files["ref"], "-m", "bleu", "-m", "chrf")
    assert res.stdout == expected.stdout
    args = ["-m", model, "--src", files["hyp"], "-r", files["ref"], "--json", "--quiet"]
    as_json = nmt("evaluate", *args)
    assert json.loads(as_json.stdout)[0]["name"] == "BLEU"
    # Unset search options are left to the model's own decoding config.
    assert fake_translator["translate"] == DecodeOptions(greedy=False, scores=False)


def test_evaluate_warnings_name_the_source_file(files, tmp_path, fake_translator, capsys):
    """Truncation warnings say which file their line numbers count in, as translate's do."""
    (tmp_path / "model").mkdir()
    res = nmt("evaluate", "-m", tmp_path / "model", "--src", files["hyp"], "-r", files["ref"], "-q")
    assert res.exit_code == 0, res.output
    capsys.readouterr()
    fake_translator["on_warning"]("line 7: source has 90 subword tokens, truncated to 63")
    err = capsys.readouterr().err
    assert (
        err == f"warning: {files['hyp']}: line 7: source has 90 subword tokens, truncated to 63\n"
    )


def test_help_shows_bracketed_defaults():
    """Rich markup took `[default: ...]` in a help text for a tag and dropped it."""
    wide = {"COLUMNS": "250"}
    shown = {
        "score": ["HI [default: 0-10,10-20,20-30,30-40,40-50,50+].", "order [default: file name]."],
        "evaluate": ["Beam width [default: model config].", "penalty [default: model config].",
                     "per batch [default: model config]."],
        "serve": ["decoder call [default: model's]."],
    }  # fmt: skip
    for command, texts in shown.items():
        res = runner.invoke(app, [command, "--help"], env=wide)
        assert res.exit_code == 0, res.output
        for text in texts:
            assert text in res.stdout, (command, text)


def test_evaluate_writes_one_line_per_input_like_translate(tmp_path, fake_translator):
    """An empty line and line breaks inside a translation (here U+2028) never shift -o."""
    model = tmp_path / "model"
    model.mkdir()
    lines = ["a man .", "", "two\u2028dogs\x85play .", "the end ."]
    src = tmp_path / "src.txt"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    out = tmp_path / "hyp.txt"
    res = nmt("evaluate", "-m", model, "--src", src, "-r", src, "-o", out, "-q")
    assert res.exit_code == 0, res.output
    written = out.read_text(encoding="utf-8").splitlines()
    assert written == ["a man .", "", "two dogs play .", "the end ."]


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["-m", "{missing}", "--src", "{hyp}", "-r", "{ref}"],
            "{missing}: model directory not found",
        ),
        (["-m", "{model}", "--src", "{missing}", "-r", "{ref}"], "{missing}: file not found"),
        (["-m", "{model}", "--src", "{hyp}", "-r", "{missing}"], "{missing}: file not found"),
        (
            ["-m", "{model}", "--src", "{short}", "-r", "{ref}"],
            "{short} has 3 lines, {ref} has 200",
        ),
        (["-m", "{model}", "--src", "{empty}", "-r", "{ref}"], "{empty}: empty source file"),
        (["-m", "{model}", "--src", "{bad}", "-r", "{ref}"], "{bad}:2: invalid UTF-8"),
        (["-m", "{model}", "--src", "{hyp}", "-r", "{ref}", "--metric", "x"], "unknown metric 'x'"),
        (
            ["-m", "{model}", "--src", "{hyp}", "-r", "{ref}", "--tokenize", "y"],
            "unknown tokenizer",
        ),
        (  # it failed after translating everything
            ["-m", "{model}", "--src", "{hyp}", "-r", "{ref}", "--width", "-1"],
            "--width must be >= 0, got -1",
        ),
        (
            ["-m", "{model}", "--src", "{hyp}", "-r", "{ref}", "--chrf-word-order", "-1"],
            "--chrf-word-order must be >= 0, got -1",
        ),
    ],
)
def test_evaluate_checks_inputs_before_loading_the_model(
    files, tmp_path, monkeypatch, args, message
):
    """Bad evaluate input fails with one line and exit 2, and the model is never loaded."""

    class Translator:
        @classmethod
        def from_dir(cls, *a, **k):
            raise AssertionError("the model was loaded before the inputs were checked")

    module = types.ModuleType("nmt.engines.translator")
    module.Translator = Translator
    monkeypatch.setitem(sys.modules, "nmt.engines.translator", module)
    (tmp_path / "model").mkdir()
    (tmp_path / "short.txt").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    names = {
        **{k: str(v) for k, v in files.items()},
        "model": str(tmp_path / "model"),
        "short": str(tmp_path / "short.txt"),
        "empty": str(tmp_path / "empty.txt"),
        "missing": str(tmp_path / "missing"),
        "bad": str(_bad_utf8(tmp_path)),
    }
    out = tmp_path / "hyp.out"
    res = nmt("evaluate", *[a.format(**names) for a in args], "-o", out)
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: ")
    assert message.format(**names) in res.stderr
    assert not out.exists()
