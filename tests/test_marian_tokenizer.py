"""nmt's Marian vocabularies against transformers' MarianTokenizer on the real OPUS-MT tokenizers:
the same ids (source and target side), pieces and decoded text on real lines of four corpora and on
a stress set; bad files refused in one line."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import shutil
import warnings

import pytest
from conftest import PRETRAINED, require

from nmt.data.marian_vocab import SpecialPieces, VocabTokenizer, load_vocab_pair
from nmt.errors import NmtError

CORPORA = {  # language and source -> file under ../shared/corpora
    "en-multi30k": "multi30k/train.en.gz",
    "de-multi30k": "multi30k/train.de.gz",
    "en-justice": "justice-laws-en-fr/train.en.gz",
    "fr-justice": "justice-laws-en-fr/train.fr.gz",
}
LINES = 1200  # every other line of the first 2,400 of each file

STRESS = [
    "",
    " ",
    "   ",
    "  leading and trailing  ",
    "many    inner     spaces",
    "\ttabs\tinside\t",
    "non\u00a0breaking\u00a0space",
    "ﬁne ﬂow ｆｕｌｌ Ｗｉｄｔｈ ① ② ㎞",
    "cafe\u0301 re\u0301sume\u0301 n\u0303",
    "<unk>",
    "</s>",
    "<pad>",
    "<unk> at the start",
    "at the end </s>",
    "in<pad>side and <unk> alone and</s>",
    "<pad><unk></s>",
    "</s<unk> <<unk>> <pa d>",
    ">>fra<< Bonjour le monde.",
    ">>fra<<",
    ">>fra<<Collé",
    "a code >>fra<< mid-line",
    "</s>>>fra<< after eos",
    "</s> >>fra<< after eos and space",
    ">>fra without end",
    ">><< empty code",
    ">>>a<<b",
    "snow ☃☃ and 漢字 and 😀 and ’quotes’ — dashes « » „x“",
    "ä ö ü ß Ä Ö Ü ẞ",
    "Привіт, світе!",
]


def _lines(path, count=LINES):
    """Every other line of a gzipped corpus's first 2 * count lines."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, 0, 2 * count, 2)]


@pytest.fixture(scope="module")
def corpora(repo_root):
    """Real lines per language and source, read straight from ../shared/corpora."""
    root = repo_root.parent / "shared/corpora"
    if not all((root / path).is_file() for path in CORPORA.values()):
        pytest.skip(f"{root}: the corpora are missing")
    return {key: _lines(root / path) for key, path in CORPORA.items()}


