"""Starting from a trained model (fine-tuning, domain adaptation, continued training).

Two steps, as in fairseq, Marian and OpenNMT: `nmt preprocess --spm-from DIR` encodes the new corpus
with the SentencePiece models of DIR (a MODEL_DIR or a DATA_DIR), so every id means the same piece
to the trained weights; `nmt train --init-from MODEL_DIR` then starts from that model's weights with
a fresh optimizer, schedule and step count. The pieces are checked one by one before any weights
load, so a corpus encoded with other SentencePiece models is a one-line error, not a silent
scramble of the embeddings. A corpus encoded with --spm-from and --extend-vocab holds the same
pieces plus appended ones: the trained rows are copied and each new id's embedding and output rows
start at the mean of the trained rows (a new piece starts as an average token, not as noise the
trained layers never saw).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmt.config import Config, ModelConfig, TrainingConfig
from nmt.data.vocab import vocabulary_difference
from nmt.dirs.data import DataDir
from nmt.dirs.model import ModelDir
from nmt.errors import NmtError

# The parameters with one row per vocabulary id, and the side whose vocabulary they follow.
VOCAB_ROWS = {"src_embed.weight": 0, "tgt_embed.weight": 1, "output.weight": 1}
THIS_RUN = "the model section of this run"  # what the initial weights must match, in errors


def check_same_vocabulary(initial: ModelDir, source: DataDir) -> tuple[int, int]:
    """The corpus must be encoded with the pieces the initial weights were trained on (or those
    plus appended ones, `--extend-vocab`), and lowercased as they were
    (nmt.data.vocab.vocabulary_difference); returns the initial model's (source, target) sizes."""
    init_dir, mine, data_dir = initial.path, source.tokenizers, source.path
    trained = initial.tokenizers
    lowercase = trained[0].lowercase
    differs = vocabulary_difference(mine, trained, extended_ok=True)
    if differs == "lowercase":
        how = "with" if lowercase else "without"
        raise NmtError(
            f"{data_dir}: {init_dir} was trained on text preprocessed {how} --lowercase (preprocess "
            f"the corpus with --spm-from {init_dir}{' --lowercase' if lowercase else ''})"
        )
    if differs is not None:
        entry = source.tokenizer_from
        whose = f" ({entry['model']}'s tokenizer)" if entry else ""
        raise NmtError(
            f"{data_dir}: its {differs} vocabulary{whose} differs from {init_dir}'s (preprocess "
            f"the corpus with {_flag(initial)} {init_dir})"
        )
    return trained[0].vocab_size, trained[1].vocab_size


def _flag(initial: ModelDir) -> str:
    """The preprocess flag that encodes a corpus for `initial`: an imported model's tokenizer
    maps pieces through its own vocabulary (--tokenizer-from); an nmt model's is SentencePiece."""
    return "--tokenizer-from" if initial.meta.get("pieces") else "--spm-from"


def check_special_ids(initial: ModelDir, source: DataDir) -> None:
    """A corpus for an imported model must be encoded with its tokenizer (`--tokenizer-from`),
    and one encoded so must have the initial model's sizes and special ids: else one line
    naming both models."""
    entry, init_dir = source.tokenizer_from, initial.path
    if entry is None:
        if initial.meta.get("pieces"):
            raise NmtError(
                f"{source.path}: not encoded with {init_dir}'s tokenizer (preprocess the "
                f"corpus with --tokenizer-from {init_dir})"
            )
        return
    ours, theirs = source.vocab_info, initial.vocab
    keys = ("src_size", "tgt_size", "pad_id", "unk_id", "bos_id", "eos_id")
    changes = [
        f"{k} {getattr(ours, k)} vs {getattr(theirs, k)}"
        for k in keys
        if getattr(ours, k) != getattr(theirs, k)
    ]
    if changes or (entry.get("kind") == "imported") != bool(initial.meta.get("pieces")):
        what = ", ".join(changes) or "another kind of tokenizer"
        raise NmtError(
            f"{source.path}: encoded with the tokenizer of {entry['model']}, which does not fit "
            f"--init-from {init_dir} ({what}); preprocess the corpus with {_flag(initial)} "
            f"{init_dir}"
        )


def write_tokenizer(model_dir: ModelDir, source: DataDir) -> None:
    """A run on a corpus encoded with an imported model's tokenizer: copy its vocabularies into
    MODEL_DIR and name them in vocab.json, so the trained model tokenizes as the imported one."""
    import shutil

    from nmt.textio import atomic_write

    entry = source.tokenizer_from
    files = entry.get("files") if entry else None
    if not files:
        return
    for key in ("pieces", "target_pieces"):
        if files.get(key):
            with atomic_write(model_dir.path / files[key], "wb") as out:
                with open(source.path / files[key], "rb") as src:
                    shutil.copyfileobj(src, out)
    model_dir.write_vocab_json(model_dir.meta | files)


