"""Does a translation depend on its batch? Translate FILE one line at a time and in normal batches
with the same model and options, and report identical lines and, for each difference, both
winners' scores (a gap of ~1e-4 is a near-tie flipped by floating-point summation order).

    .venv/bin/python scripts/check_invariance.py -m MODEL_DIR corpora/multi30k/test_2016_flickr.en
    .venv/bin/python scripts/check_invariance.py -m MODEL_DIR FILE --beam-size 1 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nmt.decode.translator import Translator  # noqa: E402
from nmt.eval.invariance import check  # noqa: E402
from nmt.textio import read_lines  # noqa: E402


def main() -> None:
    """Parse options, run the check, print a summary (or JSON)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("file")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("--beam-size", type=int, default=5)
    p.add_argument("--batch-tokens", type=int, default=None)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--lines", type=int, default=0, help="only the first N lines (0: all)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    lines = list(read_lines(args.file))
    lines = lines[: args.lines] if args.lines else lines
    tr = Translator.from_dir(args.model, device="cpu", precision=args.precision)
    report = check(tr, lines, beam_size=args.beam_size, batch_tokens=args.batch_tokens)
    if args.json:
        print(json.dumps(report.to_json()))
        return
    print(
        f"{report.identical}/{report.lines} lines identical ({100 * report.fraction:.2f}%), "
        f"beam {args.beam_size}, {args.precision}"
    )
    for d in report.differences:
        print(f"line {d.line}: score gap {d.gap:.2e}\n  alone:   {d.alone}\n  batched: {d.batched}")


if __name__ == "__main__":
    main()
