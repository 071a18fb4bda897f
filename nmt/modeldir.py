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
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from nmt.config import Config, config_from_dict
from nmt.errors import NmtError
from nmt.models.base import VocabInfo
from nmt.textio import atomic_write, publish

CHECKPOINTS = "checkpoints"
NAMED = ("best", "last", "averaged")
STATE = "last.state.pt"  # the resumable trainer state, in CHECKPOINTS


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
        shutil.copyfile(spm, model_dir / spm.name)
        names[side] = spm.name
    meta = {
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "src_spm": names["src"],
        "tgt_spm": names["tgt"],
        **dataclasses.asdict(vocab),
    }
    with atomic_write(model_dir / "vocab.json") as f:
        json.dump(meta, f, indent=2)
    cfg.save(model_dir / "config.yaml")


def read_meta(model_dir: str | Path) -> tuple[Config, VocabInfo, dict[str, Any]]:
    """Load config.yaml and vocab.json; errors name the missing file."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise NmtError(f"{model_dir}: model directory not found")
    for name in ("config.yaml", "vocab.json"):
        if not (model_dir / name).exists():
            raise NmtError(
                f"{model_dir / name}: file not found (is {model_dir} a model directory?)"
            )
    cfg_dict = yaml.safe_load((model_dir / "config.yaml").read_text(encoding="utf-8")) or {}
    cfg = config_from_dict(cfg_dict, str(model_dir / "config.yaml"))
    meta = json.loads((model_dir / "vocab.json").read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(VocabInfo)}
    vocab = VocabInfo(**{k: v for k, v in meta.items() if k in fields})
    return cfg, vocab, meta


def checkpoint_path(model_dir: str | Path, which: str = "best") -> Path:
    """Resolve best|last|averaged (or a file path) to a weights file that exists."""
    if which in NAMED or not which.endswith(".safetensors"):
        path = Path(model_dir) / CHECKPOINTS / f"{which}.safetensors"
    else:
        path = Path(which)
    if not path.exists():
        raise NmtError(f"{path}: checkpoint not found")
    return path


def save_weights(model: Any, path: str | Path) -> None:
    """Write model weights as safetensors atomically (tied tensors are stored once)."""
    from safetensors.torch import save_model

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_model(_unwrap(model), tmp)
        publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_weights(model: Any, path: str | Path, device: str = "cpu") -> None:
    """Load safetensors weights into `model` (strict: every tensor must match)."""
    from safetensors.torch import load_model

    missing, unexpected = load_model(_unwrap(model), str(path), strict=False, device=str(device))
    if missing or unexpected:
        raise NmtError(
            f"{path}: weights do not match the model (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]})"
        )


def _unwrap(model: Any) -> Any:
    """The plain module under DDP / torch.compile wrappers."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


def load_model(
    model_dir: str | Path, checkpoint: str = "best", device: str = "cpu"
) -> tuple[Any, Config, VocabInfo, dict[str, Any]]:
    """Build the model from MODEL_DIR's config and load a checkpoint; returns (model, cfg, vocab, meta)."""
    from nmt.models import build

    cfg, vocab, meta = read_meta(model_dir)
    model = build(cfg.model, vocab)
    load_weights(model, checkpoint_path(model_dir, checkpoint), device="cpu")
    model.to(device).eval()
    return model, cfg, vocab, meta


@contextlib.contextmanager
def model_dir_lock(model_dir: Path) -> Iterator[None]:
    """Refuse a second process training into the same MODEL_DIR (stale locks are taken over)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    lock = model_dir / ".lock"
    _take_lock(model_dir, lock)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _take_lock(model_dir: Path, lock: Path) -> None:
    """Create the lock file exclusively; a stale one (dead process) is removed and retried once."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _lock_is_live(lock):
                owner = lock.read_text(encoding="utf-8", errors="replace").strip()
                raise NmtError(
                    f"{model_dir}: another process is training into this directory "
                    f"(lock {lock} held by {owner or 'unknown'})"
                ) from None
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
        return
    raise NmtError(f"{lock}: cannot take the lock")


def _lock_is_live(lock: Path) -> bool:
    """A lock is live when its process still runs on this host (other hosts: assume live)."""
    try:
        host, pid = lock.read_text(encoding="utf-8").split()
        pid_n = int(pid)
    except (OSError, ValueError):
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid_n, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def state_path(model_dir: str | Path) -> Path:
    """Where the resumable trainer state of MODEL_DIR lives."""
    return Path(model_dir) / CHECKPOINTS / STATE


def has_checkpoints(model_dir: str | Path) -> bool:
    """Whether a previous run left anything in MODEL_DIR/checkpoints."""
    folder = Path(model_dir) / CHECKPOINTS
    return folder.is_dir() and any(folder.iterdir())


def check_model_dir(model_dir: Path, resume: bool, force: bool) -> None:
    """Refuse to overwrite a trained MODEL_DIR by accident, or to resume nothing."""
    if resume and force:
        raise NmtError("--resume and --force exclude each other")
    if resume:
        if not state_path(model_dir).exists():
            raise NmtError(f"{state_path(model_dir)}: nothing to resume (no trainer state)")
    elif has_checkpoints(model_dir) and not force:
        raise NmtError(
            f"{model_dir} already has checkpoints; use --resume to continue or --force to "
            "start over"
        )


def reset_model_dir(model_dir: Path) -> None:
    """--force: remove what a previous run wrote (checkpoints, metrics), keep anything else."""
    shutil.rmtree(model_dir / CHECKPOINTS, ignore_errors=True)
    shutil.rmtree(model_dir / "tensorboard", ignore_errors=True)
    (model_dir / "metrics.jsonl").unlink(missing_ok=True)
