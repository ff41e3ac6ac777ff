"""A real S3-compatible server on loopback (moto's server mode, ``python -m moto.server``)
for the tests that read by URI; never a mock of the client: pyarrow's own S3 client talks
HTTP to it.  Objects are put there with boto3 (the upload side is not under test).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Credentials the tests use; no message may ever show them.
KEY_ID = "AKIAEXAMPLEKEYID0042"
SECRET = "wJalrXUtnFEMI-test-secret-never-printed"


def need(module: str):
    """``module`` imported; skipped when missing, except under CI (``CI=true``), where
    the test extras are installed and a missing one fails the test."""
    import importlib

    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    """A moto server: its endpoint URL and a boto3 client to put objects with."""

    endpoint: str
    process: subprocess.Popen

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
        )

    def upload(self, bucket: str, local: Path, prefix: str) -> None:
        """``local`` (a file, or a folder's files) under ``s3://bucket/prefix``."""
        c = self.client()
        files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        for f in files:
            key = prefix if local.is_file() else f"{prefix}/{f.relative_to(local).as_posix()}"
            c.upload_file(str(f), bucket, key)


def start_moto(env: dict[str, str] | None = None) -> S3Server:
    """``python -m moto.server`` on a free loopback port, waited for."""
    need("moto")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return S3Server(f"http://127.0.0.1:{port}", proc)
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = start_moto()
    yield server
    server.process.terminate()
    server.process.wait(10)


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Server:
    """The server, with the environment pointing at it (as a user's would at a store:
    ``AWS_ENDPOINT_URL`` and the key pair) and no config file of this machine read."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return s3_server
