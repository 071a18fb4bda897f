"""Training throughput benchmark: target tokens/s and peak RSS of `nmt train`'s update step.

Multi30k en->de, joint SentencePiece 8k, about 4,000 target tokens a batch; transformer-small and
seq2seq-bahdanau in fp32 and bf16. Each configuration runs in its own process (so peak RSS is
its own) through the trainer's real `train_step` (collation, forward, loss, backward, clipping,
Adam), after a few warm-up steps. Each timed batch runs twice: the first pass is its shape's
first use (in bf16 on CPU that costs more: oneDNN builds its matmul kernels per shape), the second
what the shape costs once its kernels are cached. tgt tok/s is the median of the second pass, the
first pass's median is printed beside it. Real training sees the second-pass speed only where
the kernel caches hold an epoch's shapes, which `nmt train` sizes them for on AMX CPUs only
(nmt/runtime.py; elsewhere both passes build their kernels and run at the same speed).

Every figure comes with the machine's own limit: each configuration's process also times a
4096x1024x1024 matrix product of its dtype (scripts/benchlib.py), counts the model's matmul FLOPs
on the timed batches (torch.utils.flop_counter: forward + backward), and prints the achieved
model GFLOP/s and its ratio to that GEMM rate, which means the same on every machine.

    python scripts/bench_train.py              # full: 20 timed steps per configuration
    python scripts/bench_train.py --quick      # 4 timed steps, for checking the script
    python scripts/bench_train.py --threads 2 --json results.json
    python scripts/bench_train.py --rounds 5 --steps 10   # more interleaved rounds: a tighter median
    python scripts/bench_train.py --epochs 2 --only transformer-small   # whole epochs, as trained

`--epochs N` times real training instead: N whole epochs of Multi30k in the trainer's batch order,
each batch once an epoch, so kernels are cached only if the caches hold an epoch's shapes. It
reports the last epoch's rate; the summary over rounds shows the first epoch's as "first use".

A CPU's speed can drift by 20% or more between minutes, which
is larger than the effects being measured. `--rounds N` runs every configuration once per round,
round after round (so each configuration sees the same stretches of machine time), then prints
each configuration's median over rounds and, per model, the bf16 / fp32 ratio of every round
and their median: compare those, not single runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from benchlib import gemm_gflops, machine_line, multi30k  # noqa: E402

CONFIGS = [
    ("transformer-small", "fp32"),
    ("transformer-small", "bf16"),
    ("transformer-multi30k", "fp32"),
    ("transformer-multi30k", "bf16"),
    ("seq2seq-bahdanau", "fp32"),
    ("seq2seq-bahdanau", "bf16"),
]


def data_dir(work: Path) -> Path:
    """Preprocess Multi30k en->de once (joint SentencePiece 8k), reused by later runs."""
    out = work / "data-en-de-8k"
    if (out / "manifest.json").exists():
        return out
    from nmt.data.preprocess import PreprocessConfig, preprocess

    c = multi30k()
    cfg = PreprocessConfig("en", "de", c / "train", valid=c / "val", vocab_size=8000)
    preprocess(cfg, out, quiet=True)
    return out


def run_one(
    preset: str, precision: str, data: Path, steps: int, warmup: int, max_tokens: int, epochs: int
):
    """Time `steps` updates (or `epochs` whole epochs) of one configuration in this process;
    print one JSON line."""
    import numpy as np
    import torch

    from nmt.config import load_config
    from nmt.data import batching
    from nmt.dirs import DataDir, ModelDir
    from nmt.runtime import peak_rss_mb
    from nmt.train import distributed
    from nmt.train.loop import Trainer

    cfg = load_config(
        preset=preset,
        overrides=[f"training.precision={precision}", f"training.max_tokens={max_tokens}"],
    )
    trainer = Trainer(
        cfg,
        DataDir(data),
        ModelDir.at("/nonexistent"),
        torch.device("cpu"),
        distributed.DistInfo(),
        False,
        True,
    )
    trainer.budget.start = time.monotonic()
    batches = batching.epoch_batches(
        trainer.src_len, trainer.tgt_len, max_tokens, cfg.training.seed, 1, trainer.keep
    )
    for i in range(warmup):
        trainer.train_step([batches[i % len(batches)]])
    timed = [[batches[(warmup + j) % len(batches)]] for j in range(steps)]
    tokens = [int((trainer.tgt_len[g[0]] + 1).sum()) for g in timed]
    if epochs:  # real training: every batch once an epoch; epoch 1 is every shape's first use
        rates = [epoch_rate(trainer, max_tokens, e) for e in range(1, epochs + 1)]
        first_rates, times = rates[:1], []
    else:
        first = [timed_step(trainer, g) for g in timed]  # each batch shape's first use
        times = [timed_step(trainer, g) for g in timed]  # the same shapes, their kernels cached
        rates = [n / t for n, t in zip(tokens, times, strict=True)]
        first_rates = [n / t for n, t in zip(tokens, first, strict=True)]
    rss_mb = peak_rss_mb() or 0
    flops = sum(step_flops(trainer, g) for g in timed)
    rate = rates[-1] if epochs else statistics.median(rates)
    model_gflops = flops / sum(tokens) * rate / 1e9  # FLOPs per token on the timed batches
    gemm = gemm_gflops(precision)
    print(
        json.dumps(
            {
                "preset": preset,
                "precision": precision,
                "threads": torch.get_num_threads(),
                "tgt_tokens_per_batch": round(float(np.mean(tokens))),
                "step_s_median": round(statistics.median(times), 3) if times else None,
                "tok_s_median": round(rate, 1),
                "tok_s_first_median": round(statistics.median(first_rates), 1),
                "tok_s_epochs": [round(r, 1) for r in rates] if epochs else None,
                "peak_rss_mb": round(rss_mb),
                "params": trainer.n_params,
                "mflop_per_tok": round(flops / sum(tokens) / 1e6, 1),
                "model_gflops": round(model_gflops, 1),
                "gemm_gflops": round(gemm, 1),
                "gemm_ratio": round(model_gflops / gemm, 3),
            }
        )
    )


def epoch_rate(trainer, max_tokens: int, epoch: int) -> float:
    """Target tokens/s over one whole epoch of real updates, in the trainer's batch order."""
    from nmt.data import batching

    batches = batching.epoch_batches(
        trainer.src_len, trainer.tgt_len, max_tokens, trainer.tc.seed, epoch, trainer.keep
    )
    tokens = sum(int((trainer.tgt_len[b] + 1).sum()) for b in batches)
    t0 = time.perf_counter()
    for b in batches:
        trainer.train_step([b])
    return tokens / (time.perf_counter() - t0)


