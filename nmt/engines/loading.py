"""Opening an engine: a model directory (several: an ensemble) gives a `Translator`, an
`nmt export` directory a `CT2Translator`. Torch is imported only for the first."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nmt.decode.engine import Engine
from nmt.dirs.export import ExportDir, is_export
from nmt.dirs.model import ModelDir
from nmt.dirs.opening import Opened
from nmt.errors import NmtError


def open_translator(
    dirs: Opened | Sequence[Opened],
    device: str = "auto",
    checkpoint: str = "default",
    precision: str = "auto",
    workers: int = 0,
) -> Engine:
    """A Translator for a model directory (several: an ensemble), a CT2Translator for an
    `nmt export` directory: either is an `Engine`, whose `capabilities` say what it can do."""
    given = [dirs] if isinstance(dirs, ModelDir | ExportDir) else list(dirs)
    export = export_of(given, checkpoint, precision)
    engine: Engine  # both satisfy the Protocol (mypy checks it here)
    if export is not None:
        from nmt.engines.ct2 import CT2Translator

        engine = CT2Translator.from_dir(export, device=device, workers=workers)
        return engine
    from nmt.engines.translator import Translator

    members = [d for d in given if isinstance(d, ModelDir)]
    engine = Translator.from_dir(
        members if len(members) > 1 else members[0],
        device=device,
        checkpoint=checkpoint,
        precision=precision,
        workers=workers,
    )
    return engine


def export_of(dirs: Sequence[Opened], checkpoint: str, precision: str) -> ExportDir | None:
    """The `nmt export` directory among `dirs` (None if there is none), once the options that
    do not apply to one are refused: an ensemble of it, a checkpoint other than the one it
    holds, a precision."""
    export = next((d for d in dirs if isinstance(d, ExportDir)), None)
    if export is not None:
        _refuse_export_options(export.path, len(dirs), export.checkpoint, checkpoint, precision)
    return export


def checked_export(
    paths: Sequence[str | Path], checkpoint: str, precision: str
) -> ExportDir | None:
    """`export_of` for directories named on a command line: the options an export refuses are
    refused before its manifest is read (a broken one is named once the options are settled)."""
    exports = [Path(p) for p in paths if is_export(p)]
    if not exports:
        return None
    try:
        opened: ExportDir | NmtError = ExportDir(exports[0])
    except NmtError as e:
        opened = e
    held = opened.checkpoint if isinstance(opened, ExportDir) else None
    _refuse_export_options(exports[0], len(paths), held, checkpoint, precision)
    if isinstance(opened, NmtError):
        raise opened
    return opened


def _refuse_export_options(
    export: Path, count: int, held: str | None, checkpoint: str, precision: str
) -> None:
    """Refuse what does not apply to an `nmt export` directory: an ensemble of `count`
    directories, a checkpoint other than the one it holds (`held`), a precision."""
    if count > 1:
        raise NmtError(
            f"{export}: an ensemble takes model directories, not `nmt export` directories"
        )
    if checkpoint not in ("default", held):
        raise NmtError(f"--checkpoint does not apply to {export}: an export holds one checkpoint")
    if precision != "auto":
        raise NmtError(
            f"--precision does not apply to {export}: an export's compute type is its "
            "`nmt export --quantization`"
        )
