"""Speed by sentence length: does the RNN's sequential recurrence cost what the Transformer's
parallel layers do, in training and in decoding?

For each preset (seq2seq-bahdanau and transformer-small by default, vocabulary 8000) and each
length L (source = target = L tokens, eos included), on random ids drawn from a fixed seed:

- training: one update as `nmt train` runs it (nmt.train.update.Updater: forward, the fused
  label-smoothed loss, backward, clipping, AdamW; on CPU, subnormal floats flushed to zero, or
  kept with --keep-denormals) on a batch of about 4,000 target tokens (--tokens // L sentences,
  at least 1), in train mode (dropout on);
- decoding: the real greedy search (nmt.decode.search.greedy) of one sentence of L source
  tokens, held to exactly L decoder steps (L - 1 tokens, then eos), on a model prepared as
  `nmt translate` prepares it (bf16: weights cast and packed, Seq2Seq under autocast).

Each figure is the median of --repeats timed runs after --warmup untimed ones at that shape;
target tokens count eos, as training does. Every (preset, precision) runs in this process, one
after another, with its models freed before the next is built. The header gives the CPU, its
flags and the torch thread count, and the GEMM rate of each precision measured in the same run.

    python scripts/bench_length.py                              # fp32, all usable CPUs
    python scripts/bench_length.py --precision fp32,bf16 --threads 2 --json len.json --plot len.png
    python scripts/bench_length.py --quick --presets seq2seq-tiny,transformer-tiny   # script check
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from benchlib import gemm_gflops, machine_line, timed_runs, write_json  # noqa: E402

PRESETS = "seq2seq-bahdanau,transformer-small"
LENGTHS = "10,20,40,80,160"
VOCAB = 8000
SEED = 1


def int_list(text: str, flag: str, low: int) -> list[int]:
    """A comma-separated list of integers >= low, or a one-line error naming the flag."""
    from nmt.errors import NmtError

    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise NmtError(f"{flag} {text!r}: expected integers separated by commas") from None
    if not values or min(values) < low:
        raise NmtError(f"{flag} {text!r}: expected integers of at least {low}")
    return values


def train_batch(length: int, tokens: int, device: Any) -> Any:
    """`tokens // length` random sentence pairs (at least one), source = target = `length`
    tokens with eos: `[bos] y1 .. y(L-1)` in, `y1 .. y(L-1) [eos]` out."""
    import torch

    from nmt.data.batching import Batch

    g = torch.Generator().manual_seed(SEED * 1000 + length)
    rows = max(1, tokens // length)
    src = torch.randint(4, VOCAB, (rows, length), generator=g)
    src[:, -1] = 3  # eos
    ids = torch.randint(4, VOCAB, (rows, length), generator=g)
    tgt_in = torch.cat([torch.full((rows, 1), 2), ids[:, :-1]], 1)  # bos + L-1 ids
    tgt_out = ids.clone()
    tgt_out[:, -1] = 3  # the same L-1 ids + eos
    lengths = torch.full((rows,), length)
    return Batch(src, lengths, tgt_in, tgt_out, rows * length).to(device)


def fresh_model(preset: str, device: Any) -> Any:
    """The preset's model for an 8k joint vocabulary, initialised from the fixed seed."""
    import torch

    from nmt.config import load_config
    from nmt.models import VocabInfo, build

    torch.manual_seed(SEED)
    return build(load_config(preset=preset).model, VocabInfo(VOCAB, VOCAB)).to(device)


def bench_train(preset: str, precision: str, device: Any, args: argparse.Namespace) -> list[dict]:
    """Per length: the median update's seconds and target tokens/s, as `nmt train` updates."""
    from nmt.config import load_config
    from nmt.device import autocast_for, denormals_flushed
    from nmt.train.distributed import DistInfo
    from nmt.train.loss import LossHead
    from nmt.train.state import TrainState, make_optimizer
    from nmt.train.update import Updater

    tc = load_config(preset=preset).training
    model = fresh_model(preset, device).train()
    optimizer = make_optimizer(model, tc, device)
    autocast = autocast_for(precision, device)
    head = LossHead(model, tc.label_smoothing, model.vocab.pad_id)
    update = Updater(head, optimizer, None, None, autocast, tc.clip_norm, DistInfo(), device)
    state = TrainState()
    lr = tc.lr / max(1, tc.warmup)  # the first warm-up step's: the same work, safely finite

    def warn(message: str) -> None:
        print(f"warning: {preset} {precision}: {message}", file=sys.stderr)

    def one_length(length: int) -> dict:
        batch = train_batch(length, args.tokens, device)
        times = timed_runs(
            lambda: update([batch], lr, state, warn), args.warmup, args.repeats, device.type
        )
        seconds = statistics.median(times)
        return {
            "batch_size": int(batch.src.size(0)),
            "train_tokens": batch.n_tgt_tokens,
            "train_ms": round(1000 * seconds, 3),
            "train_tok_s": round(batch.n_tgt_tokens / seconds, 1),
        }

    with contextlib.nullcontext() if args.keep_denormals else denormals_flushed(device):
        return [one_length(length) for length in args.lengths]  # flushed as `nmt train` does


