"""The HTTP API and page of `nmt serve`: `create_app(translator_factory, settings)` returns a
FastAPI app that loads the model in a thread at start-up (GET /health says loading, then ready),
micro-batches POST /translate (search or sampling), POST /score (forced decoding) and POST
/attention (`nmt.serve.attention_query`) requests (`nmt.serve.batcher`), each checked
(`nmt.serve.request`) and tokenised on a thread, off the event loop (`nmt.serve.state` holds the
model and the decoding job), and serves the page at /."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from nmt.decode.engine import Engine
from nmt.serve.attention_query import Refusal
from nmt.serve.batcher import BatchResult
from nmt.serve.fields import bad
from nmt.serve.schema import (
    ATTENTION_BODY,
    ATTENTION_RESPONSES,
    OPENAPI_BODY,
    RESPONSES,
    SCORE_BODY,
    SCORE_RESPONSES,
)
from nmt.serve.state import ServerState, Settings, Work

STATIC = Path(__file__).parent / "static"
log = logging.getLogger("nmt.serve")
EngineFactory = Callable[[], Engine]  # builds the served engine (on a thread, at start-up)


def create_app(translator_factory: EngineFactory, settings: Settings | None = None) -> FastAPI:
    """The app: the factory runs on a thread at start-up and returns an `Engine`."""
    settings = settings or Settings()
    settings.check()
    state = ServerState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(state.load(translator_factory))
        try:
            yield
        finally:
            await asyncio.gather(loading, return_exceptions=True)
            if state.batcher is not None:
                await state.batcher.stop()
            if state.translator is not None:
                await asyncio.to_thread(state.translator.close)

    from nmt import __version__

    app = FastAPI(
        title="nmt serve",
        version=__version__,
        summary="Neural machine translation over HTTP, micro-batched.",
        lifespan=lifespan,
    )
    app.state.nmt = state

    @app.get("/health", responses={503: {"description": "loading or failed"}})
    async def health() -> JSONResponse:
        """ready (200) once the model is loaded; loading or failed (503) before."""
        if state.batcher is not None:
            return JSONResponse({"status": "ready", "model": state.name})
        if state.error:
            return JSONResponse({"status": "failed", "detail": state.error}, status_code=503)
        return JSONResponse({"status": "loading", "model": state.name}, status_code=503)

    @app.get("/info")
    async def info() -> dict[str, Any]:
        """Model, languages, architecture, decoding defaults and server limits."""
        state.ready()
        return state.info

    @app.post("/translate", openapi_extra=OPENAPI_BODY, responses=RESPONSES)
    async def translate(request: Request) -> Response:
        """Translate one line (`text`: a string) or several (a list), in order, one entry per line:
        the records of `nmt translate --format jsonl`."""
        limit = settings.limits.max_body_bytes
        return await _decode(request, state, state.translation, limit, "translations")

    @app.post("/score", openapi_extra=SCORE_BODY, responses=SCORE_RESPONSES)
    async def score(request: Request) -> Response:
        """Score given translations (forced decoding): per pair, the log-probability of `target`
        given `source`, in order; the records of `nmt rescore --format jsonl`."""
        limit = 2 * settings.limits.max_body_bytes  # two texts
        return await _decode(request, state, state.scoring, limit, "scores")

    @app.post("/attention", openapi_extra=ATTENTION_BODY, responses=ATTENTION_RESPONSES)
    async def attention(request: Request) -> Response:
        """One sentence's attention: cross (target x source), the encoder's self (source x
        source) or the decoder's masked self-attention (bos + target x the same); one layer,
        one head or their mean; of `target` when given, else of the search's translation."""
        return await _attend(request, state)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


async def _decode(
    request: Request, state: ServerState, check: Callable[[bytes], Work], limit: int, field: str
) -> Response:
    """A decoding request's answer: its body read (at most `limit` bytes), then checked and
    tokenised by `check` on a thread while the loop serves others, then micro-batched; its
    records under `field`."""
    start = time.perf_counter()
    batcher = state.ready()
    body = await _read_body(request, limit)
    work = await asyncio.to_thread(check, body)
    job = batcher.submit(work.items, work.options, work.lengths)
    result = await _wait(request, job, state.settings)
    if result is None:
        return Response(status_code=499)  # the client is gone: nobody reads this
    return _answer(field, result, state.name, start)


async def _attend(request: Request, state: ServerState) -> Response:
    """A /attention answer: checked and tokenised on a thread, computed on the batcher's worker
    (never beside another decoder call); a sentence the model cannot answer is its `Refusal`."""
    start = time.perf_counter()
    batcher = state.ready()
    body = await _read_body(request, state.settings.limits.max_body_bytes)
    work = await asyncio.to_thread(state.attending, body)
    job = batcher.submit(work.items, work.options, work.lengths)
    result = await _wait(request, job, state.settings)
    if result is None:
        return Response(status_code=499)  # the client is gone: nobody reads this
    (record,) = result.results
    if isinstance(record, Refusal):
        raise bad(record.status, record.detail)
    elapsed = round((time.perf_counter() - start) * 1000, 1)
    timings = {"elapsed_ms": elapsed, "decode_ms": round(result.decode_ms, 1)}
    return JSONResponse({**record, "model": state.name, **timings})


def _answer(field: str, result: BatchResult, name: str, start: float) -> JSONResponse:
    """A 200 answer: the records under `field`, the model's name, timings and the batch."""
    return JSONResponse(
        {
            field: result.results,
            "model": name,
            "elapsed_ms": round((time.perf_counter() - start) * 1000, 1),
            "decode_ms": round(result.decode_ms, 1),
            "batch": {"lines": result.batch_lines, "requests": result.batch_requests},
        }
    )


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise bad(413, f"the body has {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise bad(413, f"the body is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _wait(request: Request, work: Any, settings: Settings) -> BatchResult | None:
    """The batch result; None if the client went away first; 504 past `--timeout`."""
    job = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    done, _ = await asyncio.wait(
        {job, gone}, timeout=settings.timeout, return_when=asyncio.FIRST_COMPLETED
    )
    gone.cancel()
    if job in done:
        try:
            return job.result()
        except Exception as e:  # noqa: BLE001 - one line for the client, traceback in the log
            log.exception("decoding failed")
            raise HTTPException(500, f"decoding failed: {type(e).__name__}: {e}") from None
    job.cancel()  # drops the lines if they were not decoded yet
    if gone in done:
        return None
    raise bad(504, f"no translation within {settings.timeout:g} s (--timeout); the server is busy")


async def _disconnected(request: Request) -> None:
    """Return once the client has closed its connection."""
    while not await request.is_disconnected():
        await asyncio.sleep(0.1)
