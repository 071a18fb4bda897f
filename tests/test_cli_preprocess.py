"""`nmt preprocess` through the CLI: every bad input is one line on stderr, exit 2, and nothing left
behind; plus the installed `nmt` entry point and the `--help` of every command."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nmt.cli.app import app

NMT = Path(sys.executable).parent / "nmt"
runner = CliRunner()
GOOD = ["a dog runs", "two cats sleep", "a man walks", "the child plays"] * 10
GUT = ["ein hund rennt", "zwei katzen schlafen", "ein mann geht", "das kind spielt"] * 10


def _write(prefix: Path, src: list, tgt: list) -> Path:
    """PREFIX.en / PREFIX.de from str (UTF-8) or bytes lines."""
    for lang, lines in (("en", src), ("de", tgt)):
        raw = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
        Path(f"{prefix}.{lang}").write_bytes(raw)
    return prefix


def _run(*args: str):
    """Invoke `nmt preprocess` in-process with a tiny vocabulary."""
    base = ["preprocess", "--src-lang", "en", "--tgt-lang", "de", "--vocab-size", "40", "-q"]
    return runner.invoke(app, [*base, *args])


def _fails(tmp_path: Path, out: Path, message: str, *args: str) -> None:
    """Exit 2, exactly `error: message`, no output dir and no temporary folder left beside it."""
    before = set(tmp_path.iterdir())
    r = _run(*args, "-o", str(out))
    assert r.exit_code == 2, r.output
    assert r.stderr == f"error: {message}\n"
    assert r.stdout == ""
    assert set(tmp_path.iterdir()) == before


def test_mismatched_line_counts(tmp_path):
    p = _write(tmp_path / "c", GOOD, GUT[:-3])
    msg = f"line counts differ: {p}.en has 40 lines, {p}.de has 37 lines"
    _fails(tmp_path, tmp_path / "out", msg, "--train", str(p))
    ok = _write(tmp_path / "ok", GOOD, GUT)
    v = _write(tmp_path / "v", GOOD[:5], GUT[:6])
    msg = f"line counts differ: {v}.en has 5 lines, {v}.de has 6 lines"
    _fails(tmp_path, tmp_path / "out", msg, "--train", str(ok), "--valid", str(v))


def test_missing_file(tmp_path):
    p = _write(tmp_path / "c", GOOD, GUT)
    Path(f"{p}.de").unlink()
    _fails(tmp_path, tmp_path / "out", f"{p}.de: file not found (nor c.de.gz)", "--train", str(p))
    ok = _write(tmp_path / "ok", GOOD, GUT)
    msg = f"{tmp_path / 'nope'}.en: file not found (nor nope.en.gz)"
    _fails(tmp_path, tmp_path / "out", msg, "--train", str(ok), "--test", str(tmp_path / "nope"))


def test_no_training_pairs_left(tmp_path):
    p = _write(tmp_path / "c", ["x", " ", "y"], ["", "z", "\t"])
    msg = f"no training pairs left after cleaning {p}.en / {p}.de (3 read; dropped: empty 3)"
    _fails(tmp_path, tmp_path / "out", msg, "--train", str(p))
    long = " ".join(["word"] * 30)
    p = _write(tmp_path / "l", [long, long], [long, long])
    msg = f"no training pairs left after cleaning {p}.en / {p}.de (2 read; dropped: too_long 2)"
    _fails(tmp_path, tmp_path / "out", msg, "--train", str(p), "--max-len", "10")


def test_invalid_utf8_names_file_and_line(tmp_path):
    p = _write(tmp_path / "c", GOOD, [*GUT[:6], b"kaputt \xc3\x28 text", *GUT[7:]])
    msg = (
        f"{p}.de:7: invalid UTF-8 (invalid continuation byte at byte 7); "
        "--skip-invalid drops such pairs"
    )
    _fails(tmp_path, tmp_path / "out", msg, "--train", str(p))
    r = _run("--train", str(p), "-o", str(tmp_path / "out"), "--skip-invalid")
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["splits"]["train"]["dropped"]["invalid_utf8"] == 1
    assert m["splits"]["train"]["kept"] == 39


def test_existing_data_dir_needs_force(tmp_path):
    p = _write(tmp_path / "c", GOOD, GUT)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    _fails(
        tmp_path,
        out,
        f"{out}: exists and is not empty (use --force to replace it)",
        "--train",
        str(p),
    )
    assert (out / "keep.txt").read_text() == "mine"
    bad = _write(tmp_path / "bad", GOOD, GUT[:-1])  # --force with bad input keeps the old folder
    msg = f"line counts differ: {bad}.en has 40 lines, {bad}.de has 39 lines"
    _fails(tmp_path, out, msg, "--train", str(bad), "--force")
    assert (out / "keep.txt").read_text() == "mine"
    r = _run("--train", str(p), "-o", str(out), "--force")
    assert r.exit_code == 0 and not (out / "keep.txt").exists()
    assert (out / "manifest.json").is_file()
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".")]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run("--train", str(p), "-o", str(empty)).exit_code == 0


def test_force_refuses_to_delete_the_inputs(tmp_path):
    data = tmp_path / "data"
    (data / "corpus").mkdir(parents=True)
    p = _write(data / "c", GOOD, GUT)  # train inside the output folder
    v = _write(data / "corpus" / "v", GOOD[:5], GUT[:5])  # valid in a folder below it
    ok = _write(tmp_path / "ok", GOOD, GUT)
    (tmp_path / "link").symlink_to(data)
    cases = [
        (data, p, ["--train", str(p)]),
        (data, v, ["--train", str(ok), "--valid", str(v)]),
        (data / "corpus", v, ["--train", str(ok), "--valid", str(v)]),
        (tmp_path / "link", p, ["--train", str(p)]),  # the same folder through a symlink
    ]
    for out, prefix, args in cases:
        msg = f"--force would delete {out}, which holds the input {prefix}.en; choose another --out"
        _fails(tmp_path, out, msg, *args, "--force")
    for prefix, n in ((p, 40), (v, 5)):  # the corpus survives
        assert Path(f"{prefix}.en").read_text().splitlines() == GOOD[:n]
        assert Path(f"{prefix}.de").read_text().splitlines() == GUT[:n]
    r = _run("--train", str(ok), "-o", str(data / "new"), "--force")  # a sibling is fine
    assert r.exit_code == 0, r.output


def test_bad_options(tmp_path):
    p = _write(tmp_path / "c", GOOD, GUT)
    out = tmp_path / "out"
    _fails(
        tmp_path,
        out,
        "--spm-type must be unigram or bpe, got 'word'",
        "--train",
        str(p),
        "--spm-type",
        "word",
    )
    _fails(tmp_path, out, "--threads must be >= 1, got 0", "--train", str(p), "--threads", "0")
    msg = (  # GOOD + GUT use 21 distinct letters; + word boundary + 4 special pieces = 26
        "vocabulary size 9 is too small: the training text needs 26 pieces (its characters, the "
        "word boundary and 4 special pieces); use --vocab-size 26 or more"
    )
    _fails(tmp_path, out, msg, "--train", str(p), "--vocab-size", "9")
    t = tmp_path / "train"
    _write(t, GOOD, GUT)
    msg = "test prefix name 'train' is ambiguous (test names must be distinct and not 'train' or 'valid')"
    _fails(tmp_path, out, msg, "--train", str(p), "--test", str(t))


def test_entry_point_runs_preprocess_and_prints_summary(multi30k, tmp_path):
    for lang in ("en", "de"):
        lines = itertools.islice(open(multi30k / f"train.{lang}", encoding="utf-8"), 300)
        (tmp_path / f"tr.{lang}").write_text("".join(lines), encoding="utf-8")
    args = [str(NMT), "preprocess", "--src-lang", "en", "--tgt-lang", "de"]
    args += ["--train", str(tmp_path / "tr"), "--valid", str(multi30k / "val")]
    args += ["--test", str(multi30k / "test_2016_flickr"), "--vocab-size", "200"]
    proc = subprocess.run([*args, "-o", str(tmp_path / "d")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["train", "valid", "test_2016_flickr"]
    assert "300" in rows[0] and "1,014" in rows[1]
    assert "encode train" in proc.stderr
    proc = subprocess.run([*args, "-o", str(tmp_path / "q"), "--quiet"], capture_output=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


def _command_names() -> list[str]:
    """Every command registered on the Typer app (others are added by other modules)."""
    return sorted(c.name or c.callback.__name__ for c in app.registered_commands)


def test_version():
    import nmt

    r = subprocess.run([str(NMT), "--version"], capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"nmt {nmt.__version__}\n", "")


def test_entry_point_help():
    proc = subprocess.run([str(NMT), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "preprocess" in proc.stdout


@pytest.mark.parametrize("command", _command_names())
def test_every_command_help(command):
    proc = subprocess.run([str(NMT), command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout and command in proc.stdout


def test_valid_sample_keeps_a_seeded_sample_in_file_order(tmp_path):
    import random

    p = _write(tmp_path / "c", GOOD, GUT)
    v = _write(tmp_path / "v", [f"en {i}" for i in range(1, 51)], [f"de {i}" for i in range(1, 51)])
    out = tmp_path / "out"
    r = _run(
        "--train", str(p), "--valid", str(v), "--valid-sample", "10", "--seed", "3", "-o", str(out)
    )
    assert r.exit_code == 0, r.output
    expect = sorted(random.Random(3).sample(range(1, 51), 10))
    assert (out / "valid.en.txt").read_text() == "".join(f"en {i}\n" for i in expect)
    assert (out / "valid.de.txt").read_text() == "".join(f"de {i}\n" for i in expect)
    entry = json.loads((out / "manifest.json").read_text())["splits"]["valid"]
    assert entry["sample"] == {"lines": 10, "of": 50, "seed": 3}
    assert (entry["lines_read"], entry["kept"]) == (50, 10)
    ids = (out / "valid.en.idx").stat().st_size
    # a sample as large as the file keeps every line and records no sample
    r = _run(
        "--train", str(p), "--valid", str(v), "--valid-sample", "50", "-o", str(out), "--force"
    )
    assert r.exit_code == 0, r.output
    entry = json.loads((out / "manifest.json").read_text())["splits"]["valid"]
    assert "sample" not in entry and entry["kept"] == 50
    assert (out / "valid.en.idx").stat().st_size > ids
    _fails(
        tmp_path,
        tmp_path / "o2",
        "--valid-sample must be >= 0, got -1",
        "--train",
        str(p),
        "--valid",
        str(v),
        "--valid-sample",
        "-1",
    )
    _fails(
        tmp_path,
        tmp_path / "o2",
        "--valid-sample samples the --valid files: give --valid",
        "--train",
        str(p),
        "--valid-sample",
        "5",
    )
