"""The self-contained model directory: config, vocabulary facts, SentencePiece copies, weights.

MODEL_DIR/config.yaml               resolved Config
MODEL_DIR/vocab.json                languages, VocabInfo fields, SentencePiece file names (copied here)
MODEL_DIR/spm.model | spm.<lang>.model
MODEL_DIR/checkpoints/<name>.safetensors   weights: best, last, averaged, step-N ...
MODEL_DIR/.lock                     host and PID of the process training into it
An imported model (`nmt import`) adds its piece -> id vocabularies. `nmt translate` needs nothing else. Training takes the lock, and refuses to
overwrite a trained directory (or to resume an empty one) by accident.
"""

from __future__ import annotations

import contextlib
import dataclasses
import filecmp
import functools
import json
import shutil
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from nmt.config import Config, DecodingConfig, ModelConfig, read_saved_config
from nmt.data.marian_vocab import imported_pair
from nmt.data.spm_source import MODEL_META
from nmt.data.vocab import Tokenizer, VocabInfo
from nmt.errors import NmtError, check_format_version
from nmt.textio import atomic_write, publishing, read_json_object

CHECKPOINTS = "checkpoints"
NAMED = ("best", "last", "averaged")
STATE = "last.state.pt"  # the resumable trainer state, in CHECKPOINTS
DEFAULT = "default.json"  # in CHECKPOINTS: which named checkpoint `default` means (else best)
CONFIG = "config.yaml"  # the resolved Config a MODEL_DIR was trained with
MODEL_FORMAT = 1  # vocab.json's "format": the layout this nmt writes (absent: 1)


def write_meta(
    model_dir: str | Path,
    cfg: Config,
    src_lang: str,
    tgt_lang: str,
    src_spm: str | Path,
    tgt_spm: str | Path,
    vocab: VocabInfo,
) -> None:
    """Copy the SentencePiece model(s) and write config.yaml + vocab.json into MODEL_DIR."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    names = {}
    for side, spm in (("src", Path(src_spm)), ("tgt", Path(tgt_spm))):
        if not (model_dir / spm.name).exists() or not filecmp.cmp(
            spm, model_dir / spm.name, shallow=False
        ):
            with atomic_write(model_dir / spm.name, "wb") as out, spm.open("rb") as src:
                shutil.copyfileobj(src, out)  # a kill mid-copy leaves the old model intact
        names[side] = spm.name
    meta = {
        "format": MODEL_FORMAT,
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "src_spm": names["src"],
        "tgt_spm": names["tgt"],
        **dataclasses.asdict(vocab),
    }
    with atomic_write(model_dir / MODEL_META) as f:
        json.dump(meta, f, indent=2)
    cfg.save(model_dir / CONFIG)


class ModelDir:
    """A model directory opened once: config.yaml and vocab.json read and checked (errors name the
    missing file), its languages and SentencePiece models (the tokenizer pair, loaded at first
    use), and its checkpoints. What decoding takes instead of a path."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise NmtError(f"{self.path}: model directory not found")
        for name in (CONFIG, MODEL_META):
            if not (self.path / name).exists():
                raise NmtError(
                    f"{self.path / name}: file not found (is {self.path} a model directory?)"
                )
        self.config = read_saved_config(self.path / CONFIG)
        self.meta = read_json_object(self.path / MODEL_META)
        check_format_version(self.path / MODEL_META, self.meta.get("format"), MODEL_FORMAT, "model")
        fields = {f.name for f in dataclasses.fields(VocabInfo)}
        given = {k: v for k, v in self.meta.items() if k in fields}
        try:
            self.vocab = VocabInfo(**given | {"never": tuple(given.get("never", ()))})
        except TypeError as e:
            raise NmtError(f"{self.path / MODEL_META}: not a vocabulary file ({e})") from None

    @property
    def languages(self) -> tuple[str | None, str | None]:  # where training recorded them
        return self.meta.get("src_lang"), self.meta.get("tgt_lang")

    @functools.cached_property
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """Its source and target SentencePiece models (one object when they are one file); a
        `nmt preprocess --lowercase` model lowercases what it is given."""
        meta, path = self.meta, self.path
        if meta.get("pieces"):  # an imported model: pieces map to ids through its vocabularies
            return imported_pair(path, meta)
        lc = meta.get("lowercase", False) is True
        return Tokenizer.pair(path / meta["src_spm"], path / meta["tgt_spm"], lc)

    @property
    def decoding(self) -> DecodingConfig:
        """Its decoding defaults (the config's `decoding` section)."""
        return self.config.decoding

    def checkpoint(self, which: str = "default") -> Path:
        """The weights file `which` names (default, best, last, averaged, or a path)."""
        return checkpoint_path(self.path, which)


