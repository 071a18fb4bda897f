"""Preprocessing: clean train, learn SentencePiece, encode every split into DATA_DIR.

The steps live in their own modules (`nmt.data.cleaning`, `nmt.data.vocab`, `nmt.data.encoding`,
and `nmt.data.split_entry` for each split's record); this module holds the settings
(`PreprocessConfig`), runs the steps in order inside a temporary folder, and writes the manifest
that `nmt.dirs.data` reads. Memory stays flat as the corpus grows: train is streamed into
cleaned text files, SentencePiece samples a bounded number of sentences, and encoding runs in worker
processes over byte ranges of the cleaned files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from nmt import __version__
from nmt.data.bulk_clean import clean_files
from nmt.data.cleaning import (
    DROP_REASONS,
    Chunk,
    PairFilter,
    clean_train,
    no_pairs_message,
    resolve_input,
)
from nmt.data.corpus import sha256_file
from nmt.data.encoding import ChunkJob, check_eval, encode_eval, encode_train
from nmt.data.holdout import Held, HoldOut, Pairs, ValidSample, hold_out
from nmt.data.model_tokenizer import (
    ModelTokenizer,
    copy_tokenizer,
    imported_tokenizers,
    manifest_fields,
    tokenizer_from,
)
from nmt.data.split_entry import check_inputs_outside, over_limits, split_entry, test_names
from nmt.data.spm_source import SpmSource, copy_models, lowercase_mismatch, spm_source
from nmt.data.tsv import column_order, is_tsv, train_pairs
from nmt.data.vocab import SPECIAL_IDS, Tokenizer, train_spm
from nmt.dirs.data import FORMAT, DataDir, write_manifest
from nmt.dirs.model import ModelDir
from nmt.errors import NmtError
from nmt.runtime import usable_cpus
from nmt.textio import building_dir, check_out_dir

CHUNK_PAIRS = 20_000  # train pairs per encoding job, and valid/test lines per encoded block
SPM_TYPES = ("unigram", "bpe")
MIN_VOCAB = 8  # 4 special pieces, the word boundary and a few characters (as nmt.data.vocab checks)
COVERAGE = (0.98, 1.0)  # the character coverage SentencePiece accepts

Progress = Callable[[str, int, "int | None"], None]
Pair = tuple[Path, Path]


@dataclass(frozen=True)
class PreprocessConfig:
    """What to preprocess and how; checked once on creation, with the CLI's option names in errors."""

    src_lang: str
    tgt_lang: str
    train: str | Path
    valid: str | Path | None = None
    tests: Sequence[str | Path] = ()
    vocab_size: int = 8000
    spm_type: str = "unigram"
    joint: bool = True
    max_len: int = 250
    max_ratio: float = 3.0
    dedupe: bool = False
    threads: int | None = None  # None: nmt.runtime.usable_cpus()
    skip_invalid: bool = False
    character_coverage: float = 1.0
    spm_sample: int = 500_000
    spm_from: ModelDir | DataDir | None = None  # reuse this directory's SentencePiece models
    extend_vocab: int = 0  # with spm_from: append up to this many pieces for unknown characters
    extend_all: bool = False  # extend_vocab with every piece the corpus wants (old text kept)
    lowercase: bool = False  # lowercase every split (the setting of most Multi30k papers)
    columns: Sequence[str] | None = None  # a TSV train's column languages (None: source, target)
    split_valid: int = 0  # hold this many train pairs out as valid (instead of a valid file)
    split_test: int = 0  # ... and this many as test, whose sources train then never contains
    seed: int = 1  # draws the held-out pairs and the valid sample
    valid_sample: int = 0  # keep a seeded sample of this many valid lines (0: all of them)
    tokenizer_from: ModelDir | None = None  # encode with this model's own tokenizer

    def __post_init__(self) -> None:
        object.__setattr__(self, "tests", tuple(self.tests))
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))
        self.validate()

    def validate(self) -> None:
        """Raise NmtError on the first invalid setting (the input files are checked later)."""
        if self.threads is not None and self.threads < 1:
            raise NmtError(f"--threads must be >= 1, got {self.threads}")
        if self.spm_type not in SPM_TYPES:
            raise NmtError(f"--spm-type must be unigram or bpe, got {self.spm_type!r}")
        if self.tokenizer_from is not None and (self.spm_from is not None or self.extend_vocab):
            raise NmtError(
                "--tokenizer-from keeps a model's vocabulary: drop --spm-from/--extend-vocab"
            )
        reused = self.spm_from is not None or self.tokenizer_from is not None
        if not reused and self.vocab_size < MIN_VOCAB:  # else the reused model's size
            raise NmtError(f"vocabulary size must be at least {MIN_VOCAB}, got {self.vocab_size}")
        if not COVERAGE[0] <= self.character_coverage <= COVERAGE[1]:
            raise NmtError(
                f"--character-coverage must be between {COVERAGE[0]} and {COVERAGE[1]}, "
                f"got {self.character_coverage}"
            )
        if self.src_lang == self.tgt_lang:
            raise NmtError(f"source and target language are both {self.src_lang!r}")
        if self.extend_vocab < 0:
            raise NmtError(f"--extend-vocab must be >= 0, got {self.extend_vocab}")
        if self.extend_vocab and self.spm_from is None:
            raise NmtError(
                "--extend-vocab extends reused SentencePiece models: it needs --spm-from "
                "(a new model learns every character of the corpus already)"
            )
        if self.extend_all and not self.extend_vocab:
            raise NmtError("--extend-all needs --extend-vocab N (how many pieces at most)")
        if self.max_len < 1 or self.max_ratio < 1.0:
            raise NmtError(
                f"--max-len must be >= 1 and --max-ratio >= 1 (got {self.max_len}, {self.max_ratio})"
            )
        self.validate_sources()

    def validate_sources(self) -> None:
        """The TSV and held-out settings: each names what it conflicts with."""
        if self.columns is not None:
            if not is_tsv(self.train):
                raise NmtError(
                    "--columns names the columns of a --train file ending .tsv or .tsv.gz"
                )
            column_order(self.columns, self.langs)
        self.holdout.check()
        if self.split_valid and self.valid is not None:
            raise NmtError("--split-valid holds valid out of train: drop it or --valid")
        if self.split_test and self.tests:
            raise NmtError("--split-test holds test out of train: drop it or --test")
        ValidSample.check(self.valid_sample, self.valid is not None)

    @property
    def holdout(self) -> HoldOut:
        """The valid and test splits to draw out of train (false when there are none)."""
        return HoldOut(self.split_valid, self.split_test, self.seed)

    @property
    def tsv_order(self) -> tuple[int, int] | None:
        """(source, target) columns of a TSV train; None for two line-aligned files."""
        return column_order(self.columns, self.langs) if is_tsv(self.train) else None

    @property
    def langs(self) -> tuple[str, str]:
        """(source, target) language suffixes."""
        return self.src_lang, self.tgt_lang

    def manifest_options(self) -> dict[str, Any]:
        """The cleaning and SentencePiece settings recorded under `options` in manifest.json."""
        return {
            "max_len": self.max_len,
            "max_ratio": self.max_ratio,
            "dedupe": self.dedupe,
            "skip_invalid": self.skip_invalid,
            "character_coverage": self.character_coverage,
            "spm_sample": self.spm_sample,
            "lowercase": self.lowercase,
        }

    def split_inputs(self) -> dict[str, Pair]:
        """Input files of every split (train, valid, tests by basename); missing files are errors."""

        def files(prefix: str | Path) -> Pair:
            return resolve_input(prefix, self.src_lang), resolve_input(prefix, self.tgt_lang)

        if is_tsv(self.train):
            if not Path(self.train).is_file():
                raise NmtError(f"{self.train}: file not found")
            inputs = {"train": (Path(self.train), Path(self.train))}
        else:
            inputs = {"train": files(self.train)}
        if self.valid is not None:
            inputs["valid"] = files(self.valid)
        for name, prefix in zip(test_names(self.tests), self.tests, strict=True):
            inputs[name] = files(prefix)
        return inputs


