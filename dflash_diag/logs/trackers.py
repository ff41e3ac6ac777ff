"""Experiment trackers' own stores: an MLflow run, from its file-store folder or a
tracking server.

* A file-store run folder (``mlruns/<experiment>/<run>/``, the one holding
  ``meta.yaml`` and ``metrics/``): each ``metrics/<key>`` file (a key with ``/`` is a
  sub-folder) holds one line per logged value, ``<timestamp ms> <value> <step>``.  It
  is read as that text; no package is needed.
* A tracking server: ``mlflow://HOST:PORT/RUN_ID`` (plain HTTP), or a run id with
  ``tracking_uri`` (``http://...``, ``https://...``, ``sqlite:///...``), read with the
  ``mlflow`` package (the ``mlflow`` extra): every metric's history of the run.
* A file store given as the tracking URI (``file:./mlruns``, ``file:///abs/mlruns`` or
  a path) is read as the folders it is, the run found by its id under its experiment:
  no package, and nothing is created where no store or database is (the mlflow client
  makes an empty one, and MLflow 3 refuses file stores without
  ``MLFLOW_ALLOW_FILE_STORE``).

Both give one record per logged value, its column the key's canonical name
(:func:`~dflash_diag.logs.names.canonical_name`), its step MLflow's ``step``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from ..data import RunLog
from ..errors import InputError
from .names import canonical_name, logged, snake
from .normalise import build_table

SCHEME = "mlflow://"


def is_mlflow_path(name: str) -> bool:
    """An ``mlflow://`` URI, or an MLflow file-store run folder (``meta.yaml`` beside
    ``metrics/``)."""
    if name.startswith(SCHEME):
        return True
    p = Path(name)
    return p.is_dir() and (p / "metrics").is_dir() and (p / "meta.yaml").is_file()


def read_mlflow(name: str, rank: int | str = 0, tracking_uri: str | None = None) -> RunLog:
    """Read an MLflow run: a file-store run folder, ``mlflow://HOST:PORT/RUN_ID``, or a
    run id on the server at ``tracking_uri``.

    :raises InputError: a folder with no metric, a bad line, a server that cannot be
        reached or has no such run (one line; credentials in the URI are not shown),
        the ``mlflow`` extra missing for a server.
    """
    store = _local_store(tracking_uri) if tracking_uri is not None else None
    if tracking_uri is None and not name.startswith(SCHEME):
        records, n_lines = _file_store_records(Path(name))
        shown = name
    elif store is not None and tracking_uri is not None:  # (read as the folders it is)
        run_id = _server_of(name, tracking_uri)[1]
        records, n_lines = _file_store_records(_store_run(store, run_id, tracking_uri))
        shown = f"{tracking_uri} run {run_id}"
    else:
        uri, run_id = _server_of(name, tracking_uri)
        records, n_lines = _server_records(uri, run_id)
        shown = f"{redact(uri)} run {run_id}"
    if not records:
        raise InputError(shown, "the MLflow run has no metrics", "give a run that logged some")
    # in step order, as a console log would have printed them (one metric's file after
    # another would read as a run started again at each file)
    records.sort(key=lambda r: (r["step"], r["line"]))
    for i, rec in enumerate(records, 1):
        rec["line"] = i
    return build_table(records, path=shown, fmt="mlflow", rank=rank, n_lines=n_lines)


def _file_store_records(run: Path) -> tuple[list[dict[str, Any]], int]:
    """One record per line of each ``metrics/<key>`` file of a file-store run folder."""
    records: list[dict[str, Any]] = []
    root = run / "metrics"
    n = 0
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        column = canonical_name(snake(f.relative_to(root).as_posix()))
        for i, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines()):
            n += 1
            parts = line.split()
            if not parts:
                continue
            try:
                _, value, step = parts[0], float(parts[1]), float(parts[2])
            except (IndexError, ValueError):
                raise InputError(
                    str(f), f"line {i + 1} is not '<timestamp> <value> <step>': {line[:60]!r}"
                ) from None
            records.append({"line": n, "step": step, column: logged(value)})
    return records, n


def _local_store(uri: str) -> Path | None:
    """The folder of a file-store tracking URI (``file:./mlruns``, ``file:///abs/mlruns``
    or a plain path, as MLflow takes them), else None."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return (
            Path(url2pathname(parts.path)) if not parts.netloc else Path(parts.netloc + parts.path)
        )
    if not parts.scheme or len(parts.scheme) == 1:  # (a path; ``C:\...`` on Windows)
        return Path(uri)
    return None