def opened_at(path: str | Path, opened: Sequence[ModelDir]) -> ModelDir | None:
    """The directory among `opened` at `path` (compared resolved), if any."""
    want = Path(path).resolve()
    return next((d for d in opened if d.path.resolve() == want), None)


def read_meta(model_dir: str | Path) -> tuple[Config, VocabInfo, dict[str, Any]]:
    """config.yaml and vocab.json of a model directory (`ModelDir`'s)."""
    opened = ModelDir(model_dir)
    return opened.config, opened.vocab, opened.meta


def saved_config(model_dir: str | Path) -> Config | None:
    """MODEL_DIR's config.yaml (None when it has none): how its run was set up."""
    path = Path(model_dir) / CONFIG
    return read_saved_config(path) if path.exists() else None


def default_checkpoint(model_dir: str | Path) -> str:
    """What `default` means: the name training chose on validation (averaged or best), else best."""
    path = Path(model_dir) / CHECKPOINTS / DEFAULT
    try:
        name = json.loads(path.read_text(encoding="utf-8")).get("checkpoint")
    except (OSError, ValueError, AttributeError):
        return "best"
    chosen = Path(model_dir) / CHECKPOINTS / f"{name}.safetensors"
    return name if name in NAMED and chosen.exists() else "best"


def write_default(model_dir: str | Path, choice: dict[str, Any]) -> None:
    """Record which checkpoint `default` means (and why: its step, metric and score)."""
    with atomic_write(Path(model_dir) / CHECKPOINTS / DEFAULT) as f:
        json.dump(choice, f, indent=1)


def clear_default(model_dir: str | Path, only: str | None = None) -> None:
    """Forget the choice (`only`: if it names that checkpoint), so `default` means best again."""
    path = Path(model_dir) / CHECKPOINTS / DEFAULT
    if path.exists() and (only is None or default_checkpoint(model_dir) == only):
        path.unlink()


def checkpoint_path(model_dir: str | Path, which: str = "default") -> Path:
    """Resolve default|best|last|averaged (or a file path) to a weights file that exists."""
    if which == "default":
        which = default_checkpoint(model_dir)
    if which in NAMED or not which.endswith(".safetensors"):
        path = Path(model_dir) / CHECKPOINTS / f"{which}.safetensors"
    else:
        path = Path(which)
    if not path.exists():
        raise NmtError(f"{path}: checkpoint not found")
    return path


def save_weights(model: Any, path: str | Path, step: int | None = None) -> None:
    """Write model weights as safetensors atomically (tied tensors are stored once); `step` is
    recorded in the header so a resumed run can tell which step a file holds."""
    from safetensors.torch import save_model

    module = unwrap(model)
    with publishing(path, needed=tensor_bytes(module.state_dict())) as tmp:
        save_model(module, tmp, metadata=None if step is None else {"step": str(step)})


