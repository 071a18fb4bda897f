"""A Hugging Face Marian directory (what OPUS-MT publishes), or a Pegasus one (the pre-norm class
`nmt export --format huggingface` writes), read as nmt's config, special ids and decoding
defaults: every key that changes what the model computes is read, and a value nmt cannot express
exactly is refused in one line naming the key and the value."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.config import Config, DecodingConfig, TransformerConfig
from nmt.data.marian_vocab import SpecialPieces
from nmt.data.vocab import VocabInfo
from nmt.errors import NmtError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# What a Marian config.json means by a key it leaves out (transformers' MarianConfig defaults)
MARIAN_DEFAULTS: dict[str, Any] = {
    "max_position_embeddings": 1024,
    "activation_function": "gelu",
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "scale_embedding": False,
    "decoder_start_token_id": 58100,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "forced_eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "max_length": 512,
    "num_beams": 1,
    "length_penalty": 1.0,
}
# Pegasus: the same layers, pre-norm with final encoder and decoder norms, one shared embedding
PEGASUS_DEFAULTS: dict[str, Any] = MARIAN_DEFAULTS | {
    "decoder_start_token_id": 0,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "forced_eos_token_id": 1,
}
DEFAULTS = {"marian": MARIAN_DEFAULTS, "pegasus": PEGASUS_DEFAULTS}
NORMS = {"marian": "post", "pegasus": "pre"}
# config.json of an nmt export: the weights' channels were reordered from nmt's interleaved
# sinusoids to the halves table; importing puts them back
NMT_POSITIONS = "nmt_positions"
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
# Keys transformers' Marian ignores (it is always post-norm with fixed sinusoids): a value it
# would silently drop is refused, since the weights were trained with it.
IGNORED_BY_MARIAN = {
    "normalize_before": False,
    "normalize_embedding": False,
    "static_position_embeddings": True,
    "add_final_layer_norm": False,
    "add_bias_logits": False,
}


@dataclass(frozen=True)
class MarianDir:
    """The files of a Hugging Face Marian directory, checked to be there."""

    path: Path
    config: dict[str, Any]
    weights: Path
    source_spm: Path
    target_spm: Path
    vocab: Path
    target_vocab: Path | None
    tokenizer_config: dict[str, Any]
    generation: dict[str, Any]

    @property
    def specials(self) -> SpecialPieces:
        """The special pieces the tokenizer config names (Marian's defaults otherwise)."""
        tc = self.tokenizer_config
        return SpecialPieces(
            unk=_piece(tc.get("unk_token", "<unk>")),
            eos=_piece(tc.get("eos_token", "</s>")),
            pad=_piece(tc.get("pad_token", "<pad>")),
        )

    @property
    def languages(self) -> tuple[str | None, str | None]:
        """(source, target) language codes the tokenizer config names, where it does."""
        tc = self.tokenizer_config
        return tc.get("source_lang"), tc.get("target_lang")


def _piece(token: Any) -> str:
    """A special token as tokenizer_config.json spells it: a string or an AddedToken dict."""
    return str(token["content"]) if isinstance(token, dict) else str(token)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file; anything else is one line naming the file."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise NmtError(f"{path}: not a JSON file ({e})") from None
    if not isinstance(value, dict):
        raise NmtError(f"{path}: not a JSON object")
    return value


def _needed(path: Path, name: str) -> Path:
    """A file the directory must hold."""
    if not (path / name).is_file():
        raise NmtError(f"{path / name}: file not found (a Marian directory holds {name})")
    return path / name


def open_marian(path: Path) -> MarianDir:
    """The files of a Marian directory, each required one present, the JSON ones parsed."""
    raw = read_json(_needed(path, "config.json"))
    if raw.get("model_type") not in DEFAULTS:
        raise NmtError(
            f"{path / 'config.json'}: model_type {raw.get('model_type')!r} is not 'marian' "
            "(or 'pegasus', as nmt export --format huggingface writes)"
        )
    config = DEFAULTS[raw["model_type"]] | raw
    weights = next((path / n for n in WEIGHT_FILES if (path / n).is_file()), None)
    if weights is None:
        raise NmtError(f"{path}: no weights (model.safetensors or pytorch_model.bin)")
    tc_path = path / "tokenizer_config.json"
    tokenizer_config = read_json(tc_path) if tc_path.is_file() else {}
    separate = tokenizer_config.get("separate_vocabs") is True
    gen_path = path / "generation_config.json"
    return MarianDir(
        path=path,
        config=config,
        weights=weights,
        source_spm=_needed(path, "source.spm"),
        target_spm=_needed(path, "target.spm"),
        vocab=_needed(path, "vocab.json"),
        target_vocab=_needed(path, "target_vocab.json") if separate else None,
        tokenizer_config=tokenizer_config,
        generation=read_json(gen_path) if gen_path.is_file() else {},
    )


def _refuse(where: Path, key: str, value: Any, why: str) -> NmtError:
    return NmtError(f"{where}: {key} = {json.dumps(value)} {why}")


def _check_expressible(where: Path, c: dict[str, Any]) -> None:
    """Refuse the values transformers' Marian would ignore and nmt cannot express."""
    for key, plain in IGNORED_BY_MARIAN.items():
        if key in c and c[key] is not None and bool(c[key]) != plain:
            raise _refuse(
                where,
                key,
                c[key],
                "is not supported (Marian models are post-norm "
                "with fixed sinusoidal positions and no extra norms)",
            )
    for key in ("encoder_layerdrop", "decoder_layerdrop"):
        if float(c.get(key) or 0.0) != 0.0:
            raise _refuse(where, key, c[key], "is not supported")
    for size, what in (("attention_heads", "head count"), ("ffn_dim", "size")):
        ours, theirs = f"encoder_{size}", f"decoder_{size}"
        if c.get(ours) != c.get(theirs):
            why = f"differs from {ours} (nmt uses one {what})"
            raise _refuse(where, theirs, c.get(theirs), why)


def model_config(where: Path, c: dict[str, Any]) -> TransformerConfig:
    """nmt's Transformer config for a Marian config.json."""
    _check_expressible(where, c)
    act = c.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise _refuse(where, "activation_function", act, f"is not one of {sorted(ACTIVATIONS)}")
    shared = c.get("share_encoder_decoder_embeddings", True) is not False
    tied = c.get("tie_word_embeddings", True) is not False
    if shared and not tied:
        raise _refuse(
            where,
            "tie_word_embeddings",
            False,
            "with shared encoder and decoder "
            "embeddings is not supported (nmt ties all three or the target two)",
        )
    d, heads = int(c["d_model"]), int(c["encoder_attention_heads"])
    if d % heads:
        raise _refuse(where, "d_model", d, f"is not divisible by {heads} heads")
    positions = "sinusoidal" if c.get(NMT_POSITIONS) == "sinusoidal" else "sinusoidal-halves"
    return TransformerConfig(
        encoder_layers=int(c["encoder_layers"]),
        decoder_layers=int(c["decoder_layers"]),
        max_positions=int(c.get("max_position_embeddings", 512)),
        tie_embeddings=tied,
        dropout=float(c.get("dropout", 0.1)),
        d_model=d,
        heads=heads,
        ff_dim=int(c["encoder_ffn_dim"]),
        norm=NORMS[c["model_type"]],
        positions=positions,
        activation=ACTIVATIONS[act],
        attention_dropout=float(c.get("attention_dropout", 0.0)),
        scale_embeddings=c.get("scale_embedding", False) is True,
        output_bias=True,
    )


def _setting(m: MarianDir, key: str, default: Any = None) -> Any:
    """A generation setting: generation_config.json first, then config.json (Marian's defaults
    for what it leaves out)."""
    return m.generation.get(key, m.config.get(key, default))


def special_ids(m: MarianDir, src_size: int, tgt_size: int) -> VocabInfo:
    """The model's own special ids, as config.json (and generation_config.json) give them."""
    c, where = m.config, m.path / "config.json"
    pad, eos = _setting(m, "pad_token_id"), _setting(m, "eos_token_id")
    start = _setting(m, "decoder_start_token_id", pad)
    if isinstance(eos, list):
        if len(eos) != 1:
            raise _refuse(where, "eos_token_id", eos, "is not supported (one eos id)")
        eos = eos[0]
    bad = _setting(m, "bad_words_ids") or []
    if any(len(words) != 1 for words in bad):
        raise _refuse(where, "bad_words_ids", bad, "is not supported (single tokens only)")
    for key, value in (
        ("pad_token_id", pad),
        ("eos_token_id", eos),
        ("decoder_start_token_id", start),
    ):
        if not isinstance(value, int) or not 0 <= value < tgt_size:
            raise _refuse(where, key, value, f"is not an id of the {tgt_size}-piece vocabulary")
    shared = c.get("share_encoder_decoder_embeddings", True) is not False
    return VocabInfo(
        src_size=src_size,
        tgt_size=tgt_size,
        joint=shared,
        pad_id=pad,
        unk_id=-1,  # the tokenizer's; filled in by the importer
        bos_id=start,
        eos_id=eos,
        never=tuple(sorted({words[0] for words in bad})),
    )


def decoding_defaults(m: MarianDir, max_positions: int) -> DecodingConfig:
    """generate()'s defaults as nmt's: num_beams, max_length (forced eos counted), the rule, the
    n-gram ban."""
    fe, eos = _setting(m, "forced_eos_token_id"), _setting(m, "eos_token_id")
    if fe not in (None, eos, [eos]):
        raise _refuse(m.path / "config.json", "forced_eos_token_id", fe, f"is not eos ({eos})")
    forced = fe is not None
    max_length = int(_setting(m, "max_length", 512) or 512)
    tokens = max(1, max_length - (2 if forced else 1))  # the start token holds a position
    alpha = float(_setting(m, "length_penalty", 1.0))
    return DecodingConfig(
        beam_size=int(_setting(m, "num_beams", 4) or 1),
        length_penalty=alpha,
        max_len_a=0.0,
        max_len_b=min(tokens, max_positions - 1),
        stop="transformers",
        forced_eos=forced,
        no_repeat_ngram_size=int(_setting(m, "no_repeat_ngram_size", 0) or 0),
    )


def nmt_config(m: MarianDir, model: TransformerConfig) -> Config:
    """The whole config an imported model directory holds."""
    return Config(model=model, decoding=decoding_defaults(m, model.max_positions))
