"""``hf://`` URIs that the Hugging Face Hub refuses, or that reach no Hub: one ``error:``
line, exit 2, the cause named with what to check for the Hub, and never the token.

The client is the real one (huggingface_hub's ``HfFileSystem`` through fsspec, as a user's
``dflash-diag batches hf://datasets/...`` runs it), in a fresh process pointed at the
server by ``HF_ENDPOINT``.  The server is a look-alike typed here, since no Hub can run on
this machine: a loopback HTTP server that answers every request with one status and the
``X-Error-Code`` header the Hub sends with it (``RepoNotFound``, ``GatedRepo``,
``EntryNotFound``: the codes huggingface_hub's ``hf_raise_for_status`` reads).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import free_port, need

# servers on loopback and fresh processes, seconds each: CI runs them, the local loop not
pytestmark = pytest.mark.slow

TOKEN = "hf_testTokenThatIsNeverPrinted0042"
MANIFEST = ["batches", "hf://datasets/org/corpus/data/m.parquet", "--strategy", "random",
            "--token-budget", "4096"]  # fmt: skip
LOG = ["parse", "hf://datasets/org/runs/logs/run.log"]


def answering(status: int, code: str | None, message: str | None = None):
    """A handler class answering every request with ``status`` and the Hub's headers."""

    class Hub(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            body = json.dumps({"error": message or "refused"}).encode()
            self.send_response(status)
            if code is not None:
                self.send_header("X-Error-Code", code)
            if message is not None:
                self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_POST = answer

        def log_message(self, *args: object) -> None:
            pass

    return Hub


@pytest.fixture
def hub(request) -> Iterator[str]:
    """The endpoint of a server answering as ``request.param`` says."""
    need("huggingface_hub")
    need("fsspec")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), answering(*request.param))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def run(
    endpoint: str, args: list[str], tmp_path: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_TOKEN": TOKEN,
        "HF_HOME": str(tmp_path / "hf-home"),  # (no cache or token of this machine)
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_ETAG_TIMEOUT": "5",
        "HF_HUB_DOWNLOAD_TIMEOUT": "5",
    }
    for offline in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # (set by other tests)
        env.pop(offline, None)
    env.update(extra or {})
    return subprocess.run(
        [sys.executable, "-m", "dflash_diag", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


def one_error_line(r: subprocess.CompletedProcess[str], uri: str, what: str) -> str:
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and TOKEN not in r.stderr
    assert r.stderr.startswith(f"error: {uri}: {what}"), r.stderr
    return r.stderr


@pytest.mark.parametrize("args", [MANIFEST, LOG], ids=["manifest", "log"])
@pytest.mark.parametrize(
    ("hub", "what", "words"),
    [
        # (the Hub answers 401 for a repository that is not there, private or gated alike)
        ((401, "RepoNotFound"), "not found", "a private or gated repository"),
        ((404, "EntryNotFound"), "not found", "check the repository, the revision and the path"),
        # (HfFileSystem answers a gated repository with FileNotFoundError: the hint says so)
        ((403, "GatedRepo"), "not found", "for a gated one, that its terms are accepted"),
        ((401, None, "Invalid credentials in Authorization header"), "access denied",
         "check HF_TOKEN"),
    ],
    indirect=["hub"],
    ids=["repo-not-found", "entry-not-found", "gated", "bad-token"],
)  # fmt: skip
def test_a_refusal_of_the_hub_is_one_line_that_names_it(hub, what, words, args, tmp_path):
    line = one_error_line(run(hub, args, tmp_path), args[1], what)
    assert words in line
    assert "AWS" not in line


@pytest.mark.parametrize("args", [MANIFEST, LOG], ids=["manifest", "log"])
def test_a_hub_that_does_not_answer_is_bad_input_not_a_bug(args, tmp_path):
    # (httpx's ConnectError is no OSError: it once ended as "internal error", exit 1)
    need("huggingface_hub")
    line = one_error_line(
        run(f"http://127.0.0.1:{free_port()}", args, tmp_path),
        args[1],
        "the storage endpoint does not answer",
    )
    assert line.endswith("check HF_ENDPOINT (when set) and the network\n")


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_offline_mode_is_named_not_read_as_an_endpoint_that_does_not_answer(variable, tmp_path):
    need("huggingface_hub")
    r = run(f"http://127.0.0.1:{free_port()}", LOG, tmp_path, {variable: "1"})
    line = one_error_line(r, LOG[1], "offline mode is on, so the Hub was not asked")
    assert line.endswith("unset HF_HUB_OFFLINE (and TRANSFORMERS_OFFLINE) to read from the Hub\n")


def test_a_path_the_hub_client_refuses_is_bad_input_not_a_bug(tmp_path):
    # (huggingface_hub raises ValueError for "hf://datasets": once an internal error)
    need("huggingface_hub")
    args = ["batches", "hf://datasets", "--strategy", "random", "--batch-size", "8"]
    line = one_error_line(
        run(f"http://127.0.0.1:{free_port()}", args, tmp_path), args[1], "not a path"
    )
    assert line.endswith("give hf://datasets/ORG/NAME/path (a dataset's file) or "
                         "hf://ORG/NAME/path (a model's)\n")  # fmt: skip
