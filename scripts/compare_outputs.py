#!/usr/bin/env python3
"""Two source trees of nmt side by side (a refactor against the commit before it): everything a
user gets from them must be byte-identical. Each tree runs in fresh processes (PYTHONPATH picks
the tree) on the same model and data:

- n-best JSONL of a beam search with scores and attention, and greedy text;
- the server's answers (/info, /translate, /score, /attention of each kind);
- the checkpoint and trainer state after a few seeded updates;
- `nmt export`'s files, and the old tree's export translated by the new tree.

    git worktree add /tmp/old HEAD~5
    python scripts/compare_outputs.py --old /tmp/old --new . -m work/demo/model -d work/demo/data

Speeds are `scripts/compare_trees.py`'s. Reads test_2016_flickr from the fetched Multi30k."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import multi30k  # noqa: E402

LINES = 200  # test lines decoded per check
SERVED = 4  # lines sent to the server
TRAIN_STEPS = 12
TIMINGS = {"elapsed_ms", "decode_ms", "elapsed", "valid_seconds"}  # wall-clock, never equal


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that runs `tree`'s nmt."""
    return {**os.environ, "PYTHONPATH": str(tree.resolve())}


def nmt(tree: Path, args: list[str], cwd: Path) -> None:
    """`python -m nmt ARGS` of `tree`; fails loudly."""
    cmd = [sys.executable, "-m", "nmt", *args]
    subprocess.run(cmd, cwd=cwd, env=tree_env(tree), check=True, stdout=subprocess.DEVNULL)


def decoded(tree: Path, model: Path, src: Path, work: Path) -> dict[str, bytes]:
    """Beam n-best JSONL (scores and attention) and greedy text of `src` by `tree`."""
    out: dict[str, bytes] = {}
    common = ["translate", "-m", str(model), str(src), "-q", "--whole-lines"]
    runs = {
        "nbest.jsonl": ["-f", "jsonl", "--nbest", "3", "-b", "4", "--with-attention"],
        "greedy.txt": ["--greedy"],
    }
    for name, extra in runs.items():
        path = work / f"{tree.name}-{name}"
        nmt(tree, [*common, "-o", str(path), *extra], work)
        out[name] = path.read_bytes()
    return out


def free_port() -> int:
    """A TCP port free on the loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], seconds: float = 120) -> None:
    """Until /health answers ready (the server failing to start: an error)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"nmt serve exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {seconds:.0f} s")


def served(tree: Path, model: Path, lines: list[str], work: Path) -> dict[str, bytes]:
    """The server's answers to one request of each kind, as the bytes it sent."""
    port = free_port()
    cmd = [sys.executable, "-m", "nmt", "serve", "-m", str(model), "--port", str(port), "-q"]
    proc = subprocess.Popen(cmd, cwd=work, env=tree_env(tree))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        return {name: ask(url) for name, ask in requests(lines).items()}
    finally:
        proc.terminate()
        proc.wait(30)


def requests(lines: list[str]) -> dict[str, Callable[[str], bytes]]:
    """The requests sent to each server, by name."""

    def post(path: str, body: dict[str, Any]) -> Callable[[str], bytes]:
        return lambda url: untimed(httpx.post(url + path, json=body, timeout=120).json())

    asks = {
        "info": lambda url: untimed(httpx.get(url + "/info", timeout=30).json()),
        "translate": post("/translate", {"text": lines, "nbest": 2, "with_attention": True}),
        "greedy": post("/translate", {"text": lines, "beam_size": 1}),
        "score": post("/score", {"source": lines, "target": lines}),
    }
    for kind in ("cross", "self", "decoder"):
        asks[f"attention-{kind}"] = post("/attention", {"text": lines[0], "kind": kind})
    return asks


def untimed(answer: dict[str, Any]) -> bytes:
    """A server answer without its wall-clock fields (`elapsed_ms`, `decode_ms`), as JSON."""
    kept = {k: v for k, v in answer.items() if k not in TIMINGS}
    return json.dumps(kept, ensure_ascii=False, sort_keys=True).encode()


def trained(tree: Path, data: Path, work: Path, steps: int) -> dict[str, bytes]:
    """The files of a model directory after `steps` seeded updates by `tree` (the time it took
    and the log of events aside)."""
    out = work / f"{tree.name}-train"
    sets = {"max_steps": steps, "valid_every": 0, "save_every": steps, "save_every_time": 0}
    args = ["train", "--preset", "transformer-multi30k", "-d", str(data), "-o", str(out)]
    for key, value in sets.items():
        args += ["--set", f"training.{key}={value}"]
    nmt(tree, [*args, "--force", "--quiet"], work)
    found = files(out, skip={"metrics.jsonl"})
    return {name: canonical(out / name, data) for name, data in found.items()}


