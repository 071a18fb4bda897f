"""Decoding precision (`--precision`): auto decodes in fp32 on every device (native bf16 or not);
explicit bf16 (Transformer: cast weights and cache; Seq2Seq: autocast around fp32 recurrences)
gives the fp32 translations on almost every line, scores stay fp32, an emulated-bf16 CPU is warned
about, fp16 on CPU is refused. Validation keeps its own rule (`inference_precision`)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from test_translate import build_tiny_model_dir, synthetic_lines
from typer.testing import CliRunner

from nmt.cli.app import app
from nmt.config import Config, model_config
from nmt.data.vocab import Tokenizer, VocabInfo
from nmt.dirs import ModelDir
from nmt.engines.translator import Translator
from nmt.errors import NmtError

EMULATED = (
    "this CPU has no native bf16 (avx512_bf16/AMX): bf16 is emulated and 10-40x slower than fp32 "
    "here; use --precision fp32"
)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    """The tiny random Transformer of test_translate and a tiny Bahdanau Seq2Seq with its spm."""
    from nmt.dirs.model import ModelDir
    from nmt.dirs.weights import save_weights
    from nmt.models import build

    transformer = build_tiny_model_dir(tmp_path_factory.mktemp("t"))
    root = tmp_path_factory.mktemp("s")
    spm = transformer.parent / "spm.model"
    size = Tokenizer.load(spm).vocab_size
    vocab = VocabInfo(size, size, joint=True)
    cfg = Config()
    cfg.model = model_config(
        type="seq2seq", embed_dim=16, hidden_size=24, encoder_layers=1, decoder_layers=1,
        attention="bahdanau", dropout=0.0, max_positions=64,
    )  # fmt: skip
    cfg.decoding.max_len_b = 5
    torch.manual_seed(0)
    seq2seq = root / "model"
    ModelDir.at(seq2seq).write_meta(cfg, ("en", "de"), (spm, spm), vocab)
    save_weights(build(cfg.model, vocab), seq2seq / "checkpoints" / "best.safetensors")
    return {"transformer": transformer, "seq2seq": seq2seq}


@pytest.mark.parametrize("arch", ["transformer", "seq2seq"])
@pytest.mark.parametrize("beam", [1, 4])
def test_bf16_decoding_matches_fp32(model_dirs, arch, beam):
    lines = synthetic_lines(60, seed=3)
    fp32 = Translator.from_dir(ModelDir(model_dirs[arch]), device="cpu", precision="fp32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bf16 = Translator.from_dir(ModelDir(model_dirs[arch]), device="cpu", precision="bf16")
    assert [str(w.message) for w in caught] == [EMULATED]  # conftest pins NMT_CPU_BF16=0
    assert bf16.precision == "bf16" and fp32.precision == "fp32"
    # Transformer: weights (and so the KV cache) cast; Seq2Seq: fp32 weights under autocast
    want = torch.float32 if arch == "seq2seq" else torch.bfloat16
    assert {p.dtype for p in bf16.model.parameters()} == {want}
    a, b = fp32.translate(lines, beam_size=beam), bf16.translate(lines, beam_size=beam)
    assert len(b) == len(lines)
    same = sum(x.text == y.text for x, y in zip(a, b, strict=True))
    assert same >= 0.9 * len(lines), f"{same}/{len(lines)} identical"
    assert all(isinstance(t.hypotheses[0].log_prob, float) for t in b)
    close = [
        abs(x.hypotheses[0].log_prob - y.hypotheses[0].log_prob) < 0.5
        for x, y in zip(a, b, strict=True)
        if x.text == y.text
    ]
    assert all(close)


def test_auto_decodes_in_fp32_with_or_without_native_bf16(model_dirs, monkeypatch, tmp_path):
    wide = build_tiny_model_dir(tmp_path, d_model=128)
    assert Translator.from_dir(ModelDir(wide), device="cpu").precision == "fp32"
    monkeypatch.setenv("NMT_CPU_BF16", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # native: no warning
        tr = Translator.from_dir(ModelDir(wide), device="cpu")
        explicit = Translator.from_dir(
            ModelDir(model_dirs["transformer"]), device="cpu", precision="bf16"
        )
    assert tr.precision == "fp32"  # batch-invariant: the default on every CPU
    assert {p.dtype for p in tr.model.parameters()} == {torch.float32}
    assert explicit.precision == "bf16"  # an explicit choice is kept
    assert {p.dtype for p in explicit.model.parameters()} == {torch.bfloat16}
    assert Translator.from_dir(ModelDir(model_dirs["seq2seq"]), device="cpu").precision == "fp32"


def test_decode_precision_rules(monkeypatch):
    from nmt.device import decode_precision

    cpu = torch.device("cpu")
    monkeypatch.setenv("NMT_CPU_BF16", "1")
    assert [decode_precision(p, cpu) for p in ("auto", "fp32", "bf16")] == ["fp32", "fp32", "bf16"]
    with pytest.raises(NmtError, match=r"^--precision fp16 needs a GPU; use bf16 or fp32 on CPU$"):
        decode_precision("fp16", cpu)
    with pytest.raises(
        NmtError, match=r"^precision 'fp8': expected one of auto, fp32, bf16, fp16$"
    ):
        decode_precision("fp8", cpu)
    # CUDA: auto is fp32 whatever the GPU; bf16 and fp16 stay explicit choices
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (9, 0))
    gpu = torch.device("cuda:0")
    assert [decode_precision(p, gpu) for p in ("auto", "bf16", "fp16")] == ["fp32", "bf16", "fp16"]


def test_fp16_on_cpu_is_refused(model_dirs):
    with pytest.raises(NmtError, match=r"^--precision fp16 needs a GPU; use bf16 or fp32 on CPU$"):
        Translator.from_dir(ModelDir(model_dirs["transformer"]), device="cpu", precision="fp16")
    res = CliRunner().invoke(
        app, ["translate", "-m", str(model_dirs["transformer"]), "--precision", "fp16", "-q"],
        input="a man .\n",
    )  # fmt: skip
    assert res.exit_code == 2
    assert res.output.strip().endswith("--precision fp16 needs a GPU; use bf16 or fp32 on CPU")


def test_cli_bf16_one_line_per_input(model_dirs):
    lines = synthetic_lines(7, seed=5)
    res = CliRunner().invoke(
        app, ["translate", "-m", str(model_dirs["seq2seq"]), "--precision", "bf16", "-q"],
        input="\n".join(lines) + "\n",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = [x for x in res.stdout.splitlines() if not x.startswith("warning")]
    assert len(out) == len(lines)


def test_resolve_precision_rules(monkeypatch):
    from nmt.device import resolve_precision

    cpu = torch.device("cpu")
    monkeypatch.setenv("NMT_CPU_BF16", "0")
    assert [resolve_precision(p, cpu) for p in ("auto", "fp32", "bf16")] == ["fp32", "fp32", "bf16"]
    monkeypatch.setenv("NMT_CPU_BF16", "1")
    assert resolve_precision("auto", cpu) == "bf16"
    with pytest.raises(NmtError, match="precision 'fp8': expected one of auto, fp32, bf16, fp16"):
        resolve_precision("fp8", cpu)
    # CUDA: bf16 from compute capability 8.0 (Ampere) on; a T4 or V100 emulates it: fp16
    capability = {"cuda:0": (7, 5), "cuda:1": (8, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: capability[str(d)])
    gpus = [torch.device("cuda:0"), torch.device("cuda:1")]
    assert [resolve_precision("auto", d) for d in gpus] == ["fp16", "bf16"]


def test_validation_draws_the_bf16_line_at_d_model_256(monkeypatch):
    from nmt.device import VALID_BF16_MIN_WIDTH, decode_precision, inference_precision

    monkeypatch.setenv("NMT_CPU_BF16", "1")
    cpu = torch.device("cpu")
    assert VALID_BF16_MIN_WIDTH == 256
    widths = (64, 128, 256, 512)
    assert [inference_precision("auto", cpu, w) for w in widths] == ["fp32", "fp32", "bf16", "bf16"]
    assert inference_precision("auto", cpu, 128, min_width=128) == "bf16"
    assert inference_precision("auto", cpu) == "bf16"  # Seq2Seq: no d_model, the hardware decides
    assert inference_precision("bf16", cpu, 64) == "bf16"  # explicit: kept
    assert decode_precision("auto", cpu) == "fp32"  # translation: fp32 at every width
    monkeypatch.setenv("NMT_CPU_BF16", "0")
    assert inference_precision("auto", cpu, 512) == "fp32"


@pytest.mark.filterwarnings("ignore:this CPU has no native bf16")
def test_a_seq2seq_decoding_under_autocast_is_not_packed(model_dirs):
    """bf16 Seq2Seq keeps fp32 weights under autocast: a packed fp32 copy would never be used."""
    from torch import nn

    from nmt.engines.packed import PackedLinear, _pack

    bf16 = Translator.from_dir(ModelDir(model_dirs["seq2seq"]), device="cpu", precision="bf16")
    assert type(bf16.model.output) is nn.Linear
    fp32 = Translator.from_dir(ModelDir(model_dirs["seq2seq"]), device="cpu", precision="fp32")
    if _pack(torch.randn(8, 4)) is not None:
        assert isinstance(fp32.model.output, PackedLinear)
