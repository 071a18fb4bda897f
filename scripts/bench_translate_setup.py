"""The test set, the model and the child processes' settings that bench_translate.py shares.

Not run on its own: imported by scripts/bench_translate.py and its parts.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from benchlib import multi30k

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_translate.py"
MODES: dict[str, dict[str, Any]] = {"greedy": {"greedy": True}, "beam5": {"beam_size": 5}}


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