def init_weights(
    model: Any,
    arch: ModelConfig,
    initial: ModelDir,
    checkpoint: str,
    source: DataDir,
) -> dict[str, Any]:
    """Load MODEL_DIR's checkpoint into the freshly built `model` (of the model section `arch`),
    after checking vocabularies; returns what was loaded ({"init_from", "checkpoint", "step"})
    for the log and metrics."""
    from nmt.dirs.weights import load_weights, weights_step

    init_dir = initial.path
    check_special_ids(initial, source)
    sizes = check_same_vocabulary(initial, source)
    path = initial.checkpoint(checkpoint)
    added = extend_rows(model, path, sizes)
    if added is None:
        load_weights(model, path, what=THIS_RUN)
    check_same_architecture(initial, arch)  # what loaded may still compute something else
    loaded = {"init_from": str(init_dir), "checkpoint": str(path), "step": weights_step(path)}
    return {**loaded, "new_rows": added} if added else loaded


def with_initial(cfg: Config, init: ModelDir | None) -> Config:
    """`cfg` for a run that starts from `init`: training.init_from names it (a copy of `cfg`
    when it named none), so the saved config.yaml records where the weights came from."""
    if init is None or cfg.training.init_from:
        return cfg
    import copy

    cfg = copy.deepcopy(cfg)
    cfg.training.init_from = str(init.path)
    return cfg


def check_init_outside(tc: TrainingConfig, output: ModelDir) -> None:
    """Refuse an initial model that training would delete before loading it: the output
    MODEL_DIR itself, or anything in its checkpoints folder (emptied by --force). A model
    directory merely under MODEL_DIR (`-o runs --init-from runs/base`) is fine."""
    if not tc.init_from:
        return
    model_dir, out = output.path, output.path.resolve()
    checkpoints = output.checkpoints.resolve()
    init = Path(tc.init_from).resolve()
    if init == out or init.is_relative_to(checkpoints):
        raise NmtError(
            f"{tc.init_from}: --init-from is the output directory {model_dir} or inside its "
            "checkpoints (training would delete the checkpoints it starts from); train into a "
            "new directory"
        )
    ckpt = tc.init_checkpoint
    if ckpt.endswith(".safetensors") and Path(ckpt).resolve().is_relative_to(checkpoints):
        raise NmtError(
            f"{ckpt}: training.init_checkpoint is inside the output directory {model_dir}'s "
            "checkpoints (training would delete it before it loads); train into a new directory"
        )


def check_same_architecture(initial: ModelDir, arch: ModelConfig) -> None:
    """Refuse a model section whose architecture differs from the initial model's config.yaml:
    weights of the same shapes (other heads, activation ...) load, but compute another function.
    Dropout rates and max_positions may change (a longer learned position table fails to load)."""
    from nmt.dirs.model import architecture_changes

    init_dir = initial.path
    changes = architecture_changes(initial.config.model, arch, ignore=("max_positions",))
    if changes:
        raise NmtError(
            f"{init_dir / 'config.yaml'}: the initial model's architecture differs from this "
            f"run's model section ({', '.join(changes)}); fine-tune with its model settings "
            "(omit --preset/CONFIG to reuse them)"
        )


def extend_rows(model: Any, path: Path, sizes: tuple[int, int]) -> dict[str, int] | None:
    """Load `path` into a model whose vocabularies extend the checkpoint's `sizes` (source,
    target): trained rows copied, new rows set to the mean trained row; None (nothing loaded)
    when the vocabularies are the checkpoint's own."""
    from nmt.dirs.weights import put_weights, read_weights

    own = model.state_dict()
    grown = {
        k: side for k, side in VOCAB_ROWS.items() if k in own and own[k].shape[0] > sizes[side]
    }
    if not grown:
        return None
    state = read_weights(path)
    for key, side in grown.items():
        if key not in state:
            continue  # tied to another entry of the file (safetensors stores shared tensors once)
        trained = state[key]
        if trained.shape[0] != sizes[side] or trained.shape[1:] != own[key].shape[1:]:
            raise NmtError(f"{path}: {key} has shape {tuple(trained.shape)}, not the vocabulary's")
        rows = trained.new_empty(own[key].shape)
        rows[: sizes[side]] = trained
        rows[sizes[side] :] = trained.mean(0)
        state[key] = rows
    put_weights(model, state, path, THIS_RUN)
    return {k: own[k].shape[0] - sizes[side] for k, side in grown.items()}


def initial_config(init: ModelDir) -> Config:
    """The initial model's own config, minus where it was itself initialised from: the base of a
    run that starts from it (its architecture is what the weights fit)."""
    import copy

    cfg = copy.deepcopy(init.config)
    cfg.training.init_from, cfg.training.init_checkpoint = "", "default"
    return cfg


def preset_over_initial(
    preset: str, overrides: list[str], init: ModelDir, flags: dict[str, Any]
) -> Config:
    """`nmt train --init-from MODEL_DIR --preset NAME` without CONFIG: MODEL_DIR's config with
    the preset laid over it (its training settings; an architecture key that differs is then
    refused by `check_same_architecture`), then `--set` and the flags."""
    from nmt.config import apply_flags, apply_overrides, load_preset
    from nmt.config.strict import apply_sections

    cfg = initial_config(init)
    apply_sections(cfg, load_preset(preset), f"preset {preset}")
    apply_overrides(cfg, overrides)
    apply_flags(cfg, flags)
    cfg.check()
    return cfg
