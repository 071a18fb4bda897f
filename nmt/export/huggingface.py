"""`nmt export --format huggingface`: a Transformer as a directory that transformers'
`from_pretrained` loads (model, tokenizer and generation_config.json with the model's decoding
defaults); `nmt import` reads it back.

The class follows the architecture: post-norm is `MarianMTModel` (`model_type: marian`), pre-norm
with its final layer norms is `PegasusForConditionalGeneration` (`model_type: pegasus`). Both
add a fixed sinusoidal table with sin in the first half of the channels and cos in the second;
nmt's own `positions: sinusoidal` interleaves them, a permutation of the same channels, so the
residual stream's channels are reordered through every tensor that touches it
(`nmt.pretrained.weights.permute_residual`) and the table written is nmt's own, reordered: the
same function. `config.json` records `nmt_positions` so that `nmt import` restores nmt's order.
Learned positions, RNN models, separate source and target embeddings and lowercasing models
have no such class and are refused in one line.

The tokenizer is MarianTokenizer's files: the SentencePiece models as source.spm / target.spm
and vocab.json (piece -> id in the model's own id order), so it gives the model's ids.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt.errors import NmtError

if TYPE_CHECKING:
    from nmt.config import Config, TransformerConfig
    from nmt.data.vocab import VocabInfo
    from nmt.dirs.model import ModelDir

CLASSES = {
    "post": ("marian", "MarianMTModel"),
    "pre": ("pegasus", "PegasusForConditionalGeneration"),
}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish"}  # transformers' ACT2FN names


def export_huggingface(
    model_dir: ModelDir,
    out_dir: Path,
    checkpoint: str = "default",
    force: bool = False,
    quiet: bool = False,
) -> Path:
    """Write MODEL_DIR's checkpoint as a transformers directory OUT_DIR (built beside it and
    renamed, never half-written); returns OUT_DIR."""
    from nmt.export.ctranslate2 import _check_not_inside
    from nmt.textio import building_dir, check_out_dir

    cfg, vocab = model_dir.config, model_dir.vocab
    expressible(model_dir)
    check_out_dir(out_dir, force)
    weights = model_dir.checkpoint(checkpoint)
    _check_not_inside(model_dir, out_dir, weights)
    with building_dir(out_dir, force) as tmp:
        _write_weights(tmp, model_dir, checkpoint)
        _write_json(tmp / "config.json", hf_config(cfg, vocab))
        _write_json(tmp / "generation_config.json", generation_config(cfg, vocab))
        _write_tokenizer(tmp, model_dir)
    if not quiet:
        import sys

        sys.stderr.write(f"exported {weights} ({CLASSES[_norm(model_dir)][1]}) -> {out_dir}\n")
    return out_dir


def _norm(opened: ModelDir) -> str:
    return str(getattr(opened.config.model, "norm", ""))


def expressible(opened: ModelDir) -> None:
    """Refuse, in one line, a model no transformers class computes exactly."""
    m, vocab = opened.config.model, opened.vocab
    why = None
    if "huggingface" not in m.exports:
        why = f"a {m.type} model (no transformers class is an RNN encoder-decoder)"
    elif getattr(m, "positions", "") == "learned":
        why = "learned positions (Marian and Pegasus add a fixed sinusoidal table)"
    elif not (getattr(m, "tie_embeddings", False) and vocab.joint):
        why = "separate source and target embeddings (Marian and Pegasus share one here)"
    elif vocab.lowercase or opened.meta.get("lowercase") is True:
        why = "a lowercasing vocabulary (MarianTokenizer does not lowercase)"
    if why is not None:
        raise NmtError(f"{opened.path}: cannot export to huggingface: {why}")


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_weights(tmp: Path, opened: ModelDir, checkpoint: str) -> None:
    """model.safetensors: the weights under transformers' names, channels in the halves order,
    the position table included (nmt's own, reordered)."""
    from safetensors.torch import save_file

    from nmt.config import TransformerConfig
    from nmt.dirs.loaded import load_model
    from nmt.pretrained.weights import from_nmt, permute_residual, residual_order

    model, cfg, _, _ = load_model(opened, checkpoint=checkpoint, device="cpu")
    m = cfg.model
    assert isinstance(m, TransformerConfig)  # `expressible` refused the others
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    table = model.sinusoids.detach().float().cpu()
    if m.positions == "sinusoidal":
        order = residual_order(m.d_model)
        state, table = permute_residual(state, order), table[:, order]
    tensors = from_nmt(state, m)
    for side in ("encoder", "decoder"):
        tensors[f"model.{side}.embed_positions.weight"] = table.contiguous()
    tensors = {k: v.clone() for k, v in tensors.items()}  # tied ones saved as separate tensors
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})


