"""The self-contained model directory: config, vocabulary facts, SentencePiece copies, weights.

MODEL_DIR/config.yaml               resolved Config
MODEL_DIR/vocab.json                languages, VocabInfo fields, SentencePiece file names (copied here)
MODEL_DIR/spm.model | spm.<lang>.model
MODEL_DIR/checkpoints/<name>.safetensors   weights: best, last, averaged, step-N ...
MODEL_DIR/checkpoints/last.state.pt, default.json   trainer state; which checkpoint `default` is
MODEL_DIR/metrics.jsonl, tensorboard/   what training logged
MODEL_DIR/.lock                     host and PID of the process training into it
An imported model (`nmt import`) adds its piece -> id vocabularies. `nmt translate` needs nothing else. Training takes the lock, and refuses to
overwrite a trained directory (or to resume an empty one) by accident.
"""

from __future__ import annotations

import contextlib
import dataclasses
import filecmp
import functools
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nmt.config import Config, DecodingConfig, ModelConfig, read_saved_config
from nmt.data.marian_vocab import imported_pair
from nmt.data.vocab import Tokenizer, VocabInfo
from nmt.dirs.lock import model_dir_lock
from nmt.errors import NmtError, check_format_version
from nmt.textio import atomic_write, read_json_object

CHECKPOINTS = "checkpoints"
NAMED = ("best", "last", "averaged")
STATE = "last.state.pt"  # the resumable trainer state, in CHECKPOINTS
DEFAULT = "default.json"  # in CHECKPOINTS: which named checkpoint `default` means (else best)
INDEX = "index.json"  # in CHECKPOINTS: the kept step checkpoints and their scores
CONFIG = "config.yaml"  # the resolved Config a MODEL_DIR was trained with
MODEL_META = "vocab.json"  # vocabulary facts and SentencePiece file names
METRICS = "metrics.jsonl"  # one JSON object per training event
TENSORBOARD = "tensorboard"
WEIGHTS = ".safetensors"
MODEL_FORMAT = 1  # vocab.json's "format": the layout this nmt writes (absent: 1)

# Training's own temporaries (written under the lock). Not averaged.safetensors: `nmt average`
# writes it without the lock, and its temporary may belong to a live process.
_TEMPS = {
    "": re.compile(r"^\.(config\.yaml|vocab\.json|metrics\.jsonl|[\w.-]+\.model)\.\w+\.tmp$"),
    CHECKPOINTS: re.compile(
        r"^\.(last\.state\.pt|(last|best|step-\d+)\.safetensors|(index|default)\.json)"
        r"\.\w+\.tmp$"
    ),
}