def prepare_decoding(model: Any, precision: str, device: Any) -> Callable[[], Any]:
    """The model as `Translator.from_dir` prepares it for decoding (eval mode; bf16 weights cast
    and every product packed, or fp32 weights under autocast for a model that keeps fp32 parts;
    fp32: the vocabulary projection packed); the autocast it decodes under."""
    from nmt.device import autocast_for, compute_dtype
    from nmt.engines.packed import pack_for_decoding

    model.eval()
    if precision != "fp32" and getattr(model, "autocast_inference", False):
        return autocast_for(precision, device)
    if precision != "fp32":
        model.to(compute_dtype(precision))
    pack_for_decoding(model)
    return contextlib.nullcontext


def counted_steps(model: Any, run: Callable[[], Any]) -> tuple[int, Any]:
    """How many times `run` calls the model's decode_step, and what it returned."""
    calls = 0
    step = model.decode_step

    def counting(*a: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        return step(*a, **kw)

    model.decode_step = counting
    try:
        result = run()
    finally:
        del model.decode_step
    return calls, result


def bench_decode(preset: str, precision: str, device: Any, args: argparse.Namespace) -> list[dict]:
    """Per length: the median greedy search of one sentence held to exactly `length` steps."""
    model = fresh_model(preset, device)
    autocast = prepare_decoding(model, precision, device)
    return [decode_length(model, autocast, length, device, args) for length in args.lengths]


def decode_length(
    model: Any, autocast: Callable[[], Any], length: int, device: Any, args: argparse.Namespace
) -> dict:
    """Greedy search of one random sentence of `length` source tokens, held to `length` steps:
    the steps it took, the tokens it wrote and its median time."""
    import torch

    from nmt.decode.options import ResolvedOptions
    from nmt.decode.search.greedy import greedy_search

    g = torch.Generator().manual_seed(SEED * 1000 + length)
    src = torch.randint(4, VOCAB, (1, length), generator=g)
    src[:, -1] = 3  # eos
    src, src_lengths = src.to(device), torch.tensor([length], device=device)
    # L - 1 tokens, eos banned before them and forced after: L decoder steps, as a translation
    # of that length takes; no scores, as `nmt translate` prints none.
    opts = ResolvedOptions(
        greedy=True, max_len_a=0.0, max_len_b=length - 1, min_len=length - 1, scores=False
    )

    def search() -> Any:
        with autocast():
            return greedy_search(model, src, src_lengths, opts)

    steps, hyps = counted_steps(model, search)
    tokens = len(hyps[0].tokens) + 1  # eos included
    seconds = statistics.median(timed_runs(search, args.warmup, args.repeats, device.type))
    return {
        "decode_steps": steps,
        "decode_tokens": tokens,
        "decode_ms": round(1000 * seconds, 3),
        "decode_tok_s": round(tokens / seconds, 1),
    }


def free_memory(device: Any) -> None:
    """Drop the last configuration's tensors before the next one is built and timed."""
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def bench_config(preset: str, precision: str, device: Any, args: argparse.Namespace) -> list[dict]:
    """Every length of one (preset, precision): training, then decoding; one row per length."""
    from nmt.config import load_config

    model_type = load_config(preset=preset).model.type
    train = bench_train(preset, precision, device, args)
    free_memory(device)
    decode = bench_decode(preset, precision, device, args)
    free_memory(device)
    return [
        {
            "preset": preset,
            "type": model_type,
            "precision": precision,
            "length": length,
            "repeats": args.repeats,
            **t,
            **d,
        }
        for length, t, d in zip(args.lengths, train, decode, strict=True)
    ]


def ratios(rows: list[dict]) -> list[dict]:
    """Each Transformer's rates over the first RNN's, per precision and length."""
    rnn = next((r["preset"] for r in rows if r["type"] == "seq2seq"), None)
    base = {(r["precision"], r["length"]): r for r in rows if r["preset"] == rnn}
    out = []
    for r in rows:
        b = base.get((r["precision"], r["length"]))
        if r["type"] != "transformer" or b is None:
            continue
        out.append(
            {
                "preset": r["preset"],
                "baseline": rnn,
                "precision": r["precision"],
                "length": r["length"],
                "train": round(r["train_tok_s"] / b["train_tok_s"], 3),
                "decode": round(r["decode_tok_s"] / b["decode_tok_s"], 3),
            }
        )
    return out


def table(rows: list[dict], ratio_rows: list[dict]) -> list[str]:
    """The results as aligned text: one line per (preset, precision, length), then the ratios."""
    head = (
        f"{'model':<20} {'prec':<5} {'length':>6} {'batch':>5} {'train tok/s':>12} "
        f"{'train ms/step':>13} {'decode tok/s':>12} {'decode ms/sent':>14}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['preset']:<20} {r['precision']:<5} {r['length']:>6} {r['batch_size']:>5} "
            f"{r['train_tok_s']:>12,.0f} {r['train_ms']:>13,.1f} "
            f"{r['decode_tok_s']:>12,.0f} {r['decode_ms']:>14,.2f}"
        )
    if ratio_rows:
        lines += ["", f"{'transformer / RNN':<38} {'length':>6} {'train':>7} {'decode':>7}"]
    for q in ratio_rows:
        pair = f"{q['preset']} / {q['baseline']} {q['precision']}"
        lines.append(f"{pair:<38} {q['length']:>6} {q['train']:>6.2f}x {q['decode']:>6.2f}x")
    return lines


def plot(rows: list[dict], lengths: list[int], tokens: int, path: str) -> None:
    """Two panels, training and greedy decoding tokens/s against length (log2), a line per
    (preset, precision)."""
    from matplotlib.ticker import NullLocator

    from nmt.plots.figures import new_figure, save_png, style

    fig, left = new_figure(width=11.0, height=4.5)
    grid = fig.add_gridspec(1, 2)
    left.set_subplotspec(grid[0])
    right = fig.add_subplot(grid[1])
    right.grid(True, alpha=0.3, linewidth=0.6)
    right.spines[["top", "right"]].set_visible(False)
    series = list(dict.fromkeys((r["preset"], r["precision"]) for r in rows))
    for ax, key, title in (
        (left, "train_tok_s", f"training (one update of ~{tokens:,} target tokens)"),
        (right, "decode_tok_s", "greedy decoding (one sentence)"),
    ):
        for i, (preset, precision) in enumerate(series):
            mine = [r for r in rows if (r["preset"], r["precision"]) == (preset, precision)]
            label = preset if len({p for _, p in series}) == 1 else f"{preset} {precision}"
            ax.plot([r["length"] for r in mine], [r[key] for r in mine], label=label, **style(i))
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(bottom=0)
        ax.set_xlabel("source = target length (tokens)")
        ax.set_ylabel("target tokens / s")
        ax.set_title(title)
    handles, labels = left.get_legend_handles_labels()  # one legend for both, under them
    fig.legend(handles, labels, loc="outside lower center", ncol=min(3, len(series)), frameon=False)
    save_png(fig, path)


def header(device: Any, precisions: list[str], threads: int) -> tuple[list[str], dict]:
    """The machine, the torch thread count and device, and each precision's GEMM rate now
    (lines to print, and the rates)."""
    import torch

    lines = [machine_line(threads)]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    lines.append(f"torch {torch.__version__}; threads {torch.get_num_threads()}; device {where}")
    gemm = {p: round(gemm_gflops(p, str(device)), 1) for p in precisions}
    rates = ", ".join(f"{p} {v:,.0f} GFLOP/s" for p, v in gemm.items())
    lines.append(f"GEMM 4096x1024x1024 now: {rates}")
    return lines, gemm


def check_presets(presets: list[str], lengths: list[int]) -> None:
    """Every preset exists and takes the longest length (a Transformer has a position limit)."""
    from nmt.config import load_config
    from nmt.errors import NmtError
    from nmt.models import VocabInfo, build

    for preset in presets:
        limit = build(
            load_config(preset=preset).model, VocabInfo(VOCAB, VOCAB), False
        ).max_positions
        if limit and max(lengths) > limit:
            raise NmtError(f"--lengths: {preset} takes at most {limit} tokens, got {max(lengths)}")


def precisions_to_run(asked: list[str], device: Any, emulated: bool) -> list[str]:
    """The precisions asked for, less bf16 on a CPU that only emulates it (unless `emulated`)."""
    from nmt.device import cpu_has_native_bf16
    from nmt.errors import NmtError

    bad = [p for p in asked if p not in ("fp32", "bf16")]
    if bad or not asked:
        raise NmtError(f"--precision {','.join(asked)!r}: expected fp32, bf16 or fp32,bf16")
    if "bf16" in asked and device.type == "cpu" and not (cpu_has_native_bf16() or emulated):
        print(
            "bf16 skipped: this CPU has no native bf16 (emulated bf16 is 10-40x slower; "
            "--emulated-bf16 runs it anyway)",
            flush=True,
        )
        return [p for p in asked if p != "bf16"]
    return asked


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; --quick overrides the repeat counts."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--presets", default=PRESETS, help=f"model presets (default {PRESETS})")
    ap.add_argument("--lengths", default=LENGTHS, help=f"source = target lengths ({LENGTHS})")
    ap.add_argument("--precision", default="fp32", help="fp32, bf16 or fp32,bf16")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all usable CPUs)")
    ap.add_argument(
        "--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: cuda if available"
    )
    ap.add_argument("--tokens", type=int, default=4000, help="target tokens per training batch")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs per shape first")
    ap.add_argument("--repeats", type=int, default=10, help="timed runs per shape (median)")
    ap.add_argument("--quick", action="store_true", help="1 warm-up and 2 timed runs (check)")
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--plot", default="", help="also draw them into this PNG")
    ap.add_argument("--emulated-bf16", action="store_true", help="run bf16 without native support")
    ap.add_argument("--keep-denormals", action="store_true", help="unlike nmt train, no flush to 0")
    args = ap.parse_args(argv)
    if args.quick:
        args.warmup, args.repeats = 1, 2
    return args


