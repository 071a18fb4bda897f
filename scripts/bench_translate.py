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
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_translate_commands import cli_times, time_cli  # noqa: E402
from bench_translate_engines import (  # noqa: E402
    child,
    ct2_dir,
    ct2_exports,
    gemm_type,
    run_child,
    supports_precision,
)
from bench_translate_report import (  # noqa: E402
    bleu_of,
    ct2_ratios,
    lowercased,
    model_flops,
    print_table,
    summarise,
)
from bench_translate_setup import (  # noqa: E402
    MODES,
    build_random_model,
    hyp_path,
    length_args,
    test_name,
)
from benchlib import machine_line  # noqa: E402

PRECISIONS = ("fp32", "bf16", "fp16")


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
        note = "note: Translator.from_dir takes no precision= yet; only fp32 is run"
        print(note, file=sys.stderr)
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
    print(
        f"model {model}, {args.sentences} sentences of {test_name(args)}, "
        f"median of {args.repeats * args.rounds} ({args.rounds} rounds of {args.repeats}); "
        f"export {export or 'none'}"
    )
    print_table(results)


if __name__ == "__main__":
    main()
