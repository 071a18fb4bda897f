"""`CT2Translator`: translate with an `nmt export` directory through `ctranslate2.Translator`,
with the results and options of `nmt.engines.translator.Translator`, so `nmt translate -m EXPORT_DIR`
keeps the same command line. Pieces, ids and special tokens are the model's own (an imported
Marian model's `</s>`, `<unk>` and vocabulary; `nmt.dirs.export`).

How the options map (CTranslate2 has no per-sentence maximum and its own length penalty):
- max_len_a / max_len_b: exact. Beam search: sentences are grouped by their own maximum floor(a *
  |src| + b) (capped so the eos position fits max_positions), one `max_decoding_length` per group;
  greedy: one call, each result cut to its own maximum. At that length our search forces eos and
  counts its log-prob (0 under transformers' rule); CTranslate2 stops without it, so we add that
  term with `score_batch` (scores exact; inside CTranslate2's beam such a hypothesis still competed
  without it, and its last step keeps the beam_size best candidates, eos ones included, where ours
  forces eos on the beam_size best others too).
- min_len and no_repeat_ngram_size: the same tokens banned, but before CTranslate2's softmax
  (after ours, as in fairseq and transformers), so its log-probs of such steps are renormalized.
- banned ids: the manifest's `suppress` ids (an imported model's <pad>, its decoder start and bad
  words) are CTranslate2's `suppress_sequences`, masked before its softmax, so every step's
  log-probs are renormalized over the rest (ours are not: about 1e-5 a step for OPUS-MT's <pad>).
  nmt's own models ban none: pad and bos are never predicted by a trained model.
- length_penalty: our GNMT penalty ((5 + L) / 6) ** alpha. Greedy: exact (the score only).
  Beam: CTranslate2 searches with its own L ** alpha normalization (L counting eos, as we ask
  for the end token) and returns its `beam_size` finished hypotheses; we rescore those with the
  GNMT penalty, or under transformers' rule with L ** alpha (a forced eos counted in L with
  `forced_eos`), and keep the best `nbest`.
- stop: CTranslate2 has one stopping rule: a sentence ends once `beam_size` hypotheses are
  finished (transformers' early_stopping=True). Our `exact` and `early` rules, and transformers'
  default (`stop: transformers`, which searches on while a live hypothesis might still win), can
  find a better hypothesis that finishes later; CTranslate2 cannot, so `--stop` is checked and
  otherwise ignored, and beam results differ where that later hypothesis wins.
- with_attention: the last layer's attention averaged over heads (what the JSONL shows);
  `TextHypothesis.attention` is (T + 1, 1, 1, S), not every layer and head.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from nmt.data.vocab import Tokenizer
from nmt.decode.constraints import CONSTRAINTS_REFUSED
from nmt.decode.engine import (
    FORCED_FLOOR,
    Capabilities,
    TextHypothesis,
    Translation,
    gnmt_length_penalty,
    translate_chunks,
)
from nmt.decode.options import (
    DecodeOptions,
    OptionError,
    ResolvedOptions,
    given_options,
)
from nmt.dirs.export import ExportDir, export_decoding, export_pieces, require_ctranslate2
from nmt.engines.workers import resolve_workers
from nmt.errors import NmtError
from nmt.runtime import parse_device, usable_cpus

ATTENTION_REFUSED = (
    "attention queries need a model directory: an `nmt export` decodes with CTranslate2, which "
    "gives only the cross attention of its translations (with_attention)"
)


def _ct2_device(device: str, ct2: Any) -> tuple[str, int]:
    """(device, device_index) for ctranslate2.Translator: cpu or cuda, `cuda:N` split in two
    (CTranslate2 takes the GPU's index separately; without it, GPU 0 runs)."""
    kind, index = parse_device(device)
    if kind == "auto":
        return ("cuda" if ct2.get_cuda_device_count() > 0 else "cpu"), 0
    if kind == "mps":
        raise NmtError(f"--device {device}: a CTranslate2 export runs on cpu or cuda")
    count = ct2.get_cuda_device_count() if kind == "cuda" else 0
    if index is not None and index >= count:
        raise NmtError(f"--device {device}: only {count} CUDA device(s)")
    return kind, index or 0


class CT2Translator:
    """A CTranslate2 export with its tokenizers and the decoding defaults of its model."""

    def __init__(
        self, translator: Any, manifest: dict, src_tok: Tokenizer, tgt_tok: Tokenizer
    ) -> None:
        self.ct2, self.manifest, self.src_tok, self.tgt_tok = translator, manifest, src_tok, tgt_tok
        self.decoding = export_decoding(manifest)
        self.max_positions = int(manifest["max_positions"])
        self.max_source = self.max_positions - 1  # eos included
        self.languages = (manifest.get("src_lang"), manifest.get("tgt_lang"))  # (source, target)
        self.src_pieces = export_pieces(src_tok)  # the export's vocabularies, as it was given them
        self.tgt_pieces = export_pieces(tgt_tok)
        self.tgt_ids = {p: i for i, p in enumerate(self.tgt_pieces)}
        self.src_eos, self.tgt_eos = src_tok.eos_piece, tgt_tok.eos_piece
        # target ids never emitted (an imported model's <pad>, its bad words), one-token sequences
        banned = [[self.tgt_pieces[int(i)]] for i in manifest.get("suppress", [])]
        self.suppress: list[list[str]] | None = banned or None

    @classmethod
    def from_dir(
        cls,
        export_dir: ExportDir,
        device: str = "auto",
        threads: int = 0,
        workers: int = 0,
    ) -> CT2Translator:
        """Load EXPORT_DIR (CTranslate2 model, SentencePiece, manifest). `workers` as
        `Translator`'s (0: auto), as CTranslate2's `inter_threads`: batches translated at once,
        sharing `threads` (0: every usable core) between them. It computes in its export's type
        (CTranslate2's `default` compute type): float32 unless `nmt export --quantization` chose
        int8 or bfloat16, the faster explicit choices (DESIGN.md, "Decisions")."""
        ct2 = require_ctranslate2()
        opened, manifest = export_dir, export_dir.manifest
        src_tok, tgt_tok = opened.tokenizers
        dev, index = _ct2_device(device, ct2)
        cores = threads or usable_cpus()
        workers = resolve_workers(workers, cores, on_cpu=dev == "cpu")
        intra = threads if workers == 1 else max(1, cores // workers)
        try:
            translator = ct2.Translator(
                str(opened.path),
                device=dev,
                device_index=index,
                intra_threads=intra,
                inter_threads=workers,
            )
        except (RuntimeError, ValueError) as e:
            raise NmtError(f"{opened.path}: cannot load the CTranslate2 model ({e})") from None
        return cls(translator, manifest, src_tok, tgt_tok)

    # CTranslate2 draws no keyed samples and answers no attention queries; it gives the cross
    # attention of its translations.
    capabilities = Capabilities(sampling=False, attention=(), with_attention=True)

    def start_workers(self) -> None:
        """Nothing to start: CTranslate2 runs its workers (`inter_threads`) itself."""

    def close(self) -> None:
        """Nothing to stop (as `Translator.close`: CTranslate2 frees its workers with the model)."""

    def __enter__(self) -> CT2Translator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def resolve_options(
        self, options: DecodeOptions | None = None, **fields: Any
    ) -> ResolvedOptions:
        """The options (`fields` on top), unset ones from the exported model's decoding
        defaults, checked."""
        return given_options(options, fields).resolve(self.decoding)

    def translate(
        self,
        lines: Iterable[str],
        options: DecodeOptions | None = None,
        *,
        first_line: int = 1,
        on_warning: Callable[[str], None] | None = None,
        progress: Callable[[int], None] | None = None,
        keys: Sequence[int] | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
        **fields: Any,
    ) -> list[Translation]:
        """Translate raw lines; one Translation per line, in input order (as Translator;
        `scores=False`: greedy search returns no scores, NaN in their place). Sampling is
        refused (CTranslate2 does not draw nmt's keyed samples), so `keys` go unused; so are
        `constraints` (CTranslate2 has no lexically constrained search)."""
        if constraints is not None and any(constraints):
            raise NmtError(CONSTRAINTS_REFUSED)
        opts = self.resolve_options(options, **fields)
        if opts.sampling is not None:
            raise OptionError(
                "{sampling} needs a model directory (an `nmt export` directory decodes with "
                "CTranslate2's search)"
            )
        lines = list(lines)
        encoded = self.encode_sources(lines, first_line, on_warning or _warn)
        results: list[Any] = [None] * len(lines)
        groups: dict[int, list[int]] = {}
        for i, ids in enumerate(encoded):
            if ids:
                groups.setdefault(opts.output_limit(len(ids), self.max_positions), []).append(i)
            else:
                results[i] = Translation(
                    lines[i], [TextHypothesis("", [], 0.0, 0.0)], [self.src_eos]
                )
        if progress and len(lines) > sum(map(len, groups.values())):
            progress(len(lines) - sum(map(len, groups.values())))
        k = opts.rows
        if k == 1 and groups and opts.min_len <= min(groups):
            # greedy choices do not depend on the limit: one call, each result cut to its own
            groups = {max(groups): [i for todo in groups.values() for i in todo]}
        scored = opts.scores or k > 1  # beam reranks its hypotheses by score
        # Every group is queued before any is awaited, so `inter_threads` workers share them.
        pending = [
            (todo, self._search([encoded[i] for i in todo], max_len, opts, scored))
            for max_len, todo in sorted(groups.items())
        ]
        for todo, queued in pending:
            self._collect(lines, encoded, todo, [q.result() for q in queued], opts, scored, results)
            if progress:
                progress(len(todo))
        return results

    def translate_stream(
        self,
        lines: Iterable[str],
        options: DecodeOptions | None = None,
        *,
        buffer_size: int = 1000,
        first_line: int = 1,
        **kwargs: Any,
    ) -> Iterator[Translation]:
        """Translate an iterable chunk by chunk (`buffer_size` lines), yielding in input order."""
        return translate_chunks(self.translate, lines, options, buffer_size, first_line, kwargs)

    def attention(
        self,
        source: str,
        target: str | None = None,
        options: DecodeOptions | None = None,
        kind: str = "cross",
        **fields: Any,
    ) -> tuple[np.ndarray, list[str], list[str], str]:
        """Refused: CTranslate2 answers no attention query (`capabilities.attention` is empty);
        it gives the cross attention of its translations (`with_attention`)."""
        raise NmtError(ATTENTION_REFUSED)

    def check_constraints(
        self, lines: Sequence[str], constraints: Sequence[Sequence[str]], **fields: Any
    ) -> None:
        """Refuse constraints, as `translate` does: CTranslate2 has no constrained search."""
        if any(constraints):
            raise NmtError(CONSTRAINTS_REFUSED)

    def describe(self) -> dict[str, Any]:
        """What runs, for `nmt serve`'s /info: engine, architecture, device and compute type."""
        return {
            "engine": "ctranslate2",
            "architecture": {**self.manifest.get("model", {}), "parameters": None},
            "device": self.ct2.device,
            "precision": self.manifest.get("quantization"),
            "lowercase": self.src_tok.lowercase,  # input lowercased (`preprocess --lowercase`)
            "runtime": f"CTranslate2 {self.manifest.get('quantization')}",  # the page shows it
        }

    def score_ids(
        self, src: list[list[int]], tgt: list[list[int]], batch_tokens: int | None = None
    ) -> list[list[float]]:
        """Per pair of subword ids (no eos), the log-probability of each target token and of
        eos, in input order (`nmt rescore`): CTranslate2's `score_batch`, batched by tokens."""
        if not src:
            return []
        results = self.ct2.score_batch(
            self._sources(src),
            [[self.tgt_pieces[t] for t in ids] for ids in tgt],
            max_batch_size=batch_tokens or self.decoding.batch_tokens,
            batch_type="tokens",
            max_input_length=0,
        )
        return [[float(x) for x in res.log_probs] for res in results]

    def encode_sources(
        self, lines: list[str], first_line: int, warn: Callable[[str], None]
    ) -> list[list[int]]:
        """Subword ids per line (no eos); empty for blank lines; too long ones truncated."""
        texts = [line if line.strip() else "" for line in lines]
        encoded = self.src_tok.encode_batch(texts, threads=1) if texts else []
        for i, ids in enumerate(encoded):
            if len(ids) > self.max_source:
                warn(
                    f"line {first_line + i}: source has {len(ids)} subword tokens, truncated "
                    f"to {self.max_source} (the model's max_positions is {self.max_positions})"
                )
                encoded[i] = ids[: self.max_source]
        return encoded

    # ---- internals ------------------------------------------------------------------------

    def _sources(self, batch: list[list[int]]) -> list[list[str]]:
        """Source ids as the export's pieces, each line ended by eos."""
        return [[self.src_pieces[t] for t in ids] + [self.src_eos] for ids in batch]

    def _collect(
        self,
        lines: list[str],
        encoded: list[list[int]],
        todo: list[int],
        outs: list[Any],
        opts: ResolvedOptions,
        scored: bool,
        results: list[Any],
    ) -> None:
        """Put the Translations of the lines `todo` (CTranslate2's results `outs`) into
        `results`: forced eos added, attention completed, hypotheses rescored and cut."""
        batch = [encoded[i] for i in todo]
        own = [opts.output_limit(len(ids), self.max_positions) for ids in batch]
        forced = self._forced_eos(batch, outs, own, opts, scored)
        rows = self._forced_attention(batch, outs, forced) if opts.with_attention else None
        for j, (i, out) in enumerate(zip(todo, outs, strict=True)):
            extra = rows[j] if rows else {}
            hyps = self._hypotheses(out, forced[j], opts, extra)
            source_tokens = [self.src_pieces[t] for t in encoded[i]] + [self.src_eos]
            texts = [TextHypothesis(*h, at_limit=len(h[1]) >= own[j]) for h in hyps]
            results[i] = Translation(lines[i], texts, source_tokens)

    def _search(
        self, batch: list[list[int]], max_len: int, opts: ResolvedOptions, scores: bool = True
    ) -> list[Any]:
        """One translate_batch call over sentences that share a maximum length, queued: each
        result's `.result()` waits for it."""
        return self.ct2.translate_batch(
            self._sources(batch),
            beam_size=opts.rows,
            num_hypotheses=opts.rows,
            length_penalty=0.0 if opts.rows == 1 else opts.length_penalty,
            max_decoding_length=max_len,
            min_decoding_length=min(opts.min_len, max_len),
            no_repeat_ngram_size=opts.no_repeat_ngram_size,
            max_input_length=0,
            max_batch_size=opts.batch_tokens,
            batch_type="tokens",
            return_scores=scores,
            return_end_token=True,
            return_attention=opts.with_attention,
            suppress_sequences=self.suppress,
            asynchronous=True,
        )

    def _forced_eos(
        self,
        batch: list[list[int]],
        outs: list[Any],
        own: list[int],
        opts: ResolvedOptions,
        scores: bool = True,
    ) -> list[dict[int, tuple[list[str], float]]]:
        """Per sentence, {hypothesis: (tokens, log-prob)} for hypotheses that reach their own
        maximum length `own`: cut there, with eos forced and counted as our search does
        (CTranslate2 stops without it), scored by CTranslate2's `score_batch` (NaN without
        `scores`). Under transformers' rule the forced eos scores 0, so a hypothesis that
        CTranslate2 stopped at that very length keeps its own log-prob."""
        wanted, free = [], opts.stop == "transformers"
        found: list[dict[int, tuple[list[str], float]]] = [{} for _ in outs]
        for j, out in enumerate(outs):
            for r, pieces in enumerate(out.hypotheses):
                ended = bool(pieces) and pieces[-1] == self.tgt_eos
                body = list(pieces[:-1] if ended else pieces)
                if ended and len(body) <= own[j]:
                    continue
                if not scores:
                    found[j][r] = (body[: own[j]], math.nan)
                elif free and len(body) == own[j]:
                    found[j][r] = (body, _log_prob(out, r, opts))
                else:
                    wanted.append((j, r, body[: own[j]]))
        if not wanted:
            return found
        scored = self.ct2.score_batch(
            self._sources([batch[j] for j, _, _ in wanted]),
            [body for _, _, body in wanted],
            max_input_length=0,
        )
        for (j, r, body), res in zip(wanted, scored, strict=True):
            lps = [float(x) for x in res.log_probs]  # the tokens', then eos's
            found[j][r] = (body, sum(lps[:-1]) + (0.0 if free else max(lps[-1], FORCED_FLOOR)))
        return found

    def _forced_attention(
        self, batch: list[list[int]], outs: list[Any], forced: list[dict[int, tuple]]
    ) -> list[dict[int, np.ndarray]]:
        """Attention rows of hypotheses cut at CTranslate2's own maximum length, which returns
        none for the step where our search forces eos: decoding one step past their tokens as a
        target prefix gives that row (a step's attention does not depend on its choice)."""
        short = [
            (j, r, body)
            for j, out in enumerate(outs)
            for r, (body, _) in forced[j].items()
            if len(out.attention[r]) < len(body) + 1
        ]
        found: list[dict[int, np.ndarray]] = [{} for _ in outs]
        if not short:
            return found
        more = self.ct2.translate_batch(
            self._sources([batch[j] for j, _, _ in short]),
            target_prefix=[body for _, _, body in short],
            beam_size=1,
            max_decoding_length=max(len(body) for _, _, body in short) + 1,
            max_input_length=0,
            return_end_token=True,
            return_attention=True,
        )
        for (j, r, body), res in zip(short, more, strict=True):
            found[j][r] = np.asarray(res.attention[0], dtype=np.float32)[: len(body) + 1]
        return found

    def _hypotheses(
        self,
        out: Any,
        forced: dict[int, tuple[list[str], float]],
        opts: ResolvedOptions,
        attention: dict[int, np.ndarray] | None = None,
    ) -> list[tuple[str, list[str], float, float, np.ndarray | None]]:
        """(text, tokens, score, log_prob, attention) best first under the GNMT penalty, or
        beam search under transformers' rule L ** alpha, L counting eos (a forced one only with
        `forced_eos`), as our searches score them (`attention`: rows that replace CTranslate2's,
        by hypothesis)."""
        k, alpha = opts.rows, opts.length_penalty
        plain = k > 1 and opts.stop == "transformers"
        found = []
        for r, pieces in enumerate(out.hypotheses):
            if r in forced:
                body, log_prob = forced[r]
            else:  # ended by eos
                body, log_prob = list(pieces[:-1]), _log_prob(out, r, opts)
            ids = [self.tgt_ids.get(p, self.tgt_tok.unk_id) for p in body]
            att = None
            if out.attention:
                rows = (attention or {}).get(r)
                if rows is None:
                    rows = np.asarray(out.attention[r], dtype=np.float32)  # (T', S)
                att = rows[: len(body) + 1, None, None, :]  # (T + 1, 1, 1, S)
            if plain:
                length = len(body) + (0 if r in forced and not opts.forced_eos else 1)
                score = log_prob / float(length) ** alpha
            else:
                score = log_prob / gnmt_length_penalty(len(body) + 1, alpha)
            found.append((self.tgt_tok.decode(ids), body, score, log_prob, att))
        found.sort(key=lambda h: -h[2])
        return found[: opts.nbest]


def _log_prob(out: Any, r: int, opts: ResolvedOptions) -> float:
    """The log-prob of CTranslate2's hypothesis r (NaN without scores): its score, which beam
    search divides by L ** length_penalty (L: its tokens, eos included)."""
    if not out.scores:
        return math.nan
    norm = 1.0 if opts.rows == 1 else float(len(out.hypotheses[r])) ** opts.length_penalty
    return float(out.scores[r]) * norm


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)
