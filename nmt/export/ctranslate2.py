"""`nmt export`: a trained Transformer as a self-contained CTranslate2 model directory.

OUT_DIR/model.bin, config.json, shared_vocabulary.json   CTranslate2's files (or source_/target_)
OUT_DIR/spm*.model                                         the SentencePiece model(s), copied
OUT_DIR/nmt-export.json                                    where it came from (EXPORT_MANIFEST)

The conversion is CTranslate2's documented route: a `Converter` whose `_load` fills a
`TransformerSpec`. Token ids are kept: the vocabularies are the SentencePiece pieces in id order,
id 0 named `<blank>` (CTranslate2's padding), `<unk>`, `<s>`, `</s>` at ids 1, 2, 3. We pass our
own position table, layer-norm epsilon and sqrt(d) embedding scaling, so the exported model
computes what ours does. `ctranslate2` is imported only when an export runs (the `ct2` extra).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from nmt.decode.exported import EXPORT_FORMAT, EXPORT_MANIFEST, PAD_PIECE, require_ctranslate2
from nmt.errors import NmtError

FORMATS = ("ctranslate2",)
QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16")


def export_ctranslate2(
    model_dir: str | Path,
    out_dir: str | Path,
    quantization: str = "float32",
    checkpoint: str = "default",
    force: bool = False,
    quiet: bool = False,
) -> Path:
    """Convert MODEL_DIR's checkpoint into OUT_DIR (built in a temporary folder, renamed at the
    end, so OUT_DIR is never half-written); returns OUT_DIR."""
    from nmt.modeldir import ModelDir, checkpoint_path, weights_step
    from nmt.textio import building_dir, check_out_dir

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if quantization not in QUANTIZATIONS:
        raise NmtError(f"--quantization must be {', '.join(QUANTIZATIONS)}; got {quantization!r}")
    opened = ModelDir(model_dir)
    cfg, meta = opened.config, opened.meta
    if cfg.model.type != "transformer":
        raise NmtError(
            f"{model_dir}: a {cfg.model.type} model cannot be exported to CTranslate2 "
            "(it has no RNN decoder); only Transformer models can"
        )
    check_out_dir(out_dir, force)
    weights = checkpoint_path(model_dir, checkpoint)
    _check_not_inside(model_dir, out_dir, weights)
    ct2 = require_ctranslate2()
    with building_dir(out_dir, force) as tmp:  # a full disk names OUT_DIR
        converter = _converter_class(ct2)(model_dir, str(weights))
        converter.convert(str(tmp / "ct2"), quantization=quantization, force=True)
        for item in (tmp / "ct2").iterdir():
            item.rename(tmp / item.name)
        (tmp / "ct2").rmdir()
        for name in {meta["src_spm"], meta["tgt_spm"]}:
            shutil.copyfile(model_dir / name, tmp / name)
        step = weights_step(weights)
        manifest = _manifest(model_dir, cfg, meta, weights.stem, step, quantization)
        (tmp / EXPORT_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    if not quiet:
        import sys

        sys.stderr.write(f"exported {weights} ({quantization}) -> {out_dir}\n")
    return out_dir


def _check_not_inside(model_dir: Path, out_dir: Path, weights: Path) -> None:
    """--force must never delete the model being exported: its directory, its checkpoints, the
    folder of the weights file exported, or a folder inside it that holds weights or state."""
    from nmt.modeldir import CHECKPOINTS

    out = out_dir.resolve()
    if model_dir.resolve().is_relative_to(out):
        raise NmtError(
            f"{out_dir}: would replace the model directory {model_dir}; choose another -o"
        )
    for folder in (model_dir / CHECKPOINTS, weights.parent):
        if folder.resolve().is_relative_to(out):
            raise NmtError(
                f"{out_dir}: would replace {folder}, which holds the weights of {model_dir}; "
                "choose another -o"
            )
    if out.is_relative_to(model_dir.resolve()) and _holds_weights(out):
        raise NmtError(
            f"{out_dir}: would replace a folder of {model_dir} that holds weights or trainer "
            "state; choose another -o"
        )


def _holds_weights(folder: Path) -> bool:
    """Whether `folder` (an existing one) holds safetensors weights or a trainer state."""
    if not folder.is_dir():
        return False
    return any(p.suffix in (".safetensors", ".pt") for p in folder.rglob("*") if p.is_file())


def _manifest(
    model_dir: Path, cfg: Any, meta: dict, checkpoint: str, step: int | None, quantization: str
) -> dict[str, Any]:
    """What the export came from and how to decode with it (read by nmt.decode.ct2)."""
    import dataclasses

    from nmt import __version__

    return {
        "format": "ctranslate2",
        "format_version": EXPORT_FORMAT,
        "nmt_version": __version__,
        "source_model_dir": str(model_dir.resolve()),
        "checkpoint": checkpoint,
        "step": step,
        "quantization": quantization,
        "src_lang": meta["src_lang"],
        "tgt_lang": meta["tgt_lang"],
        "src_spm": meta["src_spm"],
        "tgt_spm": meta["tgt_spm"],
        "lowercase": meta.get("lowercase", False) is True,  # lowercase input before SentencePiece
        "max_positions": cfg.model.max_positions,
        "model": dataclasses.asdict(cfg.model),
        "decoding": dataclasses.asdict(cfg.decoding),
    }


# ---- the converter ----------------------------------------------------------------------------


def _converter_class(ct2: Any) -> type:
    """NmtConverter, defined once ctranslate2 is known to be importable."""
    from ctranslate2.converters import Converter

    class NmtConverter(Converter):
        """Fills a TransformerSpec from an nmt model directory's weights."""

        def __init__(self, model_dir: Path, checkpoint: str) -> None:
            self.model_dir, self.checkpoint = model_dir, checkpoint

        def _load(self) -> Any:
            return build_spec(self.model_dir, self.checkpoint)

    return NmtConverter


