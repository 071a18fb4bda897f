"""An original Marian release (an OPUS-MT zip, unzipped): the model's `.npz` (Marian's tensor
names, its config as YAML in `special:model.yml`), `decoder.yml`, the `*.vocab.yml` piece -> id
vocabularies and `source.spm` / `target.spm`. It is read as the Hugging Face Marian directory that
transformers' conversion would make of it (the same config keys and tensor names, a `<pad>` piece
added after the vocabulary with a zero embedding row, which is also the decoder's start), so the
importer takes it from there. A model nmt cannot express is refused in one line naming what it is."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from nmt.errors import NmtError
from nmt.pretrained.marian import MARIAN_DEFAULTS, MarianDir

MODEL_YML, DECODER_YML, PAD = "special:model.yml", "decoder.yml", "<pad>"
VOCAB_SUFFIXES = (".yml", ".yaml", ".json")
Getter = Callable[[str], torch.Tensor]
# Marian's value for what a model.yml leaves out, for the keys that change what the model computes
MARIAN_MODEL_DEFAULTS: dict[str, Any] = {
    "type": "transformer",
    "transformer-decoder-autoreg": "self-attention",
    "transformer-preprocess": "",
    "transformer-postprocess": "dan",
    "transformer-postprocess-emb": "d",
    "transformer-postprocess-top": "",
    "transformer-ffn-activation": "swish",
    "transformer-ffn-depth": 2,
    "transformer-decoder-ffn-depth": 0,
    "transformer-decoder-dim-ffn": 0,
    "transformer-tied-layers": [],
    "transformer-no-projection": False,
    "transformer-pool": False,
    "transformer-train-position-embeddings": False,
    "right-left": False,
    "tied-embeddings": False,
    "tied-embeddings-src": False,
    "tied-embeddings-all": False,
    "transformer-dropout": 0.1,
    "transformer-dropout-attention": 0.0,
}
# key -> (the values nmt expresses, what another value means)
SUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "type": (("transformer",), "only Marian's transformer is supported"),
    "transformer-preprocess": (("",), "a pre-norm transformer; Marian's post-norm one only"),
    "transformer-postprocess": (("dan",), "Marian's post-norm transformer is 'dan'"),
    "transformer-postprocess-emb": (("d", ""), "a layer norm on the embeddings"),
    "transformer-postprocess-top": (("",), "a final layer norm"),
    "transformer-ffn-activation": (
        ("swish", "relu"),
        "Marian's gelu is x * sigmoid(1.702 x), nmt's is exact; swish and relu are supported",
    ),
    "transformer-ffn-depth": ((2,), "feed-forward blocks of two layers only"),
    "transformer-decoder-ffn-depth": ((0, 2), "feed-forward blocks of two layers only"),
    "transformer-tied-layers": (([],), "layers that share weights"),
    "transformer-no-projection": ((False,), "attention without output projection"),
    "transformer-pool": ((False,), "a pooling encoder"),
    "transformer-train-position-embeddings": ((False,), "learned positions"),
    "right-left": ((False,), "a right-to-left model"),
}
REQUIRED = ("dim-emb", "enc-depth", "dec-depth", "transformer-heads", "transformer-dim-ffn")


@dataclass(frozen=True)
class Release:
    """The files of a Marian release: its model, (source, target) vocabularies and decoder.yml."""

    path: Path
    model: Path
    vocabs: tuple[Path, Path]
    decoder: dict[str, Any]


def is_release(path: Path) -> bool:
    """Whether SOURCE is a Marian release: an .npz, or a directory with decoder.yml or an .npz
    (and no config.json of the Hugging Face form)."""
    if path.is_file():
        return path.suffix == ".npz"
    if not path.is_dir() or (path / "config.json").is_file():
        return False
    return (path / DECODER_YML).is_file() or any(path.glob("*.npz"))


def _yaml(path: Path) -> Any:
    """A YAML file parsed; anything unreadable is one line naming it."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise NmtError(f"{path}: not a YAML file ({str(e).splitlines()[0]})") from None


def _listed(yml: Path, value: Any, key: str) -> list[Path]:
    """The files decoder.yml lists under `key`, beside it where a path does not exist as given."""
    names = value if isinstance(value, list) else [value] if value else []
    found = []
    for name in map(str, names):
        path = Path(name) if Path(name).is_absolute() else yml.parent / name
        if not path.is_file() and (yml.parent / Path(name).name).is_file():
            path = yml.parent / Path(name).name
        if not path.is_file():
            raise NmtError(f"{yml}: {key} names {name}, which is not there")
        found.append(path)
    return found


