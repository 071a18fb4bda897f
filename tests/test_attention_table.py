"""scripts/attention_table.py: the experiment's tables come from real `nmt score` JSON and the runs'
metrics.jsonl and checkpoint headers (parameters, updates, epochs, per-bucket BLEU, relative BLEU,
length ratios)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from nmt.cli.app import app

REPO = Path(__file__).resolve().parent.parent


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    return str(path)


def fake_run(model_dir: Path, steps: int, bleus: list[float], shape: tuple[int, int]) -> None:
    """A MODEL_DIR with what the table reads: metrics events and a best checkpoint."""
    (model_dir / "checkpoints").mkdir(parents=True)
    save_file({"w": torch.zeros(shape), "b": torch.zeros(shape[0])},
              str(model_dir / "checkpoints/best.safetensors"))  # fmt: skip
    events = [{"event": "valid", "step": 10 * i, "bleu": b} for i, b in enumerate(bleus)]
    events.append({"event": "end", "steps": steps, "epochs_completed": 2,
                   "tgt_tokens": 3_500_000, "tok_s": 2345.6})  # fmt: skip
    (model_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_tables_from_real_scores(tmp_path):
    src = ["a b c", "a b c d e f g h i j k l", "x y"]
    ref = [
        "the cat sat on the mat today",
        "one two three four five six seven",
        "dog runs in the park",
    ]
    hyp_a = ["the cat sat on the mat today", "one two three four", "dog runs in the park"]
    hyp_b = [
        "a cat sat on the mat today",
        "one two three four five six seven",
        "dog walks in the park",
    ]
    paths = [write(tmp_path / n, x) for n, x in
             [("src", src), ("ref", ref), ("a.hyp", hyp_a), ("b.hyp", hyp_b)]]  # fmt: skip
    run = CliRunner().invoke
    common = [paths[2], paths[3], "-r", paths[1], "-m", "bleu", "-m", "chrf", "-w", "2", "--json"]
    r = run(app, ["score", *common])
    assert r.exit_code == 0, r.output
    (tmp_path / "scores.json").write_text(r.stdout)
    r = run(app, ["score", "--by-length", paths[0], *common, "--label", "A", "--label", "B",
                  "--buckets", "0-10,10+"])  # fmt: skip
    assert r.exit_code == 0, r.output
    (tmp_path / "by_length.json").write_text(r.stdout)
    fake_run(tmp_path / "A", 1234, [1.5, 7.25, 6.0], (1000, 1500))
    fake_run(tmp_path / "B", 999, [], (10, 10))
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts/attention_table.py"), str(tmp_path),
         str(tmp_path / "A"), str(tmp_path / "B")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = {ln.split(" | ")[0].strip("| "): ln.strip("| ").split(" | ") for ln in out.splitlines()
            if ln.startswith("| A") or ln.startswith("| B")}  # fmt: skip
    tables = out.split("\n\n")
    run_a = next(ln for ln in tables[0].splitlines() if ln.startswith("| A "))
    cells = run_a.strip("| ").split(" | ")
    # parameters 1000*1500 + 1000; updates; tokens (epochs); tok/s; best valid BLEU
    assert cells[:6] == ["A", "1.5M", "1,234", "3.5M (2)", "2,346", "7.2"]
    run_b = next(ln for ln in tables[0].splitlines() if ln.startswith("| B "))
    assert run_b.strip("| ").split(" | ")[5] == "-"  # no validation ran
    assert rows and "0-10 (n=2, mean 2)" in out and "10+ (n=1, mean 12)" in out

    def block(title: str) -> str:
        return out.split(title + ":\n\n")[1].split("\n\n")[0]

    rel = block("BLEU as % of the system's BLEU on the shortest bucket")
    bleu = {(r["system"], r["bucket"]): r["score"] for r in json.loads(
        (tmp_path / "by_length.json").read_text()) if r["name"] == "BLEU"}  # fmt: skip
    for system in "AB":
        pct = 100 * bleu[system, "10+"] / bleu[system, "0-10"]
        assert f"| {system} | 100 | {pct:.0f} |" in rel
    assert bleu["A", "0-10"] == 100 and bleu["B", "10+"] == 100  # B: over 100% on long lines
    ratio = block("Output length / reference length (BLEU's ratio) by source length")
    assert "| A | 1.00 | 0.57 |" in ratio and "| B | 1.00 | 1.00 |" in ratio


def test_length_limit_table_counts_translations_cut_by_the_limit(tmp_path):
    """A translation as long as the limit (a=1, b=0: the source's subword count) was cut by it;
    a shorter one ended at eos. The share is per source-length bucket."""
    import sentencepiece as spm

    data = tmp_path / "data"
    data.mkdir()
    corpus = write(tmp_path / "spm.txt", ["abc def ghi jkl", "xyz uvw"] * 50)
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=str(data / "spm"), vocab_size=20,
                                   model_type="char", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                                   minloglevel=2)  # fmt: skip
    manifest = {"format": "nmt-data/1", "spm": {"src": "spm.model", "tgt": "spm.model"}}
    (data / "manifest.json").write_text(json.dumps(manifest))
    src = ["abc def", "ghi jkl xyz", "abc def ghi jkl xyz uvw abc def ghi jkl xyz uvw"]
    by_length = [{"system": s, "bucket": b, "name": m, "score": 1.0, "ratio": 1.0, "lines": 1,
                  "mean_length": 1.0} for s in "AB" for b in ("0-3", "3+")
                 for m in ("BLEU", "chrF2")]  # fmt: skip
    (tmp_path / "by_length.json").write_text(json.dumps(by_length))
    scores = [{"name": m, "score": 1.0, "ratio": 1.0} for _ in "AB" for m in ("BLEU", "chrF2")]
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    hyps = {"A": src, "B": ["abc", "ghi jkl xyz", "abc"]}  # A always at the limit; B once
    for name, hyp in hyps.items():
        fake_run(tmp_path / name, 10, [], (2, 2))
        write(tmp_path / name / "test.hyp", hyp)
        (tmp_path / name / "config.yaml").write_text(
            "decoding:\n  max_len_a: 1.0\n  max_len_b: 0\n"
        )
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts/attention_table.py"), str(tmp_path),
         str(tmp_path / "A"), str(tmp_path / "B"), "--source", write(tmp_path / "src", src),
         "--hyp", "test.hyp"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    limit = out.split("Translations that run to the length limit, % of the bucket's lines:\n\n")[1]
    assert "| system | 0-3 (n=1) | 3+ (n=2) |" in limit
    assert "| A | 100 | 100 |" in limit and "| B | 0 | 50 |" in limit
