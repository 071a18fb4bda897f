"""The corpus fetcher: verified copies from a mirror, idempotence, and clear failures on a corrupt
mirror or an unreachable address."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.data import corpus
from nmt.errors import NmtError

FILES = {
    f"{split}.{lang}"
    for split in ("train", "val", "test_2016_flickr", "test_2017_flickr")
    for lang in ("en", "de", "fr", "cs")
} - {"test_2017_flickr.cs"}


def test_manifest_matches_committed_checksums_and_files(repo_root):
    m = corpus.load_manifest("multi30k")
    assert {f.removesuffix(".gz") for f in m["files"]} == FILES
    assert all(len(h) == 64 for h in m["files"].values())
    assert m["url"].format(file="train.en.gz") == (
        "https://github.com/multi30k/dataset/raw/master/data/task1/raw/train.en.gz"
    )
    with pytest.raises(NmtError, match=r"unknown corpus 'wmt99' \(known: .*multi30k"):
        corpus.load_manifest("wmt99")


def test_fetch_from_mirror_is_verified_and_idempotent(multi30k_mirror, tmp_path):
    dest = corpus.fetch("multi30k", tmp_path / "m", mirror=multi30k_mirror, quiet=True)
    assert {p.name for p in dest.iterdir() if not p.name.startswith(".")} == FILES
    train_en = (dest / "train.en").read_bytes()
    assert train_en == gzip.decompress((multi30k_mirror / "train.en.gz").read_bytes())
    assert train_en.count(b"\n") == 29000
    assert (dest / "val.de").read_bytes().count(b"\n") == 1014
    stamp = json.loads((dest / corpus.STAMP).read_text())
    assert stamp["train.en.gz"]["sha256"] == hashlib.sha256(train_en).hexdigest()

    mtimes = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    corpus.fetch("multi30k", dest, mirror=multi30k_mirror, quiet=True)
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == mtimes

    (dest / "val.en").write_text("tampered\n")  # a damaged file is fetched again, others skipped
    corpus.fetch("multi30k", dest, mirror=multi30k_mirror, quiet=True)
    assert (dest / "val.en").read_bytes().count(b"\n") == 1014
    assert (dest / "train.de").stat().st_mtime_ns == mtimes["train.de"]


def test_env_mirror_is_used(multi30k_mirror, tmp_path, monkeypatch):
    monkeypatch.setenv("NMT_CORPUS_MIRROR", str(multi30k_mirror))
    dest = corpus.fetch("multi30k", tmp_path / "m", quiet=True)
    assert (dest / "test_2017_flickr.fr").is_file()


def test_checksum_mismatch_names_file_and_both_sums(multi30k_mirror, tmp_path):
    bad = tmp_path / "mirror"
    shutil.copytree(multi30k_mirror, bad)
    (bad / "val.de.gz").chmod(0o644)
    payload = gzip.compress(b"not the real corpus\n")
    (bad / "val.de.gz").write_bytes(payload)
    expected = corpus.load_manifest("multi30k")["files"]["val.de.gz"]
    actual = hashlib.sha256(payload).hexdigest()
    with pytest.raises(NmtError) as e:
        corpus.fetch("multi30k", tmp_path / "m", mirror=bad, quiet=True)
    assert str(e.value) == (
        f"{bad / 'val.de.gz'}: checksum mismatch for val.de.gz "
        f"(expected sha256 {expected}, got {actual})"
    )
    assert not (tmp_path / "m" / "val.de").exists()
    assert not [p for p in (tmp_path / "m").iterdir() if p.name.startswith(".val")]

    proc = subprocess.run(
        [sys.executable, "scripts/fetch_corpus.py", "multi30k", "--dest", str(tmp_path / "m2")]
        + ["--mirror", str(bad), "--quiet"],
        capture_output=True,
        text=True,
        cwd=corpus.CORPORA_DIR.parent,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"error: {e.value}\n"


def test_mirror_missing_file(multi30k_mirror, tmp_path):
    partial = tmp_path / "mirror"
    partial.mkdir()
    shutil.copy(multi30k_mirror / "train.en.gz", partial)
    with pytest.raises(NmtError, match=f"^mirror {partial} has no train.de.gz$"):
        corpus.fetch("multi30k", tmp_path / "m", mirror=partial, quiet=True)
    with pytest.raises(NmtError, match="no such folder"):
        corpus.fetch("multi30k", tmp_path / "m", mirror=tmp_path / "nope", quiet=True)


def test_unreachable_source_names_url(tmp_path, monkeypatch):
    monkeypatch.delenv("NMT_CORPUS_MIRROR", raising=False)
    manifest = corpus.load_manifest("multi30k")
    manifest["url"] = "http://127.0.0.1:9/data/{file}"  # discard port: connection refused at once
    monkeypatch.setattr(corpus, "load_manifest", lambda name: manifest)
    with pytest.raises(
        NmtError, match=r"^cannot download http://127\.0\.0\.1:9/data/train\.en\.gz: "
    ):
        corpus.fetch("multi30k", tmp_path / "m", quiet=True)


def test_file_system_errors_are_one_line_and_a_foreign_stamp_is_ignored(multi30k_mirror, tmp_path):
    dest = tmp_path / "taken"
    dest.write_text("a file, not a folder\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "scripts/fetch_corpus.py", "multi30k", "--dest", str(dest)]
        + ["--mirror", str(multi30k_mirror), "--quiet"],
        capture_output=True,
        text=True,
        cwd=corpus.CORPORA_DIR.parent,
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: {dest}: not a folder (--dest names where the corpus goes)\n",
    )
    proc = subprocess.run(  # a file on the way: the file-system error, one line
        [sys.executable, "scripts/fetch_corpus.py", "multi30k", "--dest", str(dest / "sub")]
        + ["--mirror", str(multi30k_mirror), "--quiet"],
        capture_output=True,
        text=True,
        cwd=corpus.CORPORA_DIR.parent,
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {dest / 'sub'}: not a directory\n")
    out = tmp_path / "m"
    out.mkdir()
    (out / corpus.STAMP).write_text("[1, 2]\n", encoding="utf-8")  # valid JSON, not a stamp
    corpus.fetch("multi30k", out, mirror=multi30k_mirror, quiet=True)
    assert (out / "val.de").is_file()


def _fetch_script(capsys, *args: str) -> tuple[int, str]:
    """Run scripts/fetch_corpus.py's main here (so monkeypatches apply): (exit code, stderr)."""
    path = corpus.CORPORA_DIR.parent / "scripts" / "fetch_corpus.py"
    spec = importlib.util.spec_from_file_location("fetch_corpus", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.main(["tiny", "--quiet", *args])
    return code, capsys.readouterr().err


def _tiny_corpus(tmp_path: Path, monkeypatch, text: bytes) -> Path:
    """A one-file corpus `tiny` (x.gz holding `text`) in a mirror folder, which it returns."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    payload = gzip.compress(text)
    (mirror / "x.gz").write_bytes(payload)
    manifest = {
        "files": {"x.gz": hashlib.sha256(payload).hexdigest()},
        "url": "http://example.invalid/{file}",
    }
    monkeypatch.setattr(corpus, "load_manifest", lambda name: manifest)
    monkeypatch.delenv("NMT_CORPUS_MIRROR", raising=False)
    return mirror


class _CutResponse:
    """An HTTP response whose chunked body breaks off: read() raises IncompleteRead."""

    def __enter__(self) -> _CutResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def read(self, size: int = -1) -> bytes:
        raise http.client.IncompleteRead(b"abc", 100)


def test_a_download_cut_short_is_one_line(tmp_path, monkeypatch, capsys):
    # IncompleteRead is an HTTPException, not an OSError: it ended in a traceback
    _tiny_corpus(tmp_path, monkeypatch, b"text\n")
    monkeypatch.setattr(corpus.urllib.request, "urlopen", lambda url, timeout: _CutResponse())
    code, err = _fetch_script(capsys, "--dest", str(tmp_path / "d"))
    assert (code, err) == (
        2,
        "error: cannot download http://example.invalid/x.gz: broken HTTP response "
        "(IncompleteRead(3 bytes read, 100 more expected))\n",
    )
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == []


def test_a_full_disk_is_not_a_bad_archive(tmp_path, monkeypatch, capsys):
    # a write error while decompressing was reported as "cannot decompress x.gz"
    mirror = _tiny_corpus(tmp_path, monkeypatch, b"line\n" * 5000)
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "x").symlink_to("/dev/full")  # every write: no space left on device
    code, err = _fetch_script(capsys, "--dest", str(dest), "--mirror", str(mirror))
    assert (code, err) == (2, f"error: {dest / 'x'}: no space left on device\n")
    (mirror / "x.gz").write_bytes(gzip.compress(b"line\n" * 5000)[:-12])  # cut: no gzip trailer
    monkeypatch.setattr(
        corpus,
        "load_manifest",
        lambda name: {
            "files": {"x.gz": hashlib.sha256((mirror / "x.gz").read_bytes()).hexdigest()},
            "url": "http://example.invalid/{file}",
        },
    )
    (dest / "x").unlink()
    code, err = _fetch_script(capsys, "--dest", str(dest), "--mirror", str(mirror))
    assert code == 2 and err.startswith(f"error: {mirror / 'x.gz'}: cannot decompress x.gz (")
    assert not (dest / "x").exists()


MIRRORS = corpus.CORPORA_DIR.parent.parent / "shared/corpora"
LOCAL = {
    "wmt-news-de-en": {
        f"{split}.{lang}"
        for split in ("train", "newstest2013", "newstest2014")
        for lang in ("en", "de")
    },
    "tatoeba-de-en": {"deu-eng.tsv"},
    "justice-laws-en-fr": {
        f"{split}.{lang}" for split in ("train", "dev", "test") for lang in ("en", "fr")
    },
}
LINES = {
    "tatoeba-de-en": ("deu-eng.tsv", 169813),
    "wmt-news-de-en": ("train.de", 30935),
    "justice-laws-en-fr": ("train.fr", 425473),
}


def _mirror_of(name: str) -> Path:
    """The local mirror of a corpus no public address serves; skips when this machine has none."""
    if not (MIRRORS / name / "SHA256SUMS").is_file():
        pytest.skip(f"no {name} mirror in {MIRRORS}")
    return MIRRORS / name


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_local_corpus_manifest_matches_the_mirrors_checksums(name):
    m = corpus.load_manifest(name)
    assert {f.removesuffix(".gz") for f in m["files"]} == LOCAL[name]
    assert m["url"] is None and m["no_url"]
    sums = dict(
        reversed(line.split())
        for line in (_mirror_of(name) / "SHA256SUMS").read_text().splitlines()
    )
    assert m["files"] == sums
    assert all(corpus.sha256_file(_mirror_of(name) / f) == h for f, h in sums.items())


@pytest.mark.parametrize("name", sorted(LOCAL))
@pytest.mark.slow
def test_local_corpus_fetch_from_mirror_is_verified_and_idempotent(name, tmp_path, capsys):
    mirror = _mirror_of(name)
    dest = corpus.fetch(name, tmp_path / name, mirror=mirror, quiet=True)
    assert {p.name for p in dest.iterdir() if not p.name.startswith(".")} == LOCAL[name]
    for file in corpus.load_manifest(name)["files"]:
        text = (dest / file.removesuffix(".gz")).read_bytes()
        assert text == gzip.decompress((mirror / file).read_bytes())
    file, lines = LINES[name]
    assert (dest / file).read_bytes().count(b"\n") == lines
    mtimes = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    corpus.fetch(name, dest, mirror=mirror.parent)  # a folder of mirrors, one per corpus
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == mtimes
    assert capsys.readouterr().err == f"fetch {name}: {len(mtimes) - 1} files verified in {dest}\n"


def test_justice_laws_manifest_names_its_source_alignment_and_licence():
    m = corpus.load_manifest("justice-laws-en-fr")
    assert m["languages"] == ["en", "fr"] and m["splits"] == ["train", "dev", "test"]
    assert "justicecanada/laws-lois-xml at commit d6853c4a" in m["source"]
    assert "section / subsection / paragraph labels" in m["alignment"]
    assert "Open Government Licence - Canada" in m["licence"]
    readme = " ".join((corpus.CORPORA_DIR / "README.md").read_text().split())
    assert '"Contains information licensed under the Open Government Licence - Canada."' in readme


def test_a_corpus_without_public_address_needs_a_mirror(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NMT_CORPUS_MIRROR", raising=False)
    path = corpus.CORPORA_DIR.parent / "scripts" / "fetch_corpus.py"
    spec = importlib.util.spec_from_file_location("fetch_corpus", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["tatoeba-de-en", "--dest", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: tatoeba-de-en has no public download address (")
    assert err.endswith("): give --mirror DIR or set NMT_CORPUS_MIRROR\n") and err.count("\n") == 1
    assert not (tmp_path / "w").exists()


def test_download_from_a_loopback_server_is_verified_and_a_404_is_one_line(tmp_path, monkeypatch):
    """The download path end to end against a real HTTP server on 127.0.0.1 (no internet)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    served = tmp_path / "served"
    served.mkdir()
    payload = gzip.compress(b"ein hund\nzwei katzen\n")
    (served / "train.de.gz").write_bytes(payload)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{{file}}"
        manifest = {"files": {"train.de.gz": hashlib.sha256(payload).hexdigest()}, "url": url}
        monkeypatch.setattr(corpus, "load_manifest", lambda name: manifest)
        monkeypatch.delenv("NMT_CORPUS_MIRROR", raising=False)
        dest = corpus.fetch("tiny", tmp_path / "dest", quiet=True)
        assert (dest / "train.de").read_bytes() == b"ein hund\nzwei katzen\n"
        stamp = json.loads((dest / corpus.STAMP).read_text())
        assert stamp["train.de.gz"]["source"] == url.format(file="train.de.gz")
        manifest["files"] = {"missing.de.gz": "0" * 64}
        with pytest.raises(
            NmtError, match=r"^cannot download http://127\.0\.0\.1:\d+/.*missing\.de\.gz: HTTP 404 "
        ):
            corpus.fetch("tiny", tmp_path / "dest2", quiet=True)
        assert not (tmp_path / "dest2" / "missing.de").exists()
    finally:
        server.shutdown()
        server.server_close()


def test_every_manifest_names_its_public_source_by_url():
    """A corpus either downloads from `url` or names where its public source lives
    (`source_url`), beside the reason (`no_url`) its bytes cannot be fetched from there."""
    manifests = sorted(corpus.CORPORA_DIR.glob("*.json"))
    assert len(manifests) >= 4
    for path in manifests:
        m = json.loads(path.read_text(encoding="utf-8"))
        address = m.get("url") or m.get("source_url")
        assert address and address.startswith("https://"), f"{path.name}: no url or source_url"
        if not m.get("url"):
            assert m.get("no_url"), f"{path.name}: source_url without the reason (no_url)"


SOURCES = corpus.CORPORA_DIR.parent.parent / "shared" / "corpus-sources"


def _fetch_module():
    path = corpus.CORPORA_DIR.parent / "scripts" / "fetch_corpus.py"
    spec = importlib.util.spec_from_file_location("fetch_corpus", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wmt_sources() -> Path:
    """The local copy of wmt-news-de-en's public source files; skips on a machine without one."""
    found = sorted(SOURCES.glob("OPUS-MT-testsets-*/testsets"))
    if not found:
        pytest.skip(f"no OPUS-MT-testsets copy in {SOURCES}")
    return found[0].parent


def _check_wmt(dest: Path) -> None:
    names = {p.name for p in dest.iterdir() if not p.name.startswith(".")}
    assert names == LOCAL["wmt-news-de-en"]
    assert (dest / "train.de").read_bytes().count(b"\n") == LINES["wmt-news-de-en"][1]
    assert (dest / "newstest2014.en").read_bytes().count(b"\n") == 3003


def test_wmt_news_is_built_from_its_public_files_to_the_manifests_checksums(tmp_path, monkeypatch):
    """`fetch_corpus.py wmt-news-de-en --sources DIR` builds train, newstest2013 and newstest2014
    whose .gz bytes equal the manifest's (fetch verifies each before writing it)."""
    monkeypatch.delenv("NMT_CORPUS_MIRROR", raising=False)
    sources = _wmt_sources()
    code = _fetch_module().main(
        ["wmt-news-de-en", "--dest", str(tmp_path / "w"), "--sources", str(sources), "--quiet"]
    )
    assert code == 0
    _check_wmt(tmp_path / "w")


@pytest.mark.slow
def test_wmt_news_sources_download_from_a_loopback_server(tmp_path, monkeypatch, capsys):
    """The download path of the build: the same files served over HTTP on 127.0.0.1, each checked
    against its SHA-256; a changed source is one line naming its URL."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    monkeypatch.delenv("NMT_CORPUS_MIRROR", raising=False)
    served = tmp_path / "served"
    shutil.copytree(_wmt_sources() / "testsets", served / "testsets")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    module = _fetch_module()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{{path}}"
        module.fetch_corpus("wmt-news-de-en", tmp_path / "w", url=url, quiet=True)
        _check_wmt(tmp_path / "w")
        changed = served / "testsets/deu-eng/newstest2013.eng"
        changed.write_bytes(changed.read_bytes() + b"x\n")
        with pytest.raises(NmtError, match=r"newstest2013\.eng: checksum mismatch \(expected"):
            module.fetch_corpus("wmt-news-de-en", tmp_path / "w2", url=url, quiet=True)
        assert not (tmp_path / "w2").exists()
    finally:
        server.shutdown()
        server.server_close()