def hf_config(cfg: Config, vocab: VocabInfo) -> dict[str, Any]:
    """config.json: the class for the norm placement, sizes, ids, and no forced eos unless the
    model's decoding forces one."""
    m: TransformerConfig = cfg.model  # type: ignore[assignment]
    model_type, arch = CLASSES[m.norm]
    heads, ffn = m.heads, m.ff_dim
    return {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": vocab.tgt_size,
        "d_model": m.d_model,
        "encoder_layers": m.encoder_layers,
        "decoder_layers": m.decoder_layers,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": ffn,
        "decoder_ffn_dim": ffn,
        "activation_function": ACTIVATIONS[m.activation],
        "max_position_embeddings": m.max_positions,
        "scale_embedding": m.scale_embeddings,
        "dropout": m.dropout,
        "attention_dropout": m.attention_dropout,
        "activation_dropout": 0.0,
        "init_std": 0.02,
        "is_encoder_decoder": True,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        **_ids(cfg, vocab),
        "nmt_positions": m.positions,
    }


def _ids(cfg: Config, vocab: VocabInfo) -> dict[str, Any]:
    """The special ids and the ids never generated, as config.json and generate take them."""
    return {
        "pad_token_id": vocab.pad_id,
        "eos_token_id": vocab.eos_id,
        "bos_token_id": vocab.bos_id,
        "decoder_start_token_id": vocab.bos_id,
        "forced_eos_token_id": vocab.eos_id if cfg.decoding.forced_eos else None,
    }


def generation_config(cfg: Config, vocab: VocabInfo) -> dict[str, Any]:
    """generation_config.json: the model's decoding defaults that generate expresses: beams,
    length penalty (generate's rule: nmt's `stop: transformers`), the length limit (the model's
    positions: generate has no limit relative to the source), the banned ids, the n-gram ban."""
    d, m = cfg.decoding, cfg.model
    gen: dict[str, Any] = {
        **_ids(cfg, vocab),
        "num_beams": d.beam_size,
        "length_penalty": d.length_penalty,
        "max_length": m.max_positions,
        "early_stopping": False,
        "bad_words_ids": [[i] for i in vocab.banned],
    }
    if d.min_len:
        gen["min_length"] = d.min_len + 1  # the decoder's start token counts in generate's length
    if d.no_repeat_ngram_size:
        gen["no_repeat_ngram_size"] = d.no_repeat_ngram_size
    return gen


def _write_tokenizer(tmp: Path, opened: ModelDir) -> None:
    """MarianTokenizer's files: source.spm, target.spm, vocab.json in the model's id order,
    tokenizer_config.json with its special pieces and languages."""
    meta, model_dir = opened.meta, opened.path
    pieces = meta.get("pieces")
    shutil.copyfile(model_dir / meta["src_spm"], tmp / "source.spm")
    shutil.copyfile(model_dir / meta["tgt_spm"], tmp / "target.spm")
    if pieces:  # an imported model: its own piece -> id map
        shutil.copyfile(model_dir / pieces, tmp / "vocab.json")
        specials = dict(meta["special_pieces"])
    else:
        src_tok, _ = opened.tokenizers
        sp = src_tok.sp
        _write_json(tmp / "vocab.json", {sp.id_to_piece(i): i for i in range(sp.get_piece_size())})
        vocab = opened.vocab
        specials = {
            "unk": sp.id_to_piece(vocab.unk_id),
            "eos": sp.id_to_piece(vocab.eos_id),
            "pad": sp.id_to_piece(vocab.pad_id),
        }
    _write_json(
        tmp / "tokenizer_config.json",
        {
            "tokenizer_class": "MarianTokenizer",
            "source_lang": meta.get("src_lang"),
            "target_lang": meta.get("tgt_lang"),
            "unk_token": specials["unk"],
            "eos_token": specials["eos"],
            "pad_token": specials["pad"],
            "separate_vocabs": False,
            "model_max_length": opened.config.model.max_positions,
        },
    )
