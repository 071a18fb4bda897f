"""Opening an engine: a model directory (several: an ensemble) gives a `Translator`, an
`nmt export` directory a `CT2Translator`. Torch is imported only for the first."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nmt.decode.engine import Engine
from nmt.decode.exported import is_export, read_export_manifest
from nmt.decode.lines import model_dirs
from nmt.errors import NmtError


def open_translator(
    model_dir: str | Path | Sequence[str | Path],
    device: str = "auto",
    checkpoint: str = "default",
    precision: str = "auto",
    workers: int = 0,
) -> Engine:
    """A Translator for a model directory (several: an ensemble), a CT2Translator for an
    `nmt export` directory: either is an `Engine`, whose `capabilities` say what it can do."""
    dirs = model_dirs(model_dir)
    export = checked_export(dirs, checkpoint, precision)
    engine: Engine  # both satisfy the Protocol (mypy checks it here)
    if export is not None:
        from nmt.decode.ct2 import CT2Translator

        engine = CT2Translator.from_dir(export, device=device, workers=workers)
        return engine
    from nmt.decode.translator import Translator

    engine = Translator.from_dir(
        dirs if len(dirs) > 1 else dirs[0], device=device, checkpoint=checkpoint,
        precision=precision, workers=workers,
    )  # fmt: skip
    return engine


def checked_export(dirs: Sequence[str | Path], checkpoint: str, precision: str) -> str | None:
    """The `nmt export` directory among `dirs` (None if there is none), once the options that
    do not apply to one are refused: an ensemble of it, a checkpoint other than the one it
    holds, a precision."""
    exports = [d for d in dirs if is_export(d)]
    if not exports:
        return None
    export = str(exports[0])
    if len(dirs) > 1:
        raise NmtError(
            f"{export}: an ensemble takes model directories, not `nmt export` directories"
        )
    if checkpoint not in ("default", _exported_checkpoint(export)):
        raise NmtError(f"--checkpoint does not apply to {export}: an export holds one checkpoint")
    if precision != "auto":
        raise NmtError(
            f"--precision does not apply to {export}: an export's compute type is its "
            "`nmt export --quantization`"
        )
    return export


def _exported_checkpoint(export: str) -> str | None:
    """Which checkpoint the export holds (its manifest's name, e.g. best, averaged); None when
    the manifest is unreadable (loading the export then names what is wrong with it)."""
    try:
        held = read_export_manifest(export).get("checkpoint")
    except NmtError:
        return None
    return held if isinstance(held, str) else None
