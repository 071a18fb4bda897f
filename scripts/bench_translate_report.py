"""bench_translate.py's figures: the FLOP estimate, each configuration's rates, BLEU, the ratio
to CTranslate2 by round, and the printed table.

Not run on its own: imported by scripts/bench_translate.py.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from bench_translate_setup import test_file


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

    opened = ModelDir(model)
    cfg, vocab = opened.config, opened.vocab
    if cfg.model.type != "transformer":
        return None
    return sum(decode_flops(cfg.model, vocab.tgt_size, s, t, beam) for s, t in lengths)


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


def fmt(value: Any, spec: str = "") -> str:
    """A table cell; n/a for figures that do not apply."""
    return "n/a" if value is None else format(value, spec)


def print_table(results: dict) -> None:
    """The human-readable report."""
    print(
        f"{'config':<20}{'sent/s':>9}{'tok/s':>9}{'median s':>10}{'RSS MB':>8}"
        f"{'GFLOP/s':>9}{'%GEMM':>7}{'vs ct2':>8}{'BLEU':>7}"
    )
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
            print(
                f"whole `nmt translate` {name}: {c['cli_s']} s, overhead over decoding "
                f"{c['overhead_s']} s (target <= 1.5 s)"
            )
    if "cli" in results:
        print(f"one sentence end to end: {results['cli']['cli_one_sentence_s']} s")
        print(f"python -c 'import torch' alone: {results['cli']['import_torch_s']} s")
    if "ct2_cli_beam5_s" in results:
        print(f"whole `nmt translate -m EXPORT_DIR` beam 5: {results['ct2_cli_beam5_s']} s")
