"""Run the app under uvicorn: check everything a user can get wrong first (one-line errors, exit 2),
then load the model in the background while the port already answers /health."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nmt.decode.lines import model_dirs
from nmt.decode.paragraphs import source_languages, target_token
from nmt.errors import NmtError
from nmt.serve.app import create_app
from nmt.serve.state import Settings

if TYPE_CHECKING:
    from nmt.decode.engine import Engine

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def translator_factory(
    model_dir: Any,
    device: str = "auto",
    checkpoint: str = "default",
    precision: str = "auto",
) -> Callable[[], Engine]:
    """A deferred `open_translator`: a `Translator` for a model directory (a list: an ensemble),
    CTranslate2 for an `nmt export` directory (paths, or directories `open_dirs` opened);
    options that do not apply fail now."""
    from nmt.engines.loading import export_of, open_translator

    if precision not in PRECISIONS:
        raise NmtError(f"--precision must be {', '.join(PRECISIONS)}, got {precision!r}")
    given = model_dir if isinstance(model_dir, list) else [model_dir]
    if export_of(given, checkpoint, precision) is None:
        require_torch()  # a model directory decodes with PyTorch: fail before listening
    return lambda: open_translator(model_dir, device, checkpoint, precision)


def require_torch() -> None:
    """ModuleNotFoundError now, without importing torch, when it is not installed (the command
    line names the extra that brings it)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")


def check_port(host: str, port: int) -> None:
    """Fail with one line when the address cannot be bound (in use, not local, no permission)."""
    if not 0 <= port <= 65535:
        raise NmtError(f"--port must be in [0, 65535], got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            reason = "address already in use" if e.errno == errno.EADDRINUSE else e.strerror
            raise NmtError(f"{host}:{port}: {reason}") from None


def serve(
    model_dir: str | list[str],
    host: str = "127.0.0.1",
    port: int = 8080,
    settings: Settings | None = None,
    *,
    device: str = "auto",
    precision: str = "auto",
    quiet: bool = False,
) -> None:
    """Serve MODEL_DIR (several: their ensemble; an `nmt export` directory: CTranslate2) until
    Ctrl-C / SIGTERM."""
    import uvicorn

    from nmt.dirs import open_dirs

    dirs = [str(d) for d in model_dirs(model_dir)]
    settings = settings or Settings(model_dir=dirs[0], members=tuple(dirs) if len(dirs) > 1 else ())
    settings.check()
    opened = open_dirs(dirs)  # each read once; a wrong one fails now, not in the background
    if settings.target_lang is not None:  # without one, each request names its own
        languages = source_languages(opened[0].tokenizers[0])
        target_token(languages, settings.target_lang, dirs[0])
    served = opened[0] if len(opened) == 1 else opened  # one model, or an ensemble's members
    factory = translator_factory(served, device, settings.checkpoint, precision)
    check_port(host, port)
    app = create_app(factory, settings)
    if not quiet:
        print(
            f"nmt serve: http://{host}:{port}/ (API docs at /docs), loading {', '.join(dirs)}",
            flush=True,
        )
    uvicorn.run(app, host=host, port=port, log_level="warning" if quiet else "info")
