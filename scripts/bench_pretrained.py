"""Benchmark nmt on a Marian-base-sized model against transformers and CTranslate2, side by side.

    .venv/bin/python scripts/bench_pretrained.py                     # the defaults below
    .venv/bin/python scripts/bench_pretrained.py --json work/bench/pretrained.json
    .venv/bin/python scripts/bench_pretrained.py --layers 2 --d-model 64 --lines 10 --steps 2 \\
        --rounds 1                                                   # a smoke test

The model: OPUS-MT en-mg's config.json (--pretrained; its real 54,688-piece vocabulary and
tokenizers), d512, 6+6 layers, 8 heads, ffn 2048 (--layers and --d-model shrink it: heads
d_model/64, at least 1, ffn 4 x d_model), random weights (transformers' own init), saved as a
Hugging Face directory and imported with `nmt.pretrained.importer.import_marian`. CTranslate2 gets
the same Hugging Face directory converted by `ctranslate2.converters.TransformersConverter`, in
float32 and int8. Every engine runs in this process on --threads threads (torch.set_num_threads;
CTranslate2 intra_threads, inter_threads 1; nmt's Translator with --workers, 0: as `nmt translate`,
one decoding worker process per thread, each on one thread).

- Fine-tuning (target tokens/s, fp32, and bf16 autocast where the CPU has avx512_bf16 or amx_bf16):
  nmt's own update (`nmt.train.update.Updater` around `nmt.train.loss.LossHead`: the fused output
  projection and label-smoothed loss, backward, gradient clipping, fused AdamW from
  `nmt.train.state.make_optimizer`) against transformers' MarianMTModel forward, then
  `cross_entropy(label_smoothing=0.1)`, backward, the same clipping and torch AdamW; both with
  dropout 0.1, nmt's training lr, betas and weight decay, on the same batches of real Multi30k
  train pairs (en through the source SentencePiece, de through the target one) of about
  --batch-tokens target tokens: --warmup steps, then --steps timed ones.
- Translation (sentences/s): the first --lines of Multi30k test_2016_flickr.en, greedy and beam 4,
  every output held to exactly --out-len tokens (nmt: min_len = max_len_b = N, max_len_a 0;
  transformers: generate(min_new_tokens=N, max_new_tokens=N); CTranslate2:
  min/max_decoding_length N). transformers and CTranslate2 take --batch-size sentences a batch
  (sorted by length); nmt its own batching (the model's batch_tokens).

Every round runs each measurement once per engine, the engines' order reversed in odd rounds.
The defaults (batches of 512 target tokens, 2 + 4 steps, 24 lines, 3 rounds) keep a full-size run
under 20 minutes on 2 threads (--batch-tokens 2048 --steps 20 --warmup 5 --lines 300: hours).
Reported: each engine's median over --rounds, and nmt's ratio to each other engine, the median of
the per-round ratios (each measured within one stretch of machine time), beside the targets.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from benchlib import machine_line  # noqa: E402

SHARED = ROOT.parent / "shared"
EPS = 0.1  # label smoothing, both engines
# nmt's ratio to each peer: the target it is reported against (not enforced)
TARGETS = {
    ("finetune", "transformers"): 2.0,
    ("translate", "transformers"): 2.0,
    ("translate-beam4", "ct2-float32"): 1.0,
}
Step = Callable[[Any], None]
Timed = tuple[float, list[int]]  # seconds, output tokens of each line


# ---- the models ---------------------------------------------------------------------------------


def hf_config(args: argparse.Namespace) -> dict:
    """The pretrained config.json, resized to --d-model and --layers (as is at its own size)."""
    cfg = json.loads((Path(args.pretrained) / "config.json").read_text(encoding="utf-8"))
    if args.d_model != cfg["d_model"]:
        heads, ffn = max(1, args.d_model // 64), 4 * args.d_model
        cfg.update(d_model=args.d_model, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn)
        cfg.update(encoder_attention_heads=heads, decoder_attention_heads=heads)
    cfg.update(encoder_layers=args.layers, decoder_layers=args.layers)
    cfg.update(num_hidden_layers=args.layers)
    return cfg


def build_models(args: argparse.Namespace) -> dict[str, Path]:
    """The random Hugging Face model, its nmt import and its CTranslate2 conversions, by name."""
    import ctranslate2
    import torch
    from transformers import MarianConfig, MarianMTModel

    from nmt.pretrained.importer import import_marian

    work, real = Path(args.work), Path(args.pretrained)
    hf = work / "hf"
    shutil.rmtree(hf, ignore_errors=True)
    cfg = hf_config(args)
    torch.manual_seed(args.seed)
    MarianMTModel(MarianConfig(**cfg)).save_pretrained(hf)
    for path in real.iterdir():  # the tokenizer files
        if path.is_file() and path.name != "config.json":
            shutil.copy(path, hf / path.name)
    dirs = {"hf": hf, "nmt": work / "nmt"}
    import_marian(str(hf), dirs["nmt"], force=True)
    for quant in ("float32", "int8"):
        dirs[f"ct2-{quant}"] = work / f"ct2-{quant}"
        converter = ctranslate2.converters.TransformersConverter(str(hf))
        converter.convert(str(dirs[f"ct2-{quant}"]), quantization=quant, force=True)
    return dirs


# ---- fine-tuning --------------------------------------------------------------------------------


def read_gz(path: Path, n: int) -> list[str]:
    """The first `n` lines of a gzipped text file, stripped."""
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            out.append(line.strip())
            if len(out) == n:
                break
    return out


def train_batches(model_dir: Path, args: argparse.Namespace, count: int) -> list[Any]:
    """`count` batches of consecutive Multi30k train pairs, each of about --batch-tokens target
    tokens (eos included), collated with the imported model's special ids."""
    from nmt.data.batching import collate
    from nmt.dirs.model import ModelDir

    opened = ModelDir(model_dir)
    src_tok, tgt_tok = opened.tokenizers
    corpus = SHARED / "corpora" / "multi30k"
    need = count * (args.batch_tokens // 8 + 1)
    src = src_tok.encode_batch(read_gz(corpus / "train.en.gz", need))
    tgt = tgt_tok.encode_batch(read_gz(corpus / "train.de.gz", need))
    batches, start, tokens = [], 0, 0
    for i, t in enumerate(tgt):
        tokens += len(t) + 1
        if tokens >= args.batch_tokens:
            batches.append(collate(src, tgt, range(start, i + 1), ids=opened.vocab))
            start, tokens = i + 1, 0
            if len(batches) == count:
                return batches
    raise SystemExit(f"Multi30k train has too few lines for {count} batches")


def autocast(precision: str) -> Callable[[], Any]:
    """A context factory: bf16 autocast on the CPU, or nothing for fp32."""
    import contextlib

    import torch

    if precision == "bf16":
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext


def nmt_step(model_dir: Path, precision: str) -> Step:
    """nmt's own update on the imported model: Updater(LossHead, fused AdamW), as `nmt train`."""
    import torch

    from nmt.dirs.loaded import load_model
    from nmt.dirs.model import ModelDir
    from nmt.train.distributed import DistInfo
    from nmt.train.loss import LossHead
    from nmt.train.state import TrainState, make_optimizer
    from nmt.train.update import Updater

    model, cfg, vocab, _ = load_model(ModelDir(model_dir))
    model.train()
    tc, cpu = cfg.training, torch.device("cpu")
    head = LossHead(model, EPS, vocab.pad_id, keep_pad=True)
    optimizer = make_optimizer(model, tc, cpu)
    update = Updater(
        head, optimizer, None, None, autocast(precision), tc.clip_norm, DistInfo(), cpu
    )
    state = TrainState()
    return lambda batch: update([batch], tc.lr, state, print)


def hf_step(dirs: dict[str, Path], precision: str) -> Step:
    """transformers' update: MarianMTModel's logits, cross_entropy with label smoothing, backward,
    clipping and torch AdamW at nmt's settings (lr, betas, weight decay, clip norm)."""
    import torch
    from torch.nn import functional as F
    from transformers import MarianMTModel

    from nmt.dirs.model import ModelDir

    opened = ModelDir(dirs["nmt"])
    tc, pad = opened.config.training, opened.vocab.pad_id
    model = MarianMTModel.from_pretrained(dirs["hf"]).train()
    params = [p for p in model.parameters() if p.requires_grad]
    betas, decay = tuple(tc.betas), tc.weight_decay
    optimizer = torch.optim.AdamW(params, lr=tc.lr, betas=betas, weight_decay=decay)
    context = autocast(precision)

    def step(batch: Any) -> None:
        with context():
            out = model(
                input_ids=batch.src, attention_mask=batch.src != pad, decoder_input_ids=batch.tgt_in
            )
        labels = batch.tgt_out.masked_fill(batch.tgt_out == pad, -100).reshape(-1)
        logits = out.logits.float().reshape(labels.numel(), -1)
        loss = F.cross_entropy(logits, labels, label_smoothing=EPS, reduction="sum")
        (loss / int((labels != -100).sum())).backward()
        torch.nn.utils.clip_grad_norm_(params, tc.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def time_training(step: Step, batches: list[Any], warmup: int) -> float:
    """Target tokens/s (eos included) over the timed batches, after `warmup` untimed steps."""
    for batch in batches[:warmup]:
        step(batch)
    timed = batches[warmup:]
    t0 = time.perf_counter()
    for batch in timed:
        step(batch)
    return sum(b.n_tgt_tokens for b in timed) / (time.perf_counter() - t0)


def finetune_round(
    dirs: dict[str, Path], batches: list[Any], precision: str, args: argparse.Namespace, flip: bool
) -> dict[str, dict]:
    """Each engine's fine-tuning rate in `precision`, nmt first unless `flip`."""
    makers = {
        "nmt": lambda: nmt_step(dirs["nmt"], precision),
        "transformers": lambda: hf_step(dirs, precision),
    }
    out = {}
    for engine in reversed(makers) if flip else makers:
        out[engine] = {"rate": time_training(makers[engine](), batches, args.warmup)}
    return out


# ---- translation --------------------------------------------------------------------------------


def sorted_batches(lines: list[str], size: int) -> list[list[int]]:
    """Line indices in batches of `size`, longest lines first (as CTranslate2 sorts its own)."""
    order = sorted(range(len(lines)), key=lambda i: -len(lines[i].split()))
    return [order[i : i + size] for i in range(0, len(order), size)]


def nmt_translate(
    dirs: dict[str, Path], lines: list[str], beam: int, args: argparse.Namespace
) -> Timed:
    """nmt's Translator (fp32); output token counts, eos not counted."""
    from nmt.dirs.model import ModelDir
    from nmt.engines.translator import Translator

    opts = dict(min_len=args.out_len, max_len_a=0, max_len_b=args.out_len, scores=False)
    opts.update(greedy=True) if beam == 1 else opts.update(beam_size=beam)
    load = dict(device="cpu", precision="fp32", workers=args.workers)
    with Translator.from_dir(ModelDir(dirs["nmt"]), **load) as tr:
        tr.translate(lines[:4], **opts)  # warm-up: workers forked, kernels built
        t0 = time.perf_counter()
        out = tr.translate(lines, **opts)
        seconds = time.perf_counter() - t0
    return seconds, [len(t.hypotheses[0].tokens) for t in out]


def hf_translate(
    dirs: dict[str, Path], lines: list[str], beam: int, args: argparse.Namespace
) -> Timed:
    """transformers' generate in batches of --batch-size; output token counts."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    tok = MarianTokenizer.from_pretrained(dirs["hf"])
    model = MarianMTModel.from_pretrained(dirs["hf"]).eval()
    gen = dict(num_beams=beam, do_sample=False, min_new_tokens=args.out_len)
    gen.update(max_new_tokens=args.out_len)

    def run(part: list[str]) -> list[int]:
        enc = tok(part, return_tensors="pt", padding=True)
        with torch.inference_mode():
            ids = model.generate(**enc, **gen)
        return [int((row[1:] != tok.pad_token_id).sum()) for row in ids]

    run(lines[:4])
    t0 = time.perf_counter()
    lengths = [
        n for b in sorted_batches(lines, args.batch_size) for n in run([lines[i] for i in b])
    ]
    return time.perf_counter() - t0, lengths


def ct2_translate(
    path: Path, dirs: dict[str, Path], lines: list[str], beam: int, args: argparse.Namespace
) -> Timed:
    """A CTranslate2 conversion on --threads intra-op threads, one batch at a time."""
    import ctranslate2
    from transformers import MarianTokenizer

    tok = MarianTokenizer.from_pretrained(dirs["hf"])
    threads = dict(intra_threads=args.threads, inter_threads=1)
    tr = ctranslate2.Translator(str(path), device="cpu", **threads)
    opts = dict(beam_size=beam, max_batch_size=args.batch_size)
    opts.update(min_decoding_length=args.out_len, max_decoding_length=args.out_len)

    def run(part: list[str]) -> list[int]:
        tokens = [tok.convert_ids_to_tokens(tok.encode(line)) for line in part]
        return [len(r.hypotheses[0]) for r in tr.translate_batch(tokens, **opts)]

    run(lines[:4])
    t0 = time.perf_counter()
    lengths = run(lines)
    return time.perf_counter() - t0, lengths


def translate_round(
    dirs: dict[str, Path], lines: list[str], beam: int, args: argparse.Namespace, flip: bool
) -> dict[str, dict]:
    """Each engine's sentences/s and mean output length in one mode, nmt first unless `flip`."""
    engines: dict[str, Callable[[], Timed]] = {
        "nmt": lambda: nmt_translate(dirs, lines, beam, args),
        "transformers": lambda: hf_translate(dirs, lines, beam, args),
        "ct2-float32": lambda: ct2_translate(dirs["ct2-float32"], dirs, lines, beam, args),
        "ct2-int8": lambda: ct2_translate(dirs["ct2-int8"], dirs, lines, beam, args),
    }
    out = {}
    for engine in reversed(engines) if flip else engines:
        seconds, lengths = engines[engine]()
        out[engine] = {"rate": len(lines) / seconds, "out_len": statistics.mean(lengths)}
    return out


def summarise(task: str, rounds: list[dict[str, dict]]) -> dict:
    """Per engine the median rate and the rounds' rates; per peer nmt's ratio by round, their
    median and the target (None where none is set)."""
    rates = {e: [r[e]["rate"] for r in rounds] for e in rounds[0]}
    engines = {e: {"median": statistics.median(x), "rounds": x} for e, x in rates.items()}
    for e, summary in engines.items():
        if "out_len" in rounds[0][e]:
            summary["out_len"] = statistics.mean(r[e]["out_len"] for r in rounds)
    ratios = {}
    for peer in (e for e in rounds[0] if e != "nmt"):
        each = [r["nmt"]["rate"] / r[peer]["rate"] for r in rounds]
        target = TARGETS.get((task, peer), TARGETS.get((task.split("-")[0], peer)))
        ratios[peer] = {"median": statistics.median(each), "rounds": each, "target": target}
    return {"engines": engines, "ratios": ratios}


def print_table(results: dict) -> None:
    """One line per task and engine: its median rate, nmt's ratio by round and the target."""
    print(results["setup"])
    print(results["model"])
    print(f"{'task':<18}{'engine':<14}{'median':>10}  {'nmt / engine (rounds)':<34}target")
    for task, t in results["tasks"].items():
        unit = "tgt tok/s" if task.startswith("finetune") else "sent/s"
        for engine, e in t["engines"].items():
            r = t["ratios"].get(engine)
            each = "" if r is None else ", ".join(f"{x:.2f}" for x in r["rounds"])
            ratio = "" if r is None else f"{r['median']:.2f}x ({each})"
            target = "" if r is None or r["target"] is None else f">= {r['target']:.1f}x"
            print(f"{task:<18}{engine:<14}{e['median']:>10,.1f}  {ratio:<34}{target}")
        print(f"{'':<18}({unit})")


def setup_line(threads: int) -> str:
    """CPU model and flags, threads, and the engines' versions."""
    import ctranslate2
    import torch
    import transformers

    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    return f"{machine_line(threads)}; {versions}, ctranslate2 {ctranslate2.__version__}"


def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (avx512_bf16 or amx_bf16)."""
    from nmt.runtime import cpu_flags

    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    default_pretrained = SHARED / "pretrained" / "opus-mt-en-mg"
    p.add_argument("--pretrained", default=str(default_pretrained), help="HF dir: config, vocab")
    p.add_argument("--work", default=str(ROOT / "work" / "bench_pretrained"))
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers each")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--threads", type=int, default=2, help="per engine")
    p.add_argument("--workers", type=int, default=0, help="nmt decoding workers (0: auto)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="timed fine-tuning steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed fine-tuning steps first")
    p.add_argument("--batch-tokens", type=int, default=512, help="target tokens a training batch")
    p.add_argument("--lines", type=int, default=24, help="test lines translated")
    p.add_argument("--out-len", type=int, default=32, help="output tokens, every engine")
    p.add_argument("--batch-size", type=int, default=32, help="sentences a batch (HF, CT2)")
    p.add_argument("--precision", default="auto", help="fp32,bf16 (auto: bf16 if native)")
    p.add_argument("--only", choices=["finetune", "translate"], help="run one half only")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write the results here")
    return p.parse_args()


def run_tasks(dirs: dict[str, Path], args: argparse.Namespace) -> dict[str, list[dict]]:
    """Every task's per-round results, rounds outermost (each round sees every task)."""
    precisions = args.precision.split(",") if args.precision != "auto" else ["fp32"]
    if args.precision == "auto" and native_bf16():
        precisions.append("bf16")
    tasks: dict[str, list[dict]] = {}
    count = 0 if args.only == "translate" else args.warmup + args.steps
    batches = train_batches(dirs["nmt"], args, count) if count else []
    corpus = SHARED / "corpora" / "multi30k"
    lines = read_gz(corpus / "test_2016_flickr.en.gz", args.lines)
    for rnd in range(args.rounds):
        flip = rnd % 2 == 1
        for prec in precisions if args.only != "translate" else []:
            result = finetune_round(dirs, batches, prec, args, flip)
            tasks.setdefault(f"finetune-{prec}", []).append(result)
        for mode, beam in (("greedy", 1), ("beam4", 4)) if args.only != "finetune" else ():
            result = translate_round(dirs, lines, beam, args, flip)
            tasks.setdefault(f"translate-{mode}", []).append(result)
        print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    return tasks


def main() -> None:
    """Build the models, run every round, print the table (and write the JSON)."""
    args = parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(args.threads)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    dirs = build_models(args)
    cfg = hf_config(args)
    results: dict[str, Any] = {
        "setup": setup_line(args.threads),
        "model": f"d{cfg['d_model']}, {args.layers}+{args.layers} layers, "
        f"{cfg['encoder_attention_heads']} heads, ffn {cfg['encoder_ffn_dim']}, "
        f"vocab {cfg['vocab_size']:,}, random weights",
        "options": {k: v for k, v in vars(args).items() if k != "json"},
    }
    rounds = run_tasks(dirs, args)
    results["tasks"] = {task: summarise(task, r) for task, r in rounds.items()}
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