def _only(path: Path, pattern: str, what: str) -> Path:
    """The one file of `path` matching `pattern`."""
    found = sorted(p for p in path.glob(pattern) if p.name != DECODER_YML)
    if len(found) != 1:
        names = ", ".join(p.name for p in found) or "none"
        raise NmtError(f"{path}: needs one {what} ({pattern}: {names}), or a decoder.yml naming it")
    return found[0]


def open_release(source: Path) -> Release:
    """A release's model and vocabularies: as decoder.yml names them, else the directory's one
    .npz and one *.vocab.yml. An .npz given itself is the model."""
    path = source.parent if source.is_file() else source
    yml = path / DECODER_YML
    decoder = _yaml(yml) if yml.is_file() else {}
    if not isinstance(decoder, dict):
        raise NmtError(f"{yml}: not a YAML mapping")
    models = _listed(yml, decoder.get("models"), "models")
    vocabs = _listed(yml, decoder.get("vocabs"), "vocabs")
    if source.is_file():
        models = [source]
    elif len(models) > 1:
        raise NmtError(f"{yml}: names {len(models)} models (an ensemble); import each .npz alone")
    model = models[0] if models else _only(path, "*.npz", "model")
    if not vocabs:
        vocabs = [_only(path, "*vocab.yml", "vocabulary")]
    for v in vocabs:
        if v.suffix not in VOCAB_SUFFIXES:
            raise NmtError(f"{v}: a {v.suffix} vocabulary is not supported (.yml or .json only)")
    return Release(path, model, (vocabs[0], vocabs[-1]), decoder)