def preprocess(
    cfg: PreprocessConfig,
    out_dir: str | Path,
    force: bool = False,
    quiet: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Clean train, learn SentencePiece, encode every split into `out_dir`; return the manifest.

    Everything is built in a temporary folder beside `out_dir` and renamed into place at the end,
    so an error leaves nothing behind. `progress(step, done, total)` is called during long steps.
    """
    out_dir = Path(out_dir)
    if progress is None and not quiet:
        from nmt.data.summary import stderr_progress

        progress = stderr_progress()
    report: Progress = progress if progress is not None and not quiet else (lambda *_: None)
    inputs = cfg.split_inputs()
    model = (
        None if cfg.tokenizer_from is None else tokenizer_from(cfg.tokenizer_from, cfg.lowercase)
    )
    reused = spm_source(cfg.spm_from) if cfg.spm_from is not None else None
    if model is not None:
        reused = model.spm
    if reused is not None and reused.lowercase != cfg.lowercase:
        raise NmtError(lowercase_mismatch(reused.dir, reused.lowercase))
    check_out_dir(out_dir, force)
    if force:
        check_inputs_outside(out_dir, inputs)
    # a bad valid/test file fails now, not after train
    lines = {
        split: check_eval(paths, CHUNK_PAIRS) for split, paths in inputs.items() if split != "train"
    }
    sample = ValidSample.draw(lines.get("valid", 0), cfg.valid_sample, cfg.seed)
    with building_dir(out_dir, force) as tmp:  # a full disk or a read-only folder names DATA_DIR
        run = _Run(cfg, tmp, inputs, cfg.threads or usable_cpus(), report, reused, sample=sample)
        run.model = model
        return run.build()


@dataclass
class _Run:
    """One preprocessing run inside the temporary folder `tmp`: the steps and what they share."""

    cfg: PreprocessConfig
    tmp: Path
    inputs: dict[str, Pair]
    threads: int
    report: Progress
    reused: SpmSource | None = None  # --spm-from: the SentencePiece models to copy, not learn
    extension: dict[str, Any] | None = None  # --extend-vocab: what was appended, per side
    held: Held | None = None  # --split-valid / --split-test: the pairs drawn out of train
    sums: dict[Path, Future[str]] = field(default_factory=dict)  # train's input checksums
    sample: ValidSample | None = None  # --valid-sample: the valid lines kept
    model: ModelTokenizer | None = None  # --tokenizer-from: the model whose tokenizer encodes
    unknown: dict[str, dict[str, int]] = field(default_factory=dict)  # per split and language

    @property
    def imported(self) -> tuple[str, str] | None:
        """--tokenizer-from an imported model: (folder, files) of its tokenizer copied here."""
        if self.model is None or not self.model.imported:
            return None
        return str(self.tmp), json.dumps(self.model.files(), sort_keys=True)

    def tokenizers(self, models: Pair) -> tuple[Tokenizer, Tokenizer]:
        """The tokenizers that encode: the copied SentencePiece models, or the imported pair."""
        imported = self.imported
        return Tokenizer.pair(*models) if imported is None else imported_tokenizers(*imported)

    def reporter(self, step: str, total: int | None) -> Callable[[int], None]:
        """What reports a long step's progress, called with the number done so far."""
        return lambda n: self.report(step, n, total)

    def count_unknown(self, split: str, counts: list[int]) -> None:
        """Record a split's lines holding pieces the model's vocabulary lacks."""
        if self.imported is not None:
            self.unknown[split] = dict(zip(self.cfg.langs, counts, strict=True))

    def build(self) -> dict[str, Any]:
        """All steps in order; returns the manifest, also written into `tmp`."""
        clean = (self.tmp / f".clean.{self.cfg.src_lang}", self.tmp / f".clean.{self.cfg.tgt_lang}")
        with ThreadPoolExecutor(1) as hasher:  # train's checksums, read while the steps run
            self.sums = {p: hasher.submit(sha256_file, p) for p in set(self.inputs["train"])}
            counts, chunks = self.clean_train(clean)
            models = self.learn_sentencepiece(clean)
            toks = self.tokenizers(models)
            dtype = "<u2" if max(t.vocab_size for t in toks) <= 65535 else "<i4"
            splits = {"train": self.encode_train(clean, chunks, models, dtype, counts)}
        for split, paths in self.inputs.items():
            if split != "train":
                splits[split] = self.encode_eval(split, paths, toks, dtype)
        for split, unknown in self.unknown.items():
            splits[split]["unknown_lines"] = unknown
        manifest = self.manifest(models, toks, dtype, splits)
        write_manifest(self.tmp, manifest)
        return manifest

    def clean_train(self, clean: Pair) -> tuple[dict[str, int], list[Chunk]]:
        """Step 1: stream train into cleaned text files, cut into chunks for the encoders."""
        cfg, train = self.cfg, self.inputs["train"]
        keep = PairFilter(train, cfg.dedupe, cfg.skip_invalid, cfg.lowercase)
        if cfg.holdout:
            self.report("hold out valid/test", 0, 1)

            def pairs() -> Pairs:  # each time with a count of its own, thrown away
                return train_pairs(train, cfg.tsv_order, cfg.skip_invalid, {})

            usable = partial(PairFilter, train, False, cfg.skip_invalid, cfg.lowercase)
            self.held = hold_out(pairs, usable, cfg.holdout, self.tmp, cfg.langs, train[0])
            self.inputs.update(self.held.files)
            keep.held, keep.test_sources = self.held.ranks, self.held.test_sources
            self.report("hold out valid/test", 1, 1)
        step = "clean train"
        self.report(step, 0, None)
        done = self.reporter(step, None)
        if cfg.tsv_order is None and keep.simple:
            counts, chunks = clean_files(train, keep, clean, CHUNK_PAIRS, done)
        else:
            raw = train_pairs(train, cfg.tsv_order, cfg.skip_invalid, keep.counts)
            counts, chunks = clean_train(raw, keep, clean, CHUNK_PAIRS, done)
        self.report(step, counts["read"], counts["read"])
        if not chunks:
            raise NmtError(no_pairs_message(self.inputs["train"], counts))
        return counts, chunks

    def learn_sentencepiece(self, clean: Pair) -> Pair:
        """Step 2: one joint SentencePiece model on both sides, or one per language (or a copy of
        --spm-from's, so a trained model's ids mean the same pieces here)."""
        cfg = self.cfg
        if self.model is not None and self.model.imported:
            files = copy_tokenizer(self.model, self.tmp)
            return self.tmp / files["src_spm"], self.tmp / files["tgt_spm"]
        if self.reused is not None:
            models = copy_models(self.reused, self.tmp, cfg.langs)
            if cfg.extend_vocab:
                self.extend_vocab(models, clean, self.reused)
            return models
        step = "train sentencepiece"
        self.report(step, 0, 1)

        def learn(text: Sequence[Path], prefix: Path) -> Path:
            size, kind, coverage = cfg.vocab_size, cfg.spm_type, cfg.character_coverage
            return train_spm(text, prefix, size, kind, coverage, cfg.spm_sample, self.threads)

        if cfg.joint:
            model = learn(list(clean), self.tmp / "spm")
            models = (model, model)
        else:
            models = (
                learn([clean[0]], self.tmp / f"spm.{cfg.src_lang}"),
                learn([clean[1]], self.tmp / f"spm.{cfg.tgt_lang}"),
            )
        self.report(step, 1, 1)
        return models

    def extend_vocab(self, models: Pair, clean: Pair, reused: SpmSource) -> None:
        """--extend-vocab: append pieces to the copied models for the characters they lack."""
        from nmt.data.vocab_extension import extend_copied

        cfg, step = self.cfg, "extend sentencepiece"
        self.report(step, 0, 1)
        limit, coverage, sample = cfg.extend_vocab, cfg.character_coverage, cfg.spm_sample
        self.extension = extend_copied(
            models, clean, cfg.langs, reused, limit, cfg.extend_all, coverage, sample, self.threads
        )
        self.report(step, 1, 1)

    def encode_train(
        self, clean: Pair, chunks: list[Chunk], models: Pair, dtype: str, counts: dict[str, int]
    ) -> dict[str, Any]:
        """Step 3: encode and length-filter cleaned train; its manifest entry with drop counts."""
        step, cfg = "encode train", self.cfg
        remaining = sum(c.n for c in chunks)
        self.report(step, 0, remaining)
        names = (str(models[0]), str(models[1]))
        jobs = [
            ChunkJob(clean, c, names, dtype, cfg.max_len, cfg.max_ratio, imported=self.imported)
            for c in chunks
        ]
        done = self.reporter(step, remaining)
        enc_counts, lengths = encode_train(self.tmp, cfg.langs, jobs, dtype, self.threads, done)
        self.count_unknown("train", [enc_counts.pop(f"unknown_{k}", 0) for k in ("src", "tgt")])
        for k, v in enc_counts.items():
            counts[k] += v
        for c in clean:
            c.unlink()
        kept = len(lengths[0])
        if kept == 0:
            raise NmtError(no_pairs_message(self.inputs["train"], counts))
        sums = {path: future.result() for path, future in self.sums.items()}
        entry = split_entry(self.cfg.langs, self.inputs["train"], lengths, False, "train", sums)
        reasons = (
            DROP_REASONS
            + ("malformed",) * bool(cfg.tsv_order)
            + ("test_source",) * bool(cfg.split_test)
        )
        entry.update(lines_read=counts["read"], kept=kept, dropped={k: counts[k] for k in reasons})
        if cfg.tsv_order is not None:
            entry["columns"] = [cfg.langs[cfg.tsv_order.index(i)] for i in (0, 1)]
        if cfg.holdout:
            entry["held_out"] = {"valid": cfg.split_valid, "test": cfg.split_test, "seed": cfg.seed}
        return entry

    def encode_eval(
        self, split: str, paths: Pair, toks: tuple[Tokenizer, Tokenizer], dtype: str
    ) -> dict[str, Any]:
        """Step 4: encode a valid/test split line for line, keeping its raw text; its entry."""
        step = f"encode {split}"
        self.report(step, 0, None)
        sample = self.sample if split == "valid" else None
        unknown = [0, 0]
        encode = partial(encode_eval, self.tmp, split, self.cfg.langs, paths, toks, dtype)
        keep = None if sample is None else sample.lines
        n, lengths = encode(self.threads, CHUNK_PAIRS, self.cfg.lowercase, keep, unknown)
        self.count_unknown(split, unknown)
        self.report(step, n, n)
        held = self.held is not None and split in self.held.files
        inputs = self.inputs["train"] if held else paths  # what a held-out split was drawn from
        entry = split_entry(self.cfg.langs, inputs, lengths, True, split)
        entry.update(lines_read=n, kept=n, dropped={}, over_limits=over_limits(*lengths))
        if sample is not None:
            entry.update(lines_read=sample.of, sample=sample.entry())
        if held:
            entry["held_out_of"] = "train"
        return entry

    def manifest(
        self, models: Pair, toks: tuple[Tokenizer, Tokenizer], dtype: str, splits: dict[str, Any]
    ) -> dict[str, Any]:
        """Step 5: what the data folder holds and how it was made (docs/formats.md)."""
        cfg, reused = self.cfg, self.reused
        own = {} if self.model is None else manifest_fields(self.model)
        return {
            "format": FORMAT,
            "nmt_version": __version__,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "src_lang": cfg.src_lang,
            "tgt_lang": cfg.tgt_lang,
            "joint": models[0] == models[1],
            "spm_type": None if self.imported else reused.spm_type if reused else cfg.spm_type,
            "spm": {"src": models[0].name, "tgt": models[1].name},
            "spm_from": None if reused is None else str(reused.dir),
            "vocab_extension": self.extension,
            "vocab_size": {"src": toks[0].vocab_size, "tgt": toks[1].vocab_size},
            "requested_vocab_size": cfg.vocab_size if reused is None else None,
            "special_ids": dict(SPECIAL_IDS),
            "dtype": np.dtype(dtype).name,
            "options": cfg.manifest_options(),
            "splits": splits,
        } | own
