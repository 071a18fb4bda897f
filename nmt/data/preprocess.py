"""Preprocessing: clean train, learn SentencePiece, encode every split into DATA_DIR.

The steps live in their own modules (`nmt.data.cleaning`, `nmt.data.vocab`, `nmt.data.encoding`,
and `nmt.data.split_entry` for each split's record); this module holds the settings
(`PreprocessConfig`), runs the steps in order inside a temporary folder, and writes the manifest
that `nmt.data.dataset` reads. Memory stays flat as the corpus grows: train is streamed into
cleaned text files, SentencePiece samples a bounded number of sentences, and encoding runs in worker
processes over byte ranges of the cleaned files.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from nmt import __version__
from nmt.data.cleaning import DROP_REASONS, Chunk, clean_train, no_pairs_message, resolve_input
from nmt.data.dataset import FORMAT, MANIFEST
from nmt.data.encoding import ChunkJob, check_eval, encode_eval, encode_train
from nmt.data.split_entry import over_limits, split_entry
from nmt.data.spm_source import SpmSource, spm_source
from nmt.data.vocab import SPECIAL_IDS, Tokenizer, train_spm
from nmt.errors import NmtError
from nmt.runtime import usable_cpus
from nmt.textio import check_out_dir, naming_output, replace_dir

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
    spm_from: str | Path | None = None  # reuse this MODEL_DIR's or DATA_DIR's SentencePiece models
    extend_vocab: int = 0  # with spm_from: append up to this many pieces for unknown characters
    extend_all: bool = False  # extend_vocab with every piece the corpus wants (old text kept)
    lowercase: bool = False  # lowercase every split (the setting of most Multi30k papers)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tests", tuple(self.tests))
        self.validate()

    def validate(self) -> None:
        """Raise NmtError on the first invalid setting (the input files are checked later)."""
        if self.threads is not None and self.threads < 1:
            raise NmtError(f"--threads must be >= 1, got {self.threads}")
        if self.spm_type not in SPM_TYPES:
            raise NmtError(f"--spm-type must be unigram or bpe, got {self.spm_type!r}")
        if self.spm_from is None and self.vocab_size < MIN_VOCAB:  # else --spm-from's size
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

        inputs = {"train": files(self.train)}
        if self.valid is not None:
            inputs["valid"] = files(self.valid)
        for name, prefix in zip(_test_names(self.tests), self.tests, strict=True):
            inputs[name] = files(prefix)
        return inputs


def _lowercase_mismatch(spm_dir: Path, lowercased: bool) -> str:
    """Why --spm-from's pieces do not fit: they were learnt on text cased unlike this corpus."""
    if lowercased:
        return f"--spm-from {spm_dir} was preprocessed with --lowercase: add --lowercase"
    return f"--spm-from {spm_dir} was preprocessed without --lowercase: drop --lowercase"


