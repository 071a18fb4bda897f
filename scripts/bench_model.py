"""Benchmark: forward+backward target tokens/s and peak memory of each model preset, float32 and
bfloat16 autocast, on random Multi30k-like batches (lengths ~ 14 +- 5 subwords, vocabulary 8000,
length-bucketed batches of about 4,000 target tokens, as the trainer builds them).

Each (preset, precision) runs in its own process so that peak RSS belongs to it alone.
Reports the median time of the timed iterations after warm-up.

    python scripts/bench_model.py [--quick] [--presets a,b] [--device cpu|cuda] [--json out.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import gemm_gflops  # noqa: E402

PRESETS = ["seq2seq-bahdanau", "transformer-small", "transformer-base"]


def make_batches(n_batches: int, max_tokens: int, vocab: int, seed: int) -> list:
    """Length-bucketed random batches: padded target tokens per batch <= max_tokens."""
    import torch

    g = torch.Generator().manual_seed(seed)
    pool = 40 * max_tokens // 14
    src_len = (torch.randn(pool, generator=g) * 5 + 14).round().clamp(3, 60).long()
    tgt_len = (src_len.float() * (1 + 0.15 * torch.randn(pool, generator=g))).round()
    tgt_len = tgt_len.clamp(3, 60).long() + 1  # + eos (or bos on the input side)
    order = torch.argsort(tgt_len * 100 + src_len)
    batches, start = [], 0
    while start < pool:
        end = start
        while end < pool and (end - start + 1) * int(tgt_len[order[end]]) <= max_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    picks = torch.randperm(len(batches), generator=g)[:n_batches]
    out = []
    for i in picks.tolist():
        idx = batches[i]
        s, t = src_len[idx], tgt_len[idx]
        src = torch.randint(4, vocab, (len(idx), int(s.max())), generator=g)
        src[torch.arange(src.size(1)) >= s.unsqueeze(1)] = 0
        tgt = torch.randint(4, vocab, (len(idx), int(t.max()) + 1), generator=g)
        tgt[torch.arange(tgt.size(1)) >= (t + 1).unsqueeze(1)] = 0
        tgt[:, 0] = 2
        out.append((src, s, tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()))
    return out


def run_one(preset: str, precision: str, device: str, warmup: int, iters: int, tokens: int) -> dict:
    """Time forward+backward of one preset in this process; peak memory of this process."""
    import torch
    import torch.nn.functional as F

    from nmt.config import load_config
    from nmt.models import VocabInfo, build, count_parameters
    from nmt.runtime import peak_rss_mb

    torch.manual_seed(0)
    cfg = load_config(preset=preset)
    model = build(cfg.model, VocabInfo(8000, 8000)).to(device).train()
    batches = make_batches(warmup + iters, tokens, 8000, seed=1)
    use_bf16 = precision == "bf16"
    times, ntoks = [], []
    for i, (src, src_len, tgt_in, tgt_out) in enumerate(batches):
        src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(src, src_len.to(device), tgt_in)  # (B, T, V)
        loss = F.cross_entropy(
            logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=0, label_smoothing=0.1
        )
        loss.backward()
        model.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            ntoks.append(int((tgt_out != 0).sum()))
    if device == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = peak_rss_mb() or 0
    gemm = gemm_gflops("fp32", device, m=2048)  # how loaded the cores were, now
    rates = [n / t for n, t in zip(ntoks, times, strict=True)]
    return {
        "preset": preset,
        "precision": precision,
        "device": device,
        "threads": torch.get_num_threads(),
        "params": count_parameters(model),
        "tokens_per_batch": statistics.median(ntoks),
        "tokens_per_s": round(statistics.median(rates), 1),
        "step_s": round(statistics.median(times), 4),
        "peak_mb": round(peak_mb, 1),
        "iters": iters,
        "ref_gemm_gflops": round(gemm, 1),
    }


def main() -> None:
    """Run every (preset, precision) in a subprocess, print a table and JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--tokens", type=int, default=4000, help="target tokens per batch (padded)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    ap.add_argument("--quick", action="store_true", help="1 warm-up, 3 timed iterations")
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--force-bf16", action="store_true", help="run bf16 even without native bf16")
    ap.add_argument("--one", nargs=2, metavar=("PRESET", "PRECISION"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.warmup, args.iters = 1, 3
    if args.one:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        res = run_one(*args.one, args.device, args.warmup, args.iters, args.tokens)
        print(json.dumps(res))
        return
    from nmt.device import cpu_has_native_bf16

    results = []
    for preset in args.presets.split(","):
        for precision in args.precisions.split(","):
            native = args.device == "cuda" or cpu_has_native_bf16()
            if precision == "bf16" and not native and not args.force_bf16:
                print(f"{preset:<18} bf16  skipped: this CPU has no native bf16 (--force-bf16)")
                continue
            cmd = [sys.executable, __file__, "--one", preset, precision, "--device", args.device]
            cmd += ["--tokens", str(args.tokens), "--warmup", str(args.warmup)]
            cmd += ["--iters", str(args.iters), "--threads", str(args.threads)]
            env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode:
                print(f"{preset} {precision}: failed\n{proc.stderr}", file=sys.stderr)
                continue
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            r = results[-1]
            print(
                f"{r['preset']:<18} {r['precision']:<5} params {r['params'] / 1e6:6.1f}M  "
                f"{r['tokens_per_s']:8.0f} tok/s  step {r['step_s']:.3f}s  "
                f"peak {r['peak_mb']:7.0f} MB  ({r['threads']} threads, {r['device']}, "
                f"fp32 GEMM now {r['ref_gemm_gflops']:.0f} GFLOP/s)",
                flush=True,
            )
    base = {(r["preset"], r["precision"]): r["tokens_per_s"] for r in results}
    for preset in args.presets.split(","):
        if (preset, "fp32") in base and (preset, "bf16") in base:
            ratio = base[(preset, "bf16")] / base[(preset, "fp32")]
            print(f"{preset:<18} bf16 / fp32 speed: {ratio:.2f}x")
    print(json.dumps(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
