"""`nmt serve`: an HTTP API (FastAPI + uvicorn) and a browser page over a `Translator`."""

from nmt.serve.app import create_app
from nmt.serve.server import serve
from nmt.serve.state import Settings

__all__ = ["Settings", "create_app", "serve"]
