"""Opening a directory named on a command line: the file that says what it is (an export's
manifest, a model's vocab.json, a data folder's manifest.json) picks the directory type."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nmt.dirs.data import MANIFEST, DataDir
from nmt.dirs.export import EXPORT_MANIFEST, ExportDir
from nmt.dirs.model import CONFIG, MODEL_META, ModelDir
from nmt.errors import NmtError

AnyDir = DataDir | ModelDir | ExportDir
Opened = ModelDir | ExportDir  # a directory an engine opens
DECODING: tuple[type[AnyDir], ...] = (ModelDir, ExportDir)
VOCABULARY: tuple[type[AnyDir], ...] = (ModelDir, DataDir)  # where SentencePiece models live
_MARKERS: tuple[tuple[type[AnyDir], str], ...] = (
    (ExportDir, EXPORT_MANIFEST),
    (ModelDir, MODEL_META),
    (DataDir, MANIFEST),
)


def open_dir(path: str | Path, kinds: tuple[type[AnyDir], ...] = DECODING) -> AnyDir:
    """The directory at `path`, opened once, as the first of `kinds` whose file it holds. One
    that holds none is opened as a model directory (its error names the file missing) where
    data folders are not asked for; otherwise it is a one-line error."""
    p = Path(path)
    for kind, marker in _MARKERS:
        if kind in kinds and (p / marker).is_file():
            return kind(p)
    if DataDir not in kinds:
        return ModelDir(p)
    if not p.is_dir():
        raise NmtError(f"{p}: directory not found")
    raise NmtError(
        f"{p}: neither a model directory ({MODEL_META}) nor a data directory ({MANIFEST})"
    )


def open_model(path: str | Path) -> Opened:
    """A model directory or an `nmt export` directory, opened once (what decoding takes)."""
    opened = open_dir(path)
    assert isinstance(opened, ModelDir | ExportDir)
    return opened


def open_vocabulary(path: str | Path) -> ModelDir | DataDir:
    """A model directory or a data directory (where SentencePiece models live), opened once."""
    opened = open_dir(path, VOCABULARY)
    assert isinstance(opened, ModelDir | DataDir)
    return opened


def open_dirs(paths: Sequence[str | Path]) -> list[Opened]:
    """Model or export directories (several: an ensemble), each opened once."""
    return [open_model(p) for p in paths]


def open_initial(path: str | Path) -> ModelDir:
    """The model directory fine-tuning starts from (`--init-from`, training.init_from), opened
    once; one that is missing, or is not a model directory, is a one-line error saying so."""
    p = Path(path)
    if not p.is_dir():
        raise NmtError(f"{p}: model directory not found")
    opened = open_dir(p, VOCABULARY)  # names what the folder is (a DATA_DIR, neither)
    if not isinstance(opened, ModelDir):
        raise NmtError(f"{p}: not a model directory (--init-from takes a MODEL_DIR)")
    return opened


def open_trained(path: str | Path) -> ModelDir | None:
    """The model directory at `path` opened once when a run or an import wrote it (config.yaml
    and vocab.json); None otherwise, left to the checks that name what is wrong with it."""
    p = Path(path)
    return ModelDir(p) if all((p / n).is_file() for n in (CONFIG, MODEL_META)) else None


def open_tokenizer_model(path: str | Path) -> ModelDir:
    """The model directory `--tokenizer-from` names (its tokenizer encodes a corpus), opened
    once; a missing folder or one without vocab.json is a one-line error saying which."""
    p = Path(path)
    if not p.is_dir():
        raise NmtError(f"{p}: --tokenizer-from: model directory not found")
    if not (p / MODEL_META).is_file():
        raise NmtError(
            f"{p}: --tokenizer-from takes a model directory (no {MODEL_META}; for a data "
            "directory's SentencePiece models use --spm-from)"
        )
    return ModelDir(p)
