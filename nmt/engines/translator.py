"""`Translator`: raw text in, detokenized translations out, one result per input line, in order.
Inputs are encoded with the model directory's SentencePiece model, sorted by length, cut into
batches of at most `batch_tokens` (padded) source tokens, searched, and put back in input order.
Empty lines give empty translations without running the model; a source longer than the model's
positions is truncated with a warning naming its line (nmt.decode.paragraphs cuts it first)."""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from nmt.config import Config, DecodingConfig
from nmt.data.batching import decoding_runs
from nmt.data.vocab import Tokenizer
from nmt.decode.constraints import warn_missing
from nmt.decode.engine import Capabilities, TextHypothesis, Translation, translate_chunks
from nmt.decode.options import DecodeOptions, ResolvedOptions, given_options
from nmt.decode.paragraphs import with_target
from nmt.decode.search.beam import beam_search
from nmt.decode.search.constrained import constrained_beam_search, lines_constraint_ids
from nmt.decode.search.greedy import greedy_search, sample_search
from nmt.decode.search.rows import Hypothesis, max_lengths
from nmt.device import (
    autocast_for,
    compute_dtype,
    decode_precision,
    emulated_bf16_warning,
    resolve_device,
)
from nmt.dirs.model import ModelDir
from nmt.engines.forced import score_ids
from nmt.engines.jobs import Job, batch_job, blank_translations, constraint_groups
from nmt.engines.packed import pack_for_decoding
from nmt.engines.tokenizers import check_same_vocabulary
from nmt.engines.workers import (
    DecodePool,
    decode_workers,
    map_batches,
    processes_available,
    resolve_workers,
)
from nmt.errors import NmtError
from nmt.models.base import Decoder
from nmt.models.ensemble import Ensemble

MAX_BATCH_ROWS = 640  # sentences x beam per batch: beyond this CPU steps stop getting cheaper


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