def read_vocab(path: Path) -> list[str]:
    """A Marian vocabulary (.yml or .json: piece -> id) as its pieces in id order. YAML scalars
    are read as plain strings, so pieces such as `yes` or `null` stay what they are."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.load(text, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as e:
        raise NmtError(f"{path}: not a vocabulary file ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or not data:
        raise NmtError(f"{path}: not a vocabulary (a mapping of piece -> id)")
    pieces: list[str | None] = [None] * len(data)
    for piece, i in data.items():
        index = int(i) if str(i).isdigit() else -1
        if not 0 <= index < len(pieces) or pieces[index] is not None:
            raise NmtError(f"{path}: ids must be 0 to {len(pieces) - 1}, each once; {piece!r}: {i}")
        pieces[index] = str(piece)
    return [str(p) for p in pieces]


def read_npz(path: Path) -> tuple[Any, dict[str, Any]]:
    """The .npz's arrays (read lazily) and its model config (special:model.yml)."""
    try:
        arrays = np.load(path, allow_pickle=False)
        raw = np.asarray(arrays[MODEL_YML]).tobytes() if MODEL_YML in arrays.files else None
    except (OSError, ValueError) as e:
        raise NmtError(f"{path}: damaged or not a Marian .npz ({e})") from None
    if raw is None:
        raise NmtError(f"{path}: no {MODEL_YML} (not a Marian model file)")
    try:
        config = yaml.safe_load(raw.rstrip(b"\0").decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise NmtError(f"{path}: {MODEL_YML} is not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise NmtError(f"{path}: {MODEL_YML} is not a YAML mapping")
    return arrays, MARIAN_MODEL_DEFAULTS | config


def check_model(where: str, c: dict[str, Any], names: list[str]) -> None:
    """Refuse, naming it, a Marian model nmt cannot express."""
    autoreg = c["transformer-decoder-autoreg"]
    if autoreg != "self-attention":
        cell = f", dec-cell {c.get('dec-cell')}" if autoreg == "rnn" else ""
        raise NmtError(
            f"{where}: transformer-decoder-autoreg = {autoreg}{cell} is not supported "
            "(an RNN or average-attention decoder; nmt's decoder is self-attention)"
        )
    for key, (plain, why) in SUPPORTED.items():
        if c[key] not in plain:
            raise NmtError(f"{where}: {key} = {json.dumps(c[key])} is not supported ({why})")
    for key in REQUIRED:
        if not isinstance(c.get(key), int):
            raise NmtError(f"{where}: {key} is missing or not a number")
    dec_ffn = c["transformer-decoder-dim-ffn"]
    if dec_ffn not in (0, c["transformer-dim-ffn"]):
        raise NmtError(
            f"{where}: transformer-decoder-dim-ffn = {dec_ffn} differs from "
            f"transformer-dim-ffn = {c['transformer-dim-ffn']} (nmt uses one size)"
        )
    if tied_pair(c) == (True, False):
        raise NmtError(
            f"{where}: tied-embeddings-src without tied-embeddings is not supported "
            "(nmt ties all three embeddings or the target two)"
        )
    for name in ("Wpos", "Wtype", "encoder_emb_ln_scale_pre", "decoder_emb_ln_scale_pre"):
        if name in names:
            raise NmtError(f"{where}: tensor {name} is not supported (nmt cannot express it)")


def tied_pair(c: dict[str, Any]) -> tuple[bool, bool]:
    """(source and target embeddings shared, target embeddings tied to the output layer)."""
    every = c["tied-embeddings-all"] is True
    return every or c["tied-embeddings-src"] is True, every or c["tied-embeddings"] is True


def hf_config(c: dict[str, Any], sizes: tuple[int, int], beams: int) -> dict[str, Any]:
    """The config.json transformers' conversion writes for the model (`sizes`: the vocabularies
    with <pad> added; pad, the last target id, is the decoder's start and never emitted)."""
    shared, tied = tied_pair(c)
    pad = sizes[1] - 1
    return MARIAN_DEFAULTS | {
        "model_type": "marian",
        "vocab_size": sizes[0],
        "decoder_vocab_size": sizes[1],
        "d_model": c["dim-emb"],
        "encoder_layers": c["enc-depth"],
        "decoder_layers": c["dec-depth"],
        "encoder_attention_heads": c["transformer-heads"],
        "decoder_attention_heads": c["transformer-heads"],
        "encoder_ffn_dim": c["transformer-dim-ffn"],
        "decoder_ffn_dim": c["transformer-dim-ffn"],
        "activation_function": c["transformer-ffn-activation"],
        "max_position_embeddings": max(1024, int(c.get("max-length") or 0) + 2),
        "scale_embedding": True,
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": tied,
        "dropout": float(c["transformer-dropout"]),
        "attention_dropout": float(c["transformer-dropout-attention"]),
        "pad_token_id": pad,
        "decoder_start_token_id": pad,
        "bad_words_ids": [[pad]],
        "num_beams": beams,
        "max_length": 512,
    }


def _getter(arrays: Any, where: Path) -> Getter:
    """A tensor of the .npz by Marian's name, as float32; a missing one is one line naming it."""

    def get(name: str) -> torch.Tensor:
        if name not in arrays.files:
            raise NmtError(f"{where}: tensor {name} is missing")
        return torch.from_numpy(np.array(arrays[name], dtype=np.float32))

    return get


def _attention(out: dict[str, torch.Tensor], get: Getter, hf: str, marian: str) -> None:
    """One attention block: Marian's x @ W as torch's W^T, its biases and its layer norm."""
    for proj, x in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "o")):
        out[f"{hf}.{proj}.weight"] = get(f"{marian}_W{x}").T.contiguous()
        out[f"{hf}.{proj}.bias"] = get(f"{marian}_b{x}").reshape(-1)


def _norm(out: dict[str, torch.Tensor], get: Getter, hf: str, marian: str) -> None:
    out[f"{hf}.weight"] = get(f"{marian}_ln_scale").reshape(-1)
    out[f"{hf}.bias"] = get(f"{marian}_ln_bias").reshape(-1)


def _layer(out: dict[str, torch.Tensor], get: Getter, hf: str, marian: str, cross: bool) -> None:
    """One encoder or decoder layer under transformers' names."""
    _attention(out, get, f"{hf}.self_attn", f"{marian}_self")
    _norm(out, get, f"{hf}.self_attn_layer_norm", f"{marian}_self_Wo")
    if cross:
        _attention(out, get, f"{hf}.encoder_attn", f"{marian}_context")
        _norm(out, get, f"{hf}.encoder_attn_layer_norm", f"{marian}_context_Wo")
    for i in (1, 2):
        out[f"{hf}.fc{i}.weight"] = get(f"{marian}_ffn_W{i}").T.contiguous()
        out[f"{hf}.fc{i}.bias"] = get(f"{marian}_ffn_b{i}").reshape(-1)
    _norm(out, get, f"{hf}.final_layer_norm", f"{marian}_ffn_ffn")


