"""nmt: neural machine translation from a parallel corpus to a measured translator."""

__version__ = "0.2.0"

__all__ = [
    "__version__",
    "DecodeOptions",
    "Glossary",
    "ModelDir",
    "Sampling",
    "Segmenter",
    "Translator",
    "translate_lines",
]

# Public names and the module that defines each: imported on first use, so `nmt --help` starts
# without torch.
# (Forced decoding is `nmt.decode.rescore.rescore`: a name here would clash with its module.)
_LAZY = {
    "Translator": "nmt.engines.translator",
    "DecodeOptions": "nmt.decode.options",
    "Sampling": "nmt.decode.options",
    "Segmenter": "nmt.data.sentences",
    "Glossary": "nmt.decode.constraints",
    "ModelDir": "nmt.dirs.model",
    "translate_lines": "nmt.decode.paragraphs",
}


def __getattr__(name: str):
    """Import heavy modules (torch) only when their names are used, so `nmt --help` starts fast."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
