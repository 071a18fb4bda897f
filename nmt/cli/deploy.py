"""`nmt serve` and `nmt export`: a model over HTTP (nmt.serve), or as a CTranslate2 directory
(nmt.export.ctranslate2) or a transformers one (nmt.export.huggingface)."""

from __future__ import annotations

import typer

from nmt.cli.errors import user_errors
from nmt.cli.flags import (
    CheckpointOpt,
    DeviceOpt,
    ModelDirOpt,
    ModelDirsOpt,
    PrecisionOpt,
    QuietOpt,
    TargetLangOpt,
)

commands = typer.Typer()


@commands.command("serve")
@user_errors
def serve_cmd(
    *,
    model_dir: ModelDirsOpt,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", help="TCP port (0: any free one)."),
    max_batch_tokens: int = typer.Option(
        None,
        "--max-batch-tokens",
        help="Padded source tokens per decoder call \\[default: model's].",
    ),
    max_wait_ms: float = typer.Option(
        10.0, "--max-wait-ms", help="How long a request waits for others to share its batch."
    ),
    max_request_lines: int = typer.Option(256, "--max-request-lines", help="Lines per request."),
    max_line_chars: int = typer.Option(2000, "--max-line-chars", help="Characters per line."),
    timeout: float = typer.Option(
        60.0, "--timeout", help="Seconds a request may wait for its translation (then 504)."
    ),
    precision: PrecisionOpt = "auto",
    checkpoint: CheckpointOpt = "default",
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
    target_lang: TargetLangOpt = None,
) -> None:
    """Serve MODEL_DIR over HTTP: POST /translate (micro-batched), GET /health, GET /info, the
    OpenAPI docs at /docs, and a page at / with translations and attention heatmaps."""
    from nmt.serve import Settings, serve

    settings = Settings(
        model_dir=model_dir[0],
        members=tuple(model_dir) if len(model_dir) > 1 else (),
        checkpoint=checkpoint,
        max_batch_tokens=max_batch_tokens,
        max_wait_ms=max_wait_ms,
        max_request_lines=max_request_lines,
        max_line_chars=max_line_chars,
        timeout=timeout,
        target_lang=target_lang,
    )
    serve(model_dir, host, port, settings, device=device, precision=precision, quiet=quiet)


@commands.command("export")
@user_errors
def export_cmd(
    *,
    model_dir: ModelDirOpt,
    out_dir: str = typer.Option(..., "--output", "-o", help="EXPORT_DIR to create."),
    fmt: str = typer.Option(
        "ctranslate2",
        "--format",
        help="Export format: ctranslate2, or huggingface (a transformers from_pretrained directory).",
    ),
    quantization: str = typer.Option(
        "float32", "--quantization", help="Weights: float32, int8, int8_float32 or bfloat16."
    ),
    checkpoint: CheckpointOpt = "default",
    force: bool = typer.Option(False, "--force", help="Replace an existing non-empty EXPORT_DIR."),
    quiet: QuietOpt = False,
) -> None:
    """Export a Transformer to a self-contained CTranslate2 directory (needs the ct2 extra);
    `nmt translate -m EXPORT_DIR` translates with it."""
    from pathlib import Path

    from nmt.dirs import ModelDir
    from nmt.export import check_export_options, export

    check_export_options(fmt, quantization)  # before the model directory is read
    opened = ModelDir(model_dir)
    export(opened, Path(out_dir), fmt, quantization, checkpoint, force=force, quiet=quiet)


@commands.command("import")
@user_errors
def import_cmd(
    source: str = typer.Argument(
        ...,
        help="A Hugging Face Marian directory (OPUS-MT), an original Marian release (.npz, "
        "decoder.yml, vocabulary, .spm), a directory nmt export --format huggingface wrote, or a "
        "hub id such as Helsinki-NLP/opus-mt-en-de (an existing local directory of that name wins).",
    ),
    out_dir: str = typer.Option(..., "--output", "-o", help="MODEL_DIR to create."),
    force: bool = typer.Option(False, "--force", help="Replace an existing non-empty MODEL_DIR."),
    quiet: QuietOpt = False,
) -> None:
    """Import a pretrained Marian (OPUS-MT) model as a model directory every command takes; it
    keeps its own tokenizer, special ids and decoding defaults."""
    from pathlib import Path

    from nmt.pretrained.importer import import_marian

    opened = import_marian(source, Path(out_dir), force=force)
    if not quiet:
        cfg = opened.config.model
        src, tgt = opened.languages
        typer.echo(
            f"imported {source} ({src or '?'} -> {tgt or '?'}, {cfg.encoder_layers}+"
            f"{cfg.decoder_layers} layers, d_model {getattr(cfg, 'd_model', '?')}) into {out_dir}",
            err=True,
        )
