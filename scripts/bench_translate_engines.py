"""The engines bench_translate.py times: nmt's Translator and a CTranslate2 export, each
configuration in a child process of its own (fresh peak RSS), and how the peer export is found.

Not run on its own: scripts/bench_translate.py --child runs `child` here.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_translate_setup import MODES, SCRIPT, child_env, hyp_path, length_args, test_file
from benchlib import gemm_gflops, machine_line


def load_engine(args: argparse.Namespace) -> Any:
    """The nmt Translator (in --precision when supported) or the CTranslate2 export's translator."""
    if args.engine == "ct2":
        from nmt.dirs import ExportDir
        from nmt.engines.ct2 import CT2Translator

        return CT2Translator.from_dir(
            ExportDir(args.model),
            device=args.device,
            threads=args.threads,
            **workers_kwarg(args, "ct2"),
        )
    from nmt.dirs import ModelDir
    from nmt.engines.translator import Translator

    extra = {"precision": args.precision} if supports_precision() else {}
    extra.update(workers_kwarg(args, "nmt"))
    return Translator.from_dir(ModelDir(args.model), device=args.device, **extra)


def workers_kwarg(args: argparse.Namespace, engine: str) -> dict:
    """{"workers": N} where this checkout's engine takes it (decoding workers are new), else {}."""
    if engine == "ct2":
        from nmt.engines.ct2 import CT2Translator as Engine
    else:
        from nmt.engines.translator import Translator as Engine
    takes = "workers" in inspect.signature(Engine.from_dir).parameters
    return {"workers": args.workers} if takes else {}


def supports_precision() -> bool:
    """Whether Translator.from_dir takes `precision=` (bf16 decoding is being added meanwhile)."""
    from nmt.engines.translator import Translator

    return "precision" in inspect.signature(Translator.from_dir).parameters


def native(args: argparse.Namespace) -> bool:
    """Whether a GEMM in --precision is worth timing: emulated bf16/fp16 on a CPU takes minutes."""
    if args.precision == "fp32" or not args.device.startswith("cpu"):
        return True
    flags = machine_line(args.threads).split("; ")[1]
    return args.precision == "bf16" and ("avx512_bf16" in flags or "amx_bf16" in flags)


def child(args: argparse.Namespace) -> None:
    """One timed configuration in this process (fresh peak RSS); prints a JSON line."""
    from nmt.runtime import peak_rss_mb, retain_freed_memory

    retain_freed_memory()  # as every `nmt` command does (nmt.cli.app), for both engines
    import torch

    torch.set_num_threads(args.threads)
    from nmt.textio import read_lines

    lines = list(read_lines(args.input))[: args.sentences]
    tr = load_engine(args)
    # scores=False: what `nmt translate` asks for text output (greedy then skips log-softmax);
    # both engines take it, so CTranslate2 skips its scores too.
    kwargs = dict(MODES[args.child], batch_tokens=args.batch_tokens, scores=False)
    kwargs.update(max_len_a=args.max_len_a, max_len_b=args.max_len_b)
    if args.stop and "beam_size" in kwargs:
        kwargs["stop"] = args.stop  # CTranslate2 checks it and keeps its own rule
    tr.translate(lines[:16], **kwargs)  # warm-up (allocator, kernels)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = tr.translate(lines, **kwargs)
        times.append(time.perf_counter() - t0)
    # worker processes (nmt.engines.workers) hold their own buffers: what they added counts too
    rss_mb = (peak_rss_mb() or 0) + getattr(tr, "worker_peak_mb", lambda: 0)()
    Path(args.hyp_out).write_text("".join(t.text + "\n" for t in out), encoding="utf-8")
    lengths = [[len(t.source_tokens), len(t.hypotheses[0].tokens) + 1] for t in out]
    gemm = gemm_gflops(args.precision, args.device) if args.gemm and native(args) else None
    print(json.dumps({"seconds": times, "lengths": lengths, "rss_mb": rss_mb, "gemm": gemm}))


def run_child(
    engine: str,
    mode: str,
    precision: str,
    model: Path,
    args: argparse.Namespace,
    gemm: bool,
    label: str | None = None,
) -> dict:
    """Run one configuration in a fresh process and return its JSON line (its translations in
    hyp_path(engine, `label`: the row's precision or export type, mode))."""
    options = {
        "--child": mode,
        "--engine": engine,
        "--precision": precision,
        "-m": model,
        "--input": test_file(args, args.src),
        "--threads": args.threads,
        "--repeats": args.repeats,
        "--sentences": args.sentences,
        "--batch-tokens": args.batch_tokens,
        "--device": args.device,
        "--workers": args.workers,
        "--hyp-out": hyp_path(args, engine, label or precision, mode),
    }
    cmd = [sys.executable, str(SCRIPT), *(x for k, v in options.items() for x in (k, str(v)))]
    cmd += [*length_args(args), *(["--gemm"] if gemm else [])]
    cmd += ["--stop", args.stop] if args.stop else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=child_env(args))
    return json.loads(out.stdout.strip().splitlines()[-1])


def ct2_dir(model: Path, args: argparse.Namespace) -> Path | None:
    """The export to compare with: --ct2, or --export's WORK/ct2-float32 (made or reused)."""
    if not (args.ct2 or args.export):
        return None
    if importlib.util.find_spec("ctranslate2") is None:
        print("note: ctranslate2 is not installed; CTranslate2 skipped", file=sys.stderr)
        return None
    if args.ct2:
        return Path(args.ct2)
    from nmt.dirs.export import is_export, read_export_manifest
    from nmt.dirs.model import ModelDir
    from nmt.dirs.weights import weights_step
    from nmt.export.ctranslate2 import export_ctranslate2

    out = Path(args.work) / "ct2-float32"
    step = weights_step(ModelDir(model).checkpoint())
    if is_export(out):
        manifest = read_export_manifest(out)
        if manifest["source_model_dir"] == str(model.resolve()) and manifest["step"] == step:
            return out
    return export_ctranslate2(ModelDir(model), out, quantization="float32", force=True, quiet=True)


def ct2_exports(first: Path | None, more: list[str] | None) -> dict[str, Path]:
    """The exports to time by type, the one "vs ct2" compares with first; --ct2-also adds
    others (another quantization of the same model) timed beside it."""
    if first is None:
        return {}
    exports = {ct2_type(first): first}
    for path in map(Path, more or []):
        if (kind := ct2_type(path)) in exports:
            sys.exit(f"--ct2-also {path}: a {kind} export is already timed ({exports[kind]})")
        exports[kind] = path
    return exports


def ct2_type(export: Path) -> str:
    """The export's computation type (its `nmt export --quantization`): "float32", "int8", ..."""
    from nmt.dirs.export import read_export_manifest

    return str(read_export_manifest(export).get("quantization") or "float32")


def gemm_type(engine: str, precision: str) -> str | None:
    """The GEMM dtype a configuration's rate is a share of: its own precision for nmt, the
    matching float type for CTranslate2, none for integer types (no int8 GEMM is timed)."""
    if engine == "nmt":
        return precision
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(precision)
