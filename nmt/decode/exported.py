"""What an `nmt export` directory is: its manifest, how to recognise one, and the optional
ctranslate2 import. Torch-free, so the deployment path can read an export without torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nmt.errors import NmtError, install_hint

EXPORT_MANIFEST = "nmt-export.json"
PAD_PIECE = "<blank>"  # CTranslate2's name for padding; our id 0


def require_ctranslate2() -> Any:
    """The ctranslate2 module, or a one-line error telling how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise NmtError(f"ctranslate2 is not installed: {install_hint('ct2')}") from None
    return ctranslate2


def read_export_manifest(export_dir: str | Path) -> dict[str, Any]:
    """OUT_DIR/nmt-export.json; a broken one is a one-line error naming it."""
    path = Path(export_dir) / EXPORT_MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NmtError(f"{path}: file not found (is {export_dir} an nmt export?)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise NmtError(f"{path}: invalid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != "ctranslate2":
        raise NmtError(f"{path}: not an nmt CTranslate2 export manifest")
    return data


def is_export(model_dir: str | Path) -> bool:
    """Whether MODEL_DIR is an `nmt export` output rather than a training model directory."""
    return (Path(model_dir) / EXPORT_MANIFEST).is_file()
