#!/usr/bin/env python3
"""Parameters and training FLOPs per target token of a preset on a DATA_DIR's train split, counted
by torch's FLOP counter on meta tensors: shapes alone decide a matmul's FLOPs, so nothing is
computed and a transformer-base epoch of WMT size counts in about a minute of CPU.

    python scripts/count_flops.py work/news32k --preset transformer-base [--max-tokens 8192] [--json]

It prints the parameter count, the epoch's batches, real target tokens per batch (eos included),
the padding share and the matmul FLOPs (forward + backward) per real target token."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))


@contextlib.contextmanager
def meta_truthiness() -> Iterator[None]:
    """Let code that asks a meta tensor for a bool or an int (is there padding? how many
    targets?) take its general path: meta tensors hold no values to answer with."""
    import torch

    saved = {name: getattr(torch.Tensor, name) for name in ("__bool__", "__int__")}
    answers = {"__bool__": True, "__int__": 1}
    try:
        for name, real in saved.items():
            value = answers[name]
            setattr(torch.Tensor, name, lambda x, r=real, v=value: v if x.is_meta else r(x))
        yield
    finally:
        for name, real in saved.items():
            setattr(torch.Tensor, name, real)


def count(data_dir: str, preset: str, max_tokens: int, device: str = "meta") -> dict[str, Any]:
    """Parameters and FLOPs per real target token over one epoch's batches."""
    import torch
    from bench_train import step_flops

    from nmt.config import load_config
    from nmt.data import batching, dataset
    from nmt.models import build, count_parameters

    cfg = load_config(preset=preset)
    vocab = dataset.vocab_info(data_dir)
    train = dataset.load(data_dir, "train")
    s, t = train.src.lengths, train.tgt.lengths
    keep = batching.keep_mask(s, t, max_tokens, cfg.model.max_positions)
    batches = batching.epoch_batches(s, t, max_tokens, 1, 1, keep)
    model = build(cfg.model, vocab, init=device != "meta").to(device)
    trainer = SimpleNamespace(
        data=SimpleNamespace(train=train), device=torch.device(device), model=model,
        autocast=contextlib.nullcontext, tc=cfg.training,
    )  # fmt: skip
    tokens = sum(int((t[b] + 1).sum()) for b in batches)
    with meta_truthiness() if device == "meta" else contextlib.nullcontext():
        flops = sum(step_flops(trainer, [b]) for b in batches)
    return {
        "preset": preset,
        "parameters": count_parameters(model),
        "batches": len(batches),
        "target_tokens_per_batch": tokens / len(batches),
        "padding": batching.padding_ratio(batches, s, t),
        "flops_per_target_token": flops / tokens,
    }


def main() -> int:
    """Parse options, count, print."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("data_dir", help="a DATA_DIR from nmt preprocess")
    p.add_argument("--preset", default="transformer-base")
    p.add_argument("--max-tokens", type=int, default=8192, help="target tokens per batch")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    r = count(args.data_dir, args.preset, args.max_tokens)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"{r['preset']}: {r['parameters']:,} parameters")
    print(f"{r['batches']:,} batches of {r['target_tokens_per_batch']:,.0f} real target tokens")
    print(f"padding {r['padding']:.1%}")
    print(f"{r['flops_per_target_token'] / 1e6:,.1f} MFLOP per target token (forward + backward)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