def _store_run(store: Path, run_id: str, uri: str) -> Path:
    """The run folder of ``run_id`` in the file store ``store`` (``<experiment>/<run>``).

    :raises InputError: no store there, or no such run in it (nothing is created: the
        mlflow client would make an empty store where it finds none)."""
    if not store.is_dir():
        raise InputError(uri, "no MLflow file store there", "give the folder MLflow wrote (mlruns)")
    found = [d for d in store.glob(f"*/{run_id}") if is_mlflow_path(str(d))]
    if not found:
        raise InputError(
            uri,
            f"no run {run_id} in the MLflow file store",
            "check the run id (mlflow ui lists it)",
        )
    return found[0]


def _database_missing(uri: str) -> bool:
    """A ``sqlite:///PATH`` URI whose file is not there (the mlflow client would create
    it, and its tables, on reading)."""
    if not uri.startswith("sqlite:///"):
        return False
    return not Path(uri[len("sqlite:///") :]).is_file()


def redact(uri: str) -> str:
    """``uri`` without a user name or password (``http://u:p@h:5000`` -> ``http://h:5000``).

    >>> redact("https://me:secret@example.com:5000/x")
    'https://example.com:5000/x'
    """
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return parts._replace(netloc=netloc).geturl()


def _server_of(name: str, tracking_uri: str | None) -> tuple[str, str]:
    """``(tracking URI, run id)`` of ``mlflow://HOST:PORT/RUN_ID`` or of a run id with
    ``tracking_uri``."""
    if tracking_uri is not None:
        run_id = name[len(SCHEME) :].rsplit("/", 1)[-1] if name.startswith(SCHEME) else name
        return tracking_uri, run_id
    rest = name[len(SCHEME) :]
    host, _, run_id = rest.partition("/")
    if not host or not run_id or "/" in run_id:
        raise InputError(name, "not an MLflow run URI", "write mlflow://HOST:PORT/RUN_ID")
    return f"http://{host}", run_id


def _server_records(uri: str, run_id: str) -> tuple[list[dict[str, Any]], int]:
    """One record per logged value of every metric of the run, from the server."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise InputError(
            redact(uri),
            "reading an MLflow tracking server needs the 'mlflow' extra",
            "pip install 'dflash-diag[mlflow]'",
        ) from None
    if _database_missing(uri):
        raise InputError(redact(uri), "no MLflow database there", "check the path in the URI")
    # one attempt, a short wait: an unreachable server is an answer, not minutes of retries
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    try:
        client = MlflowClient(tracking_uri=uri)
        keys = sorted(client.get_run(run_id).data.metrics)
        histories = {k: client.get_metric_history(run_id, k) for k in keys}
    except Exception as e:  # (mlflow raises its own, requests' and urllib3's errors)
        raise InputError(redact(uri), _why(e, run_id), "check the URI and the run id") from None
    records: list[dict[str, Any]] = []
    for key, history in histories.items():
        column = canonical_name(snake(key))
        for m in history:
            rec = {"line": len(records) + 1, "step": float(m.step), column: logged(m.value)}
            records.append(rec)
    return records, len(records)


def _why(e: Exception, run_id: str) -> str:
    """One line for a failed request: unreachable, or no such run."""
    text = str(e)
    if "RESOURCE_DOES_NOT_EXIST" in text or "not found" in text.lower():
        return f"no run {run_id} on the MLflow server"
    return "cannot reach the MLflow tracking server"
