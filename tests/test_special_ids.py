"""A model whose special ids are not nmt's own (pad 0, unk 1, bos 2, eos 3): an imported
Marian-like model (eos 0, unk 1, pad and decoder start the last id), random and tiny, written here
without transformers. It fine-tunes a few steps, decodes, exports to CTranslate2 and serves, each
through the command line, every step asking the model's vocabulary for its ids."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import httpx
import pytest
import sentencepiece as spm
import torch
from safetensors.torch import save_file
from test_serve import start_server, stop_server
from typer.testing import CliRunner

from nmt.cli.app import app as cli
from nmt.data.vocab import VocabInfo
from nmt.models import build
from nmt.pretrained.marian import MARIAN_DEFAULTS, model_config
from nmt.pretrained.weights import from_nmt

WORDS = "a man woman dog cat sees runs the red blue house small big child plays with ball".split()
LINES = ["a man sees the dog", "the small child plays with a red ball", ""]


def _text(out: Path, n: int, seed: int) -> list[str]:
    """`n` lines of 3 to 8 words drawn from WORDS."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(n)]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def _marian_dir(root: Path) -> Path:
    """A Hugging Face Marian directory: a shared SentencePiece model, vocab.json with Marian's
    ids (</s> 0, <unk> 1, <pad> last), config.json, and random weights (eos a little likelier)."""
    hf = root / "hf"
    hf.mkdir()
    _text(root / "spm.txt", 300, 0)
    spm.SentencePieceTrainer.train(
        input=str(root / "spm.txt"),
        model_prefix=str(root / "spm"),
        vocab_size=32,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        unk_id=1,
        eos_id=2,
        bos_id=-1,
        pad_id=-1,
    )
    for name in ("source.spm", "target.spm"):
        shutil.copy(root / "spm.model", hf / name)
    sp = spm.SentencePieceProcessor(model_file=str(root / "spm.model"))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    pad = vocab["<pad>"] = len(vocab)
    (hf / "vocab.json").write_text(json.dumps(vocab))
    (hf / "tokenizer_config.json").write_text('{"source_lang": "en", "target_lang": "de"}')
    config = {
        "model_type": "marian",
        "vocab_size": pad + 1,
        "pad_token_id": pad,
        "decoder_start_token_id": pad,
        "eos_token_id": 0,
        "forced_eos_token_id": 0,
        "max_position_embeddings": 64,
        "max_length": 24,
        "num_beams": 2,
        "d_model": 32,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "scale_embedding": True,
    }
    (hf / "config.json").write_text(json.dumps(config))
    cfg = model_config(hf, MARIAN_DEFAULTS | config)
    torch.manual_seed(0)
    model = build(cfg, VocabInfo(pad + 1, pad + 1, pad_id=pad, unk_id=1, bos_id=pad, eos_id=0))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["output_bias"][0] += 1.0  # eos: most lines end before the length limit
    save_file(from_nmt(state, cfg), str(hf / "model.safetensors"))
    return hf


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, Path]:
    """(MODEL_DIR of the imported model, folder of its fine-tuning text)."""
    root = tmp_path_factory.mktemp("special")
    hf = _marian_dir(root)
    text = root / "text"
    text.mkdir()
    for split, n, seed in (("train", 200, 1), ("valid", 20, 2)):
        for lang in ("en", "de"):
            _text(text / f"{split}.{lang}", n, seed + (lang == "de"))
    run(["import", str(hf), "-o", str(root / "model"), "--quiet"])
    return root / "model", text


def run(args: list[str]) -> str:
    """An `nmt` command in this process; its stdout, once it succeeded."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def served(model_dir: Path, line: str) -> str:
    """The best translation of `line` from a real `nmt serve` of `model_dir` (one request)."""
    proc, url = start_server(model_dir)
    try:
        answer = httpx.post(url + "/translate", json={"text": line}, timeout=30).json()
    finally:
        stop_server(proc)
    return answer["translations"][0]["hypotheses"][0]["translation"]


@pytest.mark.slow
def test_a_model_with_its_own_special_ids_trains_decodes_exports_and_serves(imported, tmp_path):
    model, text = imported
    ids = json.loads((model / "vocab.json").read_text())
    pad = ids["src_size"] - 1  # Marian's <pad>, its last id, also starts the decoder
    assert (ids["pad_id"], ids["unk_id"], ids["bos_id"], ids["eos_id"]) == (pad, 1, pad, 0)
    data, tuned, export = tmp_path / "data", tmp_path / "tuned", tmp_path / "export"
    run(
        f"preprocess --src-lang en --tgt-lang de --train {text / 'train'} --valid "
        f"{text / 'valid'} -o {data} --tokenizer-from {model} --quiet".split()
    )
    sets = (
        "training.max_steps=3 training.max_tokens=300 training.accumulate=1 training.warmup=1 "
        "training.valid_every=3 training.precision=fp32 training.max_time= "
        "training.save_every_time= training.average_last=1"
    )
    run(
        f"train -d {data} -o {tuned} --init-from {model} --preset finetune-marian-cpu "
        "--device cpu --quiet".split()
        + [a for s in sets.split() for a in ("--set", s)]
    )
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    decoded = run(f"translate -m {tuned} --device cpu -q --format jsonl {source}".split())
    records = [json.loads(line) for line in decoded.splitlines()]
    assert len(records) == len(LINES) and records[2]["hypotheses"][0]["translation"] == ""
    for record in records[:2]:  # no special piece is written: the model's own were asked
        assert not {"<pad>", "</s>", "<unk>"} & set(record["hypotheses"][0]["tokens"])
    assert served(tuned, LINES[0]) == records[0]["hypotheses"][0]["translation"]
    run(f"export -m {tuned} -o {export} --quiet".split())
    exported = run(f"translate -m {export} --device cpu -q {source}".split())
    assert len(exported.splitlines()) == len(LINES)
    greedy = [
        run(f"translate -m {m} --device cpu -q --greedy {source}".split()) for m in (tuned, export)
    ]
    assert greedy[0] == greedy[1]  # both engines start, stop and pad with the model's own ids
    assert served(export, LINES[0]) == exported.splitlines()[0]