def _hf(directory):
    """transformers' MarianTokenizer of a directory (without sacremoses: it warns, and applies no
    Moses normalisation, as nmt does not)."""
    transformers = require("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.MarianTokenizer.from_pretrained(str(directory))


@pytest.fixture(scope="module")
def models(pretrained_root):
    """name -> (MarianTokenizer, nmt source tokenizer, nmt target tokenizer), each loaded once."""
    out = {}
    for name in PRETRAINED:
        d = pretrained_root / name
        out[name] = (_hf(d), *load_vocab_pair(d / "source.spm", d / "target.spm", d / "vocab.json"))
    return out


def _hf_ids(hf, texts, side):
    """MarianTokenizer's ids of lines on one side, without the eos it appends."""
    enc = hf(texts)["input_ids"] if side == "source" else hf(text_target=texts)["input_ids"]
    assert all(ids[-1] == hf.eos_token_id for ids in enc)
    return [ids[:-1] for ids in enc]


def _hf_pieces(hf, texts, side):
    """MarianTokenizer.tokenize on one side (its target mode has no public switch)."""
    if side == "target":
        hf._switch_to_target_mode()
    try:
        return [hf.tokenize(text) for text in texts]
    finally:
        hf._switch_to_input_mode()


def _identical(ours, theirs):
    """How many of two lists of sequences agree, position by position."""
    assert len(ours) == len(theirs)
    return sum(a == b for a, b in zip(ours, theirs, strict=True))


@pytest.mark.parametrize("side", ["source", "target"])
@pytest.mark.parametrize("name", PRETRAINED)
def test_ids_match_marian_tokenizer(models, corpora, name, side):
    """Real lines of every language: encode_batch gives MarianTokenizer's ids; some lines hold
    pieces vocab.json lacks (read as <unk>)."""
    hf, src, tgt = models[name]
    tok = src if side == "source" else tgt
    unknown = {}
    for key, texts in corpora.items():
        theirs = _hf_ids(hf, texts, side)
        assert len(texts) >= 1000
        assert _identical(tok.encode_batch(texts, threads=1), theirs) == len(texts), key
        sample = texts[:100]
        assert [tok.encode(t) for t in sample] == theirs[:100], key
        assert [tok.pieces(t) for t in sample] == _hf_pieces(hf, sample, side), key
        unknown[key] = tok.unknown_lines(texts)
    assert max(unknown.values()) > 0, unknown


@pytest.mark.parametrize("side", ["source", "target"])
@pytest.mark.parametrize("name", PRETRAINED)
def test_stress_set_matches(models, name, side):
    """Changed-by-NFKC characters, odd spacing, special pieces and language codes written in the
    text, the empty line and unknown characters: ids and pieces as MarianTokenizer's, one line at
    a time or in a batch."""
    hf, src, tgt = models[name]
    tok = src if side == "source" else tgt
    theirs = _hf_ids(hf, STRESS, side)
    for text, ids in zip(STRESS, theirs, strict=True):
        assert tok.encode(text) == ids, text
    assert tok.encode_batch(STRESS) == theirs
    assert [tok.pieces(t) for t in STRESS] == _hf_pieces(hf, STRESS, side)
    assert tok.encode("") == [] and tok.pieces("") == []
    assert tok.encode("<unk> x</s>")[0] == tok.unk_id and tok.encode("x</s>")[-1] == tok.eos_id


def test_unknown_lines_count_missing_pieces_only(models):
    """A written <unk> is the unknown piece itself, not a missing one; a character no piece
    covers is."""
    _, src, tgt = models["opus-mt-tc-big-fr-en"]
    for tok in (src, tgt):
        assert tok.unknown_lines(["<unk>", "a <unk> b", "plain text", ""]) == 0
        assert tok.unknown_lines(["snow ☃", "<unk> ☃", "<unk>"]) == 2
    assert src.unknown_lines([">>xyz<< unknown code"]) == 1


def _model_like(tok, count=150, seed=0):
    """Id sequences a model might output: any ids, with eos, pad and unk among them."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(0, 25))]
        for special in (tok.unk_id, tok.pad_id, tok.eos_id):
            if rng.random() < 0.4:
                ids.insert(rng.randrange(len(ids) + 1), special)
        out.append(ids + [tok.eos_id] + [tok.pad_id] * rng.randrange(3))
    return out + [[], [tok.eos_id], [tok.pad_id, tok.eos_id], [tok.unk_id]]


@pytest.mark.parametrize("name", PRETRAINED)
def test_decode_matches(models, corpora, name):
    """decode == MarianTokenizer.decode(skip_special_tokens=True) on encoded real lines and on
    model-like ids, and with the special pieces kept too; both sides decode alike (a shared
    vocabulary joins pieces with the source model)."""
    hf, src, tgt = models[name]
    texts = [t for lines in corpora.values() for t in lines[:150]] + STRESS
    seqs = [ids + [tgt.eos_id] for ids in tgt.encode_batch(texts)] + _model_like(tgt)
    theirs = [hf.decode(ids, skip_special_tokens=True) for ids in seqs]
    assert _identical(tgt.decode_batch(seqs), theirs) == len(seqs)
    assert _identical(src.decode_batch(seqs), theirs) == len(seqs)
    kept = [hf.decode(ids, skip_special_tokens=False) for ids in seqs]
    assert _identical([tgt.decode(ids, skip_special=False) for ids in seqs], kept) == len(seqs)
    with pytest.raises(IndexError):
        tgt.decode([tgt.vocab_size])


def test_vocabulary_facts(models):
    """Special ids, sizes and pieces are the vocabulary's; both sides share one vocabulary."""
    for hf, src, tgt in models.values():
        for tok in (src, tgt):
            assert isinstance(tok, VocabTokenizer) and tok.lowercase is False
            assert (tok.unk_id, tok.eos_id, tok.pad_id) == (
                hf.unk_token_id,
                hf.eos_token_id,
                hf.pad_token_id,
            )
            assert tok.vocab_size == hf.vocab_size
            assert tok.languages == sorted(hf.supported_language_codes) == []
            assert [tok.id_to_piece(i) for i in (0, 7, tok.vocab_size - 1)] == [
                hf.decoder[i] for i in (0, 7, tok.vocab_size - 1)
            ]
            assert tok.piece_to_id(tok.id_to_piece(7)) == 7
            assert tok.piece_to_id("no such piece ☃") == tok.unk_id
        assert src.same_pieces(tgt) and not src.extends(tgt)
        assert src.path is not None and src.path.name == "source.spm"
    _, src, _ = models["opus-mt-tc-big-fr-en"]
    assert (src.eos_id, src.unk_id, src.pad_id) == (43311, 50387, 53016)
    assert src.normalize("  Une  ﬁle  <unk> ") == "Une file"
    assert src.normalized_characters("ﬁ  Ａ") == " fi A"


def test_sampled_segmentations(models, corpora):
    """Subword regularisation: other segmentations of the same text (lines with no missing
    piece, whose text an <unk> would change), special pieces whole."""
    _, src, _ = models["opus-mt-tc-big-fr-en"]
    texts = [t for t in corpora["fr-justice"][:80] if not src.unknown_lines([t])]
    texts.append("</s>>>fra<< x <unk> y")
    sampled = src.sample_batch(texts, alpha=0.1)
    assert sampled != src.encode_batch(texts)
    assert [src.decode(ids) for ids in sampled] == [
        src.decode(ids) for ids in src.encode_batch(texts)
    ]
    assert sampled[-1][0] == src.eos_id and src.unk_id in sampled[-1]


def _copy(pretrained_root, name, tmp_path):
    """A writable copy of an OPUS-MT tokenizer directory."""
    out = tmp_path / name
    shutil.copytree(pretrained_root / name, out)
    for f in out.iterdir():
        f.chmod(0o644)
    return out


def test_language_codes(pretrained_root, corpora, tmp_path):
    """`>>xx<<` entries of a shared vocabulary are its languages; a leading code is one piece."""
    d = _copy(pretrained_root, "opus-mt-en-mg", tmp_path)
    vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
    n = len(vocab)
    vocab.update({">>fra<<": n, ">>deu<<": n + 1})
    (d / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    src, tgt = load_vocab_pair(d / "source.spm", d / "target.spm", d / "vocab.json")
    hf = _hf(d)
    assert src.languages == tgt.languages == [">>deu<<", ">>fra<<"]
    assert sorted(hf.supported_language_codes) == src.languages
    assert src.encode(">>fra<< Bonjour")[0] == n and src.encode(">>deu<<")[0] == n + 1
    assert src.pieces(">>deu<< x")[0] == ">>deu<<"
    texts = [">>fra<< " + t for t in corpora["en-multi30k"][:100]] + STRESS
    assert src.encode_batch(texts) == _hf_ids(hf, texts, "source")
    assert tgt.encode_batch(texts) == _hf_ids(hf, texts, "target")


def test_separate_vocabularies(pretrained_root, corpora, tmp_path):
    """With `separate_vocabs`, the target side maps pieces through target_vocab.json and decodes
    with the target model; no language codes (as MarianTokenizer)."""
    d = _copy(pretrained_root, "opus-mt-tc-big-fr-en", tmp_path)
    vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
    specials = set(SpecialPieces().all())
    ids = sorted(v for k, v in vocab.items() if k not in specials)
    moved = dict(zip(ids, reversed(ids), strict=True))
    target = {k: v if k in specials else moved[v] for k, v in vocab.items()}
    (d / "target_vocab.json").write_text(json.dumps(target), encoding="utf-8")
    config = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    (d / "tokenizer_config.json").write_text(json.dumps(config | {"separate_vocabs": True}))
    src, tgt = load_vocab_pair(
        d / "source.spm", d / "target.spm", d / "vocab.json", d / "target_vocab.json"
    )
    hf = _hf(d)
    assert hf.separate_vocabs and src.languages == tgt.languages == []
    assert not src.same_pieces(tgt)
    texts = corpora["en-justice"][:200] + corpora["fr-justice"][:200] + STRESS
    assert src.encode_batch(texts) == _hf_ids(hf, texts, "source")
    theirs = _hf_ids(hf, texts, "target")
    assert tgt.encode_batch(texts) == theirs
    seqs = [ids + [tgt.eos_id] for ids in theirs] + _model_like(tgt, 50)
    assert tgt.decode_batch(seqs) == [hf.decode(s, skip_special_tokens=True) for s in seqs]


BAD_VOCABS = {
    "not JSON": b"{not json",
    "not UTF-8": b'{"\xff": 0}',
    "a list": b"[1, 2]",
    "string ids": b'{"<unk>": "0", "</s>": 1, "<pad>": 2}',
    "bool ids": b'{"<unk>": 0, "</s>": true, "<pad>": 2}',
    "a gap": b'{"<unk>": 0, "</s>": 1, "<pad>": 3}',
    "a repeated id": b'{"<unk>": 0, "</s>": 0, "<pad>": 1}',
    "no pad": b'{"<unk>": 0, "</s>": 1, "a": 2}',
    "empty": b"{}",
}


@pytest.mark.parametrize(
    "case", [*BAD_VOCABS, "missing vocab", "missing spm", "bad spm", "bad target"]
)
def test_bad_files_are_one_line_errors(pretrained_root, tmp_path, case):
    """Each bad file is one NmtError line naming it."""
    d = pretrained_root / "opus-mt-en-mg"
    files = {"src": d / "source.spm", "tgt": d / "target.spm", "vocab": d / "vocab.json"}
    bad = tmp_path / "bad.file"
    if case in BAD_VOCABS:
        bad.write_bytes(BAD_VOCABS[case])
        files["vocab"] = bad
    elif case == "missing vocab":
        files["vocab"] = bad
    elif case == "missing spm":
        files["tgt"] = bad
    elif case == "bad spm":
        bad.write_bytes(b"not a SentencePiece model")
        files["src"] = bad
    target = None
    if case == "bad target":
        bad.write_bytes(b'{"<unk>": 0}')
        target = bad
    with pytest.raises(NmtError) as err:
        load_vocab_pair(files["src"], files["tgt"], files["vocab"], target)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{bad}: "), message


def test_named_special_pieces(pretrained_root, tmp_path):
    """Special pieces come from tokenizer_config.json; one missing from the vocabulary is named."""
    d = pretrained_root / "opus-mt-uk-en"
    specials = SpecialPieces(pad="<unk>")
    src, _ = load_vocab_pair(d / "source.spm", d / "target.spm", d / "vocab.json", None, specials)
    assert src.pad_id == src.unk_id == 1
    with pytest.raises(NmtError, match=r"vocab\.json: special piece '<eos>' \(eos\) is missing"):
        load_vocab_pair(
            d / "source.spm", d / "target.spm", d / "vocab.json", None, SpecialPieces(eos="<eos>")
        )
    with pytest.raises(TypeError):
        VocabTokenizer.load(d / "source.spm")