class Translator:
    """A loaded model with its tokenizers and decoding defaults."""

    def __init__(
        self,
        model: Decoder,
        cfg: Config,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        device: torch.device,
        precision: str = "fp32",
        workers: int = 0,
        processes: bool | None = None,
    ) -> None:
        self.model, self.cfg, self.src_tok, self.tgt_tok = model, cfg, src_tok, tgt_tok
        self.device, self.precision = device, precision
        resolve_workers(workers, 1, True)  # a bad value fails here, not at the first batch
        self.workers = workers
        # Forked worker processes where they can be (nmt.engines.workers), else threads.
        self.worker_processes = processes_available(device) if processes is None else processes
        self._pool: DecodePool | None = None
        # Models that keep fp32 parts (Seq2Seq's recurrences) decode under autocast instead.
        use_autocast = precision != "fp32" and model.autocast_inference
        self.autocast = autocast_for(precision, device) if use_autocast else contextlib.nullcontext
        self.max_source = model.max_positions - 1  # eos included
        self.languages: tuple[str | None, str | None] = (None, None)  # from_dir: its metadata's

    @classmethod
    def from_dir(
        cls,
        model_dir: ModelDir | Sequence[ModelDir],
        device: str = "auto",
        checkpoint: str = "default",
        precision: str = "auto",
        workers: int = 0,
        processes: bool | None = None,
    ) -> Translator:
        """Load MODEL_DIR (config, SentencePiece, weights) for translation; several directories
        load as one ensemble (`nmt.models.ensemble`), with the first one's decoding defaults.
        `precision` auto: fp32 on every device, so a line translates the same whatever it is
        batched with; bf16 (fp16 on GPUs) is faster but not batch-invariant: padding and batch
        size move its roundings enough to flip near-ties. bf16/fp16 cast the weights once (so the
        decoder cache follows); scores stay fp32 (log-softmax in fp32). `workers` batches run at
        once (0: one per intra-op thread, at most 4), on forked processes where `processes`
        (None: on Linux CPUs, `nmt.engines.workers`), else on threads; `close` stops the processes."""
        from nmt.dirs.loaded import load_model

        dirs = [model_dir] if isinstance(model_dir, ModelDir) else list(model_dir)
        if not dirs:
            raise NmtError("no model directory given")
        dev = resolve_device(device)
        prec = decode_precision(precision, dev)  # fp16 on a CPU: refused before any weights load
        src_tok, tgt_tok = dirs[0].tokenizers
        for d in dirs[1:]:  # a member with other pieces fails before any weights load
            check_same_vocabulary(dirs[0], d)
        loaded = [load_model(d, checkpoint=checkpoint, device=str(dev)) for d in dirs]
        if message := emulated_bf16_warning(prec, dev, fix="--precision fp32"):
            _warn(message)
        models = []
        for model, *_ in loaded:
            if prec == "fp32" or not model.autocast_inference:
                if prec != "fp32":
                    model.to(compute_dtype(prec))  # weights cast once: the decoder cache follows
                pack_for_decoding(model)  # on a CPU: weights packed once for oneDNN
            models.append(model)
        model = models[0] if len(models) == 1 else Ensemble(models)
        engine = cls(model, loaded[0][1], src_tok, tgt_tok, dev, prec, workers, processes)
        engine.languages = dirs[0].languages
        return engine

    def resolve_options(
        self, options: DecodeOptions | None = None, **fields: Any
    ) -> ResolvedOptions:
        """The options (`fields` on top), unset ones from the model config's decoding section,
        checked."""
        return given_options(options, fields).resolve(self.cfg.decoding)

    def translate(
        self,
        lines: Iterable[str],
        options: DecodeOptions | None = None,
        *,
        first_line: int = 1,
        on_warning: Callable[[str], None] | None = None,
        progress: Callable[[int], None] | None = None,
        keys: Sequence[int] | None = None,
        parts: int | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
        target_lang: str | None = None,
        **fields: Any,
    ) -> list[Translation]:
        """Translate raw lines; one Translation per line, in input order.

        `options` say how (`fields`: DecodeOptions fields on top of them, `beam_size=5`); unset
        ones come from the model's `decoding` config. `sampling` draws `nbest` samples per line,
        keyed by line number (counted from `first_line`), so a line's samples do not depend on
        how lines are batched; `keys` gives each line its own key instead: `nmt serve` keys a
        line by its place in its request, so a request draws the same samples whatever it is
        batched with. `first_line` numbers the lines in warnings; `progress(n)` is called after
        each batch with the number of lines it finished. `parts` caps how many batches the lines
        are evenly cut into (None: one per decoding worker): `nmt serve` decodes several
        requests' batches at once and gives each the workers that are free. `constraints` (a
        list of target phrases per line) are phrases each line's translations must contain
        (nmt.decode.search.constrained; beam search only); those lines are batched apart, so the
        others translate as without them. `target_lang` (`fra`): a multilingual model's target
        language, whose token is written before each line (nmt.decode.paragraphs.with_target).
        """
        opts = self.resolve_options(options, **fields)
        lines = list(lines)
        if keys is not None and len(keys) != len(lines):
            raise NmtError(f"{len(keys)} sampling keys for {len(lines)} lines")
        line_keys = (
            list(keys) if keys is not None else range(first_line - 1, first_line - 1 + len(lines))
        )
        sources = with_target(self.src_tok, lines, target_lang)
        encoded = self.encode_sources(sources, first_line, on_warning or _warn)
        results, todo = blank_translations(lines, encoded)
        if progress and len(todo) < len(lines):
            progress(len(lines) - len(todo))
        wanted = lines_constraint_ids(
            self.model, self.tgt_tok, constraints, encoded, opts, first_line
        )
        groups = constraint_groups(todo, wanted)
        batches = [
            b for group in groups if group for b in self._batches(encoded, group, opts, parts)
        ]
        jobs = [batch_job(batch, lines, encoded, opts, line_keys, wanted) for batch in batches]
        for b, translations in self._map(jobs):
            for i, translation in zip(batches[b], translations, strict=True):
                results[i] = translation
            if progress:
                progress(len(batches[b]))
        if wanted is not None and constraints is not None:
            pieces = self.tgt_tok.id_to_piece
            warn_missing(results, constraints, wanted, pieces, first_line, on_warning or _warn)
        return results  # type: ignore[return-value]

    def start_workers(self) -> None:
        """Fork the decoding worker processes now rather than at the first batches that need
        them (`nmt serve` does, before its server threads start); a no-op without them."""
        if self.worker_processes and self._pool_size() > 1:
            self._worker_pool().start()

    @property
    def capabilities(self) -> Capabilities:
        """Keyed samples, its models' attention kinds, and how many batches decode at once (one
        per worker process, else 1: `nmt serve` keeps that many in flight)."""
        size, kinds = self._pool_size(), self.model.attention_kinds
        slots = size if self.worker_processes and size > 1 else 1
        return Capabilities(True, kinds, "cross" in kinds, slots, constraints=True)

    def worker_peak_mb(self) -> int:
        """Memory the worker processes added at their peak (0 without them; nmt.engines.workers)."""
        return self._pool.peak_extra_mb() if self._pool is not None else 0

    def close(self) -> None:
        """Stop the worker processes, if any (a later translate starts new ones)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> Translator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def translate_stream(
        self,
        lines: Iterable[str],
        options: DecodeOptions | None = None,
        *,
        buffer_size: int = 1000,
        first_line: int = 1,
        **kwargs: Any,
    ) -> Iterator[Translation]:
        """Translate an iterable chunk by chunk (`buffer_size` lines), yielding in input order
        (`kwargs`: `translate`'s). Memory stays bounded by the chunk; with buffer_size 1 each
        line is translated as soon as it is read (interactive use)."""
        return translate_chunks(self.translate, lines, options, buffer_size, first_line, kwargs)

    def attention(
        self,
        source: str,
        target: str | None = None,
        options: DecodeOptions | None = None,
        kind: str = "cross",
        **fields: Any,
    ) -> tuple[np.ndarray, list[str], list[str], str]:
        """Attention of one sentence: (layers, heads, rows, columns), the column pieces, the row
        pieces, and the translation. `kind` "cross": target x source (eos on both); "self" (a
        Transformer's encoder): source x source; "decoder" (its masked self-attention): bos +
        target x the same. Searches (with `options`, `fields` on top), or force-decodes `target`."""
        from nmt.engines.sentence_attention import sentence_attention

        return sentence_attention(self, source, target, given_options(options, fields), kind)

    @property
    def decoding(self) -> DecodingConfig:
        """The model's decoding defaults (as an export's `CT2Translator.decoding`)."""
        return self.cfg.decoding

    def describe(self) -> dict[str, Any]:
        """What runs, for `nmt serve`'s /info: engine, architecture, device and precision."""
        params = sum(p.numel() for p in self.model.parameters())
        return {
            "engine": "pytorch",
            "architecture": {**dataclasses.asdict(self.cfg.model), "parameters": params},
            "device": str(self.device),
            "precision": self.precision,
            "lowercase": self.src_tok.lowercase,  # input lowercased (`preprocess --lowercase`)
            "runtime": None,  # PyTorch: the page names no runtime beside the device
        }

    def score_ids(
        self, src: list[list[int]], tgt: list[list[int]], batch_tokens: int | None = None
    ) -> list[list[float]]:
        """Per pair of subword ids (no eos), the log-probability of each target token and of
        eos, in input order (forced decoding: `nmt.decode.rescore`)."""
        budget = batch_tokens or self.cfg.decoding.batch_tokens
        return score_ids(self.model, self.device, self.autocast, src, tgt, budget)

    # ---- internals ------------------------------------------------------------------------

    def encode_sources(
        self, lines: list[str], first_line: int, warn: Callable[[str], None]
    ) -> list[list[int]]:
        """Subword ids per line (no eos); empty for blank lines; too long ones truncated."""
        texts = [line if line.strip() else "" for line in lines]
        encoded = self.src_tok.encode_batch(texts, threads=1) if texts else []
        limit = self.max_source
        if limit > 0:
            for i, ids in enumerate(encoded):
                if len(ids) > limit:
                    warn(
                        f"line {first_line + i}: source has {len(ids)} subword tokens, truncated "
                        f"to {limit} (the model's max_positions is {limit + 1})"
                    )
                    encoded[i] = ids[:limit]
        return encoded

    def check_constraints(
        self, lines: Sequence[str], constraints: Sequence[Sequence[str]], **fields: Any
    ) -> None:
        """Refuse, naming the line (counted from 1), what `translate` would refuse of these
        lines' constraints (with the options `fields`), before any of them is decoded: `nmt
        serve` checks a request on its own, so it never fails a batch it shares."""
        opts = self.resolve_options(None, **fields)
        encoded = self.encode_sources(list(lines), 1, lambda _: None)
        lines_constraint_ids(self.model, self.tgt_tok, constraints, encoded, opts, 1)

    def _map(self, jobs: list[Job]) -> Iterator[tuple[int, list[Translation]]]:
        """(i, translations of jobs[i]) as they finish: here, on worker processes or on worker
        threads (`nmt.engines.workers`)."""
        workers = decode_workers(self.workers, self.device, len(jobs))
        started = self._pool is not None and self._pool.started
        if self.worker_processes and (workers > 1 or started):
            # once the processes run, a lone batch goes to one too: one intra-op thread is
            # faster at these sizes than a team of them (a team on a non-main thread, as the
            # server's, took 2-3x as long for one sentence)
            return self._worker_pool().map(jobs)
        return map_batches(self._run, jobs, workers)

    def _pool_size(self) -> int:
        """Worker processes for this machine: `workers`, or one per intra-op thread (at most 4)."""
        return resolve_workers(self.workers, torch.get_num_threads(), on_cpu=True)

    def _worker_pool(self) -> DecodePool:
        """The worker processes, forked at first use with this translator as it is then (a call
        with fewer batches than processes leaves some idle)."""
        if self._pool is None:
            size = self._pool_size()
            self._pool = DecodePool(self._run, size, max(1, torch.get_num_threads() // size))
        return self._pool

    def _batches(
        self,
        encoded: list[list[int]],
        todo: list[int],
        opts: ResolvedOptions,
        parts: int | None = None,
    ) -> list[list[int]]:
        """The lines `todo` (indices into `encoded`) cut into batches, longest first (memory
        peaks show up at once), within the token budget and MAX_BATCH_ROWS rows of search."""
        todo = sorted(todo, key=lambda i: -len(encoded[i]))
        max_rows = max(1, MAX_BATCH_ROWS // opts.rows)
        lengths = [len(encoded[i]) + 1 for i in todo]
        workers = decode_workers(self.workers, self.device, len(todo))  # even runs for them
        parts = workers if parts is None else max(1, min(parts, workers))
        runs = decoding_runs(lengths, opts.batch_tokens, max_rows, parts)
        return [todo[start:end] for start, end in runs]

    def _run(self, job: Job) -> list[Translation]:
        """Search one batch and detokenize it: what a worker does (in this process or not)."""
        src, src_lengths = self._padded(job.ids)
        with self.autocast():
            if job.constraints is not None:
                hyps = constrained_beam_search(
                    self.model, src, src_lengths, job.constraints, job.options
                )
            else:
                hyps = self._search(src, src_lengths, job.options, job.keys)
        opts = job.options
        limits = max_lengths(self.model, src_lengths, opts.max_len_a, opts.max_len_b).tolist()
        return [
            self._to_translation(line, ids, h, limit)
            for line, ids, h, limit in zip(job.lines, job.ids, hyps, limits, strict=True)
        ]

    def _padded(self, batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch as (B, S) source ids with eos, padded, and (B,) lengths, on the device."""
        lengths = [len(ids) + 1 for ids in batch]
        width = max(lengths)
        eos, pad = self.model.vocab.eos_id, self.model.vocab.pad_id
        rows = [[*ids, eos] + [pad] * (width - len(ids) - 1) for ids in batch]
        src = torch.tensor(rows, dtype=torch.long)  # (B, S): one tensor, not two copies a row
        return src.to(self.device), torch.tensor(lengths, device=self.device)

    def _search(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        opts: ResolvedOptions,
        keys: list[int] | None,
    ) -> list[list[Hypothesis]]:
        """Sampling (keyed by `keys`), greedy or beam search on one padded batch."""
        if opts.sampling is not None:
            assert keys is not None  # line numbers from 0 by default
            return sample_search(self.model, src, src_lengths, torch.tensor(keys), opts)
        if opts.rows == 1:
            return [[h] for h in greedy_search(self.model, src, src_lengths, opts)]
        return beam_search(self.model, src, src_lengths, opts)

    def _pieces(self, ids: list[int]) -> list[str]:
        return [self.src_tok.id_to_piece(i) for i in ids] + [self.src_tok.eos_piece]

    def _to_translation(
        self, line: str, ids: list[int], hyps: list[Hypothesis], limit: int
    ) -> Translation:
        """Detokenize one sentence's hypotheses (`limit`: its most output tokens)."""
        out = []
        for h in hyps:
            att = None if h.attention is None else h.attention.float().cpu().numpy()
            out.append(
                TextHypothesis(
                    text=self.tgt_tok.decode(h.tokens),
                    tokens=[self.tgt_tok.id_to_piece(i) for i in h.tokens],
                    score=h.score,
                    log_prob=h.log_prob,
                    attention=att,
                    at_limit=len(h.tokens) >= limit,
                )
            )
        return Translation(line, out, self._pieces(ids))
