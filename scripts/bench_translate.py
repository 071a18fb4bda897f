"""Benchmark `nmt translate` against the machine's own limit and against CTranslate2, side by side.

    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR --export          # nmt + CTranslate2
    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR --precision fp32,bf16 --export
    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR --ct2 EXPORT_DIR  # an `nmt export`
    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR --ct2 EXPORT_DIR --rounds 3
    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR --ct2 INT8_DIR --ct2-also FLOAT32_DIR
    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR --ct2 EXPORT_DIR --stop early
    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR --ct2 EXPORT_DIR --test SRC_FILE REF_FILE
    .venv/bin/python scripts/bench_translate.py --quick                        # 200 sentences, 1 run
    .venv/bin/python scripts/bench_translate.py -m MODEL_DIR --json            # one JSON object

Every configuration (greedy and beam 5; each --precision; CTranslate2 when asked) translates the
first --sentences lines of the test set (--test SOURCE REFERENCE; default Multi30k's
test_2016_flickr) in a fresh child process with --threads threads, after a warm-up, --repeats times. Both engines decode --workers batches at once, the threads split between
them (default 0: as `nmt translate`, one per thread up to 4; CTranslate2's inter_threads); --workers 1
is one batch at a time on all threads. Per configuration it prints:
- sent/s, tok/s: sentences and target tokens (eos included) per second of the median run;
- median s: the median decoding time, model loading excluded; RSS MB: the child's peak RSS;
- GFLOP/s: an analytic estimate of the model's GEMM-like work (`decode_flops`) per second, and
  %GEMM: that rate over a plain 4096x1024x1024 matrix product of the same dtype timed in the same
  run with the same threads (scripts/benchlib.py), a share that means the same on every machine
  (n/a for seq2seq models, whose cost the formula does not cover, and for bf16/fp16 on a CPU that
  only emulates them: such a GEMM takes minutes and the ratio would mean nothing, and for an
  int8 export: no int8 GEMM is timed); CTranslate2 rows are named by the export's own type
  (ct2-float32, ct2-int8, ...), the type it decodes in;
- vs ct2: nmt's sent/s over CTranslate2's in the same mode (same sentences, threads; the --ct2
  export, whatever --ct2-also adds);
  with --rounds N every configuration runs once per round, round after round (mode by mode, each
  mode's nmt runs beside its CTranslate2 run, CTranslate2 last in even rounds, first in odd ones),
  and vs ct2 is the median of the N per-round ratios (each measured within one stretch of
  machine time; the other columns pool every round's runs);
- BLEU: sacreBLEU against the reference (lowercased for a model preprocessed with --lowercase),
  only when all 1,000 sentences are translated.
Then (not with --quick) the whole `nmt translate` command on the same lines (start-up, model load
and file I/O included) for greedy and beam 5 and its overhead over its own median decoding time, one
sentence end to end (`echo ... | nmt translate`), and the whole beam-5 command on the export.

Without -m, a randomly initialised transformer-small (joint SentencePiece 8k learned on Multi30k
train) is built under --work. It never predicts eos, so its outputs run to the maximum length; the
benchmark then sets the maximum to the source length (--max-len-a 1 --max-len-b 0), about what a
trained model writes. Prefer a trained model: beam search also stops earlier with one.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from benchlib import gemm_gflops, machine_line, multi30k  # noqa: E402

from nmt.dirs import ModelDir  # noqa: E402

MODES: dict[str, dict[str, Any]] = {"greedy": {"greedy": True}, "beam5": {"beam_size": 5}}
PRECISIONS = ("fp32", "bf16", "fp16")
ONE_SENTENCE = "A man is walking.\n"


def corpus_file(split: str, lang: str) -> Path:
    """`split`.`lang` of the fetched Multi30k (benchlib.multi30k)."""
    return multi30k() / f"{split}.{lang}"


def test_file(args: argparse.Namespace, lang: str) -> Path:
    """The source (`lang` == --src) or reference of the test set: --test's files, or else
    Multi30k's test_2016_flickr in `lang`."""
    if args.test:
        return Path(args.test[0] if lang == args.src else args.test[1])
    return corpus_file("test_2016_flickr", lang)


def test_name(args: argparse.Namespace) -> str:
    """The test source's name for the report."""
    return str(args.test[0]) if args.test else f"test_2016_flickr.{args.src}"