def tensor_bytes(obj: Any) -> int:
    """Roughly the size of `obj` saved (torch.save, safetensors), for a full disk's message: the
    bytes of the tensors in its dicts, lists and tuples, a storage shared by several once."""
    import torch

    storages: dict[int, int] = {}
    todo = [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return sum(storages.values())


def weights_step(path: str | Path) -> int | None:
    """The training step recorded in a weights file by `save_weights`; None when unknown."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            step = (f.metadata() or {}).get("step")
    except Exception:  # noqa: BLE001 - a damaged file has no trustworthy step
        return None
    return int(step) if step is not None and step.isdigit() else None


def load_weights(
    model: Any, path: str | Path, device: str = "cpu", what: str = "the model in config.yaml"
) -> None:
    """Load safetensors weights into `model` (strict: every tensor must match); a damaged file or
    one of another model (`what` names the model in the error) is a one-line error naming the file."""
    from safetensors.torch import load_model

    with _loading(path, what):
        missing, unexpected = load_model(unwrap(model), str(path), strict=False, device=str(device))
    _check_complete(path, what, missing, unexpected)


def read_weights(path: str | Path) -> dict[str, Any]:
    """The tensors of a safetensors file, for a caller that adapts them before `put_weights`."""
    from safetensors.torch import load_file

    with _loading(path, "the model"):
        return load_file(str(path))


def put_weights(model: Any, state: dict[str, Any], path: str | Path, what: str) -> None:
    """Load tensors read from `path` (and adapted) into `model`, as strictly as `load_weights`:
    an entry tied to a loaded one counts as loaded (safetensors stores shared tensors once)."""
    import torch

    module = unwrap(model)
    own = module.state_dict()
    with _loading(path, what), torch.no_grad():
        missing, unexpected = module.load_state_dict(state, strict=False)
    _check_complete(path, what, set(missing) - _tied_names(own, set(state)), unexpected)


@contextlib.contextmanager
def _loading(path: str | Path, what: str) -> Iterator[None]:
    """Reading or loading weights: a damaged file or a tensor of another shape is a one-line
    error naming the file (and, as `what`, the model it was loaded for)."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as e:
        raise NmtError(f"{path}: damaged or not a safetensors file ({e})") from None
    except RuntimeError as e:
        first = next((ln.strip() for ln in str(e).splitlines() if "mismatch" in ln), str(e))
        raise NmtError(f"{path}: weights do not match {what} ({first})") from None


def _check_complete(
    path: str | Path, what: str, missing: Collection[str], unexpected: Collection[str]
) -> None:
    """Refuse weights that leave part of the model unloaded or hold tensors it lacks."""
    if missing or unexpected:
        raise NmtError(
            f"{path}: weights do not match {what} (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]})"
        )


def _tied_names(own: dict[str, Any], loaded: set[str]) -> set[str]:
    """Entries of the model that share storage with an entry that was loaded."""
    ptrs = {own[k].data_ptr() for k in loaded if k in own}
    return {k for k, v in own.items() if k not in loaded and v.data_ptr() in ptrs}


def unwrap(model: Any) -> Any:
    """The plain module under DDP / torch.compile wrappers."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


def load_model(
    model_dir: str | Path | ModelDir, checkpoint: str = "default", device: str = "cpu"
) -> tuple[Any, Config, VocabInfo, dict[str, Any]]:
    """Build the model from MODEL_DIR's config and load a checkpoint; returns (model, cfg, vocab,
    meta). Takes an opened `ModelDir` (read once) or a path."""
    from nmt.models import build

    opened = model_dir if isinstance(model_dir, ModelDir) else ModelDir(model_dir)
    model = build(opened.config.model, opened.vocab, init=False)  # every weight from the file
    load_weights(model, opened.checkpoint(checkpoint), device="cpu")
    model.to(device).eval()
    return model, opened.config, opened.vocab, opened.meta


def state_path(model_dir: str | Path) -> Path:
    """Where the resumable trainer state of MODEL_DIR lives."""
    return Path(model_dir) / CHECKPOINTS / STATE


def has_checkpoints(model_dir: str | Path) -> bool:
    """Whether a previous run left anything in MODEL_DIR/checkpoints."""
    folder = Path(model_dir) / CHECKPOINTS
    return folder.is_dir() and any(folder.iterdir())


def check_model_dir(
    model_dir: Path,
    resume: bool,
    force: bool,
    model: ModelConfig | None = None,
    warn: Callable[[str], None] | None = None,
    opened: Sequence[ModelDir] = (),
) -> bool:
    """Refuse to overwrite a trained MODEL_DIR by accident; True when there is a state to resume.

    `--resume` before the first save (a preempted job re-run as is) starts from scratch; with or
    without a state, a `model` section of another architecture than config.yaml's is refused."""
    if resume and force:
        raise NmtError("--resume and --force exclude each other")
    if resume:
        if state_path(model_dir).exists():
            _check_same_model(model_dir, model, opened)  # the state's weights were trained for it
            return True
        trained = [
            n for n in ("last.safetensors", DEFAULT) if (model_dir / CHECKPOINTS / n).exists()
        ]
        if trained:  # written only with or after the state: it was removed, not yet to come
            raise NmtError(
                f"{state_path(model_dir)}: not found, but {model_dir} holds a trained run "
                f"({CHECKPOINTS}/{trained[0]}): nothing to resume; train into a new directory, "
                "or --force to start over (deletes its checkpoints)"
            )
        _check_same_model(model_dir, model, opened)
        if warn is not None:
            warn(f"{model_dir}: no trainer state to resume; starting from scratch")
    elif has_checkpoints(model_dir) and not force:
        raise NmtError(
            f"{model_dir} already has checkpoints; use --resume to continue or --force to "
            "start over"
        )
    return False


