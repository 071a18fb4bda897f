"""The model directory: the training lock, refusals to reuse or resume, --force's reset, the
config/vocab/weights round trip, and checkpoint averaging (`nmt average`)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import nmt.train.checkpoint as ck
from nmt.config import load_config
from nmt.data.vocab import VocabInfo
from nmt.dirs.loaded import load_model
from nmt.dirs.model import MODEL_FORMAT, ModelDir
from nmt.dirs.weights import save_weights
from nmt.errors import NmtError
from nmt.models import build
from nmt.train.selection import average


def test_second_lock_on_the_same_dir_is_refused(tmp_path):
    with ModelDir.at(tmp_path).lock():
        owner = f"{socket.gethostname()} {os.getpid()}"
        assert (tmp_path / ".lock").read_text() == owner + "\n"
        msg = (
            f"{tmp_path}: another process is training into this directory "
            f"(lock {tmp_path / '.lock'} held by {owner})"
        )
        with pytest.raises(NmtError, match=re.escape(msg)):
            with ModelDir.at(tmp_path).lock():
                pass
        assert (tmp_path / ".lock").exists()  # the refused attempt left the holder's lock alone
    assert not (tmp_path / ".lock").exists()


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".lock").write_text(f"{socket.gethostname()} {dead.pid}\n")
    with ModelDir.at(tmp_path).lock():
        assert (tmp_path / ".lock").read_text().split() == [socket.gethostname(), str(os.getpid())]
    assert not (tmp_path / ".lock").exists()


@pytest.mark.parametrize("owner", ["some-other-host 1", "OWN_PID"])
def test_lock_file_without_a_live_flock_does_not_block(tmp_path, owner):
    # An OOM kill in a container leaves a lock naming another hostname, or PID 1 again (ours).
    owner = f"{socket.gethostname()} {os.getpid()}" if owner == "OWN_PID" else owner
    (tmp_path / ".lock").write_text(owner + "\n")
    with ModelDir.at(tmp_path).lock():
        assert (tmp_path / ".lock").read_text().split() == [socket.gethostname(), str(os.getpid())]


def test_lock_held_by_a_live_process_blocks(tmp_path):
    code = (
        "import sys; from pathlib import Path; from nmt.dirs import ModelDir\n"
        "with ModelDir.at(Path(sys.argv[1])).lock():\n"
        "    print('held', flush=True); sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        msg = (
            f"{tmp_path}: another process is training into this directory "
            f"(lock {tmp_path / '.lock'} held by {socket.gethostname()} {holder.pid})"
        )
        with pytest.raises(NmtError, match=f"^{re.escape(msg)}$"):
            with ModelDir.at(tmp_path).lock():
                pass
    finally:
        holder.communicate("", timeout=30)
    with ModelDir.at(tmp_path).lock():  # released when the holder exits
        pass


def test_check_model_dir_refusals(tmp_path):
    with pytest.raises(NmtError, match=r"^--resume and --force exclude each other$"):
        ModelDir.at(tmp_path).check_training(resume=True, force=True)
    state = tmp_path / "checkpoints" / "last.state.pt"
    assert (
        ModelDir.at(tmp_path).check_training(resume=True, force=False) is False
    )  # nothing saved yet
    ModelDir.at(tmp_path).check_training(resume=False, force=False)  # a fresh directory is fine
    (tmp_path / "checkpoints").mkdir()
    ModelDir.at(tmp_path).check_training(
        resume=False, force=False
    )  # an empty checkpoints folder too
    (tmp_path / "checkpoints" / "last.safetensors").write_bytes(b"")
    msg = f"{tmp_path} already has checkpoints; use --resume to continue or --force to start over"
    with pytest.raises(NmtError, match=f"^{re.escape(msg)}$"):
        ModelDir.at(tmp_path).check_training(resume=False, force=False)
    ModelDir.at(tmp_path).check_training(resume=False, force=True)
    state.write_bytes(b"")
    assert ModelDir.at(tmp_path).check_training(resume=True, force=False) is True


def test_resume_before_the_first_save_starts_from_scratch_unless_the_model_differs(tmp_path):
    cfg = load_config(preset="transformer-tiny")
    cfg.save(tmp_path / "config.yaml")  # a first run that died before its first save
    warnings: list[str] = []
    assert not ModelDir.at(tmp_path).check_training(True, False, cfg.model, warnings.append)
    assert warnings == [f"{tmp_path}: no trainer state to resume; starting from scratch"]
    other = load_config(preset="transformer-tiny", overrides=["model.d_model=32"])
    msg = f"{tmp_path / 'config.yaml'}: the saved model does not match this config's model section"
    with pytest.raises(NmtError, match=f"^{re.escape(msg)}"):
        ModelDir.at(tmp_path).check_training(True, False, other.model, warnings.append)


@pytest.mark.parametrize(
    ("override", "change"),
    [
        ("model.heads=8", "model.heads 4 -> 8"),
        ("model.activation=gelu", "model.activation relu -> gelu"),
    ],
)
def test_resume_of_a_state_refuses_another_architecture_of_the_same_shapes(
    tmp_path, override, change
):
    # Same-shaped weights would load into the other model, and config.yaml would be rewritten
    # to describe it: the saved checkpoints would be read as a model they never were.
    cfg = load_config(preset="transformer-tiny")
    cfg.save(tmp_path / "config.yaml")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.state.pt").write_bytes(b"")
    other = load_config(preset="transformer-tiny", overrides=[override])
    msg = (
        f"{tmp_path / 'config.yaml'}: the saved model does not match this config's model section "
        f"({change}); resume with the same model settings (omit --preset/CONFIG to reuse the "
        "saved ones)"
    )
    with pytest.raises(NmtError, match=f"^{re.escape(msg)}$"):
        ModelDir.at(tmp_path).check_training(True, False, other.model)
    # Regularisation is not architecture: the trained weights fit any dropout rate.
    drop = load_config(
        preset="transformer-tiny", overrides=["model.dropout=0.3", "model.attention_dropout=0.2"]
    )
    assert ModelDir.at(tmp_path).check_training(True, False, drop.model)
    assert ModelDir.at(tmp_path).check_training(True, False, cfg.model)
    # nor is max_positions (sinusoidal tables are not stored; a learned one of another size
    # fails to load with its own error)
    longer = load_config(preset="transformer-tiny", overrides=["model.max_positions=1024"])
    assert ModelDir.at(tmp_path).check_training(True, False, longer.model)


@pytest.mark.parametrize("name", ["last.safetensors", "default.json"])
def test_resume_without_the_state_of_a_trained_run_refuses_instead_of_deleting_it(tmp_path, name):
    # last.safetensors is written after the state, default.json at the end of training: with
    # either present the state was removed (copied without it), and starting from scratch would
    # delete best, averaged and every step-N file.
    (tmp_path / "checkpoints").mkdir()
    for kept in (name, "best.safetensors", "step-100.safetensors"):
        (tmp_path / "checkpoints" / kept).write_bytes(b"x")
    msg = (
        f"{tmp_path / 'checkpoints' / 'last.state.pt'}: not found, but {tmp_path} holds a trained "
        f"run (checkpoints/{name}): nothing to resume; train into a new directory, or --force to "
        "start over (deletes its checkpoints)"
    )
    with pytest.raises(NmtError, match=f"^{re.escape(msg)}$"):
        ModelDir.at(tmp_path).check_training(resume=True, force=False)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == sorted(
        [name, "best.safetensors", "step-100.safetensors"]
    )
    # a run preempted before its first save (step-N and best files, no last): from scratch
    (tmp_path / "checkpoints" / name).unlink()
    assert ModelDir.at(tmp_path).check_training(resume=True, force=False) is False


def test_reset_model_dir_keeps_unrelated_files(tmp_path):
    for name in ("checkpoints/last.safetensors", "tensorboard/events", "metrics.jsonl"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "config.yaml").write_text("model: {}\n")
    ModelDir.at(tmp_path).reset()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_write_meta_and_load_model_round_trip(tmp_path):
    cfg = load_config(preset="transformer-tiny")
    vocab = VocabInfo(src_size=40, tgt_size=40, joint=True)
    spm = tmp_path / "data" / "spm.model"
    spm.parent.mkdir()
    spm.write_bytes(b"not really a sentencepiece model")
    out = tmp_path / "m"
    ModelDir.at(out).write_meta(cfg, ("en", "de"), (spm, spm), vocab)
    torch.manual_seed(0)
    model = build(cfg.model, vocab)
    save_weights(model, out / "checkpoints" / "best.safetensors")
    loaded, cfg2, vocab2, meta = load_model(ModelDir(out), "best")
    assert cfg2 == cfg and vocab2 == vocab
    assert (meta["src_lang"], meta["tgt_lang"], meta["src_spm"]) == ("en", "de", "spm.model")
    assert (out / "spm.model").read_bytes() == spm.read_bytes()
    want, got = model.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert not loaded.training
    with pytest.raises(NmtError, match="last.safetensors: checkpoint not found"):
        load_model(ModelDir(out), "last")
    # The directory records its format; one written before it did (no "format") still loads,
    # one from a newer nmt is one line naming the file.
    meta_path = out / "vocab.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    assert meta["format"] == MODEL_FORMAT == 1
    del meta["format"]
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    assert ModelDir(out).vocab == vocab
    meta_path.write_text(json.dumps({**meta, "format": 2}), encoding="utf-8")
    with pytest.raises(NmtError) as e:
        ModelDir(out)
    assert str(e.value) == (
        f"{meta_path}: model format 2; this nmt reads formats 1 to 1 (a newer nmt wrote it)"
    )


class _Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Parameter(torch.zeros(5))


def _save_steps(root: Path, steps: list[int]) -> dict[int, dict[str, torch.Tensor]]:
    """Random step checkpoints as training writes them; returns their tensors."""
    c = ck.Checkpoints(ModelDir.at(root), keep_best=10, keep_last=10)
    torch.manual_seed(1)
    saved = {}
    for step in steps:
        m = _Two()
        with torch.no_grad():
            m.b.normal_()
        c.save_step(m, step, "bleu", float(step), False)
        saved[step] = {k: v.clone() for k, v in m.state_dict().items()}
    return saved


def test_average_is_the_element_wise_mean_of_the_newest(tmp_path):
    saved = _save_steps(tmp_path, [10, 20, 30])
    path, steps = average(ModelDir.at(tmp_path), last=2)
    assert steps == [20, 30]
    avg = load_file(str(path))
    assert avg.keys() == saved[20].keys()
    for k, v in avg.items():
        assert torch.allclose(v, (saved[20][k] + saved[30][k]) / 2, atol=1e-7), k
    _, steps = average(ModelDir.at(tmp_path), last=3)
    assert steps == [10, 20, 30]
    avg = load_file(str(path))
    for k, v in avg.items():
        mean = (saved[10][k].double() + saved[20][k].double() + saved[30][k].double()) / 3
        assert torch.allclose(v, mean.float(), atol=1e-7), k


def test_resume_drops_a_torn_metrics_line(tmp_path):
    from nmt.train.log import Metrics

    rows = [json.dumps({"event": "train", "step": s}) for s in (5, 10, 15)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + '\n{"event": "train", "st')
    metrics = Metrics(ModelDir.at(tmp_path), enabled=True)
    metrics.open(resume_step=10)
    metrics.close()
    assert (tmp_path / "metrics.jsonl").read_text() == rows[0] + "\n" + rows[1] + "\n"


def test_broken_config_or_vocab_is_a_one_line_error(tmp_path):
    from nmt.dirs.model import ModelDir

    cfg = load_config(preset="transformer-tiny")
    cfg.save(tmp_path / "config.yaml")
    (tmp_path / "vocab.json").write_text('{"src_size": 40,')
    with pytest.raises(NmtError, match=f"^{re.escape(str(tmp_path / 'vocab.json'))}: invalid JSON"):
        ModelDir(tmp_path)
    (tmp_path / "config.yaml").write_text("model: [unclosed\n")
    with pytest.raises(NmtError, match=f"^{re.escape(str(tmp_path))}/config.yaml: invalid YAML"):
        ModelDir(tmp_path)


def test_taking_the_lock_removes_temporaries_of_a_killed_run(tmp_path):
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    stale = [ckpts / ".last.state.pt.a1b_2c.tmp", ckpts / ".step-40.safetensors.x9.tmp"]
    stale.append(tmp_path / ".metrics.jsonl.q7.tmp")
    kept = [ckpts / ".averaged.safetensors.k3.tmp", tmp_path / "notes.tmp", ckpts / "last.pt"]
    for path in stale + kept:
        path.write_bytes(b"x" * 10)
    with ModelDir.at(tmp_path).lock():
        assert [p.exists() for p in stale] == [False] * 3
        assert [p.exists() for p in kept] == [True] * 3


@pytest.mark.parametrize("preset", ["transformer-tiny", "seq2seq-tiny"])
def test_load_model_draws_no_random_weights_and_keeps_buffers_and_ties(tmp_path, preset):
    cfg = load_config(preset=preset)
    vocab = VocabInfo(src_size=40, tgt_size=40, joint=True)
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"sp")
    out = tmp_path / "m"
    ModelDir.at(out).write_meta(cfg, ("en", "de"), (spm, spm), vocab)
    model = build(cfg.model, vocab)
    save_weights(model, out / "checkpoints" / "best.safetensors")
    rng = torch.get_rng_state()
    loaded, *_ = load_model(ModelDir(out), "best")
    assert torch.equal(torch.get_rng_state(), rng)  # build(init=False) drew nothing
    want, got = dict(model.named_buffers()), dict(loaded.named_buffers())  # sinusoids too
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    shared = {n for n, _ in model.named_parameters(remove_duplicate=False)} - {
        n for n, _ in model.named_parameters()
    }  # tied matrices: still one tensor after loading
    assert len(list(loaded.parameters())) == len(list(model.parameters()))
    assert {n for n, _ in loaded.named_parameters(remove_duplicate=False)} - {
        n for n, _ in loaded.named_parameters()
    } == shared
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 4))
    lengths = torch.tensor([5, 3])
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(src, lengths, tgt), loaded(src, lengths, tgt))


def test_stale_temporaries_of_every_file_training_writes_are_removed(tmp_path):
    # A SIGKILL mid-write leaves `.NAME.XXXX.tmp` beside NAME; the next run under the lock
    # removes those of training's own files and nothing else.

    (tmp_path / "checkpoints").mkdir()
    ours = [
        ".config.yaml.a1.tmp", ".vocab.json.b2.tmp", ".metrics.jsonl.c3.tmp", ".spm.model.d4.tmp",
        ".spm.de.model.e5.tmp", "checkpoints/.last.state.pt.f6.tmp",
        "checkpoints/.best.safetensors.g7.tmp", "checkpoints/.step-300.safetensors.h8.tmp",
        "checkpoints/.index.json.j0.tmp", "checkpoints/.default.json.k1.tmp",
    ]  # fmt: skip
    theirs = [
        ".notes.txt.a1.tmp", "spm.model", "checkpoints/.mine.safetensors.x.tmp",
        "checkpoints/.averaged.safetensors.i9.tmp",  # `nmt average` writes it without the lock
    ]  # fmt: skip
    for name in ours + theirs:
        (tmp_path / name).write_bytes(b"x")
    removed = ModelDir.at(tmp_path).remove_stale_temps()
    assert sorted(str(p.relative_to(tmp_path)) for p in removed) == sorted(ours)
    assert all((tmp_path / name).exists() for name in theirs)
