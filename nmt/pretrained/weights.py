"""A Marian (or Pegasus) checkpoint's tensors as nmt's Transformer names them, and back. The file
is read without running code (safetensors, or `torch.load(weights_only=True)`), float16 is upcast
to float32, and what a transformers checkpoint leaves out is rebuilt: positions (nmt computes its
table), tied copies and a zero `final_logits_bias`. Pegasus adds the pre-norm model's final
encoder and decoder layer norms. `residual_order` / `permute_residual` move between nmt's
interleaved sinusoids and the sin|cos halves table that transformers' classes compute."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

from nmt.config import TransformerConfig
from nmt.errors import NmtError

_ENC, _DEC = "model.encoder.layers", "model.decoder.layers"
# per layer: nmt's name -> Marian's (q, k, v fused into one projection are handled apart)
_ENCODER_LAYER = {
    "norms.0": "self_attn_layer_norm",
    "norms.1": "final_layer_norm",
    "ff.fc1": "fc1",
    "ff.fc2": "fc2",
    "self_attn.out_proj": "self_attn.out_proj",
}
_DECODER_LAYER = {
    "norms.0": "self_attn_layer_norm",
    "norms.1": "encoder_attn_layer_norm",
    "norms.2": "final_layer_norm",
    "ff.fc1": "fc1",
    "ff.fc2": "fc2",
    "self_attn.out_proj": "self_attn.out_proj",
    "cross_attn.q_proj": "encoder_attn.q_proj",
    "cross_attn.out_proj": "encoder_attn.out_proj",
}


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of model.safetensors or pytorch_model.bin, floating ones as float32; a damaged
    file, or a pickle that would need code run to load, is one line naming the file."""
    if path.suffix == ".safetensors":
        state = _read_safetensors(path)
    else:
        state = _read_pickle(path)
    return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise NmtError(f"{path}: damaged, truncated or not a safetensors file ({e})") from None