def canonical(path: Path, data: bytes) -> bytes:
    """A checkpoint file's content without what varies from run to run: a safetensors file as
    its tensors and metadata in name order (its header's key order is not fixed), trainer state
    without its wall-clock seconds; other files as they are."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            meta = sorted((f.metadata() or {}).items())
            tensors = [(k, raw(f.get_tensor(k))) for k in sorted(f.keys())]
        return repr((meta, tensors)).encode()
    if path.suffix == ".pt":
        import torch

        state = torch.load(path, weights_only=True, map_location="cpu")
        return repr(untimed_state(state)).encode()
    return data


def raw(tensor: Any) -> bytes:
    """A tensor's bytes, whatever its dtype."""
    import torch

    return bytes(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())


def untimed_state(obj: Any) -> Any:
    """Trainer state without wall-clock seconds, tensors as bytes, for comparing."""
    import torch

    if isinstance(obj, dict):
        return sorted((str(k), untimed_state(v)) for k, v in obj.items() if k not in TIMINGS)
    if isinstance(obj, list | tuple):
        return [untimed_state(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return (str(obj.dtype), tuple(obj.shape), raw(obj))
    return obj


def exported(tree: Path, model: Path, work: Path) -> tuple[Path, dict[str, bytes]]:
    """`tree`'s CTranslate2 export of `model`: its directory and files."""
    out = work / f"{tree.name}-export"
    nmt(tree, ["export", "-m", str(model), "-o", str(out), "--force", "-q"], work)
    return out, files(out)


def files(directory: Path, skip: set[str] | None = None) -> dict[str, bytes]:
    """Every file under `directory` by relative path, except the names in `skip`."""
    found = sorted(p for p in directory.rglob("*") if p.is_file())
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in found
        if p.name not in (skip or set())
    }


def differences(old: dict[str, bytes], new: dict[str, bytes]) -> list[str]:
    """The names whose bytes differ (or exist on one side only), with their digests."""
    out = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a != b:
            out.append(f"{name}: old {digest(a)} new {digest(b)}")
    return out


def digest(data: bytes | None) -> str:
    """A short SHA-256 of `data` ('missing' for None)."""
    return "missing" if data is None else hashlib.sha256(data).hexdigest()[:12]


def compare(name: str, old: dict[str, bytes], new: dict[str, bytes]) -> bool:
    """Print one check's verdict; whether it held."""
    diff = differences(old, new)
    total = sum(len(v) for v in old.values())
    verdict = "identical" if not diff else "DIFFER: " + "; ".join(diff)
    print(f"{name}: {len(old)} outputs, {total:,} bytes, {verdict}", flush=True)
    return not diff


def run_checks(args: argparse.Namespace, work: Path) -> bool:
    """Every check, old then new; whether all held."""
    old, new = args.old.resolve(), args.new.resolve()
    model, data = args.model.resolve(), args.data.resolve()
    src = work / "source.txt"
    lines = (multi30k(None) / "test_2016_flickr.en").read_text().splitlines()[:LINES]
    src.write_text("\n".join(lines) + "\n")
    (work / "old").mkdir()
    (work / "new").mkdir()
    where = {"old": (old, work / "old"), "new": (new, work / "new")}
    ok = True
    for check, run in checks(model, data, src, lines[:SERVED], args.train_steps).items():
        got = {side: run(*where[side]) for side in ("old", "new")}
        ok &= compare(check, got["old"], got["new"])
    ok &= old_export_opens(old, new, model, src, work)
    return ok


def checks(
    model: Path, data: Path, src: Path, lines: list[str], steps: int
) -> dict[str, Callable[[Path, Path], dict[str, bytes]]]:
    """The checks by name: each runs one tree in its own folder and gives its outputs."""
    return {
        "translate": lambda tree, work: decoded(tree, model, src, work),
        "serve": lambda tree, work: served(tree, model, lines, work),
        "train": lambda tree, work: trained(tree, data, work, steps),
        "export": lambda tree, work: exported(tree, model, work)[1],
    }


def old_export_opens(old: Path, new: Path, model: Path, src: Path, work: Path) -> bool:
    """The old tree's export, translated by each tree: the same bytes."""
    export = work / "old" / f"{old.name}-export"
    if not export.is_dir():
        exported(old, model, work / "old")
    got = {}
    for side, tree in (("old", old), ("new", new)):
        out = work / f"{side}-of-old-export.txt"
        nmt(tree, ["translate", "-m", str(export), str(src), "-o", str(out), "-q"], work)
        got[side] = {"translations": out.read_bytes()}
    return compare("old export", got["old"], got["new"])


def main(argv: list[str] | None = None) -> int:
    """Compare the trees' outputs; exit 1 when any differs."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--old", type=Path, required=True, help="the tree before the change")
    p.add_argument("--new", type=Path, default=ROOT, help="the tree after it")
    p.add_argument("-m", "--model", type=Path, default=ROOT / "work/demo/model")
    p.add_argument("-d", "--data", type=Path, default=ROOT / "work/demo/data")
    p.add_argument("--train-steps", type=int, default=TRAIN_STEPS)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        ok = run_checks(args, Path(tmp))
    print("all outputs byte-identical" if ok else "OUTPUTS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
