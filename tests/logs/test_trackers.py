"""MLflow runs written by ``mlflow`` itself: a file-store run folder, and a real
``mlflow server`` started on 127.0.0.1 (issue 24).  Skipped outside CI only when
``mlflow`` is not installed; under CI (``CI=true``) they must run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.logs import read_log

# a real server or cluster on loopback, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

if os.environ.get("CI") != "true":
    pytest.importorskip("mlflow")

STEPS = range(1, 7)


def _log_run(mlflow) -> str:
    with mlflow.start_run() as run:
        for s in STEPS:
            mlflow.log_metrics({"train/loss": 3.0 - 0.25 * s, "learning_rate": 1e-4 * s}, step=s)
            if s % 3 == 0:
                mlflow.log_metric("eval/loss", 3.5 - 0.25 * s, step=s)
        return run.info.run_id


def _check(run) -> None:
    t = run.table
    assert t["step"].tolist() == list(STEPS)
    assert t["loss"].tolist() == pytest.approx([3.0 - 0.25 * s for s in STEPS])
    assert t["lr"].tolist() == pytest.approx([1e-4 * s for s in STEPS])
    assert t.set_index("step")["eval_loss"].dropna().to_dict() == pytest.approx({3: 2.75, 6: 2.0})


def test_file_store_run_folder(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # (mlflow 3 keeps it opt-in)
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    run_id = _log_run(mlflow)
    (folder,) = (tmp_path / "mlruns").glob(f"*/{run_id}")
    run = read_log(folder)
    assert run.format == "mlflow"
    _check(run)


def test_file_store_as_the_tracking_uri_reads_the_run_without_mlflows_opt_in(tmp_path, monkeypatch):
    # ``--tracking-uri`` with the URI the run was logged to (MLflowLogger's
    # ``file:./mlruns``): the store is read as folders, whatever MLflow 3's client
    # thinks of file stores, from the store's folder in each spelling MLflow takes
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = tmp_path / "mlruns"
    mlflow.set_tracking_uri(store.as_uri())
    run_id = _log_run(mlflow)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    monkeypatch.chdir(tmp_path)
    for uri in ("file:./mlruns", "./mlruns", store.as_uri(), f"file:{store}", str(store)):
        _check(read_log(run_id, tracking_uri=uri))
    r = CliRunner().invoke(app, ["parse", run_id, "--tracking-uri", "file:./mlruns", "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["parse", "nosuchrun", "--tracking-uri", "file:./mlruns"])
    assert (r.exit_code, r.output) == (
        2,
        "error: file:./mlruns: no run nosuchrun in the MLflow file store; "
        "check the run id (mlflow ui lists it)\n",
    )


@pytest.mark.parametrize("uri", ["file:./elsewhere", "elsewhere", "sqlite:///elsewhere.db"])
def test_a_store_that_is_not_there_is_one_error_and_nothing_is_made(tmp_path, monkeypatch, uri):
    # the mlflow client makes an empty store (a folder, or a database and its tables)
    # where it finds none: reading must not
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["parse", "abc", "--tracking-uri", uri])
    assert r.exit_code == 2
    assert r.output.startswith(f"error: {uri}: no MLflow ") and r.output.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--backend-store-uri", f"sqlite:///{root / 'db.sqlite'}", "--workers", "1"]
    cmd += ["--default-artifact-root", (root / "artifacts").as_uri()]
    proc = subprocess.Popen(
        cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(uri + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start in 120 s")
        yield uri
    finally:
        # the server and the workers it started: their own process group, this test's
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def test_tracking_server_by_uri(server, monkeypatch):
    import mlflow

    mlflow.set_tracking_uri(server)
    run_id = _log_run(mlflow)
    host = server.removeprefix("http://")
    _check(read_log(f"mlflow://{host}/{run_id}"))
    r = CliRunner().invoke(app, ["parse", run_id, "--tracking-uri", server, "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["parse", f"mlflow://{host}/nosuchrun"])
    assert r.exit_code == 2
    assert (
        r.output
        == f"error: {server}: no run nosuchrun on the MLflow server; check the URI and the run id\n"
    )


def test_unreachable_server_is_one_line_without_credentials():
    port = _free_port()  # (nothing listens there)
    r = CliRunner().invoke(
        app, ["parse", "abc", "--tracking-uri", f"http://me:secret@127.0.0.1:{port}"]
    )
    assert r.exit_code == 2
    assert r.output == (
        f"error: http://127.0.0.1:{port}: cannot reach the MLflow tracking server; "
        "check the URI and the run id\n"
    )
    assert "secret" not in r.output


def test_bad_uri_and_bad_folder(tmp_path):
    with pytest.raises(InputError, match="write mlflow://HOST:PORT/RUN_ID"):
        read_log("mlflow://nohost")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "meta.yaml").write_text("x: 1\n")
    (tmp_path / "metrics" / "loss").write_text("123 not-a-number 1\n")
    with pytest.raises(InputError, match="is not '<timestamp> <value> <step>'"):
        read_log(tmp_path)
