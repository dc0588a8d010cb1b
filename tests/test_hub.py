"""`orcd pull` and `hf:` model specs against a local server that answers like the Hugging Face Hub.

The server speaks the two requests hf_hub_download makes: HEAD then GET on
/{owner}/{name}/resolve/{revision}/{file}, with the headers the client reads (X-Repo-Commit, ETag,
Content-Length, Range/Content-Range for resumed downloads, X-Error-Code on 404). The CLI runs as a
subprocess so that HF_ENDPOINT and HF_HUB_CACHE are read the way a user's shell would set them.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orcd import hub

REPO = "orcd-test/tiny-GGUF"
FILE = "model-q8_0.gguf"
CONTENT = bytes(range(256)) * 49152 + b"tail"  # 12 MiB + 4: more than huggingface_hub's 10 MiB chunk
SHA256 = hashlib.sha256(CONTENT).hexdigest()
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub(BaseHTTPRequestHandler):
    files = {(REPO, FILE): CONTENT}
    log: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
    break_next_get_after: int | None = None  # send only this many body bytes, then drop the connection
    break_every_get = False  # drop every GET after 1 MiB (a connection that never holds)

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        self.log.append((self.command, self.path, self.headers.get("Range")))
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path)
        if m is None:
            return self._error(404, "RepoNotFound")
        repo, revision, name = m.groups()
        if not any(r == repo for r, _ in self.files):
            return self._error(404, "RepoNotFound")
        if revision not in ("main", COMMIT):
            return self._error(404, "RevisionNotFound")
        data = self.files.get((repo, name))
        if data is None:
            return self._error(404, "EntryNotFound")
        start = 0
        rng = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if rng:
            start = int(rng.group(1))
        self.send_response(206 if rng else 200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if body and self.break_every_get:
            self.wfile.write(data[start : start + 2**20])
            self.close_connection = True
        elif body and self.break_next_get_after is not None:
            self.wfile.write(data[start : start + self.break_next_get_after])
            FakeHub.break_next_get_after = None
            self.close_connection = True  # fewer bytes than Content-Length: a broken download
        elif body:
            self.wfile.write(data[start:])

    def _error(self, status: int, code: str) -> None:
        msg = f"{code}: {self.path}".encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", code)
        self.send_header("Content-Length", str(len(msg)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(msg)


@pytest.fixture()
def fake_hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeHub.log = []
    FakeHub.break_next_get_after = None
    FakeHub.break_every_get = False
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def hub_env(endpoint: str, cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HF_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(HF_ENDPOINT=endpoint, HF_HUB_CACHE=str(cache), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1", **extra)
    return env


def orcd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orcd", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def resolve_in_subprocess(env: dict[str, str], spec: str) -> subprocess.CompletedProcess:
    code = "import sys; from orcd.hub import resolve_model_path; print(resolve_model_path(sys.argv[1]))"
    return subprocess.run([sys.executable, "-c", code, spec], env=env, capture_output=True, text=True,
                          timeout=120)


def test_pull_downloads_into_the_cache_then_hf_spec_resolves_there(fake_hub, tmp_path):
    env = hub_env(fake_hub, tmp_path / "cache")
    res = orcd(env, "pull", REPO, FILE)
    assert res.returncode == 0, res.stderr
    path = Path(res.stdout.strip().splitlines()[0])
    assert path.read_bytes() == CONTENT
    assert (tmp_path / "cache") in path.parents
    assert f"hf:{REPO}/{FILE}" in res.stderr
    assert [m for m, _, _ in FakeHub.log].count("GET") == 1

    FakeHub.log.clear()
    again = resolve_in_subprocess(env, f"hf:{REPO}/{FILE}")
    assert again.returncode == 0, again.stderr
    assert Path(again.stdout.strip()) == path
    assert "GET" not in [m for m, _, _ in FakeHub.log], "a cached file must not be downloaded again"

    offline = resolve_in_subprocess({**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"},
                                    f"hf:{REPO}/{FILE}")
    assert offline.returncode == 0, offline.stderr
    assert Path(offline.stdout.strip()) == path


def test_pull_resumes_a_broken_download(fake_hub, tmp_path):
    FakeHub.break_next_get_after = 11 * 1024 * 1024
    res = orcd(hub_env(fake_hub, tmp_path / "cache"), "pull", REPO, FILE)
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip().splitlines()[0]).read_bytes() == CONTENT
    gets = [rng for method, _, rng in FakeHub.log if method == "GET"]
    assert len(gets) == 2 and gets[0] is None
    resumed_at = int(re.fullmatch(r"bytes=(\d+)-", gets[1]).group(1))
    assert 0 < resumed_at <= 11 * 1024 * 1024, "the second request must continue, not restart"


def test_pull_over_a_connection_that_keeps_breaking_is_a_one_line_error(fake_hub, tmp_path):
    """Each try continues the partial file (hub.DOWNLOAD_ATTEMPTS calls, each with huggingface_hub's own
    retries); when none finishes, orcd's last line names the file, whatever the HTTP library raised (no
    traceback; huggingface_hub logs its retries above it)."""
    FakeHub.break_every_get = True
    res = orcd(hub_env(fake_hub, tmp_path / "cache"), "pull", REPO, FILE)
    assert res.returncode == 2, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"orcd pull: error: download of {REPO}/{FILE} failed"), res.stderr
    assert "Traceback" not in res.stderr
    assert sum(method == "GET" for method, _, _ in FakeHub.log) >= hub.DOWNLOAD_ATTEMPTS


def test_pull_missing_file_and_repo_are_one_line_errors(fake_hub, tmp_path):
    env = hub_env(fake_hub, tmp_path / "cache")
    res = orcd(env, "pull", REPO, "nope.gguf")
    assert res.returncode == 2
    assert res.stderr.strip() == f"orcd pull: error: file 'nope.gguf' not found in {REPO}"
    res = orcd(env, "pull", "nobody/nothing", FILE)
    assert res.returncode == 2
    assert "repository nobody/nothing not found" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_hf_spec_not_cached_and_hub_unreachable(tmp_path):
    env = hub_env("http://127.0.0.1:9", tmp_path / "cache", HF_HUB_OFFLINE="1")
    res = resolve_in_subprocess(env, f"hf:{REPO}/{FILE}")
    assert res.returncode != 0
    assert "is not in the cache and the Hub cannot be reached" in res.stderr


@pytest.mark.parametrize("spec", ["hf:", "hf:owner/name", "hf:owner//file.gguf", "hf:owner/name/../x.gguf"])
def test_bad_hf_specs_are_refused(spec):
    with pytest.raises(hub.HubError, match="expected hf:OWNER/REPO/FILE"):
        hub.resolve_model_path(spec)


def test_parse_hf_spec_keeps_subfolders():
    assert hub.parse_hf_spec("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/q/model.gguf") == (
        "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "q/model.gguf")


def test_local_paths_and_the_default(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert hub.resolve_model_path(str(f)) == f
    with pytest.raises(hub.HubError, match="model file not found"):
        hub.resolve_model_path(str(tmp_path / "missing.gguf"))
    assert hub.resolve_model_path(None) == hub.DEMO_MODEL_PATH
    assert hub.DEMO_MODEL_PATH.read_bytes()[:4] == b"GGUF"
