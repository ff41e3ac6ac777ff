"""``gs://`` read by pyarrow's own GCS client where no credentials can be found: one
``error:`` line, exit 2, that says so and names Google's credentials, within the retry
time dflash-diag gives a ``gs://`` request (the client alone retries for minutes).

Nothing leaves the machine: the endpoint is a port on loopback where nothing listens, and
the metadata server the client asks for a token (``GCE_METADATA_ROOT``) is another; no
credentials file of this machine is read (``HOME`` is the test's folder).
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dflash_diag import storage
from dflash_diag.cli import app

from .conftest import free_port

# the GCS client's retries, a second or two a case: CI runs them, the local loop does not
pytestmark = pytest.mark.slow


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GCE_METADATA_ROOT", f"127.0.0.1:{free_port()}")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    return f"endpoint_override=127.0.0.1:{free_port()}&scheme=http"


def expect_no_credentials(args: list[str], uri: str) -> None:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.stderr == (
        f"error: {storage.display(uri)}: no credentials found for this store; check "
        "GOOGLE_APPLICATION_CREDENTIALS (or `gcloud auth application-default login`) and "
        "the bucket's permissions\n"
    )


def test_no_credentials_for_gcs_is_said_within_dflash_diags_retry_time(no_credentials, monkeypatch):
    # (the URI sets no retry time: dflash-diag's, shortened here, bounds the wait)
    monkeypatch.setattr(storage, "GCS_RETRY_SECONDS", 1)
    uri = f"gs://bkt/m.parquet?{no_credentials}"
    expect_no_credentials(["batches", uri, "--strategy", "random", "--token-budget", "4096"], uri)


def test_a_retry_time_in_the_uri_is_the_users(no_credentials, monkeypatch):
    monkeypatch.setattr(storage, "GCS_RETRY_SECONDS", 3600)  # (would not end the test)
    uri = f"gs://bkt/logs/run.log?{no_credentials}&retry_limit_seconds=1"
    expect_no_credentials(["parse", uri], uri)
