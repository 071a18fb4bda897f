"""nmt: neural machine translation from a parallel corpus to a measured translator."""

__version__ = "0.1.0"

__all__ = ["__version__", "Translator"]


def __getattr__(name: str):
    """Import heavy modules (torch) only when their names are used, so `nmt --help` starts fast."""
    if name == "Translator":
        from nmt.translate import Translator

        return Translator
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
