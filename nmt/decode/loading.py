"""Opening an engine: a model directory (several: an ensemble) gives a `Translator`, an
`nmt export` directory a `CT2Translator`. Torch is imported only for the first."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nmt.decode.engine import Engine
from nmt.decode.exported import ExportDir, is_export
from nmt.errors import NmtError
from nmt.modeldir import ModelDir

Opened = ModelDir | ExportDir  # a directory an engine opens


def open_translator(
    model_dir: str | Path | Opened | Sequence[str | Path | Opened],
    device: str = "auto",
    checkpoint: str = "default",
    precision: str = "auto",
    workers: int = 0,
) -> Engine:
    """A Translator for a model directory (several: an ensemble), a CT2Translator for an
    `nmt export` directory: either is an `Engine`, whose `capabilities` say what it can do.
    Directories already opened (`open_dirs`) are not read again."""
    given = _listed(model_dir)
    export = checked_export(given, checkpoint, precision)
    engine: Engine  # both satisfy the Protocol (mypy checks it here)
    if export is not None:
        from nmt.decode.ct2 import CT2Translator

        engine = CT2Translator.from_dir(export, device=device, workers=workers)
        return engine
    from nmt.decode.translator import Translator

    members = [d for d in given if not isinstance(d, ExportDir)]  # opened by Translator.from_dir
    engine = Translator.from_dir(
        members if len(members) > 1 else members[0], device=device, checkpoint=checkpoint,
        precision=precision, workers=workers,
    )  # fmt: skip
    return engine


def open_dir(path: str | Path | Opened) -> Opened:
    """A directory opened once: an `nmt export` (it has an export manifest) or a model
    directory; an opened one as it is."""
    if isinstance(path, ModelDir | ExportDir):
        return path
    return ExportDir(path) if is_export(path) else ModelDir(path)


def open_dirs(dirs: str | Path | Opened | Sequence[str | Path | Opened]) -> list[Opened]:
    """One directory or several (an ensemble), each opened once."""
    return [open_dir(d) for d in _listed(dirs)]


def _listed(dirs: str | Path | Opened | Sequence[str | Path | Opened]) -> list[str | Path | Opened]:
    """One directory or several, as a list."""
    return list(dirs) if isinstance(dirs, Sequence) and not isinstance(dirs, str) else [dirs]


def checked_export(
    dirs: Sequence[str | Path | Opened], checkpoint: str, precision: str
) -> ExportDir | None:
    """The `nmt export` directory among `dirs` (None if there is none), once the options that
    do not apply to one are refused: an ensemble of it, a checkpoint other than the one it
    holds, a precision."""
    exports = [d for d in dirs if isinstance(d, ExportDir) or (
        not isinstance(d, ModelDir) and is_export(d))]  # fmt: skip
    if not exports:
        return None
    first = exports[0]
    export = first.path if isinstance(first, ExportDir) else Path(first)
    if len(dirs) > 1:
        raise NmtError(
            f"{export}: an ensemble takes model directories, not `nmt export` directories"
        )
    try:  # its manifest read once; a broken one is named once the options are settled
        opened: ExportDir | NmtError = first if isinstance(first, ExportDir) else ExportDir(export)
    except NmtError as e:
        opened = e
    held = opened.checkpoint if isinstance(opened, ExportDir) else None
    if checkpoint not in ("default", held):
        raise NmtError(f"--checkpoint does not apply to {export}: an export holds one checkpoint")
    if precision != "auto":
        raise NmtError(
            f"--precision does not apply to {export}: an export's compute type is its "
            "`nmt export --quantization`"
        )
    if isinstance(opened, NmtError):
        raise opened
    return opened