def build_spec(model_dir: Path, checkpoint: str) -> Any:
    """The TransformerSpec of MODEL_DIR's checkpoint, weights and vocabularies set."""
    from ctranslate2.specs import common_spec, transformer_spec

    from nmt.config import TransformerConfig
    from nmt.data.vocab import Tokenizer
    from nmt.modeldir import load_model

    model, cfg, _, meta = load_model(model_dir, checkpoint=checkpoint, device="cpu")
    m = cfg.model
    assert isinstance(m, TransformerConfig)  # export_ctranslate2 refused other types
    act = common_spec.Activation.GELU if m.activation == "gelu" else common_spec.Activation.RELU
    spec = transformer_spec.TransformerSpec.from_config(
        (m.encoder_layers, m.decoder_layers),
        m.heads,
        pre_norm=m.norm == "pre",
        activation=act,
        alignment_heads=m.heads,  # return_attention: the last layer's mean over all heads
    )
    w = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    positions = _positions(model)
    _set_encoder(spec.encoder, w, positions["src"], m.norm == "pre")
    _set_decoder(spec.decoder, w, positions["tgt"], m.norm == "pre")
    spec.config.layer_norm_epsilon = float(model.encoder_layers[0].norms[0].eps)
    spec.config.add_source_eos = (
        False  # sources are ids + [eos]: nmt.decode.ct2 passes the eos itself,
    )
    # so that return_attention has its column (CTranslate2 leaves an added one out)
    for side, register in (
        ("src_spm", spec.register_source_vocabulary),
        ("tgt_spm", spec.register_target_vocabulary),
    ):
        register(vocabulary(Tokenizer.load(Path(model_dir) / meta[side])))
    return spec


def vocabulary(tok: Any) -> list[str]:
    """Pieces in id order, id 0 renamed to CTranslate2's padding name; pieces must be unique."""
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    pieces[0] = PAD_PIECE
    if len(set(pieces)) != len(pieces):
        raise NmtError(f"{tok.path}: SentencePiece pieces are not unique (is {PAD_PIECE} a piece?)")
    return pieces


def _positions(model: Any) -> dict[str, Any]:
    """Position tables (max_positions, d): the learned one or our sinusoids (not CT2's own)."""
    table = model.positions.weight if model.positions is not None else model.sinusoids
    arr = table.detach().float().cpu().numpy()
    return {"src": arr, "tgt": arr}


def _set_inputs(spec: Any, emb: Any, positions: Any) -> None:
    """Embedding matrix, its sqrt(d) scaling, and the position table."""
    spec_emb = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    spec_emb.weight = emb
    spec.scale_embeddings = True  # our embeddings are multiplied by sqrt(d_model)
    spec.position_encodings.encodings = positions


def _set_encoder(spec: Any, w: dict, positions: Any, pre: bool) -> None:
    """Encoder layers; pre-norm has a final layer norm."""
    _set_inputs(spec, w["src_embed.weight"], positions)
    if pre:
        _set_norm(spec.layer_norm, w, "encoder_norm")
    for i, layer in enumerate(spec.layer):
        p = f"encoder_layers.{i}"
        _set_self_attention(layer.self_attention, w, f"{p}.self_attn")
        _set_norm(layer.self_attention.layer_norm, w, f"{p}.norms.0")
        _set_ffn(layer.ffn, w, p, 1)


def _set_decoder(spec: Any, w: dict, positions: Any, pre: bool) -> None:
    """Decoder layers, final norm (pre-norm) and the output projection (no bias)."""
    _set_inputs(spec, w["tgt_embed.weight"], positions)
    if pre:
        _set_norm(spec.layer_norm, w, "decoder_norm")
    spec.projection.weight = w["output.weight"]
    for i, layer in enumerate(spec.layer):
        p = f"decoder_layers.{i}"
        _set_self_attention(layer.self_attention, w, f"{p}.self_attn")
        _set_norm(layer.self_attention.layer_norm, w, f"{p}.norms.0")
        att = layer.attention
        _set_linear(att.linear[0], w, f"{p}.cross_attn.q_proj")
        _set_linear(att.linear[1], w, f"{p}.cross_attn.kv_proj")  # fused [k; v], as CT2's
        _set_linear(att.linear[2], w, f"{p}.cross_attn.out_proj")
        _set_norm(att.layer_norm, w, f"{p}.norms.1")
        _set_ffn(layer.ffn, w, p, 2)


def _set_self_attention(spec: Any, w: dict, prefix: str) -> None:
    """Our fused [q; k; v] projection is CTranslate2's fused linear[0]."""
    _set_linear(spec.linear[0], w, f"{prefix}.qkv_proj")
    _set_linear(spec.linear[1], w, f"{prefix}.out_proj")


def _set_ffn(spec: Any, w: dict, prefix: str, norm: int) -> None:
    _set_norm(spec.layer_norm, w, f"{prefix}.norms.{norm}")
    _set_linear(spec.linear_0, w, f"{prefix}.ff.fc1")
    _set_linear(spec.linear_1, w, f"{prefix}.ff.fc2")


def _set_linear(spec: Any, w: dict, prefix: str) -> None:
    spec.weight = w[f"{prefix}.weight"]
    spec.bias = w[f"{prefix}.bias"]


def _set_norm(spec: Any, w: dict, prefix: str) -> None:
    spec.gamma = w[f"{prefix}.weight"]
    spec.beta = w[f"{prefix}.bias"]