def _test_names(tests: Sequence[str | Path]) -> list[str]:
    """Split names from test prefixes' basenames; they must be distinct and not train/valid."""
    names = [Path(t).name for t in tests]
    for name in names:
        if name in ("train", "valid") or names.count(name) > 1:
            raise NmtError(
                f"test prefix name {name!r} is ambiguous (test names must be distinct "
                "and not 'train' or 'valid')"
            )
    return names


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
    report: Progress = (lambda *_: None) if quiet else (progress or _stderr_progress())
    inputs = cfg.split_inputs()
    reused = spm_source(cfg.spm_from) if cfg.spm_from is not None else None
    if reused is not None and reused.lowercase != cfg.lowercase:
        raise NmtError(_lowercase_mismatch(reused.dir, reused.lowercase))
    check_out_dir(out_dir, force)
    if force:
        _check_inputs_outside(out_dir, inputs)
    for split, paths in inputs.items():  # a bad valid/test file fails now, not after train
        if split != "train":
            check_eval(paths, CHUNK_PAIRS)
    with naming_output(out_dir):  # a full disk or a read-only folder names DATA_DIR
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
        try:
            run = _Run(cfg, tmp, inputs, cfg.threads or usable_cpus(), report, reused)
            manifest = run.build()
            check_out_dir(out_dir, force)
            replace_dir(tmp, out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest


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

    def build(self) -> dict[str, Any]:
        """All steps in order; returns the manifest, also written into `tmp`."""
        clean = (self.tmp / f".clean.{self.cfg.src_lang}", self.tmp / f".clean.{self.cfg.tgt_lang}")
        counts, chunks = self.clean_train(clean)
        models = self.learn_sentencepiece(clean)
        toks = (Tokenizer.load(models[0]), Tokenizer.load(models[1]))
        dtype = "<u2" if max(t.vocab_size for t in toks) <= 65535 else "<i4"
        splits = {"train": self.encode_train(clean, chunks, models, dtype, counts)}
        for split, paths in self.inputs.items():
            if split != "train":
                splits[split] = self.encode_eval(split, paths, toks, dtype)
        manifest = self.manifest(models, toks, dtype, splits)
        _write_manifest(self.tmp / MANIFEST, manifest)
        return manifest

    def clean_train(self, clean: Pair) -> tuple[dict[str, int], list[Chunk]]:
        """Step 1: stream train into cleaned text files, cut into chunks for the encoders."""
        step = "clean train"
        self.report(step, 0, None)
        counts, chunks = clean_train(
            self.inputs["train"], clean, self.cfg.dedupe, self.cfg.skip_invalid, CHUNK_PAIRS,
            lambda n: self.report(step, n, None), self.cfg.lowercase,
        )  # fmt: skip
        self.report(step, counts["read"], counts["read"])
        if not chunks:
            raise NmtError(no_pairs_message(self.inputs["train"], counts))
        return counts, chunks

    def learn_sentencepiece(self, clean: Pair) -> Pair:
        """Step 2: one joint SentencePiece model on both sides, or one per language (or a copy of
        --spm-from's, so a trained model's ids mean the same pieces here)."""
        cfg = self.cfg
        if self.reused is not None:
            models = self.copy_sentencepiece(self.reused)
            if cfg.extend_vocab:
                self.extension = self.extend_sentencepiece(models, clean, self.reused)
            return models
        step = "train sentencepiece"
        self.report(step, 0, 1)

        def learn(text: Sequence[Path], prefix: Path) -> Path:
            return train_spm(
                text, prefix, vocab_size=cfg.vocab_size, model_type=cfg.spm_type,
                character_coverage=cfg.character_coverage, input_sentence_size=cfg.spm_sample,
                threads=self.threads,
            )  # fmt: skip

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

    def copy_sentencepiece(self, source: SpmSource) -> Pair:
        """Step 2 with --spm-from: copy its model(s) under this folder's names."""
        src, tgt = self.cfg.langs
        models: Pair = (
            (self.tmp / "spm.model",) * 2
            if source.joint
            else (self.tmp / f"spm.{src}.model", self.tmp / f"spm.{tgt}.model")
        )
        for origin, dst in zip((source.src, source.tgt), models, strict=True):
            for suffix in (".model", ".vocab"):  # the .vocab beside it is for people to read
                if origin.with_suffix(suffix).is_file():
                    shutil.copyfile(origin.with_suffix(suffix), dst.with_suffix(suffix))
        return models

    def extend_sentencepiece(self, models: Pair, clean: Pair, source: SpmSource) -> dict[str, Any]:
        """Step 2b with --extend-vocab: append pieces for the characters the copied model(s)
        cannot encode, learnt from the cleaned train side(s) each model encodes."""
        from nmt.data.vocab_extension import extend_for, model_type

        step = "extend sentencepiece"
        self.report(step, 0, 1)
        kind = source.spm_type or model_type(models[0])
        cfg = self.cfg
        made_for = {source.src_lang, source.tgt_lang}  # the reused models' own languages
        sides: list[tuple[Path, list[Path], list[Path]]]
        if models[0] == models[1]:
            own = [c for c, lang in zip(clean, cfg.langs, strict=True) if lang in made_for]
            sides = [(models[0], list(clean), own)]
        else:
            sides = [
                (models[0], [clean[0]], [clean[0]] if cfg.src_lang == source.src_lang else []),
                (models[1], [clean[1]], [clean[1]] if cfg.tgt_lang == source.tgt_lang else []),
            ]
        done = [
            extend_for(
                model,
                text,
                cfg.extend_vocab,
                kind,
                cfg.character_coverage,
                cfg.spm_sample,
                self.threads,
                keep=own if cfg.extend_all else None,
            )  # fmt: skip
            for model, text, own in sides
        ]
        self.report(step, 1, 1)
        entries = [
            {
                "added": e.added,
                "from_size": e.parent_size,
                "characters": "".join(e.characters),
                "all_pieces": cfg.extend_all,
                "checked_languages": [p.suffix[1:] for p in own] if cfg.extend_all else None,
            }  # fmt: skip
            for e, (_, _, own) in zip(done, sides, strict=True)
        ]
        return {"src": entries[0], "tgt": entries[-1]}

    def encode_train(
        self, clean: Pair, chunks: list[Chunk], models: Pair, dtype: str, counts: dict[str, int]
    ) -> dict[str, Any]:
        """Step 3: encode and length-filter cleaned train; its manifest entry with drop counts."""
        step = "encode train"
        remaining = sum(c.n for c in chunks)
        self.report(step, 0, remaining)
        names = (str(models[0]), str(models[1]))
        jobs = [
            ChunkJob(clean, c, names, dtype, self.cfg.max_len, self.cfg.max_ratio) for c in chunks
        ]
        enc_counts, lengths = encode_train(
            self.tmp, self.cfg.langs, jobs, dtype, self.threads,
            lambda n: self.report(step, n, remaining),
        )  # fmt: skip
        for k, v in enc_counts.items():
            counts[k] += v
        for c in clean:
            c.unlink()
        kept = len(lengths[0])
        if kept == 0:
            raise NmtError(no_pairs_message(self.inputs["train"], counts))
        entry = split_entry(self.cfg.langs, self.inputs["train"], lengths, False, "train")
        entry.update(
            lines_read=counts["read"], kept=kept, dropped={k: counts[k] for k in DROP_REASONS}
        )
        return entry

    def encode_eval(
        self, split: str, paths: Pair, toks: tuple[Tokenizer, Tokenizer], dtype: str
    ) -> dict[str, Any]:
        """Step 4: encode a valid/test split line for line, keeping its raw text; its entry."""
        step = f"encode {split}"
        self.report(step, 0, None)
        n, lengths = encode_eval(
            self.tmp, split, self.cfg.langs, paths, toks, dtype, self.threads, CHUNK_PAIRS,
            self.cfg.lowercase,
        )  # fmt: skip
        self.report(step, n, n)
        entry = split_entry(self.cfg.langs, paths, lengths, True, split)
        entry.update(lines_read=n, kept=n, dropped={}, over_limits=over_limits(*lengths))
        return entry

    def manifest(
        self, models: Pair, toks: tuple[Tokenizer, Tokenizer], dtype: str, splits: dict[str, Any]
    ) -> dict[str, Any]:
        """Step 5: what the data folder holds and how it was made (see DESIGN.md)."""
        cfg, reused = self.cfg, self.reused
        return {
            "format": FORMAT,
            "nmt_version": __version__,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "src_lang": cfg.src_lang,
            "tgt_lang": cfg.tgt_lang,
            "joint": models[0] == models[1],
            "spm_type": cfg.spm_type if reused is None else reused.spm_type,
            "spm": {"src": models[0].name, "tgt": models[1].name},
            "spm_from": None if reused is None else str(reused.dir),
            "vocab_extension": self.extension,
            "vocab_size": {"src": toks[0].vocab_size, "tgt": toks[1].vocab_size},
            "requested_vocab_size": cfg.vocab_size if reused is None else None,
            "special_ids": dict(SPECIAL_IDS),
            "dtype": np.dtype(dtype).name,
            "options": cfg.manifest_options(),
            "splits": splits,
        }


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Write manifest.json (no atomic rename: the temporary folder is renamed into place whole)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _check_inputs_outside(out_dir: Path, inputs: dict[str, Pair]) -> None:
    """Refuse --force when replacing `out_dir` would delete an input file (the user's corpus)."""
    root = out_dir.resolve()
    for pair in inputs.values():
        for path in pair:
            if path.resolve().is_relative_to(root):
                raise NmtError(
                    f"--force would delete {out_dir}, which holds the input {path}; "
                    "choose another --out"
                )


def _stderr_progress() -> Progress:
    """Plain one-line-per-step progress for library callers that pass neither progress nor quiet."""
    started: dict[str, float] = {}

    def report(step: str, done: int, total: int | None) -> None:
        started.setdefault(step, time.perf_counter())
        if total is not None and done >= total:
            secs = time.perf_counter() - started[step]
            print(f"preprocess: {step}: {done:,} in {secs:.1f}s", file=sys.stderr)

    return report