def build_random_model(work: Path, src: str, tgt: str) -> Path:
    """A random-init transformer-small model dir with a joint 8k SentencePiece on Multi30k train."""
    import torch

    from nmt.config import load_config
    from nmt.data.vocab import Tokenizer, VocabInfo, train_spm
    from nmt.dirs.model import ModelDir
    from nmt.dirs.weights import save_weights
    from nmt.models import build
    from nmt.textio import read_lines

    model_dir = work / "random-transformer-small"
    if (model_dir / "checkpoints" / "best.safetensors").exists():
        return model_dir
    text = [x for lang in (src, tgt) for x in read_lines(corpus_file("train", lang))]
    spm = train_spm(text, work / "spm", vocab_size=8000)
    tok = Tokenizer.load(spm)
    vocab = VocabInfo(tok.vocab_size, tok.vocab_size, joint=True)
    cfg = load_config(preset="transformer-small")
    torch.manual_seed(1)
    model = build(cfg.model, vocab)
    ModelDir.at(model_dir).write_meta(cfg, (src, tgt), (spm, spm), vocab)
    save_weights(model, model_dir / "checkpoints" / "best.safetensors")
    return model_dir


# ---- the FLOP estimate -------------------------------------------------------------------------


def decode_flops(cfg: Any, vocab: int, src_tokens: int, tgt_tokens: int, beam: int) -> float:
    """FLOPs to translate one sentence with a Transformer: an estimate counting GEMM-like work only.

    cfg: a TransformerConfig (d_model, ff_dim, encoder_layers, decoder_layers); vocab: target
    vocabulary size; src_tokens S and tgt_tokens T include eos. Multiply-adds (MACs), times 2:
    - encoder, per source token and layer: q/k/v/o projections 4d^2, feed-forward 2*d*ff,
      attention scores and context 2*S*d; plus, per decoder layer, the cross-attention k/v of
      the memory, computed once: 2d^2;
    - decoder, per row and step t = 1..T, per layer: self-attention projections 4d^2,
      cross-attention q/o 2d^2, feed-forward 2*d*ff, attention over the cache and the memory
      2*(t + S)*d; plus the output projection d*V per row and step.
    Rows: `beam` rows for each of the T steps of the final hypothesis (an estimate: beams that end
    earlier or later, rows kept for finished sentences, softmax, layer norms and the search's own
    work are not counted).
    """
    d, ff, s, t = cfg.d_model, cfg.ff_dim, src_tokens, tgt_tokens
    encoder = s * cfg.encoder_layers * (4 * d * d + 2 * d * ff + 2 * s * d)
    memory_kv = s * cfg.decoder_layers * 2 * d * d
    attended = t * (t + 1) // 2 + t * s  # sum over steps of (t + S)
    layer = t * (6 * d * d + 2 * d * ff) + 2 * attended * d
    decoder = beam * (cfg.decoder_layers * layer + t * d * vocab)
    return 2.0 * (encoder + memory_kv + decoder)


def model_flops(model: Path, lengths: list[list[int]], beam: int) -> float | None:
    """Summed `decode_flops` over the translated sentences; None for non-Transformer models."""
    from nmt.dirs.model import ModelDir

    cfg, vocab = ModelDir(model).config, ModelDir(model).vocab
    if cfg.model.type != "transformer":
        return None
    return sum(decode_flops(cfg.model, vocab.tgt_size, s, t, beam) for s, t in lengths)


# ---- the child process: one timed configuration -------------------------------------------------


def load_engine(args: argparse.Namespace) -> Any:
    """The nmt Translator (in --precision when supported) or the CTranslate2 export's translator."""
    if args.engine == "ct2":
        from nmt.decode.ct2 import CT2Translator
        from nmt.dirs import ExportDir

        return CT2Translator.from_dir(
            ExportDir(args.model),
            device=args.device,
            threads=args.threads,
            **workers_kwarg(args, "ct2"),
        )
    from nmt.decode.translator import Translator

    extra = {"precision": args.precision} if supports_precision() else {}
    extra.update(workers_kwarg(args, "nmt"))
    return Translator.from_dir(ModelDir(args.model), device=args.device, **extra)


