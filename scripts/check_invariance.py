"""Does a translation depend on its batch? Translate FILE one line at a time and in normal batches
with the same model and options, and report identical lines, how many differ and, for each
difference, both winners' scores (a near-tie flipped by rounding that depends on the batch).
At the defaults (precision auto: fp32) no line may differ; bf16 does not promise it.

    .venv/bin/python scripts/check_invariance.py -m MODEL_DIR corpora/multi30k/test_2016_flickr.en
    .venv/bin/python scripts/check_invariance.py -m MODEL_DIR FILE --precision bf16
    .venv/bin/python scripts/check_invariance.py -m MODEL_DIR FILE --beam-size 1 --json
    .venv/bin/python scripts/check_invariance.py -m EXPORT_DIR FILE       # a CTranslate2 export

Exit status 1 when any line differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nmt.dirs import open_model  # noqa: E402
from nmt.engines.loading import open_translator  # noqa: E402
from nmt.errors import NmtError  # noqa: E402
from nmt.eval.invariance import check  # noqa: E402
from nmt.textio import read_lines  # noqa: E402


def main() -> None:
    """Parse options, run the check, print a summary (or JSON)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("file")
    p.add_argument("-m", "--model", required=True, help="MODEL_DIR or an `nmt export` directory")
    p.add_argument("--beam-size", type=int, default=5)
    p.add_argument("--batch-tokens", type=int, default=None)
    p.add_argument("--precision", default="auto", help="auto (the default: fp32), fp32 or bf16")
    p.add_argument("--lines", type=int, default=0, help="only the first N lines (0: all)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    try:
        lines = list(read_lines(args.file))
        tr = open_translator(
            open_model(args.model), device="cpu", precision=args.precision
        )  # or an export
    except NmtError as e:
        sys.exit(f"error: {e}")
    lines = lines[: args.lines] if args.lines else lines
    precision = tr.describe()["precision"]
    report = check(tr, lines, beam_size=args.beam_size, batch_tokens=args.batch_tokens)
    if args.json:
        print(json.dumps({**report.to_json(), "precision": precision}))
    else:
        print(
            f"{report.identical}/{report.lines} lines identical ({100 * report.fraction:.2f}%), "
            f"{len(report.differences)} differ, beam {args.beam_size}, {precision} "
            f"(--precision {args.precision})"
        )
        for d in report.differences:
            print(
                f"line {d.line}: score gap {d.gap:.2e}\n  alone:   {d.alone}\n  "
                f"batched: {d.batched}"
            )
    if report.differences:
        sys.exit(1)


if __name__ == "__main__":
    main()
