"""Every on-disk format nmt reads and writes, one class a directory kind: `DataDir` (what `nmt
preprocess` writes), `ModelDir` (what training and `nmt import` write) and `ExportDir` (what `nmt
export` writes), each with its file names, reader, writer and format version; `open_dir` opens a
directory named on a command line. Torch-free."""

from nmt.dirs.data import DataDir
from nmt.dirs.export import ExportDir
from nmt.dirs.model import ModelDir
from nmt.dirs.opening import open_dir, open_dirs, open_model

__all__ = ["DataDir", "ExportDir", "ModelDir", "open_dir", "open_dirs", "open_model"]