def _padded(t: torch.Tensor) -> torch.Tensor:
    """One zero row (or value) more: <pad>'s."""
    return torch.cat([t, t.new_zeros((1, *t.shape[1:]))])


def hf_state(arrays: Any, where: Path, c: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The model's tensors under transformers' names, each embedding and the output layer with a
    zero <pad> row added (its logit bias 0: it is never emitted)."""
    get, out = _getter(arrays, where), {}
    shared, tied = tied_pair(c)
    if shared:
        out["model.shared.weight"] = _padded(get("Wemb"))
    else:
        out["model.encoder.embed_tokens.weight"] = _padded(get("encoder_Wemb"))
        out["model.decoder.embed_tokens.weight"] = _padded(get("decoder_Wemb"))
    for i in range(c["enc-depth"]):
        _layer(out, get, f"model.encoder.layers.{i}", f"encoder_l{i + 1}", cross=False)
    for i in range(c["dec-depth"]):
        _layer(out, get, f"model.decoder.layers.{i}", f"decoder_l{i + 1}", cross=True)
    if not tied:
        name = "decoder_ff_logit_out_W"
        w = get(name).T if name in arrays.files else get(f"{name}t")
        out["lm_head.weight"] = _padded(w.contiguous())
    out["final_logits_bias"] = _padded(get("decoder_ff_logit_out_b").reshape(-1)).reshape(1, -1)
    return out


def _rows(state: dict[str, torch.Tensor], side: str) -> int:
    """Rows of a side's embeddings, <pad>'s left out."""
    name = f"model.{side}.embed_tokens.weight"
    return int(state.get(name, state.get("model.shared.weight", torch.zeros(1))).shape[0]) - 1


def _write_vocab(pieces: list[str], where: Path, out: Path) -> int:
    """vocab.json (piece -> id) of a Marian vocabulary with <pad> added at the end; returns eos's id."""
    if PAD in pieces or "</s>" not in pieces:
        why = f"holds {PAD}" if PAD in pieces else "has no </s>"
        raise NmtError(f"{where}: {why} (a Marian vocabulary has </s> and <unk>, and no {PAD})")
    out.write_text(json.dumps({p: i for i, p in enumerate([*pieces, PAD])}), encoding="utf-8")
    return pieces.index("</s>")


def as_marian_dir(source: Path, scratch: Path) -> tuple[MarianDir, dict[str, torch.Tensor]]:
    """A Marian release as the Hugging Face directory transformers' conversion makes of it: the
    config and tensors (in memory), the vocabularies written to `scratch` as vocab.json."""
    r = open_release(source)
    arrays, c = read_npz(r.model)
    check_model(f"{r.model}", c, list(arrays.files))
    state = hf_state(arrays, r.model, c)
    pieces = [read_vocab(v) for v in r.vocabs]
    separate = pieces[0] != pieces[1]
    for side, vocab, got in zip(("encoder", "decoder"), r.vocabs, pieces, strict=True):
        if len(got) != _rows(state, side):
            raise NmtError(
                f"{vocab}: {len(got)} pieces, but the model's {side} embeddings have "
                f"{_rows(state, side)} rows"
            )
    eos = _write_vocab(pieces[0], r.vocabs[0], scratch / "vocab.json")
    target = scratch / "target_vocab.json" if separate else None
    if target is not None:
        eos = _write_vocab(pieces[1], r.vocabs[1], target)
    sizes = (len(pieces[0]) + 1, len(pieces[1]) + 1)
    beams = int(r.decoder.get("beam-size") or 12)  # Marian's default
    config = hf_config(c, sizes, beams) | {"eos_token_id": eos, "forced_eos_token_id": eos}
    m = MarianDir(
        path=r.path,
        config=config,
        weights=r.model,
        source_spm=_needed(r.path, "source.spm"),
        target_spm=_needed(r.path, "target.spm"),
        vocab=scratch / "vocab.json",
        target_vocab=target,
        tokenizer_config={"separate_vocabs": separate},
        generation={},
    )
    return m, state


def _needed(path: Path, name: str) -> Path:
    if not (path / name).is_file():
        raise NmtError(f"{path / name}: file not found (a Marian release holds {name})")
    return path / name
