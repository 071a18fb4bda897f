"""Load-test `nmt serve` on 127.0.0.1: requests/s, sentences/s, p50/p99 latency and errors for one
client at a time and for N concurrent clients (single-sentence requests), every answer checked
against `nmt translate` on the same line (both at their defaults, precision auto: a served line
shares its batch with other clients' lines and must still come back the same), and the batching
gain (sentences/s, N clients / 1).

    .venv/bin/python scripts/bench_serve.py -m MODEL_DIR                 # 16 clients, 10 s per phase
    .venv/bin/python scripts/bench_serve.py -m MODEL_DIR --clients 8 --seconds 5 --json

Sentences: the first --sentences lines of Multi30k test_2016_flickr.en (or --input FILE). The server
runs in its own process with --threads torch threads; the load generator never leaves 127.0.0.1.
Exit status 1 when any request failed or any answer differed from `nmt translate`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CORPORA = [ROOT / "corpora" / "multi30k", ROOT.parent / "shared" / "corpora" / "multi30k"]


@dataclass
class Phase:
    """What one load phase measured."""

    clients: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds per request
    sentences: int = 0
    errors: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        """The figures of the report."""
        lat = sorted(self.latencies) or [float("nan")]
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
        return {
            "clients": self.clients,
            "requests": len(self.latencies),
            "requests_per_s": round(len(self.latencies) / self.seconds, 1),
            "sentences_per_s": round(self.sentences / self.seconds, 1),
            "p50_ms": round(pick(0.50), 1),
            "p99_ms": round(pick(0.99), 1),
            "errors": len(self.errors),
            "mismatches": len(self.mismatches),
        }


def read_sentences(path: Path | None, n: int) -> list[str]:
    """The first n non-empty lines of PATH or of Multi30k's test_2016_flickr.en."""
    if path is None:
        found = [d / f for d in CORPORA for f in ("test_2016_flickr.en", "test_2016_flickr.en.gz")]
        path = next((p for p in found if p.exists()), None)
        if path is None:
            sys.exit("Multi30k not found: pass --input FILE or run `make fetch`")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[:n]


def reference(model_dir: str, lines: list[str], beam: int | None, env: dict) -> dict[str, str]:
    """`nmt translate` on the same lines: the answer every request must match."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "nmt",
        "translate",
        f.name,
        "-m",
        model_dir,
        "-q",
        "--device",
        "cpu",
    ]
    if beam:
        cmd += ["--beam-size", str(beam)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    os.unlink(f.name)
    return dict(zip(lines, out.stdout.splitlines(), strict=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    model_dir: str, args: argparse.Namespace, env: dict
) -> tuple[subprocess.Popen, str]:
    """`nmt serve` on a free local port, once /health says ready (at most 180 s)."""
    port = free_port()
    cmd = [sys.executable, "-m", "nmt", "serve", "-m", model_dir, "--port", str(port), "--quiet"]
    cmd += ["--device", "cpu", "--max-wait-ms", str(args.max_wait_ms)]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("the server did not become ready")


def load(
    url: str, lines: list[str], want: dict[str, str], clients: int, seconds: float, beam: int | None
) -> Phase:
    """`clients` threads, each sending one sentence per request back to back for `seconds`."""
    phase, lock = Phase(clients), threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(k: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            i = k
            while time.monotonic() < stop_at:
                line = lines[i % len(lines)]
                i += clients
                body: dict = {"text": [line]}
                if beam:
                    body["beam_size"] = beam
                t0 = time.perf_counter()
                try:
                    r = http.post("/translate", json=body)
                except httpx.HTTPError as e:
                    with lock:
                        phase.errors.append(f"{type(e).__name__}: {e}")
                    continue
                dt = time.perf_counter() - t0
                with lock:
                    if r.status_code != 200:
                        phase.errors.append(f"{r.status_code}: {r.text[:200]}")
                        continue
                    phase.latencies.append(dt)
                    phase.sentences += 1
                    got = r.json()["translations"][0]["hypotheses"][0]["translation"]
                    if got != want[line]:
                        phase.mismatches.append(
                            f"{line!r}: served {got!r}, nmt translate {want[line]!r}"
                        )

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    phase.seconds = time.monotonic() - start
    return phase


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-m", "--model", required=True, help="MODEL_DIR written by nmt train.")
    ap.add_argument("--input", type=Path, help="Sentences, one per line (default: Multi30k test).")
    ap.add_argument("--sentences", type=int, default=200, help="How many distinct sentences.")
    ap.add_argument("--clients", type=int, default=16, help="Concurrent clients (phase 2).")
    ap.add_argument("--seconds", type=float, default=10.0, help="Length of each phase.")
    ap.add_argument("--beam-size", type=int, help="Beam width (default: the model's).")
    ap.add_argument("--max-wait-ms", type=float, default=10.0, help="The server's --max-wait-ms.")
    ap.add_argument("--threads", type=int, default=2, help="Torch threads of the server.")
    ap.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = ap.parse_args()
    if not (1 <= args.clients <= 256 and 0 < args.seconds <= 600):
        sys.exit("--clients must be in [1, 256] and --seconds in (0, 600]")

    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONUNBUFFERED": "1"}
    lines = read_sentences(args.input, args.sentences)
    want = reference(args.model, lines, args.beam_size, env)
    proc, url = start_server(args.model, args, env)
    try:
        precision = httpx.get(url + "/info", timeout=10).json().get("precision")
        load(url, lines[:8], want, 1, min(2.0, args.seconds), args.beam_size)  # warm-up
        one = load(url, lines, want, 1, args.seconds, args.beam_size)
        many = load(url, lines, want, args.clients, args.seconds, args.beam_size)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    report = {
        "model": args.model,
        "server_threads": args.threads,
        "max_wait_ms": args.max_wait_ms,
        "precision": precision,
        "one_client": one.summary(),
        "concurrent": many.summary(),
        "batching_gain": round(many.sentences / many.seconds / (one.sentences / one.seconds), 2),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name in ("one_client", "concurrent"):
            s = report[name]
            print(
                f"{s['clients']:>3} client(s): {s['requests_per_s']:7.1f} req/s "
                f"{s['sentences_per_s']:7.1f} sent/s  p50 {s['p50_ms']:7.1f} ms  "
                f"p99 {s['p99_ms']:7.1f} ms  errors {s['errors']}  mismatches {s['mismatches']}"
            )
        print(
            f"batching gain ({args.clients} clients vs 1): {report['batching_gain']}x, "
            f"precision {precision}"
        )
    for msg in (one.errors + many.errors + one.mismatches + many.mismatches)[:5]:
        print("  " + msg, file=sys.stderr)
    if one.errors or many.errors or one.mismatches or many.mismatches:
        sys.exit(1)


if __name__ == "__main__":
    main()