def timed_step(trainer, group) -> float:
    """Seconds of one real update on `group`."""
    t0 = time.perf_counter()
    trainer.train_step(group)
    return time.perf_counter() - t0


def step_flops(trainer, group) -> int:
    """Matmul FLOPs of one update on `group` (forward + backward), as torch's counter sees them."""
    from torch.utils.flop_counter import FlopCounterMode

    from nmt.data import batching
    from nmt.train.loss import label_smoothed_nll

    train = trainer.data.train
    batch = batching.collate(train.src, train.tgt, group[0]).to(trainer.device)
    with FlopCounterMode(display=False) as counter, trainer.autocast():
        logits = trainer.model(batch.src, batch.src_lengths, batch.tgt_in)
        pad = trainer.model.vocab.pad_id
        loss, _, _ = label_smoothed_nll(logits, batch.tgt_out, trainer.tc.label_smoothing, pad)
        loss.backward()
    trainer.model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def run_config(args, preset: str, precision: str, data: Path, steps: int, warmup: int):
    """One configuration in its own process (its own peak RSS); its JSON result, None if it failed."""
    cmd = [sys.executable, __file__, "--one", preset, precision, "--data", str(data)]
    cmd += ["--steps", str(steps), "--warmup", str(warmup), "--threads", str(args.threads)]
    cmd += ["--max-tokens", str(args.max_tokens), "--epochs", str(args.epochs)]
    cmd += ["--quick"] if args.quick else []
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
    if out.returncode != 0:
        print(f"{preset} {precision}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(results: list[dict]) -> list[str]:
    """Medians over rounds per configuration, and each model's bf16 / fp32 ratio round by round."""
    lines = ["", "median over rounds (min-max):"]
    by_config: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        by_config.setdefault((r["preset"], r["precision"]), []).append(r)
    for (preset, precision), rs in by_config.items():
        tok = [r["tok_s_median"] for r in rs]
        first = statistics.median(r["tok_s_first_median"] for r in rs)
        rss = [r["peak_rss_mb"] for r in rs]
        gemm = [r["gemm_gflops"] for r in rs]
        ratio = statistics.median(r["gemm_ratio"] for r in rs)
        lines.append(
            f"{preset:18s} {precision}  {statistics.median(tok):,.0f} tgt tok/s "
            f"({min(tok):,.0f}-{max(tok):,.0f}; first use {first:,.0f})  "
            f"peak RSS {statistics.median(rss):,.0f} MB  "
            f"{100 * ratio:.0f}% of GEMM (GEMM {min(gemm):,.0f}-{max(gemm):,.0f})"
        )
    for preset in dict.fromkeys(p for p, _ in by_config):
        fp32 = {r["round"]: r["tok_s_median"] for r in by_config.get((preset, "fp32"), [])}
        bf16 = {r["round"]: r["tok_s_median"] for r in by_config.get((preset, "bf16"), [])}
        ratios = [bf16[k] / fp32[k] for k in sorted(fp32) if k in bf16]
        if ratios:
            each = ", ".join(f"{x:.2f}" for x in ratios)
            lines.append(
                f"{preset:18s} bf16/fp32 by round {each}: median {statistics.median(ratios):.2f}x"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4 timed steps (script check)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    ap.add_argument("--max-tokens", type=int, default=4400, help="~4,000 target tokens a batch")
    ap.add_argument("--work", default=str(REPO / "work" / "bench"), help="cache folder")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (median reported)")
    ap.add_argument(
        "--epochs", type=int, default=0, help="time N whole epochs instead (the last is reported)"
    )
    ap.add_argument("--only", default="", help="run configurations whose name contains this")
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--emulated-bf16", action="store_true", help="run bf16 without native support")
    ap.add_argument("--one", nargs=2, metavar=("PRESET", "PRECISION"), help=argparse.SUPPRESS)
    ap.add_argument("--data", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps, warmup = (4, 2) if args.quick else (args.steps, args.warmup)
    if args.one:
        from nmt.runtime import retain_freed_memory, size_kernel_caches

        size_kernel_caches()  # as `nmt train` does, before torch loads
        retain_freed_memory()  # as every `nmt` command does (nmt.cli.app)
        import torch

        torch.set_num_threads(args.threads or os.cpu_count() or 1)
        run_one(*args.one, Path(args.data), steps, warmup, args.max_tokens, args.epochs)
        return
    data = data_dir(Path(args.work))
    results = []
    print(machine_line(args.threads or os.cpu_count() or 1), flush=True)
    from nmt.device import cpu_has_native_bf16

    native = cpu_has_native_bf16() or args.emulated_bf16
    configs = [(p, q) for p, q in CONFIGS if not args.only or args.only in f"{p} {q}"]
    for preset, precision in configs:
        if precision == "bf16" and not native:
            print(
                f"{preset:18s} {precision}  skipped: no native bf16 on this CPU (emulated bf16 "
                "is 10-40x slower; --emulated-bf16 runs it anyway)",
                flush=True,
            )
    configs = [(p, q) for p, q in configs if native or q != "bf16"]
    for rnd in range(1, args.rounds + 1):
        # Odd rounds in the listed order, even rounds reversed: neither precision always goes first.
        for preset, precision in configs if rnd % 2 else configs[::-1]:
            r = run_config(args, preset, precision, data, steps, warmup)
            if r is None:
                continue
            r["round"] = rnd
            results.append(r)
            label = f"round {rnd}  " if args.rounds > 1 else ""
            if r["tok_s_epochs"]:
                how = "by epoch " + ", ".join(f"{x:,.0f}" for x in r["tok_s_epochs"])
            else:
                how = f"step {r['step_s_median']:.2f}s, first use {r['tok_s_first_median']:,.0f}"
            print(
                f"{label}{preset:18s} {precision}  threads {r['threads']}  "
                f"{r['tgt_tokens_per_batch']:,} tgt tok/batch  "
                f"{r['tok_s_median']:,.0f} tgt tok/s ({how})  "
                f"peak RSS {r['peak_rss_mb']:,} MB  "
                f"{r['model_gflops']:,.0f} GFLOP/s = {100 * r['gemm_ratio']:.0f}% of "
                f"{precision} GEMM {r['gemm_gflops']:,.0f}",
                flush=True,
            )
    if args.rounds > 1:
        print("\n".join(summarise(results)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
