"""Fine-tuning: `nmt preprocess --spm-from` reuses a trained model's SentencePiece models, and
`nmt train --init-from` starts from its weights (fresh optimizer and schedule), with exact errors
for corpora of other pieces or models of another shape, and exact resume of the fine-tuned run."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nmt.config import load_config
from nmt.data.preprocess import PreprocessConfig, preprocess
from nmt.data.summary import summary_notes
from nmt.data.vocab import Tokenizer
from nmt.dirs import DataDir, ModelDir
from nmt.dirs.loaded import load_model
from nmt.dirs.opening import open_initial, open_vocabulary
from nmt.errors import NmtError
from nmt.train import distributed
from nmt.train.loop import Trainer, train
from nmt.train.setup import run_config

REPO = Path(__file__).resolve().parent.parent
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima".split()


def _corpus(root: Path, seed: int, reverse: bool = False, n: int = 1500) -> Path:
    """A copy task (or copy-reversed: another 'domain' over the same words) in ROOT/{train,valid}."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", n), ("valid", 60)):
        src = [rng.choices(WORDS, k=rng.randint(3, 7)) for _ in range(count)]
        tgt = [list(reversed(s)) if reverse else s for s in src]
        for lang, lines in (("en", src), ("de", tgt)):
            text = "\n".join(" ".join(w) for w in lines) + "\n"
            (root / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return root


def _preprocess(root: Path, out: Path, **kw) -> Path:
    if kw.get("spm_from") is not None:  # a directory, opened as `nmt preprocess` opens it
        kw["spm_from"] = open_vocabulary(kw["spm_from"])
    cfg = PreprocessConfig("en", "de", root / "train", valid=root / "valid", threads=1, **kw)
    preprocess(cfg, out, quiet=True)
    return out


def _tiny(*overrides: str):
    base = ["training.valid_every=10", "training.log_every=5", "training.warmup=10",
            "training.max_tokens=600"]  # fmt: skip
    return load_config(preset="transformer-tiny", overrides=[*base, *overrides])


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path]:
    """(DATA_DIR, MODEL_DIR) of a tiny model trained for 20 steps on the copy task."""
    root = tmp_path_factory.mktemp("base")
    data = _preprocess(_corpus(root / "text", 0), root / "data", vocab_size=48)
    model = root / "model"
    train(
        _tiny("training.max_steps=20"),
        DataDir(data),
        ModelDir.at(model),
        "cpu",
        quiet=True,
        threads=1,
    )
    return data, model


@pytest.fixture(scope="module")
def new_data(base, tmp_path_factory) -> Path:
    """The reversed task, encoded with the base model's SentencePiece models."""
    root = tmp_path_factory.mktemp("new")
    return _preprocess(_corpus(root / "text", 1, reverse=True), root / "data", spm_from=base[1])