def workers_kwarg(args: argparse.Namespace, engine: str) -> dict:
    """{"workers": N} where this checkout's engine takes it (decoding workers are new), else {}."""
    if engine == "ct2":
        from nmt.decode.ct2 import CT2Translator as Engine
    else:
        from nmt.decode.translator import Translator as Engine
    takes = "workers" in inspect.signature(Engine.from_dir).parameters
    return {"workers": args.workers} if takes else {}


def child(args: argparse.Namespace) -> None:
    """One timed configuration in this process (fresh peak RSS); prints a JSON line."""
    from nmt.runtime import peak_rss_mb, retain_freed_memory

    retain_freed_memory()  # as every `nmt` command does (nmt.cli.app), for both engines
    import torch

    torch.set_num_threads(args.threads)
    from nmt.textio import read_lines

    lines = list(read_lines(args.input))[: args.sentences]
    tr = load_engine(args)
    # scores=False: what `nmt translate` asks for text output (greedy then skips log-softmax);
    # both engines take it, so CTranslate2 skips its scores too.
    kwargs = dict(MODES[args.child], batch_tokens=args.batch_tokens, scores=False)
    kwargs.update(max_len_a=args.max_len_a, max_len_b=args.max_len_b)
    if args.stop and "beam_size" in kwargs:
        kwargs["stop"] = args.stop  # CTranslate2 checks it and keeps its own rule
    tr.translate(lines[:16], **kwargs)  # warm-up (allocator, kernels)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = tr.translate(lines, **kwargs)
        times.append(time.perf_counter() - t0)
    # worker processes (nmt.decode.workers) hold their own buffers: what they added counts too
    rss_mb = (peak_rss_mb() or 0) + getattr(tr, "worker_peak_mb", lambda: 0)()
    Path(args.hyp_out).write_text("".join(t.text + "\n" for t in out), encoding="utf-8")
    lengths = [[len(t.source_tokens), len(t.hypotheses[0].tokens) + 1] for t in out]
    gemm = gemm_gflops(args.precision, args.device) if args.gemm and native(args) else None
    print(json.dumps({"seconds": times, "lengths": lengths, "rss_mb": rss_mb, "gemm": gemm}))


def native(args: argparse.Namespace) -> bool:
    """Whether a GEMM in --precision is worth timing: emulated bf16/fp16 on a CPU takes minutes."""
    if args.precision == "fp32" or not args.device.startswith("cpu"):
        return True
    flags = machine_line(args.threads).split("; ")[1]
    return args.precision == "bf16" and ("avx512_bf16" in flags or "amx_bf16" in flags)


def supports_precision() -> bool:
    """Whether Translator.from_dir takes `precision=` (bf16 decoding is being added meanwhile)."""
    from nmt.decode.translator import Translator

    return "precision" in inspect.signature(Translator.from_dir).parameters


def run_child(
    engine: str,
    mode: str,
    precision: str,
    model: Path,
    args: argparse.Namespace,
    gemm: bool,
    label: str | None = None,
) -> dict:
    """Run one configuration in a fresh process and return its JSON line (its translations in
    hyp_path(engine, `label`: the row's precision or export type, mode))."""
    cmd = [
        sys.executable, __file__, "--child", mode, "--engine", engine, "--precision", precision,
        "-m", str(model), "--input", str(test_file(args, args.src)), "--threads", str(args.threads),
        "--repeats", str(args.repeats), "--sentences", str(args.sentences),
        "--batch-tokens", str(args.batch_tokens), "--device", args.device,
        "--workers", str(args.workers), "--hyp-out", str(hyp_path(args, engine, label or precision, mode)), *length_args(args),
        *(["--gemm"] if gemm else []), *(["--stop", args.stop] if args.stop else []),
    ]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=child_env(args))
    return json.loads(out.stdout.strip().splitlines()[-1])


def hyp_path(args: argparse.Namespace, engine: str, precision: str, mode: str) -> Path:
    """Where a configuration's translations go, for BLEU."""
    return Path(args.work) / f"hyp.{engine}-{precision}-{mode}.{args.tgt}"


def length_args(args: argparse.Namespace) -> list[str]:
    """--max-len-a/-b options when set (else the model config decides)."""
    out = []
    for opt, value in (("--max-len-a", args.max_len_a), ("--max-len-b", args.max_len_b)):
        out += [opt, str(value)] if value is not None else []
    return out


