"""Translate a test set and score it (`nmt evaluate`): the one place where a model meets the
metrics, so `nmt.eval.scoring` itself needs sacrebleu alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nmt.decode.lines import check_model_dirs, model_dirs, one_line, warn_to_stderr
from nmt.errors import NmtError
from nmt.eval.scoring import (
    TOKENIZERS,
    Options,
    Result,
    check_lengths,
    check_options,
    parse_metrics,
    read_text,
    score,
)
from nmt.textio import atomic_write


def _check_inputs(
    dirs: Sequence[str | Path],
    src: str | Path,
    ref_paths: Sequence[str | Path],
    opts: Options,
) -> tuple[list[str], list[list[str]]]:
    """Source and reference lines, refused when missing, empty or misaligned (no model needed)."""
    if opts.tokenize is not None and opts.tokenize not in TOKENIZERS:
        raise NmtError(f"unknown tokenizer {opts.tokenize!r} (choose from {', '.join(TOKENIZERS)})")
    check_model_dirs(dirs)
    src_lines = read_text(src)
    if not src_lines:
        raise NmtError(f"{src}: empty source file")
    refs = [read_text(p) for p in ref_paths]
    check_lengths(src_lines, refs, hyp_name=str(src), ref_names=[str(p) for p in ref_paths])
    return src_lines, refs


def evaluate(
    model_dir: str | Path | Sequence[str | Path],
    src: str | Path,
    ref_paths: Sequence[str | Path],
    hyp_out: str | Path | None = None,
    metrics: Sequence[str] = ("bleu",),
    options: Options | None = None,
    device: str = "auto",
    checkpoint: str = "default",
    precision: str = "auto",
    progress: Callable[[int, int], None] | None = None,
    **translate_kwargs: Any,
) -> list[Result]:
    """Translate `src` with the model (several directories: their ensemble) and score it; every
    input is checked before the model loads.

    `translate_kwargs` go to `Translator.translate` (None means the model config's value);
    `progress(n_done_now, n_total)` is called as batches finish.
    """
    metric_names = parse_metrics(metrics)
    opts = options or Options()
    check_options(metric_names, opts)
    dirs = model_dirs(model_dir)
    src_lines, refs = _check_inputs(dirs, src, ref_paths, opts)

    from nmt.decode.translator import (
        Translator,  # torch is imported only when a model is really used
    )

    translator = Translator.from_dir(
        dirs[0] if len(dirs) == 1 else dirs, device, checkpoint, precision
    )
    kwargs = {k: v for k, v in translate_kwargs.items() if v is not None}
    kwargs.setdefault("scores", False)  # only the text is scored
    kwargs.setdefault("on_warning", warn_to_stderr(str(src)))  # truncations name the file
    if progress is not None:
        kwargs["progress"] = lambda n: progress(n, len(src_lines))
    with translator:  # its worker processes end with the translation
        hyps = [one_line(h.text) for h in translator.translate(src_lines, **kwargs)]  # as translate
    if translator.tgt_tok.lowercase:  # it writes lowercased text: cased BLEU would only punish that
        opts = dataclasses.replace(opts, lowercase=True)  # the signature says case:lc
    if len(hyps) != len(src_lines):  # the translator's contract; never score a shifted file
        raise NmtError(f"translator returned {len(hyps)} lines for {len(src_lines)} inputs")
    if hyp_out is not None:
        with atomic_write(hyp_out) as f:
            f.writelines(h + "\n" for h in hyps)
    return score(hyps, refs, metric_names, options=opts)