def _read_pickle(path: Path) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL (\S+)", str(e))
        what = f"it would call {found.group(1)}" if found else "it holds more than tensors"
        raise NmtError(
            f"{path}: refused, not loaded: unpickling it would run code ({what}); "
            "convert it to model.safetensors where it came from"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise NmtError(f"{path}: damaged or not a PyTorch weights file ({e})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise NmtError(f"{path}: not a state dict of tensors")
    return state


def _take(state: dict[str, torch.Tensor], path: Path, *names: str) -> torch.Tensor:
    """The first of `names` the checkpoint holds."""
    for name in names:
        if name in state:
            return state[name]
    raise NmtError(f"{path}: tensor {names[0]} is missing")


def _linear(out: dict[str, torch.Tensor], dst: str, state: dict[str, Any], src: str, path: Path):
    out[f"{dst}.weight"] = _take(state, path, f"{src}.weight")
    out[f"{dst}.bias"] = _take(state, path, f"{src}.bias")


def _fused(state: dict[str, Any], path: Path, attn: str, parts: tuple[str, ...]) -> list[Any]:
    """Weight and bias of Marian's separate q / k / v projections, concatenated in nmt's order."""
    w = torch.cat([_take(state, path, f"{attn}.{p}_proj.weight") for p in parts])
    b = torch.cat([_take(state, path, f"{attn}.{p}_proj.bias") for p in parts])
    return [w, b]


def _fill(out: dict, state: dict, path: Path, src: str, dst: str, names: dict[str, str]) -> None:
    """One layer's plain linears and norms, and its fused self-attention projection."""
    for ours, theirs in names.items():
        _linear(out, f"{dst}.{ours}", state, f"{src}.{theirs}", path)
    w, b = _fused(state, path, f"{src}.self_attn", ("q", "k", "v"))
    out[f"{dst}.self_attn.qkv_proj.weight"], out[f"{dst}.self_attn.qkv_proj.bias"] = w, b


def _layers(state: dict[str, Any], path: Path, cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """Every encoder and decoder layer's tensors under nmt's names."""
    out: dict[str, torch.Tensor] = {}
    for i in range(cfg.encoder_layers):
        _fill(out, state, path, f"{_ENC}.{i}", f"encoder_layers.{i}", _ENCODER_LAYER)
    for i in range(cfg.decoder_layers):
        src, dst = f"{_DEC}.{i}", f"decoder_layers.{i}"
        _fill(out, state, path, src, dst, _DECODER_LAYER)
        w, b = _fused(state, path, f"{src}.encoder_attn", ("k", "v"))
        out[f"{dst}.cross_attn.kv_proj.weight"], out[f"{dst}.cross_attn.kv_proj.bias"] = w, b
    return out


def embedding_rows(state: dict[str, torch.Tensor], path: Path, side: str) -> int:
    """Rows of the encoder's or the decoder's token embeddings (the shared matrix if any)."""
    names = ["model.shared.weight", f"model.{side}.embed_tokens.weight"]
    return int(_take(state, path, *(names[::-1] if side == "decoder" else names)).shape[0])


def to_nmt(
    state: dict[str, torch.Tensor], path: Path, cfg: TransformerConfig, shared: bool
) -> dict[str, torch.Tensor]:
    """nmt's state dict for a Marian checkpoint: embeddings (tied copies rebuilt), layers, the
    output layer and its fixed bias (zeros when the checkpoint leaves it out)."""
    enc = _take(state, path, "model.shared.weight", "model.encoder.embed_tokens.weight")
    dec = enc if shared else _take(state, path, "model.decoder.embed_tokens.weight")
    out = {"src_embed.weight": enc, "tgt_embed.weight": dec}
    if not cfg.tie_embeddings:
        out["output.weight"] = _take(state, path, "lm_head.weight")
    bias = state.get("final_logits_bias")
    out["output_bias"] = torch.zeros(dec.size(0)) if bias is None else bias.reshape(-1)
    out.update(_layers(state, path, cfg))
    if cfg.norm == "pre":  # Pegasus: the encoder's and decoder's final layer norms
        _linear(out, "encoder_norm", state, "model.encoder.layer_norm", path)
        _linear(out, "decoder_norm", state, "model.decoder.layer_norm", path)
    if cfg.positions == "sinusoidal":  # an nmt export: its channels back in nmt's order
        out = permute_residual(out, torch.argsort(residual_order(cfg.d_model)))
    return out


def residual_order(d: int) -> torch.Tensor:
    """The channel order that turns nmt's interleaved table (sin on even, cos on odd channels)
    into the sin|cos halves one: halves channel k is interleaved channel order[k]."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


# nmt's tensors whose rows (outputs) or columns (inputs) are channels of the residual stream
_ROWS = re.compile(r"(norms\.\d+|encoder_norm|decoder_norm|out_proj|ff\.fc2)\.(weight|bias)$")
_COLUMNS = re.compile(r"(embed|output|qkv_proj|q_proj|kv_proj|ff\.fc1)\.weight$")


def permute_residual(
    state: dict[str, torch.Tensor], order: torch.Tensor
) -> dict[str, torch.Tensor]:
    """nmt's state dict with the residual stream's channels reordered (channel k := channel
    order[k]) through every tensor that touches it: the same function, other channel order."""
    out = {}
    for name, value in state.items():
        if _ROWS.search(name):
            value = value[order]
        elif _COLUMNS.search(name):
            value = value[:, order]
        out[name] = value.contiguous()
    return out


def _unfuse(out: dict, w: torch.Tensor, b: torch.Tensor, attn: str, parts: str) -> None:
    """A fused projection split into transformers' separate q / k / v ones."""
    for p, wp, bp in zip(parts, w.chunk(len(parts)), b.chunk(len(parts)), strict=True):
        out[f"{attn}.{p}_proj.weight"], out[f"{attn}.{p}_proj.bias"] = wp, bp


def _unfill(out: dict, state: dict, src: str, dst: str, names: dict[str, str]) -> None:
    """One layer back under transformers' names."""
    for ours, theirs in names.items():
        for kind in ("weight", "bias"):
            out[f"{dst}.{theirs}.{kind}"] = state[f"{src}.{ours}.{kind}"]
    w, b = state[f"{src}.self_attn.qkv_proj.weight"], state[f"{src}.self_attn.qkv_proj.bias"]
    _unfuse(out, w, b, f"{dst}.self_attn", "qkv")


def from_nmt(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """transformers' Marian / Pegasus tensors for nmt's state dict (channels already in the
    halves order): shared or separate embeddings, layers, final norms, output layer and bias."""
    enc, tgt = state["src_embed.weight"], state["tgt_embed.weight"]
    if torch.equal(enc, tgt):
        out = {"model.shared.weight": tgt}
    else:  # Marian's separate embeddings (share_encoder_decoder_embeddings false)
        out = {"model.encoder.embed_tokens.weight": enc, "model.decoder.embed_tokens.weight": tgt}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = state["output.weight"]
    bias = state.get("output_bias")
    out["final_logits_bias"] = torch.zeros(1, tgt.size(0)) if bias is None else bias.reshape(1, -1)
    for i in range(cfg.encoder_layers):
        _unfill(out, state, f"encoder_layers.{i}", f"{_ENC}.{i}", _ENCODER_LAYER)
    for i in range(cfg.decoder_layers):
        src, dst = f"decoder_layers.{i}", f"{_DEC}.{i}"
        _unfill(out, state, src, dst, _DECODER_LAYER)
        w, b = state[f"{src}.cross_attn.kv_proj.weight"], state[f"{src}.cross_attn.kv_proj.bias"]
        _unfuse(out, w, b, f"{dst}.encoder_attn", "kv")
    if cfg.norm == "pre":
        for ours, side in (("encoder_norm", "encoder"), ("decoder_norm", "decoder")):
            for kind in ("weight", "bias"):
                out[f"model.{side}.layer_norm.{kind}"] = state[f"{ours}.{kind}"]
    return {k: v.contiguous() for k, v in out.items()}