class ModelDir:
    """A model directory: its files' names, what it holds read and checked once (config.yaml and
    vocab.json; errors name the missing file), its languages and SentencePiece models (the
    tokenizer pair, loaded at first use), its checkpoints, and what training writes into it."""

    def __init__(self, path: str | Path) -> None:
        """Open a model directory that exists (config.yaml and vocab.json read and checked)."""
        self.path = Path(path)
        if not self.path.is_dir():
            raise NmtError(f"{self.path}: model directory not found")
        for name in (CONFIG, MODEL_META):
            if not (self.path / name).exists():
                raise NmtError(
                    f"{self.path / name}: file not found (is {self.path} a model directory?)"
                )
        _ = self.vocab  # config.yaml and vocab.json read now

    @classmethod
    def at(cls, path: str | Path) -> ModelDir:
        """The directory at `path`, read only when asked: what training writes into (it may not
        exist yet), or one whose checkpoints alone are wanted."""
        out = cls.__new__(cls)
        out.path = Path(path)
        return out

    @functools.cached_property
    def config(self) -> Config:
        """Its config.yaml: how it was trained, and its decoding defaults."""
        return read_saved_config(self.path / CONFIG)

    @functools.cached_property
    def meta(self) -> dict[str, Any]:
        """Its vocab.json, checked for a format this nmt reads."""
        meta = read_json_object(self.path / MODEL_META)
        check_format_version(self.path / MODEL_META, meta.get("format"), MODEL_FORMAT, "model")
        return meta

    @functools.cached_property
    def vocab(self) -> VocabInfo:
        """Its vocabulary facts (sizes, special ids), from vocab.json."""
        _ = self.config  # read first: a broken config.yaml is named before vocab.json
        fields = {f.name for f in dataclasses.fields(VocabInfo)}
        given = {k: v for k, v in self.meta.items() if k in fields}
        try:
            return VocabInfo(**given | {"never": tuple(given.get("never", ()))})
        except TypeError as e:
            raise NmtError(f"{self.path / MODEL_META}: not a vocabulary file ({e})") from None

    @property
    def trained(self) -> bool:
        """Whether it holds config.yaml (a run, or an import, wrote it)."""
        return (self.path / CONFIG).is_file()

    @property
    def languages(self) -> tuple[str | None, str | None]:  # where training recorded them
        return self.meta.get("src_lang"), self.meta.get("tgt_lang")

    @functools.cached_property
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """Its source and target SentencePiece models (one object when they are one file); a
        `nmt preprocess --lowercase` model lowercases what it is given."""
        meta, path = self.meta, self.path
        if meta.get("pieces"):  # an imported model: pieces map to ids through its vocabularies
            return imported_pair(path, meta)
        lc = meta.get("lowercase", False) is True
        return Tokenizer.pair(path / meta["src_spm"], path / meta["tgt_spm"], lc)

    @property
    def decoding(self) -> DecodingConfig:
        """Its decoding defaults (the config's `decoding` section)."""
        return self.config.decoding

    # ---- file names ----------------------------------------------------------------------

    @property
    def checkpoints(self) -> Path:
        """The folder of its weights files, trainer state and default choice."""
        return self.path / CHECKPOINTS

    def weights(self, name: str) -> Path:
        """Where the weights file `name` (best, last, averaged, step-N) lives, present or not."""
        return self.checkpoints / f"{name}{WEIGHTS}"

    def step_weights(self, step: int) -> Path:
        """Where the weights kept at update `step` live."""
        return self.weights(f"step-{step}")

    def kept_steps(self) -> list[Path]:
        """The step-N weights files present."""
        return list(self.checkpoints.glob(f"step-*{WEIGHTS}"))

    @property
    def state_path(self) -> Path:
        """Where the resumable trainer state lives."""
        return self.checkpoints / STATE

    @property
    def index_path(self) -> Path:
        """Where the index of kept step checkpoints (and their scores) lives."""
        return self.checkpoints / INDEX

    @property
    def metrics_path(self) -> Path:
        """Where training logs its events (metrics.jsonl)."""
        return self.path / METRICS

    @property
    def tensorboard(self) -> Path:
        """Where training writes TensorBoard events."""
        return self.path / TENSORBOARD

    # ---- checkpoints ---------------------------------------------------------------------

    def checkpoint(self, which: str = "default") -> Path:
        """The weights file `which` names (default, best, last, averaged, or a path), which
        must exist."""
        if which == "default":
            which = self.default_checkpoint()
        if which in NAMED or not which.endswith(WEIGHTS):
            path = self.weights(which)
        else:
            path = Path(which)
        if not path.exists():
            raise NmtError(f"{path}: checkpoint not found")
        return path

    def default_checkpoint(self) -> str:
        """What `default` means: the name training chose on validation (averaged or best),
        else best."""
        try:
            text = (self.checkpoints / DEFAULT).read_text(encoding="utf-8")
            name = json.loads(text).get("checkpoint")
        except (OSError, ValueError, AttributeError):
            return "best"
        return name if name in NAMED and self.weights(name).exists() else "best"

    def write_default(self, choice: dict[str, Any]) -> None:
        """Record which checkpoint `default` means (and why: its step, metric and score)."""
        with atomic_write(self.checkpoints / DEFAULT) as f:
            json.dump(choice, f, indent=1)

    def clear_default(self, only: str | None = None) -> None:
        """Forget the choice (`only`: if it names that checkpoint), so `default` means best."""
        path = self.checkpoints / DEFAULT
        if path.exists() and (only is None or self.default_checkpoint() == only):
            path.unlink()

    def has_checkpoints(self) -> bool:
        """Whether a previous run left anything in its checkpoints folder."""
        return self.checkpoints.is_dir() and any(self.checkpoints.iterdir())

    def saved_config(self) -> Config | None:
        """Its config.yaml, None when it has none: how its run was set up."""
        return self.config if self.trained else None

    # ---- what training writes ------------------------------------------------------------

    def write_meta(
        self,
        cfg: Config,
        languages: tuple[str, str],
        spm: tuple[Path, Path],
        vocab: VocabInfo,
    ) -> None:
        """Copy the (source, target) SentencePiece model(s) in and write config.yaml and
        vocab.json."""
        self.path.mkdir(parents=True, exist_ok=True)
        names = {}
        for side, model in zip(("src", "tgt"), spm, strict=True):
            copy = self.path / model.name
            if not copy.exists() or not filecmp.cmp(model, copy, shallow=False):
                with atomic_write(copy, "wb") as out, model.open("rb") as src:
                    shutil.copyfileobj(src, out)  # a kill mid-copy leaves the old model intact
            names[side] = model.name
        meta = {
            "format": MODEL_FORMAT,
            "src_lang": languages[0],
            "tgt_lang": languages[1],
            "src_spm": names["src"],
            "tgt_spm": names["tgt"],
            **dataclasses.asdict(vocab),
        }
        self.write_vocab_json(meta)
        cfg.save(self.path / CONFIG)
        self.__dict__.pop("config", None)

    def write_vocab_json(self, meta: dict[str, Any]) -> None:
        """Write vocab.json (atomically)."""
        with atomic_write(self.path / MODEL_META) as f:
            json.dump(meta, f, indent=2)
        for cached in ("meta", "vocab", "tokenizers"):
            self.__dict__.pop(cached, None)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold its lock while training into it; a second process is refused."""
        with model_dir_lock(self.path):
            self.remove_stale_temps()
            yield

    def remove_stale_temps(self) -> list[Path]:
        """Delete temporaries of a killed run (training's own names only); call under the lock."""
        removed = []
        for sub, pattern in _TEMPS.items():
            folder = self.path / sub if sub else self.path
            if not folder.is_dir():
                continue
            for path in folder.iterdir():
                if pattern.match(path.name) and path.is_file():
                    path.unlink(missing_ok=True)
                    removed.append(path)
        return removed

    def reset(self) -> None:
        """--force: remove what a previous run wrote (checkpoints, metrics), keep anything else."""
        shutil.rmtree(self.checkpoints, ignore_errors=True)
        shutil.rmtree(self.tensorboard, ignore_errors=True)
        self.metrics_path.unlink(missing_ok=True)

    def check_training(
        self,
        resume: bool,
        force: bool,
        model: ModelConfig | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> bool:
        """Refuse to overwrite a trained directory by accident; True when there is a state to
        resume.

        `--resume` before the first save (a preempted job re-run as is) starts from scratch;
        with or without a state, a `model` section of another architecture than config.yaml's
        is refused."""
        if resume and force:
            raise NmtError("--resume and --force exclude each other")
        if not resume:
            if self.has_checkpoints() and not force:
                raise NmtError(
                    f"{self.path} already has checkpoints; use --resume to continue or --force "
                    "to start over"
                )
            return False
        if self.state_path.exists():
            self._check_same_model(model)  # the state's weights were trained for it
            return True
        trained = [n for n in ("last" + WEIGHTS, DEFAULT) if (self.checkpoints / n).exists()]
        if trained:  # written only with or after the state: it was removed, not yet to come
            raise NmtError(
                f"{self.state_path}: not found, but {self.path} holds a trained run "
                f"({CHECKPOINTS}/{trained[0]}): nothing to resume; train into a new directory, "
                "or --force to start over (deletes its checkpoints)"
            )
        self._check_same_model(model)
        if warn is not None:
            warn(f"{self.path}: no trainer state to resume; starting from scratch")
        return False

    def _check_same_model(self, model: ModelConfig | None) -> None:
        """--resume: refuse a model section whose architecture differs from config.yaml's
        (same-shaped weights would load, and be read as another model from then on);
        max_positions may change (a learned table of another size fails to load; sinusoidal
        ones are not stored)."""
        if model is None or not self.trained:
            return
        changes = architecture_changes(self.config.model, model, ignore=("max_positions",))
        if changes:
            raise NmtError(
                f"{self.path / CONFIG}: the saved model does not match this config's model "
                f"section ({', '.join(changes)}); resume with the same model settings (omit "
                "--preset/CONFIG to reuse the saved ones)"
            )


def architecture_changes(
    saved: ModelConfig, model: ModelConfig, ignore: tuple[str, ...] = ()
) -> list[str]:
    """'model.KEY old -> new' for each architecture key that differs; regularisation keys
    (dropout, *_dropout) and `ignore` are not architecture: trained weights fit any value."""
    if saved.type != model.type:
        return [f"model.type {saved.type} -> {model.type}"]
    old, new = dataclasses.asdict(saved), dataclasses.asdict(model)
    return [
        f"model.{key} {old[key]} -> {new[key]}"
        for key in old
        if old[key] != new[key] and not _regularisation(key) and key not in ignore
    ]


def _regularisation(key: str) -> bool:
    """Model keys that only regularise training (dropout rates), not what the weights compute."""
    return key == "dropout" or key.endswith("_dropout")