def _check_same_model(
    model_dir: Path, model: ModelConfig | None, opened: Sequence[ModelDir] = ()
) -> None:
    """--resume: refuse a model section whose architecture differs from MODEL_DIR's config.yaml
    (same-shaped weights would load, and be read as another model from then on); max_positions
    may change (a learned table of another size fails to load; sinusoidal ones are not stored)."""
    saved = model_dir / "config.yaml"
    if model is None or not saved.exists():
        return
    known = opened_at(model_dir, opened)
    before = known.config if known is not None else read_saved_config(saved)
    changes = architecture_changes(before.model, model, ignore=("max_positions",))
    if changes:
        raise NmtError(
            f"{saved}: the saved model does not match this config's model section "
            f"({', '.join(changes)}); resume with the same model settings (omit --preset/CONFIG "
            "to reuse the saved ones)"
        )


def architecture_changes(
    saved: ModelConfig, model: ModelConfig, ignore: tuple[str, ...] = ()
) -> list[str]:
    """'model.KEY old -> new' for each architecture key that differs; regularisation keys
    (dropout, *_dropout) and `ignore` are not architecture: trained weights fit any value."""
    if saved.type != model.type:
        return [f"model.type {saved.type} -> {model.type}"]
    old, new = dataclasses.asdict(saved), dataclasses.asdict(model)
    return [
        f"model.{key} {old[key]} -> {new[key]}"
        for key in old
        if old[key] != new[key] and not _regularisation(key) and key not in ignore
    ]


def _regularisation(key: str) -> bool:
    """Model keys that only regularise training (dropout rates), not what the weights compute."""
    return key == "dropout" or key.endswith("_dropout")


def reset_model_dir(model_dir: Path) -> None:
    """--force: remove what a previous run wrote (checkpoints, metrics), keep anything else."""
    shutil.rmtree(model_dir / CHECKPOINTS, ignore_errors=True)
    shutil.rmtree(model_dir / "tensorboard", ignore_errors=True)
    (model_dir / "metrics.jsonl").unlink(missing_ok=True)


STATE_FORMAT = 2  # 1: the states written before they carried their format (the same fields)
_STATE_NEEDS = ("model", "optimizer", "train_state", "rng", "world_size")


@dataclasses.dataclass
class SavedState:
    """The resumable trainer state (`last.state.pt`) as `--resume` reads it, versioned: a field
    added later gets a default here, and `from_saved` upgrades an older format in one place."""

    model: dict[str, Any]
    optimizer: dict[str, Any]
    train_state: dict[str, Any]  # TrainState's fields
    rng: dict[str, Any]  # this process's generators
    world_size: int
    scaler: dict[str, Any] = dataclasses.field(default_factory=dict)
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # what resume compares
    valid_seconds: float = 0.0
    weight_average: dict[str, Any] | None = None
    ranks_rng: list[Any] | None = None  # DDP: every rank's dropout stream
    format: int = STATE_FORMAT

    def to_saved(self) -> dict[str, Any]:
        """What is written: plain types and tensors (read back with weights_only=True)."""
        fields = (f.name for f in dataclasses.fields(self))
        return {k: v for k in fields if (v := getattr(self, k)) is not None}

    @classmethod
    def from_saved(cls, raw: Any, path: str | Path) -> SavedState:
        """A loaded state checked and brought to today's format; a state from a newer nmt, or
        something else, is a one-line error naming the file."""
        if not isinstance(raw, dict) or (absent := [k for k in _STATE_NEEDS if k not in raw]):
            what = f"no {absent[0]!r}" if isinstance(raw, dict) else type(raw).__name__
            raise NmtError(f"{path}: not a trainer state ({what})")
        check_format_version(path, raw.get("format"), STATE_FORMAT, "trainer state")
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in raw.items() if k in known and v is not None}
        return cls(**{**fields, "format": STATE_FORMAT})


def read_state(path: str | Path, device: Any = "cpu") -> SavedState:
    """MODEL_DIR's trainer state, loaded (`load_state`) and checked (`SavedState.from_saved`)."""
    return SavedState.from_saved(load_state(path, device), path)


def load_state(path: str | Path, device: Any = "cpu") -> dict[str, Any]:
    """Load a trainer state with weights_only=True; a damaged file is a one-line error."""
    import torch

    path = Path(path)
    if not path.exists():
        raise NmtError(f"{path}: trainer state not found (cannot resume)")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise NmtError(f"{path}: cannot read trainer state ({type(e).__name__}: {e})") from None
