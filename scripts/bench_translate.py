"""Benchmark `nmt translate`: sentences/s, target tokens/s and peak RSS for greedy and beam 5 on
test_2016_flickr (1,000 sentences), plus the wall time of the whole CLI command (start-up included).

    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR            # a trained transformer-small
    .venv/bin/python scripts/bench_translate.py --quick                 # 200 sentences, one run

Without -m, a randomly initialised transformer-small (joint SentencePiece 8k learned on Multi30k
train) is built under --work. It never predicts eos, so its outputs run to the maximum length; the
benchmark then sets the maximum to the source length (--max-len-a 1 --max-len-b 0), about what a
trained model writes. Prefer a trained model: beam search also stops earlier with one. Each measurement runs in a fresh child
process (clean peak RSS). Reference, 2 cores (issue 5): CTranslate2 4.8 float32, batch 64: beam 5
104 sentences/s, greedy 288; OpenNMT-py whole beam-5 command 15.6 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS_CANDIDATES = [ROOT / "corpora" / "multi30k", ROOT.parent / "shared" / "corpora" / "multi30k"]
MODES = {"greedy": {"greedy": True}, "beam5": {"beam_size": 5}}


def corpus_dir() -> Path:
    """The Multi30k folder: ./corpora/multi30k (make fetch) or the shared mirror."""
    for d in CORPUS_CANDIDATES:
        if (d / "test_2016_flickr.en.gz").exists() or (d / "test_2016_flickr.en").exists():
            return d
    sys.exit("Multi30k not found: run `make fetch` first")


def test_file(src: str) -> Path:
    d = corpus_dir()
    for name in (f"test_2016_flickr.{src}", f"test_2016_flickr.{src}.gz"):
        if (d / name).exists():
            return d / name
    sys.exit(f"test_2016_flickr.{src} not found in {d}")


def build_random_model(work: Path, src: str, tgt: str) -> Path:
    """A random-init transformer-small model dir with a joint 8k SentencePiece on Multi30k train."""
    import torch

    from nmt.config import load_config
    from nmt.modeldir import save_weights, write_meta
    from nmt.models import build
    from nmt.models.base import VocabInfo
    from nmt.textio import read_lines
    from nmt.vocab import Tokenizer, train_spm

    model_dir = work / "random-transformer-small"
    if (model_dir / "checkpoints" / "best.safetensors").exists():
        return model_dir
    d = corpus_dir()
    text = [x for lang in (src, tgt) for x in read_lines(d / f"train.{lang}.gz")]
    spm = train_spm(text, work / "spm", vocab_size=8000)
    tok = Tokenizer.load(spm)
    vocab = VocabInfo(tok.vocab_size, tok.vocab_size, joint=True)
    cfg = load_config(preset="transformer-small")
    torch.manual_seed(1)
    model = build(cfg.model, vocab)
    write_meta(model_dir, cfg, src, tgt, spm, spm, vocab)
    save_weights(model, model_dir / "checkpoints" / "best.safetensors")
    return model_dir


def child(args: argparse.Namespace) -> None:
    """One timed run in this process; prints a JSON line."""
    import torch

    torch.set_num_threads(args.threads)
    from nmt.textio import read_lines
    from nmt.translate import Translator

    lines = list(read_lines(args.input))[: args.sentences]
    tr = Translator.from_dir(args.model, device=args.device)
    kwargs = dict(MODES[args.child], batch_tokens=args.batch_tokens)
    kwargs.update(max_len_a=args.max_len_a, max_len_b=args.max_len_b)
    tr.translate(lines[:16], **kwargs)  # warm-up (allocator, kernels)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = tr.translate(lines, **kwargs)
        times.append(time.perf_counter() - t0)
    tokens = sum(len(t.hypotheses[0].tokens) + 1 for t in out)  # eos included
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps({"seconds": times, "sentences": len(lines), "tokens": tokens, "rss_mb": rss_mb})
    )


def run_child(mode: str, model: Path, inp: Path, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable, __file__, "--child", mode, "-m", str(model), "--input", str(inp),
        "--threads", str(args.threads), "--repeats", str(args.repeats),
        "--sentences", str(args.sentences), "--batch-tokens", str(args.batch_tokens),
        "--device", args.device, *length_args(args),
    ]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=child_env(args))
    return json.loads(out.stdout.strip().splitlines()[-1])


def length_args(args: argparse.Namespace) -> list[str]:
    """--max-len-a/-b options when set (else the model config decides)."""
    out = []
    for opt, value in (("--max-len-a", args.max_len_a), ("--max-len-b", args.max_len_b)):
        out += [opt, str(value)] if value is not None else []
    return out


def child_env(args: argparse.Namespace) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}


def time_cli(model: Path, inp: Path, args: argparse.Namespace, extra: list[str]) -> float:
    """Wall time of the whole `nmt translate` command, start-up included."""
    out = Path(args.work) / "cli.hyp"
    cmd = [sys.executable, "-m", "nmt", "translate", "-m", str(model), str(inp), "-o", str(out)]
    cmd += ["--quiet", "--device", args.device, *length_args(args), *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=child_env(args), cwd=ROOT)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-m", "--model", help="MODEL_DIR (default: a random-init transformer-small)")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--work", default=str(ROOT / "work" / "bench_translate"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-len-a", type=float, help="default: model config (random model: 1)")
    p.add_argument("--max-len-b", type=float, help="default: model config (random model: 0)")
    p.add_argument("--quick", action="store_true", help="200 sentences, one run, no CLI timing")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    if args.quick:
        args.sentences, args.repeats = 200, 1
    Path(args.work).mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    inp = test_file(args.src)
    if args.model:
        model = Path(args.model)
    else:
        model = build_random_model(Path(args.work), args.src, args.tgt)
        args.max_len_a = 1.0 if args.max_len_a is None else args.max_len_a
        args.max_len_b = 0.0 if args.max_len_b is None else args.max_len_b

    results = {"model": str(model), "threads": args.threads, "sentences": args.sentences}
    results["max_len"] = length_args(args)
    for mode in MODES:
        r = run_child(mode, model, inp, args)
        sec = statistics.median(r["seconds"])
        results[mode] = {
            "sentences_per_s": round(r["sentences"] / sec, 1),
            "tokens_per_s": round(r["tokens"] / sec, 1),
            "median_s": round(sec, 3),
            "runs_s": [round(x, 3) for x in r["seconds"]],
            "avg_target_tokens": round(r["tokens"] / r["sentences"], 1),
            "peak_rss_mb": round(r["rss_mb"], 1),
        }
    if not args.quick:
        results["cli_beam5_s"] = round(time_cli(model, inp, args, ["--beam-size", "5"]), 2)
        results["cli_greedy_s"] = round(time_cli(model, inp, args, ["--greedy"]), 2)
    if args.json:
        print(json.dumps(results))
        return
    print(f"model {model}, {args.sentences} sentences of test_2016_flickr.{args.src}, "
          f"{args.threads} threads")  # fmt: skip
    print(f"{'mode':<8}{'sent/s':>10}{'tok/s':>10}{'median s':>10}{'tok/sent':>10}{'RSS MB':>9}")
    for mode in MODES:
        r = results[mode]
        print(
            f"{mode:<8}{r['sentences_per_s']:>10}{r['tokens_per_s']:>10}{r['median_s']:>10}"
            f"{r['avg_target_tokens']:>10}{r['peak_rss_mb']:>9}"
        )
    print("reference (CTranslate2 4.8, 2 cores): beam5 104 sent/s, greedy 288 sent/s")
    if not args.quick:
        print(f"whole `nmt translate` command, start-up included: beam 5 {results['cli_beam5_s']} s,"
              f" greedy {results['cli_greedy_s']} s (target < 15 s; OpenNMT-py beam 5: 15.6 s)")  # fmt: skip


if __name__ == "__main__":
    main()