def test_spm_from_copies_the_models_and_encodes_with_their_pieces(base, new_data, tmp_path):
    data, model = base
    manifest = json.loads((new_data / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["spm_from"] == str(model)
    assert f"SentencePiece models copied from {model} (--spm-from)" in summary_notes(manifest)
    assert manifest["joint"] is True and manifest["requested_vocab_size"] is None
    assert (new_data / "spm.model").read_bytes() == (data / "spm.model").read_bytes()
    assert manifest["vocab_size"] == json.loads((data / "manifest.json").read_text())["vocab_size"]
    # From a DATA_DIR too; its manifest records the SentencePiece type.
    again = _preprocess(_corpus(tmp_path / "t", 2), tmp_path / "d", spm_from=data)
    assert json.loads((again / "manifest.json").read_text())["spm_type"] == "unigram"
    ids = Tokenizer.load(again / "spm.model").encode("alpha kilo lima")
    assert ids == Tokenizer.load(data / "spm.model").encode("alpha kilo lima")


def test_spm_from_keeps_separate_models_separate(tmp_path):
    text = _corpus(tmp_path / "t", 3, n=400)
    first = _preprocess(text, tmp_path / "a", vocab_size=40, joint=False)
    second = _preprocess(text, tmp_path / "b", spm_from=first)
    manifest = json.loads((second / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["joint"] is False
    assert manifest["spm"] == {"src": "spm.en.model", "tgt": "spm.de.model"}
    for lang in ("en", "de"):
        assert (second / f"spm.{lang}.model").read_bytes() == (
            first / f"spm.{lang}.model"
        ).read_bytes()
        assert (second / f"spm.{lang}.vocab").is_file()


def test_spm_from_a_folder_that_holds_no_models_is_one_line_error(tmp_path):
    text = _corpus(tmp_path / "t", 4, n=100)
    (tmp_path / "empty").mkdir()
    with pytest.raises(NmtError) as e:
        _preprocess(text, tmp_path / "out", spm_from=tmp_path / "empty")
    assert str(e.value) == (
        f"{tmp_path / 'empty'}: neither a model directory (vocab.json) nor a data directory "
        "(manifest.json)"
    )
    with pytest.raises(NmtError, match="nowhere: directory not found"):
        _preprocess(text, tmp_path / "out", spm_from=tmp_path / "nowhere")
    assert not (tmp_path / "out").exists()


def test_init_from_starts_from_the_models_weights_with_a_fresh_run(base, new_data, tmp_path):
    _, model = base
    cfg = _tiny(f"training.init_from={model}", "training.ema_decay=0.99")
    trainer = Trainer(
        cfg,
        DataDir(new_data),
        ModelDir.at(tmp_path / "ft"),
        torch.device("cpu"),
        distributed.from_env(),
        False,
        True,
    )
    loaded = load_model(ModelDir(model))[0].state_dict()
    for ours in (trainer.model.state_dict(), trainer.eval_model.state_dict()):
        assert ours.keys() == loaded.keys()
        assert all(torch.equal(ours[k], loaded[k]) for k in ours)
    assert trainer.state.step == 0 and not trainer.optimizer.state  # fresh optimizer and counts
    assert trainer.init == {
        "init_from": str(model),
        "checkpoint": str(ModelDir(model).checkpoint()),
        "step": 20,
    }


def test_train_starts_from_an_opened_initial_model(base, new_data, tmp_path):
    """A library caller hands `train` the initial model opened; the saved config names it."""
    _, model = base
    out = tmp_path / "ft"
    s = train(
        _tiny("training.max_steps=1"),
        DataDir(new_data),
        ModelDir.at(out),
        "cpu",
        init=ModelDir(model),
        quiet=True,
        threads=1,
    )
    assert s.steps == 1
    assert ModelDir(out).config.training.init_from == str(model)


@pytest.mark.slow
def test_fine_tuning_learns_the_new_task_and_resumes_bitwise(base, new_data, tmp_path):
    _, model = base
    full, cut = tmp_path / "full", tmp_path / "cut"
    ft = (f"training.init_from={model}",)
    s_full = train(
        _tiny(*ft, "training.max_steps=30"),
        DataDir(new_data),
        ModelDir.at(full),
        "cpu",
        quiet=True,
        threads=1,
    )
    train(
        _tiny(*ft, "training.max_steps=15"),
        DataDir(new_data),
        ModelDir.at(cut),
        "cpu",
        quiet=True,
        threads=1,
    )
    s2 = train(
        _tiny(*ft, "training.max_steps=30"),
        DataDir(new_data),
        ModelDir.at(cut),
        "cpu",
        resume=True,
        quiet=True,
        threads=1,
    )
    assert s_full.steps == s2.steps == 30
    a, b = (load_file(str(d / "checkpoints" / "last.safetensors")) for d in (full, cut))
    assert all(torch.equal(a[k], b[k]) for k in a)
    start = json.loads((full / "metrics.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["init"]["step"] == 20
    # Starting from the model beats starting from scratch at the same step count (valid loss).
    scratch = train(
        _tiny("training.max_steps=30"),
        DataDir(new_data),
        ModelDir.at(tmp_path / "s"),
        "cpu",
        quiet=True,
        threads=1,
    )
    assert s_full.best_metric == "loss" and s_full.best_score < scratch.best_score


def test_a_corpus_with_other_pieces_is_refused_before_weights_load(base, tmp_path):
    _, model = base
    own = _preprocess(_corpus(tmp_path / "t", 5, n=300), tmp_path / "own", vocab_size=40)
    with pytest.raises(NmtError) as e:
        train(
            _tiny(f"training.init_from={model}", "training.max_steps=2"),
            DataDir(own),
            ModelDir.at(tmp_path / "m"),
            "cpu",
            quiet=True,
            threads=1,
        )
    assert str(e.value) == (
        f"{own}: its source vocabulary differs from {model}'s (preprocess the corpus with "
        f"--spm-from {model})"
    )


def test_another_architecture_or_a_data_dir_is_a_one_line_error(base, new_data, tmp_path):
    data, model = base
    wide = _tiny(f"training.init_from={model}", "training.max_steps=2", "model.ff_dim=40")
    with pytest.raises(NmtError) as e:
        train(wide, DataDir(new_data), ModelDir.at(tmp_path / "m"), "cpu", quiet=True, threads=1)
    message = str(e.value)
    assert message.startswith(
        f"{ModelDir(model).checkpoint()}: weights do not match the model section "
    )
    assert "size mismatch" in message and "\n" not in message
    with pytest.raises(NmtError) as e:
        train(
            _tiny(f"training.init_from={data}"),
            DataDir(new_data),
            ModelDir.at(tmp_path / "m2"),
            "cpu",
            quiet=True,
        )
    assert str(e.value) == f"{data}: not a model directory (--init-from takes a MODEL_DIR)"
    with pytest.raises(NmtError, match="training.init_checkpoint must be default, best, last"):
        _tiny("training.init_checkpoint=newest")


@pytest.mark.parametrize(
    ("override", "change"),
    [
        ("model.heads=2", "model.heads 4 -> 2"),
        ("model.activation=gelu", "model.activation relu -> gelu"),
    ],
)
def test_another_architecture_of_the_same_shapes_is_refused(
    base, new_data, tmp_path, override, change
):
    # Every tensor keeps its shape, so the weights would load and compute another function.
    _, model = base
    cfg = _tiny(f"training.init_from={model}", override)
    with pytest.raises(NmtError) as e:
        Trainer(
            cfg,
            DataDir(new_data),
            ModelDir.at(tmp_path / "ft"),
            torch.device("cpu"),
            distributed.from_env(),
            False,
            True,
        )
    assert str(e.value) == (
        f"{model / 'config.yaml'}: the initial model's architecture differs from this run's "
        f"model section ({change}); fine-tune with its model settings (omit --preset/CONFIG to "
        "reuse them)"
    )


def test_other_dropout_or_max_positions_start_from_the_same_weights(base, new_data, tmp_path):
    _, model = base
    cfg = _tiny(
        f"training.init_from={model}", "model.dropout=0.3", "model.attention_dropout=0.1",
        "model.max_positions=300",
    )  # fmt: skip
    trainer = Trainer(
        cfg,
        DataDir(new_data),
        ModelDir.at(tmp_path / "ft"),
        torch.device("cpu"),
        distributed.from_env(),
        False,
        True,
    )
    loaded = load_model(ModelDir(model))[0].state_dict()
    assert all(torch.equal(v, loaded[k]) for k, v in trainer.model.state_dict().items())


def test_damaged_or_mismatched_weights_for_new_rows_are_one_line_errors(tmp_path):
    # extend_rows reads the file itself: its errors name it, as load_weights' do.
    from safetensors.torch import save_file
    from torch import nn

    from nmt.train.finetune import extend_rows

    class Rows(nn.Module):
        def __init__(self, n: int, width: int) -> None:
            super().__init__()
            self.src_embed = nn.Embedding(n, 4)
            self.hidden = nn.Linear(4, width)

    good, other = tmp_path / "good.safetensors", tmp_path / "other.safetensors"
    save_file({k: v.contiguous() for k, v in Rows(6, 3).state_dict().items()}, str(good))
    save_file({k: v.contiguous() for k, v in Rows(6, 5).state_dict().items()}, str(other))
    torn = tmp_path / "torn.safetensors"
    torn.write_bytes(good.read_bytes()[:20])
    assert extend_rows(Rows(8, 3), good, (6, 6)) == {"src_embed.weight": 2}
    with pytest.raises(NmtError) as e:
        extend_rows(Rows(8, 3), torn, (6, 6))
    assert str(e.value).startswith(f"{torn}: damaged or not a safetensors file (")
    with pytest.raises(NmtError) as e:
        extend_rows(Rows(8, 3), other, (6, 6))
    assert str(e.value).startswith(
        f"{other}: weights do not match the model section of this run (size mismatch for "
        "hidden.weight"
    )
    assert "\n" not in str(e.value)


def test_init_from_without_a_config_takes_the_models_own(base, tmp_path):
    _, model = base
    flags = {"max_steps": 5, "max_epochs": None, "max_time": None, "seed": None}
    init = open_initial(model)
    cfg = run_config(None, None, ["training.lr=0.0001"], flags, init=init)
    saved = load_model(ModelDir(model))[1]
    assert cfg.model == saved.model
    assert (cfg.training.init_from, cfg.training.lr, cfg.training.max_steps) == (
        str(model),
        0.0001,
        5,
    )
    laid = run_config(None, "transformer-tiny", ["training.lr=0.0002"], flags, init=init)
    assert laid.model.type == saved.model.type and laid.training.lr == 0.0002  # over the model's
    assert laid.training.init_from == str(model)
    with pytest.raises(NmtError) as e:
        open_initial(tmp_path / "nowhere")
    assert str(e.value) == f"{tmp_path / 'nowhere'}: model directory not found"


@pytest.mark.slow
def test_cli_fine_tunes_and_translates(base, tmp_path):
    _, model = base
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def nmt(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "nmt", *args], cwd=REPO, env=env,
                              capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc

    text = _corpus(tmp_path / "t", 6, reverse=True, n=300)
    data, ft = tmp_path / "data", tmp_path / "ft"
    nmt("preprocess", "--src-lang", "en", "--tgt-lang", "de", "--train", str(text / "train"),
        "--valid", str(text / "valid"), "-o", str(data), "--spm-from", str(model), "--threads", "1",
        "--quiet")  # fmt: skip
    proc = nmt("train", "-d", str(data), "-o", str(ft), "--init-from", str(model),
               "--max-steps", "4", "--set", "training.valid_every=2", "--device", "cpu")  # fmt: skip
    assert f"training from {ModelDir(model).checkpoint()} (step 20) transformer" in proc.stderr
    saved = (ft / "config.yaml").read_text(encoding="utf-8")
    assert f"init_from: {model}" in saved
    out = nmt("translate", "-m", str(ft), "--quiet", str(text / "valid.en"))
    assert len(out.stdout.splitlines()) == 60