def check_args(args: argparse.Namespace) -> None:
    """Numbers in range and files that can be written, before anything is timed."""
    from nmt.errors import NmtError

    args.lengths = int_list(args.lengths, "--lengths", 2)
    args.presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    for flag, value, low in (
        ("--threads", args.threads, 0),
        ("--tokens", args.tokens, 1),
        ("--warmup", args.warmup, 0),
        ("--repeats", args.repeats, 1),
    ):
        if value < low:
            raise NmtError(f"{flag} {value}: expected at least {low}")
    if args.plot and Path(args.plot).suffix.lower() != ".png":
        raise NmtError(f"--plot {args.plot}: the plot is written as PNG; name the file *.png")
    if not args.presets:
        raise NmtError("--presets: no preset given")
    check_presets(args.presets, args.lengths)


def run(args: argparse.Namespace) -> None:
    """Time every (preset, precision), print the table, write the JSON and the plot."""
    from nmt.runtime import retain_freed_memory, size_kernel_caches, usable_cpus

    size_kernel_caches()  # as `nmt train` does, before torch builds its first kernel
    retain_freed_memory()  # as every `nmt` command does (nmt.cli.app)
    check_args(args)
    import torch

    from nmt.device import resolve_device

    device = resolve_device(args.device)
    threads = args.threads or usable_cpus()
    torch.set_num_threads(threads)
    precisions = precisions_to_run(args.precision.split(","), device, args.emulated_bf16)
    lines, gemm = header(device, precisions, threads)
    print("\n".join(lines), flush=True)
    rows: list[dict] = []
    for preset in args.presets:
        for precision in precisions:
            rows += bench_config(preset, precision, device, args)
            print(f"{preset} {precision}: done", file=sys.stderr, flush=True)
    ratio_rows = ratios(rows)
    print("\n".join(table(rows, ratio_rows)), flush=True)
    if args.json:
        meta = {"machine": lines[0], "threads": threads, "device": str(device), "gemm_gflops": gemm}
        settings = {"tokens": args.tokens, "warmup": args.warmup, "repeats": args.repeats}
        settings["denormals"] = "kept" if args.keep_denormals else "flushed"
        write_json(args.json, {**meta, **settings, "rows": rows, "ratios": ratio_rows})
    if args.plot:
        plot(rows, args.lengths, args.tokens, args.plot)


def main(argv: list[str] | None = None) -> None:
    """Bad input is one line on stderr and exit status 2, no traceback."""
    from nmt.errors import NmtError

    args = parse_args(argv)
    try:
        run(args)
    except NmtError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
