"""Check `nmt export --format huggingface` on a trained model, both ways: transformers' `generate`
on the export against `nmt translate` on the model directory (greedy and beam, nmt under
transformers' rule), and the export imported back (`nmt import`) against the model directory.

    python scripts/compare_hf_export.py -m work/demo/model corpora/multi30k/test_2016_flickr.en

Prints the identical counts; a differing line is listed with the top-2 log-probability gap at the
first token where the two differ (a near-tie when it is under 1e-4).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from nmt.dirs import ModelDir


def _nmt(
    model_dir: Path, lines: list[str], beam: int, limit: int
) -> tuple[list[list[int]], list[str]]:
    """nmt's output ids and text per line (transformers' rule for beam search), with generate's
    length limit: `limit` positions, the start token's included (forced eos: one token fewer)."""
    from nmt.engines.translator import Translator

    with Translator.from_dir(ModelDir(model_dir), workers=1) as tr:
        forced = tr.decoding.forced_eos
        opts: dict = {"max_len_a": 0, "max_len_b": limit - (2 if forced else 1)}
        opts |= {"greedy": True} if beam == 1 else {"beam_size": beam, "stop": "transformers"}
        done = [t.hypotheses[0] for t in tr.translate(lines, **opts)]
        return [[tr.tgt_tok.piece_to_id(p) for p in h.tokens] for h in done], [h.text for h in done]


def _hf(export: Path, lines: list[str], beam: int, limit: int) -> list[list[int]]:
    """transformers' output ids per line, generated with the export's own settings."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(export, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(export)
    eos, out = model.generation_config.eos_token_id, []
    for i in range(0, len(lines), 50):
        batch = tok(lines[i : i + 50], return_tensors="pt", padding=True)
        with torch.no_grad():
            seqs = model.generate(**batch, num_beams=beam, do_sample=False, max_length=limit)
        for row in seqs.tolist():
            body = row[1:]
            body = body[: body.index(eos)] if eos in body else body
            out.append([t for t in body if t != model.generation_config.pad_token_id])
    return out


def _gap(model_dir: Path, line: str, ours: list[int], theirs: list[int]) -> float:
    """The top-2 log-probability gap of nmt's model at the first token where the outputs differ."""
    from nmt.engines.translator import Translator

    pairs = zip([*ours, -1], [*theirs, -1], strict=False)  # -1: the end of the shorter
    j = next(i for i, (a, b) in enumerate(pairs) if a != b)
    with Translator.from_dir(ModelDir(model_dir), workers=1) as tr:
        v = tr.model.vocab
        src = torch.tensor([tr.src_tok.encode(line) + [v.eos_id]])
        tgt_in = torch.tensor([[v.bos_id, *ours[:j]]])
        with torch.no_grad():
            lp = tr.model(src, torch.tensor([src.size(1)]), tgt_in)[0, -1].log_softmax(-1)
        top = lp.topk(2).values.tolist()
    return top[0] - top[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", type=Path, required=True, help="an nmt MODEL_DIR")
    ap.add_argument("source", type=Path, help="source lines")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--json", type=Path, help="write the counts here")
    args = ap.parse_args()
    from nmt.export.huggingface import export_huggingface
    from nmt.pretrained.importer import import_marian

    lines = args.source.read_text(encoding="utf-8").splitlines()
    work = Path(tempfile.mkdtemp(prefix="hf-export-"))
    export = work / "hf"
    export_huggingface(ModelDir(args.model), export)
    back = import_marian(str(export), work / "back").path
    limit = json.loads((export / "generation_config.json").read_text())["max_length"]
    report: dict = {"lines": len(lines)}
    for beam in sorted({1, args.beam}):
        (ours, text), theirs = _nmt(args.model, lines, beam, limit), _hf(export, lines, beam, limit)
        diff = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
        gaps = {i + 1: _gap(args.model, lines[i], ours[i], theirs[i]) for i in diff}
        report[f"beam{beam}"] = {"identical": len(lines) - len(diff), "differing": gaps}
        again = _nmt(back, lines, beam, limit)[1]
        report[f"beam{beam}_reimported_identical"] = sum(
            a == b for a, b in zip(text, again, strict=True)
        )
        print(f"beam {beam}: {len(lines) - len(diff)}/{len(lines)} identical; differing: {gaps}")
        print(f"beam {beam}: imported back, {report[f'beam{beam}_reimported_identical']} identical")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
