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
def meta_values(pending: list) -> Iterator[None]:
    """Answer what code asks of a meta tensor's values, which it does not hold: True for a bool
    (is there padding?), 1 for an int, and for `.cpu()` the batch's real source lengths, queued
    in `pending` (an RNN packs its input by them). Later `.cpu()` calls are the packing's index
    permutations: the identity keeps their shapes, and the FLOPs do not depend on their order."""
    import torch

    saved = {name: getattr(torch.Tensor, name) for name in ("__bool__", "__int__", "cpu")}

    def values(x: torch.Tensor) -> torch.Tensor:
        return pending.pop() if pending else torch.arange(x.numel()).view(x.shape)

    answers = {"__bool__": lambda x: True, "__int__": lambda x: 1, "cpu": values}
    try:
        for name, real in saved.items():
            answer = answers[name]
            setattr(torch.Tensor, name, lambda x, r=real, a=answer: a(x) if x.is_meta else r(x))
        yield
    finally:
        for name, real in saved.items():
            setattr(torch.Tensor, name, real)


def count(data_dir: str, preset: str, max_tokens: int, device: str = "meta") -> dict[str, Any]:
    """Parameters and FLOPs per real target token over one epoch's batches."""
    import torch
    from bench_train import step_flops

    from nmt.config import load_config
    from nmt.data import batching
    from nmt.dirs import data as dataset
    from nmt.models import build, count_parameters

    cfg = load_config(preset=preset)
    vocab = dataset.DataDir(data_dir).vocab_info
    train = dataset.DataDir(data_dir).split("train")
    s, t = train.src.lengths, train.tgt.lengths
    keep = batching.keep_mask(s, t, max_tokens, cfg.model.max_positions)
    batches = batching.epoch_batches(s, t, max_tokens, 1, 1, keep)
    with torch.device(device):  # built in place: moving to meta would untie shared weights
        model = build(cfg.model, vocab, init=device != "meta")
    trainer = SimpleNamespace(
        data=SimpleNamespace(train=train),
        device=torch.device(device),
        model=model,
        autocast=contextlib.nullcontext,
        tc=cfg.training,
    )
    tokens = sum(int((t[b] + 1).sum()) for b in batches)
    pending: list = []
    flops = 0
    with meta_values(pending) if device == "meta" else contextlib.nullcontext():
        for b in batches:
            pending[:] = [batching.collate(train.src, train.tgt, b).src_lengths]
            flops += step_flops(trainer, [b])
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