def child_env(args: argparse.Namespace) -> dict:
    """Children see the same thread count and this checkout's nmt."""
    return {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}


# ---- whole commands -----------------------------------------------------------------------------


def time_cli(model: Path, args: argparse.Namespace, extra: list[str], stdin: str = "") -> float:
    """Wall time of the whole `nmt translate` command, start-up included (stdin when given)."""
    cmd = [sys.executable, "-m", "nmt", "translate", "-m", str(model), "--quiet"]
    if not stdin:
        cmd += [str(cli_input(args)), "-o", str(Path(args.work) / "cli.hyp")]
    cmd += ["--device", args.device, *length_args(args), *extra]
    cmd += ["--workers", str(args.workers)] if args.workers else []
    return wall_s(cmd, args, input=stdin, text=True, stdout=subprocess.DEVNULL)


def wall_s(cmd: list[str], args: argparse.Namespace, **run_kwargs: Any) -> float:
    """Wall time of one child process, start-up included, in the children's environment."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=child_env(args), cwd=ROOT, **run_kwargs)
    return time.perf_counter() - t0


def cli_input(args: argparse.Namespace) -> Path:
    """The --sentences lines the children decode, as a file, so command and decoding compare."""
    from nmt.textio import read_lines

    path = Path(args.work) / f"input.{args.src}"
    lines = list(read_lines(test_file(args, args.src)))[: args.sentences]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def cli_has_precision(args: argparse.Namespace) -> bool:
    """Whether `nmt translate` takes --precision (else it runs the model's own precision)."""
    cmd = [sys.executable, "-m", "nmt", "translate", "--help"]
    env = {**child_env(args), "COLUMNS": "200"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    return "--precision" in out.stdout


def import_torch_s(args: argparse.Namespace) -> float:
    """Wall time of a fresh interpreter that only imports torch: the part of any command's
    start-up that nmt cannot shorten (median of --repeats)."""
    cmd = [sys.executable, "-c", "import torch"]
    return statistics.median(wall_s(cmd, args) for _ in range(args.repeats))


def cli_times(model: Path, args: argparse.Namespace, results: dict) -> dict:
    """Whole-command seconds per precision and mode (median of --repeats), the overhead over
    decoding, the interpreter + `import torch` share of it, and one sentence end to end."""
    out: dict[str, Any] = {}
    flag = cli_has_precision(args)
    for prec in args.precisions if flag else ["fp32"]:
        for mode, opt in (("beam5", ["--beam-size", "5"]), ("greedy", ["--greedy"])):
            extra = opt + (["--precision", prec] if flag else [])
            cli = statistics.median(time_cli(model, args, extra) for _ in range(args.repeats))
            decode = results["runs"][f"nmt-{prec}-{mode}"]["median_s"]
            out[f"{prec}-{mode}"] = {"cli_s": round(cli, 2), "overhead_s": round(cli - decode, 2)}
    out["cli_one_sentence_s"] = round(time_cli(model, args, [], stdin=ONE_SENTENCE), 2)
    out["import_torch_s"] = round(import_torch_s(args), 2)
    return out


# ---- CTranslate2 --------------------------------------------------------------------------------


def ct2_dir(model: Path, args: argparse.Namespace) -> Path | None:
    """The export to compare with: --ct2, or --export's WORK/ct2-float32 (made or reused)."""
    if not (args.ct2 or args.export):
        return None
    if importlib.util.find_spec("ctranslate2") is None:
        print("note: ctranslate2 is not installed; CTranslate2 skipped", file=sys.stderr)
        return None
    if args.ct2:
        return Path(args.ct2)
    from nmt.dirs.export import is_export, read_export_manifest
    from nmt.dirs.model import ModelDir
    from nmt.dirs.weights import weights_step
    from nmt.export.ctranslate2 import export_ctranslate2

    out = Path(args.work) / "ct2-float32"
    step = weights_step(ModelDir(model).checkpoint())
    if is_export(out):
        manifest = read_export_manifest(out)
        if manifest["source_model_dir"] == str(model.resolve()) and manifest["step"] == step:
            return out
    return export_ctranslate2(ModelDir(model), out, quantization="float32", force=True, quiet=True)


# ---- reporting ----------------------------------------------------------------------------------


def summarise(r: dict, flops: float | None, gemm: float | None, bleu: float | None) -> dict:
    """One configuration's figures from its child's JSON line."""
    sec = statistics.median(r["seconds"])
    n, tokens = len(r["lengths"]), sum(t for _, t in r["lengths"])
    gflops = flops / sec / 1e9 if flops is not None else None
    return {
        "sentences_per_s": round(n / sec, 1),
        "tokens_per_s": round(tokens / sec, 1),
        "median_s": round(sec, 3),
        "runs_s": [round(x, 3) for x in r["seconds"]],
        "avg_target_tokens": round(tokens / n, 1),
        "peak_rss_mb": round(r["rss_mb"], 1),
        "model_gflops": round(gflops, 1) if gflops is not None else None,
        "gemm_ratio": round(gflops / gemm, 3) if gflops is not None and gemm else None,
        "bleu": bleu,
    }


def lowercased(model: Path) -> bool:
    """Whether MODEL_DIR was preprocessed with --lowercase: it writes lowercase, so its BLEU is
    case-insensitive, as `nmt evaluate` scores it."""
    from nmt.dirs.model import ModelDir

    return ModelDir(model).meta.get("lowercase", False) is True


def bleu_of(path: Path, args: argparse.Namespace, lowercase: bool = False) -> float | None:
    """sacreBLEU of a configuration's output on the test set; None unless all lines ran."""
    from nmt.eval.scoring import score
    from nmt.textio import read_lines

    refs = list(read_lines(test_file(args, args.tgt)))
    if args.sentences < len(refs):
        return None
    hyps = path.read_text(encoding="utf-8").splitlines()
    return round(score(hyps, [refs], lowercase=lowercase)[0].score, 2)


def fmt(value: Any, spec: str = "") -> str:
    """A table cell; n/a for figures that do not apply."""
    return "n/a" if value is None else format(value, spec)


def print_table(results: dict) -> None:
    """The human-readable report."""
    print(f"{'config':<20}{'sent/s':>9}{'tok/s':>9}{'median s':>10}{'RSS MB':>8}"
          f"{'GFLOP/s':>9}{'%GEMM':>7}{'vs ct2':>8}{'BLEU':>7}")  # fmt: skip
    for name, r in results["runs"].items():
        pct = None if r["gemm_ratio"] is None else 100 * r["gemm_ratio"]
        print(
            f"{name:<20}{r['sentences_per_s']:>9}{r['tokens_per_s']:>9}{r['median_s']:>10}"
            f"{r['peak_rss_mb']:>8.0f}{fmt(r['model_gflops'], '.1f'):>9}{fmt(pct, '.0f'):>7}"
            f"{fmt(r.get('vs_ct2'), '.2f'):>8}{fmt(r['bleu'], '.2f'):>7}"
        )
    for name, r in results["runs"].items():
        if len(r.get("vs_ct2_rounds", [])) > 1:
            print(f"{name} vs ct2 by round: {', '.join(map(str, r['vs_ct2_rounds']))}")
    rates = results["gemm_gflops"].items()
    gemm = ", ".join(f"{p} {fmt(g, ',.0f')}" for p, g in rates)
    note = " (n/a: emulated on this CPU, not timed)" if None in dict(rates).values() else ""
    print(f"GEMM 4096x1024x1024 GFLOP/s, same run and threads: {gemm}{note}")
    for name, c in results.get("cli", {}).items():
        if isinstance(c, dict):
            print(f"whole `nmt translate` {name}: {c['cli_s']} s, overhead over decoding "
                  f"{c['overhead_s']} s (target <= 1.5 s)")  # fmt: skip
    if "cli" in results:
        print(f"one sentence end to end: {results['cli']['cli_one_sentence_s']} s")
        print(f"python -c 'import torch' alone: {results['cli']['import_torch_s']} s")
    if "ct2_cli_beam5_s" in results:
        print(f"whole `nmt translate -m EXPORT_DIR` beam 5: {results['ct2_cli_beam5_s']} s")


# ---- main ---------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    """Command-line options (the child's hidden ones included)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-m", "--model", help="MODEL_DIR (default: a random-init transformer-small)")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    test_help = "the test set's source and reference files (default: Multi30k's test_2016_flickr)"
    p.add_argument("--test", nargs=2, metavar=("SOURCE", "REFERENCE"), help=test_help)
    p.add_argument("--work", default=str(ROOT / "work" / "bench_translate"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, help="timed runs per configuration (default 3)")
    rounds_help = "every configuration once a round; vs ct2: median of the per-round ratios"
    p.add_argument("--rounds", type=int, default=1, help=rounds_help)
    p.add_argument("--sentences", type=int, help="first lines of the test set (default 1000)")
    p.add_argument("--batch-tokens", type=int, default=4096)
    workers_help = "batches decoded at once by both engines (CTranslate2: inter_threads); 0: auto"
    p.add_argument("--workers", type=int, default=0, help=workers_help)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32", help="comma-separated list: fp32,bf16,fp16")
    p.add_argument("--ct2", help="an `nmt export` directory to compare with (CTranslate2)")
    p.add_argument("--export", action="store_true", help="export the model to WORK/ct2-float32")
    also_help = "another export of the same model to time beside (repeatable; no ratio)"
    p.add_argument("--ct2-also", action="append", metavar="EXPORT_DIR", help=also_help)
    stop_help = "nmt's beam stopping rule, exact or early (default: the model's decoding.stop)"
    p.add_argument("--stop", choices=["exact", "early"], help=stop_help)
    p.add_argument("--max-len-a", type=float, help="default: model config (random model: 1)")
    p.add_argument("--max-len-b", type=float, help="default: model config (random model: 0)")
    p.add_argument("--quick", action="store_true", help="200 sentences, 1 run, no command timing")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    p.add_argument("--engine", choices=["nmt", "ct2"], default="nmt", help=argparse.SUPPRESS)
    p.add_argument("--gemm", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--hyp-out", help=argparse.SUPPRESS)
    return p.parse_args()


def precisions(args: argparse.Namespace) -> list[str]:
    """The --precision list, less those this checkout's Translator cannot run (with a note)."""
    wanted = [p.strip() for p in args.precision.split(",") if p.strip()]
    if bad := [p for p in wanted if p not in PRECISIONS]:
        sys.exit(f"--precision: unknown {', '.join(bad)} (choose from {', '.join(PRECISIONS)})")
    if not supports_precision() and any(p != "fp32" for p in wanted):
        print("note: Translator.from_dir takes no precision= yet; only fp32 is run",
              file=sys.stderr)  # fmt: skip
        wanted = ["fp32"]
    return wanted


def run_round(
    model: Path,
    exports: dict[str, Path],
    args: argparse.Namespace,
    gemm: dict[str, float | None],
    index: int = 0,
) -> dict[str, dict]:
    """Every configuration once, mode by mode, so each mode's nmt runs sit beside its
    CTranslate2 runs (the machine's speed drifts over minutes); CTranslate2 last in even rounds
    and first in odd ones, so a steady drift does not favour either engine. Each child's JSON
    line by name: ENGINE-PRECISION-MODE, CTranslate2's precision being its export's type (the
    keys of `exports`)."""
    out: dict[str, dict] = {}
    configs = [("nmt", p) for p in args.precisions] + [("ct2", t) for t in exports]
    if index % 2:
        configs.reverse()
    for mode in MODES:
        for engine, prec in configs:
            path = exports[prec] if engine == "ct2" else model
            ref = gemm_type(engine, prec)  # the GEMM its rate is measured against, if any
            timed = ref is not None and ref not in gemm
            r = run_child(engine, mode, ref or "fp32", path, args, gemm=timed, label=prec)
            if ref is not None and timed:
                gemm[ref] = r["gemm"]
            out[f"{engine}-{prec}-{mode}"] = r
    return out


def ct2_exports(first: Path | None, more: list[str] | None) -> dict[str, Path]:
    """The exports to time by type, the one "vs ct2" compares with first; --ct2-also adds
    others (another quantization of the same model) timed beside it."""
    if first is None:
        return {}
    exports = {ct2_type(first): first}
    for path in map(Path, more or []):
        if (kind := ct2_type(path)) in exports:
            sys.exit(f"--ct2-also {path}: a {kind} export is already timed ({exports[kind]})")
        exports[kind] = path
    return exports


def ct2_type(export: Path) -> str:
    """The export's computation type (its `nmt export --quantization`): "float32", "int8", ..."""
    from nmt.dirs.export import read_export_manifest

    return str(read_export_manifest(export).get("quantization") or "float32")


def gemm_type(engine: str, precision: str) -> str | None:
    """The GEMM dtype a configuration's rate is a share of: its own precision for nmt, the
    matching float type for CTranslate2, none for integer types (no int8 GEMM is timed)."""
    if engine == "nmt":
        return precision
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(precision)


def ct2_ratios(rounds: list[dict[str, dict]], name: str, peer: str | None = None) -> list[float]:
    """nmt's sent/s over CTranslate2's (export type `peer`; None: the first export) in the same
    mode, one ratio per round (same stretch of machine time, so a slow minute slows both
    sides)."""
    mode = name.rsplit("-", 1)[1]
    peers = [
        n
        for n in rounds[0]
        if n.startswith("ct2-") and n.endswith(f"-{mode}") and peer in (None, n.split("-")[1])
    ]
    if name.startswith("ct2") or not peers:
        return []
    # same sentences on both sides, so the ratio of sent/s is the inverse ratio of median times
    return [
        statistics.median(r[peers[0]]["seconds"]) / statistics.median(r[name]["seconds"])
        for r in rounds
    ]


def run_all(model: Path, exports: dict[str, Path], args: argparse.Namespace) -> dict:
    """Every configuration's figures over --rounds rounds (all repeats pooled), and each nmt
    configuration's ratio to CTranslate2 (the first export): the median of the per-round
    ratios."""
    gemm: dict[str, float | None] = {}
    rounds = [run_round(model, exports, args, gemm, i) for i in range(args.rounds)]
    first = next(iter(exports), None)
    runs: dict[str, dict] = {}
    for name in rounds[0]:
        engine, prec, mode = name.split("-")
        ref = gemm_type(engine, prec)
        pooled = dict(rounds[-1][name], seconds=[s for r in rounds for s in r[name]["seconds"]])
        flops = model_flops(model, pooled["lengths"], MODES[mode].get("beam_size", 1))
        bleu = bleu_of(hyp_path(args, engine, prec, mode), args, lowercased(model))
        runs[name] = summarise(pooled, flops, gemm.get(ref) if ref else None, bleu)
        if ratios := ct2_ratios(rounds, name, first):
            runs[name]["vs_ct2"] = round(statistics.median(ratios), 2)
            runs[name]["vs_ct2_rounds"] = [round(x, 2) for x in ratios]
    rates = {p: None if g is None else round(g, 1) for p, g in gemm.items()}
    return {"runs": runs, "gemm_gflops": rates, "rounds": args.rounds}


def main() -> None:
    """Set up the model (and export), run every configuration, time the commands, report."""
    args = parse_args()
    if args.child:
        return child(args)
    args.sentences = args.sentences or (200 if args.quick else 1000)
    args.repeats = args.repeats or (1 if args.quick else 3)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    args.precisions = precisions(args)
    if args.rounds < 1:
        sys.exit(f"--rounds must be at least 1, got {args.rounds}")
    if args.model:
        model = Path(args.model)
    else:
        model = build_random_model(Path(args.work), args.src, args.tgt)
        args.max_len_a = 1.0 if args.max_len_a is None else args.max_len_a
        args.max_len_b = 0.0 if args.max_len_b is None else args.max_len_b
    export = ct2_dir(model, args)
    exports = ct2_exports(export, args.ct2_also)
    results: dict[str, Any] = {"machine": machine_line(args.threads), "model": str(model)}
    results.update(threads=args.threads, sentences=args.sentences, max_len=length_args(args))
    results["ct2_export"] = str(export) if export else None
    results["ct2_exports"] = {t: str(p) for t, p in exports.items()}
    results.update(run_all(model, exports, args))
    if not args.quick:
        results["cli"] = cli_times(model, args, results)
        if export:
            results["ct2_cli_beam5_s"] = round(time_cli(export, args, ["--beam-size", "5"]), 2)
    if args.json:
        print(json.dumps(results))
        return
    print(results["machine"])
    print(f"model {model}, {args.sentences} sentences of {test_name(args)}, "
          f"median of {args.repeats * args.rounds} ({args.rounds} rounds of {args.repeats}); "
          f"export {export or 'none'}")  # fmt: skip
    print_table(results)


if __name__ == "__main__":
    main()
