"""`nmt export`: a trained Transformer as a self-contained CTranslate2 model directory.

OUT_DIR/model.bin, config.json, shared_vocabulary.json   CTranslate2's files (or source_/target_)
OUT_DIR/spm*.model                                         the SentencePiece model(s), copied
OUT_DIR/pieces.json (target_pieces.json)                   an imported model's piece -> id maps
OUT_DIR/nmt-export.json                                    where it came from (EXPORT_MANIFEST)

The conversion is CTranslate2's documented route: a `Converter` whose `_load` fills a
`TransformerSpec`. Token ids are kept: the vocabularies are the model's pieces in id order
(`export_pieces`; for nmt's own models id 0 is named `<blank>`, CTranslate2's padding, beside
`<unk>`, `<s>`, `</s>` at ids 1, 2, 3), and the unknown, end and decoder start tokens are the
model's own (an imported Marian model starts from `<pad>` and ends with its `</s>`, wherever they
are). We pass our own position table (interleaved or Marian's sin|cos halves), activation,
layer-norm epsilon, embedding scaling and fixed output bias, so the exported model computes what
ours does. What CTranslate2's model cannot hold, the manifest does: the target ids never emitted
(`suppress`, passed as `suppress_sequences`) and the tokenizer's files and special pieces.
`ctranslate2` is imported only when an export runs (the `ct2` extra).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt.dirs.export import (
    export_manifest,
    export_pieces,
    require_ctranslate2,
    tokenizer_files,
    write_export_manifest,
)
from nmt.dirs.model import ModelDir
from nmt.errors import NmtError

if TYPE_CHECKING:  # the export's modules load when it runs
    from nmt.config import TransformerConfig
    from nmt.data.vocab import VocabInfo

FORMATS = ("ctranslate2",)
QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16")


def export_ctranslate2(
    model_dir: ModelDir,
    out_dir: Path,
    quantization: str = "float32",
    checkpoint: str = "default",
    force: bool = False,
    quiet: bool = False,
) -> Path:
    """Convert MODEL_DIR's checkpoint into OUT_DIR (built in a temporary folder, renamed at the
    end, so OUT_DIR is never half-written); returns OUT_DIR."""
    from nmt.dirs.weights import weights_step
    from nmt.textio import building_dir, check_out_dir

    if quantization not in QUANTIZATIONS:
        raise NmtError(f"--quantization must be {', '.join(QUANTIZATIONS)}; got {quantization!r}")
    model = model_dir.config.model
    if "ctranslate2" not in model.exports:
        raise NmtError(
            f"{model_dir.path}: a {model.type} model cannot be exported to CTranslate2 "
            "(it has no RNN decoder); only Transformer models can"
        )
    check_out_dir(out_dir, force)
    weights = model_dir.checkpoint(checkpoint)
    _check_not_inside(model_dir, out_dir, weights)
    ct2 = require_ctranslate2()
    with building_dir(out_dir, force) as tmp:  # a full disk names OUT_DIR
        converter = _converter_class(ct2)(model_dir, str(weights))
        converter.convert(str(tmp / "ct2"), quantization=quantization, force=True)
        for item in (tmp / "ct2").iterdir():
            item.rename(tmp / item.name)
        (tmp / "ct2").rmdir()
        for name in tokenizer_files(model_dir):
            shutil.copyfile(model_dir.path / name, tmp / name)
        manifest = export_manifest(model_dir, weights.stem, weights_step(weights), quantization)
        write_export_manifest(tmp, manifest)
    if not quiet:
        import sys

        sys.stderr.write(f"exported {weights} ({quantization}) -> {out_dir}\n")
    return out_dir


def _check_not_inside(model: ModelDir, out_dir: Path, weights: Path) -> None:
    """--force must never delete the model being exported: its directory, its checkpoints, the
    folder of the weights file exported, or a folder inside it that holds weights or state."""
    out, model_dir = out_dir.resolve(), model.path
    if model_dir.resolve().is_relative_to(out):
        raise NmtError(
            f"{out_dir}: would replace the model directory {model_dir}; choose another -o"
        )
    for folder in (model.checkpoints, weights.parent):
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


# ---- the converter ----------------------------------------------------------------------------


def _converter_class(ct2: Any) -> type:
    """NmtConverter, defined once ctranslate2 is known to be importable."""
    from ctranslate2.converters import Converter

    class NmtConverter(Converter):
        """Fills a TransformerSpec from an nmt model directory's weights."""

        def __init__(self, model_dir: ModelDir, checkpoint: str) -> None:
            self.model_dir, self.checkpoint = model_dir, checkpoint

        def _load(self) -> Any:
            return build_spec(self.model_dir, self.checkpoint)

    return NmtConverter


ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "swish": "SWISH"}  # CTranslate2's names


