"""`nmt serve`: an HTTP API (FastAPI + uvicorn) and a browser page over a `Translator`."""

from nmt.serve.app import Settings, create_app
from nmt.serve.server import serve

__all__ = ["Settings", "create_app", "serve"]
