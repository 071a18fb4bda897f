"""The self-contained model directory: config, vocabulary facts, SentencePiece copies, weights.

MODEL_DIR/config.yaml               resolved Config
MODEL_DIR/vocab.json                languages, VocabInfo fields, SentencePiece file names (copied here)
MODEL_DIR/spm.model | spm.<lang>.model
MODEL_DIR/checkpoints/<name>.safetensors   weights: best, last, averaged, step-N ...
MODEL_DIR/.lock                     host and PID of the process training into it
`nmt translate -m MODEL_DIR` needs nothing else. Training takes the lock, and refuses to
overwrite a trained directory (or to resume an empty one) by accident.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import filecmp
import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from nmt.config import Config, ModelConfig, read_saved_config
from nmt.data.spm_source import MODEL_META
from nmt.data.vocab import VocabInfo
from nmt.errors import NmtError
from nmt.textio import atomic_write, publishing, read_json_object

CHECKPOINTS = "checkpoints"
NAMED = ("best", "last", "averaged")
STATE = "last.state.pt"  # the resumable trainer state, in CHECKPOINTS
DEFAULT = "default.json"  # in CHECKPOINTS: which named checkpoint `default` means (else best)


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
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "src_spm": names["src"],
        "tgt_spm": names["tgt"],
        **dataclasses.asdict(vocab),
    }
    with atomic_write(model_dir / MODEL_META) as f:
        json.dump(meta, f, indent=2)
    cfg.save(model_dir / "config.yaml")


def read_meta(model_dir: str | Path) -> tuple[Config, VocabInfo, dict[str, Any]]:
    """Load config.yaml and vocab.json; errors name the missing file."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise NmtError(f"{model_dir}: model directory not found")
    for name in ("config.yaml", MODEL_META):
        if not (model_dir / name).exists():
            raise NmtError(
                f"{model_dir / name}: file not found (is {model_dir} a model directory?)"
            )
    cfg = read_saved_config(model_dir / "config.yaml")
    meta = read_json_object(model_dir / MODEL_META)
    fields = {f.name for f in dataclasses.fields(VocabInfo)}
    try:
        vocab = VocabInfo(**{k: v for k, v in meta.items() if k in fields})
    except TypeError as e:
        raise NmtError(f"{model_dir / 'vocab.json'}: not a vocabulary file ({e})") from None
    return cfg, vocab, meta


def saved_config(model_dir: str | Path) -> Config | None:
    """MODEL_DIR's config.yaml (None when it has none): how its run was set up."""
    path = Path(model_dir) / "config.yaml"
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
    model_dir: str | Path, checkpoint: str = "default", device: str = "cpu"
) -> tuple[Any, Config, VocabInfo, dict[str, Any]]:
    """Build the model from MODEL_DIR's config and load a checkpoint; returns (model, cfg, vocab, meta)."""
    from nmt.models import build

    cfg, vocab, meta = read_meta(model_dir)
    model = build(cfg.model, vocab, init=False)  # every weight comes from the checkpoint
    load_weights(model, checkpoint_path(model_dir, checkpoint), device="cpu")
    model.to(device).eval()
    return model, cfg, vocab, meta


@contextlib.contextmanager
def model_dir_lock(model_dir: Path) -> Iterator[None]:
    """Refuse a second process training into MODEL_DIR; the kernel drops the lock when we die."""
    model_dir.mkdir(parents=True, exist_ok=True)
    lock = model_dir / ".lock"
    fd = _take_lock(model_dir, lock)
    try:
        remove_stale_temps(model_dir)
        yield
    finally:
        lock.unlink(missing_ok=True)  # still held: a process that opened it re-checks the inode
        os.close(fd)


def _take_lock(model_dir: Path, lock: Path) -> int:
    """flock MODEL_DIR/.lock (the file's "host pid" line only informs the error message)."""
    for _ in range(10):
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = lock.read_text(encoding="utf-8", errors="replace").strip()
            raise NmtError(
                f"{model_dir}: another process is training into this directory "
                f"(lock {lock} held by {owner or 'unknown'})"
            ) from None
        if _same_file(fd, lock):
            os.ftruncate(fd, 0)
            os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
            return fd
        os.close(fd)  # its holder removed the file between our open and flock: retry
    raise NmtError(f"{lock}: cannot take the lock")


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open `fd` is still the file at `path` (not an unlinked predecessor)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


# Training's own temporaries (written under the lock). Not averaged.safetensors: `nmt average`
# writes it without the lock, and its temporary may belong to a live process.
_TEMPS = {
    "": re.compile(r"^\.(config\.yaml|vocab\.json|metrics\.jsonl|[\w.-]+\.model)\.\w+\.tmp$"),
    CHECKPOINTS: re.compile(
        r"^\.(last\.state\.pt|(last|best|step-\d+)\.safetensors|(index|default)\.json)"
        r"\.\w+\.tmp$"
    ),
}


def remove_stale_temps(model_dir: Path) -> list[Path]:
    """Delete temporaries of a killed run (training's own names only); call under the lock."""
    removed = []
    for sub, pattern in _TEMPS.items():
        folder = model_dir / sub if sub else model_dir
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if pattern.match(path.name) and path.is_file():
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


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
) -> bool:
    """Refuse to overwrite a trained MODEL_DIR by accident; True when there is a state to resume.

    `--resume` before the first save (a preempted job re-run as is) starts from scratch; with or
    without a state, a `model` section of another architecture than config.yaml's is refused."""
    if resume and force:
        raise NmtError("--resume and --force exclude each other")
    if resume:
        if state_path(model_dir).exists():
            _check_same_model(model_dir, model)  # the state's weights were trained for it
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
        _check_same_model(model_dir, model)
        if warn is not None:
            warn(f"{model_dir}: no trainer state to resume; starting from scratch")
    elif has_checkpoints(model_dir) and not force:
        raise NmtError(
            f"{model_dir} already has checkpoints; use --resume to continue or --force to "
            "start over"
        )
    return False


def _check_same_model(model_dir: Path, model: ModelConfig | None) -> None:
    """--resume: refuse a model section whose architecture differs from MODEL_DIR's config.yaml
    (same-shaped weights would load, and be read as another model from then on); max_positions
    may change (a learned table of another size fails to load; sinusoidal ones are not stored)."""
    saved = model_dir / "config.yaml"
    if model is None or not saved.exists():
        return
    changes = architecture_changes(read_saved_config(saved).model, model, ignore=("max_positions",))
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
