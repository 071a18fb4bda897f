"""An imported OPUS-MT model computes what transformers computes: logits within 1e-4, greedy
and beam search (under transformers' rule) token for token, on each real config shrunk to 2+2
layers with every parameter random, and on real lines. The runs are not degenerate: most lines
end in eos, outputs are distinct, none is one token repeated."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import PRETRAINED, require
from marian_fixtures import parity_lines, small_marian

from nmt.dirs import ModelDir

pytestmark = pytest.mark.slow
LINES, BATCH, NEW_TOKENS = 200, 50, 64


@pytest.fixture(scope="module", params=PRETRAINED)
def pair(request, pretrained_root, repo_root, tmp_path_factory):
    """(name, transformers model, nmt Translator, real lines) for one shrunk random model."""
    require("transformers")
    from transformers import MarianMTModel

    from nmt.engines.translator import Translator
    from nmt.pretrained.importer import import_marian

    name = request.param
    work = tmp_path_factory.mktemp(name)
    corpora = repo_root.parent / "shared/corpora"
    hf_dir = small_marian(pretrained_root / name, work / "hf")
    lines = parity_lines(corpora, name)[0]
    imported = import_marian(str(hf_dir), work / "nmt")
    hf = MarianMTModel.from_pretrained(hf_dir, dtype=torch.float32).eval()
    tr = Translator.from_dir(ModelDir(imported.path), workers=1)
    yield name, hf, tr, lines
    tr.close()


def _hf_batch(tr, lines: list[str]) -> dict:
    """transformers' inputs made from nmt's source ids (their parity is test_marian_tokenizer's)."""
    vocab = tr.model.vocab
    ids = [tr.src_tok.encode(line) + [vocab.eos_id] for line in lines]
    width = max(map(len, ids))
    rows = [i + [vocab.pad_id] * (width - len(i)) for i in ids]
    mask = [[1] * len(i) + [0] * (width - len(i)) for i in ids]
    return {"input_ids": torch.tensor(rows), "attention_mask": torch.tensor(mask)}


def _generate(hf, tr, lines: list[str], **settings) -> list[list[int]]:
    """transformers' output ids per line, without the start token, eos and padding; the
    generation settings passed explicitly (transformers 5 does not always read config.json)."""
    vocab, out = tr.model.vocab, []
    for i in range(0, len(lines), BATCH):
        with torch.no_grad():
            seqs = hf.generate(
                **_hf_batch(tr, lines[i : i + BATCH]), do_sample=False,
                bad_words_ids=[[vocab.pad_id]], forced_eos_token_id=vocab.eos_id,
                eos_token_id=vocab.eos_id, pad_token_id=vocab.pad_id,
                decoder_start_token_id=vocab.bos_id, **settings,
            )  # fmt: skip
        for row in seqs.tolist():
            body = row[1:]
            out.append(body[: body.index(vocab.eos_id)] if vocab.eos_id in body else body)
    return out


def _ours(tr, lines: list[str], **options) -> list[list[int]]:
    return [
        [tr.tgt_tok.piece_to_id(p) for p in t.hypotheses[0].tokens]
        for t in tr.translate(lines, **options)
    ]


def _not_degenerate(outs: list[list[int]], ended: int) -> None:
    assert ended >= len(outs) / 2, f"only {ended} of {len(outs)} lines ended in eos"
    assert len({tuple(o) for o in outs}) >= 0.9 * len(outs)
    assert not any(len(o) > 1 and len(set(o)) == 1 for o in outs)


def test_logits_match(pair):
    _, hf, tr, lines = pair
    batch = _hf_batch(tr, lines[:100])
    vocab = tr.model.vocab
    tgt = [[vocab.bos_id] + tr.tgt_tok.encode(line)[:20] for line in lines[:100]]
    width = max(map(len, tgt))
    tgt_in = torch.tensor([t + [vocab.pad_id] * (width - len(t)) for t in tgt])
    with torch.no_grad():
        theirs = hf(**batch, decoder_input_ids=tgt_in).logits
        ours = tr.model(batch["input_ids"], batch["attention_mask"].sum(1), tgt_in)
    real = torch.tensor([[j < len(t) for j in range(width)] for t in tgt])
    assert (theirs - ours)[real].abs().max().item() <= 1e-4


def test_greedy_matches_generate(pair):
    name, hf, tr, lines = pair
    theirs = _generate(hf, tr, lines, num_beams=1, max_new_tokens=NEW_TOKENS)
    # forced eos: transformers ends at NEW_TOKENS tokens with eos the last of them
    ours = _ours(tr, lines, greedy=True, max_len_a=0, max_len_b=NEW_TOKENS - 1)
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    ended = sum(len(o) < NEW_TOKENS - 1 for o in ours)
    distinct = len({tuple(o) for o in ours})
    print(f"{name} greedy: {same}/{len(lines)} identical, {ended} ended, {distinct} distinct")
    assert same == len(lines), f"{name}: greedy {same}/{len(lines)} identical"
    _not_degenerate(ours, ended)


def test_greedy_at_the_configs_max_length(pair):
    _, hf, tr, lines = pair
    few = lines[:5]
    limit = tr.decoding.max_len_b  # the config's max_length, as the model's default
    theirs = _generate(hf, tr, few, num_beams=1, max_length=limit + 2)
    assert _ours(tr, few, greedy=True) == theirs


def test_imported_defaults_are_the_models(pair, pretrained_root):
    import json

    name, _, tr, _ = pair
    real = json.loads((pretrained_root / name / "config.json").read_text())
    d = tr.decoding
    assert (d.beam_size, d.stop, d.forced_eos) == (real["num_beams"], "transformers", True)
    assert tr.model.vocab.eos_id == real["eos_token_id"]
    assert tr.model.vocab.bos_id == real["decoder_start_token_id"] == tr.model.vocab.pad_id
    assert Path(tr.src_tok.path).name == "source.spm"


def test_tensors_a_checkpoint_leaves_out_are_rebuilt(pretrained_root, tmp_path):
    """A checkpoint without positions, tied copies (lm_head, the embed_tokens copies) or
    final_logits_bias imports as transformers loads it: positions and ties rebuilt, a zero bias."""
    require("transformers")
    from safetensors.torch import load_file, save_file
    from transformers import MarianMTModel

    from nmt.dirs.loaded import load_model
    from nmt.pretrained.importer import import_marian

    hf_dir = small_marian(pretrained_root / "opus-mt-en-mg", tmp_path / "hf")
    state = load_file(str(hf_dir / "model.safetensors"))
    dropped = ("final_logits_bias", "lm_head", "embed_positions", "embed_tokens")
    save_file(
        {k: v for k, v in state.items() if not any(d in k for d in dropped)},
        str(hf_dir / "model.safetensors"),
        metadata={"format": "pt"},
    )
    hf = MarianMTModel.from_pretrained(hf_dir, dtype=torch.float32).eval()
    assert not hf.final_logits_bias.any()
    model, *_ = load_model(import_marian(str(hf_dir), tmp_path / "nmt"))
    assert model.output_bias is not None and not model.output_bias.any()
    src, tgt_in = torch.tensor([[5, 6, 7, 0]]), torch.tensor([[54687, 9, 10]])
    with torch.no_grad():
        theirs = hf(input_ids=src, decoder_input_ids=tgt_in).logits
        ours = model(src, torch.tensor([4]), tgt_in)
    assert (theirs - ours).abs().max().item() <= 1e-4


def test_separate_vocabularies_and_embeddings(pretrained_root, repo_root, tmp_path):
    """share_encoder_decoder_embeddings false with separate vocabularies (target_vocab.json,
    decoder_vocab_size): encoder and decoder embeddings apart, the output tied to the decoder's;
    logits and greedy search as transformers computes them."""
    require("transformers")
    import json
    import shutil

    from transformers import MarianMTModel

    from nmt.engines.translator import Translator
    from nmt.pretrained.importer import import_marian

    real = tmp_path / "opus-mt-en-mg"
    shutil.copytree(pretrained_root / "opus-mt-en-mg", real)
    shutil.copy(real / "vocab.json", real / "target_vocab.json")
    tc = json.loads((real / "tokenizer_config.json").read_text()) | {"separate_vocabs": True}
    (real / "tokenizer_config.json").write_text(json.dumps(tc))
    hf_dir = small_marian(
        real, tmp_path / "hf", share_encoder_decoder_embeddings=False, decoder_vocab_size=54688
    )
    shutil.copy(real / "target_vocab.json", hf_dir / "target_vocab.json")
    hf = MarianMTModel.from_pretrained(hf_dir, dtype=torch.float32).eval()
    assert hf.model.encoder.embed_tokens.weight.data_ptr() != hf.lm_head.weight.data_ptr()
    imported = import_marian(str(hf_dir), tmp_path / "nmt")
    assert not imported.vocab.joint
    lines = parity_lines(repo_root.parent / "shared/corpora", "opus-mt-en-mg")[0][:50]
    with Translator.from_dir(ModelDir(imported.path), workers=1) as tr:
        assert tr.model.src_embed is not tr.model.tgt_embed
        batch = _hf_batch(tr, lines)
        tgt_in = torch.tensor([[tr.model.vocab.bos_id, 9, 10]] * len(lines))
        with torch.no_grad():
            theirs = hf(**batch, decoder_input_ids=tgt_in).logits
            ours = tr.model(batch["input_ids"], batch["attention_mask"].sum(1), tgt_in)
        assert (theirs - ours).abs().max().item() <= 1e-4
        want = _generate(hf, tr, lines, num_beams=1, max_new_tokens=NEW_TOKENS)
        assert _ours(tr, lines, greedy=True, max_len_a=0, max_len_b=NEW_TOKENS - 1) == want
