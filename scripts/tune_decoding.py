"""Choose a model's decoding defaults (beam size, length penalty) on the validation set.

    .venv/bin/python scripts/tune_decoding.py -m MODEL_DIR                 # DATA_DIR from training
    .venv/bin/python scripts/tune_decoding.py -m MODEL_DIR --data DATA_DIR --write
    .venv/bin/python scripts/tune_decoding.py -m MODEL_DIR --src valid.en --ref valid.de \
        --beams 1,5 --penalties 0.8,1.0,1.2 --max-sentences 500 --json

Prints one row per grid point (beam, length penalty, cased sacreBLEU, sentences/s) as markdown
(or JSON); the chosen row is the best BLEU, the fastest within 0.05 of it. `--write` stores it in
MODEL_DIR/config.yaml, so `nmt translate -m MODEL_DIR` uses it. Never tune on a test set.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nmt.dirs import ModelDir  # noqa: E402
from nmt.errors import NmtError  # noqa: E402


def numbers(text: str, kind: type) -> list:
    """'1,4,5' -> [1, 4, 5]."""
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-m", "--model", required=True, help="MODEL_DIR written by nmt train.")
    p.add_argument(
        "--data", help="DATA_DIR whose valid.<lang>.txt to tune on (default: training's)."
    )
    p.add_argument("--src", help="Source file to tune on (instead of DATA_DIR's valid split).")
    p.add_argument("--ref", help="Its reference file.")
    p.add_argument("--beams", type=lambda t: numbers(t, int), default=None, help="e.g. 1,4,5,8")
    p.add_argument(
        "--penalties", type=lambda t: numbers(t, float), default=None, help="e.g. 0.6,1.0"
    )
    p.add_argument("--max-sentences", type=int, default=0, help="Tune on the first N (0: all).")
    p.add_argument(
        "--checkpoint", default="default", help="default, best, last, averaged or a path."
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or mps.")
    p.add_argument(
        "--write", action="store_true", help="Store the choice in MODEL_DIR/config.yaml."
    )
    p.add_argument("--json", action="store_true", help="Print JSON instead of a markdown table.")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    """Tune and (with --write) store; returns what is printed as JSON."""
    from nmt.engines.translator import Translator
    from nmt.eval import tuning
    from nmt.textio import read_lines

    if bool(args.src) != bool(args.ref):
        raise NmtError("--src and --ref go together")
    if args.src:
        src_path, ref_path = Path(args.src), Path(args.ref)
    else:
        src_path, ref_path = tuning.valid_files(args.model, args.data)
    src, refs = list(read_lines(src_path)), list(read_lines(ref_path))
    if args.max_sentences > 0:
        src, refs = src[: args.max_sentences], refs[: args.max_sentences]
    pairs = tuning.grid(args.beams or tuning.BEAMS, args.penalties or tuning.PENALTIES)
    translator = Translator.from_dir(
        ModelDir(args.model), device=args.device, checkpoint=args.checkpoint
    )

    def show(row: tuning.TuneRow) -> None:
        lp = "-" if row.length_penalty is None else f"{row.length_penalty:g}"
        sys.stderr.write(
            f"beam {row.beam_size} lp {lp}: BLEU {row.bleu:.2f}, {row.sent_s:.1f} sent/s\n"
        )

    rows = tuning.tune(translator, src, refs, pairs, on_row=show)
    chosen = tuning.best(rows)
    written = str(tuning.write_decoding(args.model, chosen)) if args.write else None
    return {
        "tuned_on": [str(src_path), str(ref_path)],
        "sentences": len(src),
        "checkpoint": args.checkpoint,
        "rows": [r.to_dict() for r in rows],
        "chosen": chosen.to_dict(),
        "written": written,
        "_table": tuning.table(rows, chosen),
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point: exit 2 with one line on a user error."""
    args = parse_args(argv)
    try:
        out = run(args)
    except NmtError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    table = out.pop("_table")
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"tuned on {out['sentences']} sentences of {out['tuned_on'][0]}\n\n{table}")
        if out["written"]:
            print(f"\nwrote beam {out['chosen']['beam_size']} to {out['written']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
