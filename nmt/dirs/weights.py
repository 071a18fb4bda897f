"""Model weights on disk: safetensors files written atomically (the training step in their header),
read back strictly (a damaged file, or one of another model, is a one-line error naming it)."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from nmt.errors import NmtError
from nmt.textio import publishing


def save_weights(model: Any, path: str | Path, step: int | None = None) -> None:
    """Write model weights as safetensors atomically (tied tensors are stored once); `step` is
    recorded in the header so a resumed run can tell which step a file holds."""
    from safetensors.torch import save_model

    with publishing(path, needed=tensor_bytes(model.state_dict())) as tmp:
        save_model(model, tmp, metadata=None if step is None else {"step": str(step)})


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
        missing, unexpected = load_model(model, str(path), strict=False, device=str(device))
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

    own = model.state_dict()
    with _loading(path, what), torch.no_grad():
        missing, unexpected = model.load_state_dict(state, strict=False)
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