def build_spec(model_dir: ModelDir, checkpoint: str) -> Any:
    """The TransformerSpec of MODEL_DIR's checkpoint, weights, vocabularies and special tokens set."""
    from ctranslate2.specs import common_spec, transformer_spec

    from nmt.config import TransformerConfig
    from nmt.dirs.loaded import load_model

    model, cfg, vocab, _ = load_model(model_dir, checkpoint=checkpoint, device="cpu")
    m = cfg.model
    assert isinstance(m, TransformerConfig)  # export_ctranslate2 refused other types
    spec = transformer_spec.TransformerSpec.from_config(
        (m.encoder_layers, m.decoder_layers),
        m.heads,
        pre_norm=m.norm == "pre",
        activation=getattr(common_spec.Activation, ACTIVATIONS[m.activation]),
        alignment_heads=m.heads,  # return_attention: the last layer's mean over all heads
    )
    w = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    positions = _positions(model)
    _set_encoder(spec.encoder, w, positions["src"], m)
    _set_decoder(spec.decoder, w, positions["tgt"], m)
    spec.config.layer_norm_epsilon = float(model.encoder_layers[0].norms[0].eps)
    # sources are ids + [eos]: nmt.engines.ct2 passes the eos itself, so that return_attention
    # has its column (CTranslate2 leaves an added one out)
    spec.config.add_source_eos = False
    src_tok, tgt_tok = model_dir.tokenizers
    spec.register_source_vocabulary(export_pieces(src_tok))
    target = export_pieces(tgt_tok)
    spec.register_target_vocabulary(target)
    _set_special_tokens(spec.config, vocab, target)
    return spec


def _set_special_tokens(config: Any, vocab: VocabInfo, target: list[str]) -> None:
    """The model's own unknown, end and decoder start tokens (nmt's own: <unk>, </s>, <s>; a
    Marian model starts its decoder from <pad>), named by their target pieces."""
    config.unk_token = target[vocab.unk_id]
    config.eos_token = target[vocab.eos_id]
    config.bos_token = config.decoder_start_token = target[vocab.bos_id]


def _positions(model: Any) -> dict[str, Any]:
    """Position tables (max_positions, d): the learned one or our sinusoids (not CT2's own)."""
    table = model.positions.weight if model.positions is not None else model.sinusoids
    arr = table.detach().float().cpu().numpy()
    return {"src": arr, "tgt": arr}


def _set_inputs(spec: Any, emb: Any, positions: Any, scale: bool) -> None:
    """Embedding matrix, its sqrt(d) scaling (or none), and the position table."""
    spec_emb = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    spec_emb.weight = emb
    spec.scale_embeddings = scale  # True: multiplied by sqrt(d_model), as ours are
    spec.position_encodings.encodings = positions


def _set_encoder(spec: Any, w: dict, positions: Any, m: TransformerConfig) -> None:
    """Encoder layers; pre-norm has a final layer norm."""
    _set_inputs(spec, w["src_embed.weight"], positions, m.scale_embeddings)
    if m.norm == "pre":
        _set_norm(spec.layer_norm, w, "encoder_norm")
    for i, layer in enumerate(spec.layer):
        p = f"encoder_layers.{i}"
        _set_self_attention(layer.self_attention, w, f"{p}.self_attn")
        _set_norm(layer.self_attention.layer_norm, w, f"{p}.norms.0")
        _set_ffn(layer.ffn, w, p, 1)


def _set_decoder(spec: Any, w: dict, positions: Any, m: TransformerConfig) -> None:
    """Decoder layers, final norm (pre-norm) and the output projection, whose bias is the
    model's fixed output bias (Marian's final_logits_bias) where it has one."""
    _set_inputs(spec, w["tgt_embed.weight"], positions, m.scale_embeddings)
    if m.norm == "pre":
        _set_norm(spec.layer_norm, w, "decoder_norm")
    spec.projection.weight = w["output.weight"]
    if m.output_bias:
        spec.projection.bias = w["output_bias"]
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
