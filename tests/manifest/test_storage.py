"""dflash_diag.storage without a store: URIs told from paths, shown without credentials,
local folders and globs of shards; and ``manifest``'s outputs (``--to``, ``--shards``)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.manifest import read_manifest
from dflash_diag.storage import (
    DENIED,
    NOT_FOUND,
    UNREACHABLE,
    classify,
    display,
    failure,
    has_glob,
    is_store_error,
    is_uri,
    list_shards,
    open_input,
    split_query,
    store_call,
    store_errors,
    uri_text,
)

from .conftest import need

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
runner = CliRunner()
SAFE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)


@given(SAFE, st.lists(SAFE, max_size=4), SAFE, SAFE, st.sampled_from(["s3", "gs", "hdfs"]))
def test_a_uri_is_shown_without_its_user_part_and_query(bucket, keys, user, secret, scheme):
    # invariant: what a message shows of a URI holds neither the user part nor the query
    path = "/".join(keys)
    uri = f"{scheme}://{user}:{secret}@{bucket}/{path}?secret_key={secret}&region=x"
    shown = display(uri)
    assert shown == f"{scheme}://{bucket}/{path}"
    assert "@" not in shown and "?" not in shown
    assert is_uri(uri) and display(shown) == shown


@given(SAFE, st.lists(SAFE, min_size=1, max_size=4))
def test_pathlib_folding_of_a_uri_is_undone(bucket, keys):
    uri = f"s3://{bucket}/{'/'.join(keys)}"
    assert uri_text(Path(uri)) == uri
    assert is_uri(Path(uri))


@pytest.mark.parametrize(
    "path", ["data/manifest.parquet", "/abs/m.parquet", "C:/x/m.parquet", "s3_local/m.parquet"]
)
def test_paths_are_not_uris(path):
    assert not is_uri(path)
    assert display(path) == path


def test_a_local_glob_of_shards_is_one_manifest():
    shards = sorted((DATA / "shards").glob("*.parquet"))
    m = read_manifest(DATA / "shards" / "part-0000[13].parquet")
    expected = [len(r) for p in (shards[1], shards[3]) for r in pq.read_table(p)["input_ids"]]
    assert has_glob(str(DATA / "shards" / "*.parquet"))
    assert m.lengths.tolist() == expected
    loc, files = list_shards(str(DATA / "shards" / "*.parquet"))
    assert [f.rsplit("/", 1)[-1] for f in files] == [p.name for p in shards]


def test_a_file_whose_name_looks_like_a_glob_is_that_file(tmp_path):
    p = tmp_path / "lens[1].parquet"
    pq.write_table(pa.table({"length": [5, 6]}), p)
    pq.write_table(pa.table({"length": [9]}), tmp_path / "lens1.parquet")
    assert read_manifest(p).lengths.tolist() == [5, 6]
    assert read_manifest(tmp_path / "lens[0-9].parquet").lengths.tolist() == [9]


def test_a_glob_that_matches_nothing_is_one_error(tmp_path):
    with pytest.raises(InputError, match=r"no shards there"):
        read_manifest(tmp_path / "*.parquet")


def test_open_input_reads_a_local_file_and_a_file_uri(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"\x00\x01abc")
    assert open_input(p).read() == b"\x00\x01abc"
    assert open_input(p.as_uri()).read() == b"\x00\x01abc"
    assert read_manifest((DATA / "ids.parquet").as_uri()).lengths.tolist() == (
        read_manifest(DATA / "ids.parquet").lengths.tolist()
    )


def test_manifest_writes_shards_with_the_local_engine(tmp_path):
    r = runner.invoke(app, ["manifest", str(DATA / "shards"), "--shards", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("wrote 1 Parquet shards in ")
    back = read_manifest(tmp_path / "o")
    assert back.lengths.tolist() == read_manifest(DATA / "shards").lengths.tolist()
    again = runner.invoke(app, ["manifest", str(DATA / "shards"), "--shards", str(tmp_path / "o")])
    assert again.exit_code == 2
    assert again.stderr == f"error: {tmp_path / 'o'}: already exists; add --force to replace it\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ([], "error: --to: no output named; give --to FILE and/or --shards DIR\n"),
        (
            ["--to", "o.parquet", "--address", "auto"],
            "error: --address: applies to --engine ray; add --engine ray\n",
        ),
    ],
)
def test_manifest_option_errors(args, line):
    r = runner.invoke(app, ["manifest", str(DATA / "shards"), *args])
    assert r.exit_code == 2
    assert r.stderr == line


def test_shards_are_never_written_into_the_input(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(pa.table({"input_ids": [[1], [2, 3]]}), folder / "a.parquet")
    for out in (folder, folder / "sub"):
        r = runner.invoke(app, ["manifest", str(folder), "--shards", str(out), "--force"])
        assert r.exit_code == 2
        assert r.stderr == (
            f"error: {out}: refusing to write into the input; choose another folder\n"
        )


# What pyarrow 25's S3 filesystem raises when nothing listens at AWS_ENDPOINT_URL, with
# the port left open (the real text; tests/manifest/test_s3.py makes pyarrow raise it).
REFUSED = (
    "When getting information for key 'm.parquet' in bucket 'bkt': AWS Error "
    "NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Could not connect to "
    "server; Details: Failed to connect to 127.0.0.1 port {port} after 0 ms: Could not "
    "connect to server"
)


@given(st.integers(1, 65535))
@example(40399)
@example(403)
def test_an_endpoint_that_does_not_answer_is_never_read_as_a_refusal(port):
    # (a port such as 40399 holds "403"; it once read as "access denied")
    e = classify(OSError(REFUSED.format(port=port)), "s3://bkt/m.parquet")
    assert e.what == "the storage endpoint does not answer"


@pytest.mark.parametrize(
    "text",
    [
        "AWS Error ACCESS_DENIED during HeadObject operation: No response body.",
        "403, message='Forbidden', url='https://host:8403/x'",
        "Client error '403' for url 'https://host/x'",
        "HTTP 403",
    ],
)
def test_a_refusal_is_access_denied(text):
    e = classify(OSError(text), "s3://bkt/m.parquet")
    assert e.what.startswith("access denied")


@pytest.mark.parametrize("text", ["status 4031", "host 10.0.403.1", "key a-403-b", "port 8403"])
def test_403_inside_another_token_is_not_a_refusal(text):
    e = classify(OSError(text), "s3://bkt/m.parquet")
    assert e.what == "cannot read (OSError)"


# Each store's hint names that store's own settings; S3's are the messages docs/storage.md
# shows, to the letter.
@pytest.mark.parametrize(
    ("uri", "error", "what", "words"),
    [
        ("s3://b/k", PermissionError(), DENIED,
         "check AWS_PROFILE / AWS_ACCESS_KEY_ID or the store's credentials and its policy"),
        ("s3://b/k", FileNotFoundError(), NOT_FOUND, "check the bucket and the key"),
        ("s3://b/k", OSError("curlCode: 7, Could not connect"), UNREACHABLE,
         "check AWS_ENDPOINT_URL (or the endpoint in the URI) and the network"),
        ("gs://b/k", PermissionError(), DENIED, "GOOGLE_APPLICATION_CREDENTIALS"),
        ("gcs://b/k", PermissionError(), DENIED, "GOOGLE_APPLICATION_CREDENTIALS"),
        ("abfss://c@a.dfs.core.windows.net/k", PermissionError(), DENIED, "AZURE_"),
        ("hf://datasets/o/d/x.parquet", PermissionError(), DENIED, "HF_TOKEN"),
        ("hf://datasets/o/d/x.parquet", FileNotFoundError(), NOT_FOUND, "private or gated"),
        ("hf://datasets/o/d/x.parquet", ConnectionRefusedError(), UNREACHABLE, "HF_ENDPOINT"),
        ("https://h/x.parquet", PermissionError(), DENIED, "the store's credentials"),
    ],
)  # fmt: skip
def test_a_failure_names_what_to_check_for_that_store(uri, error, what, words):
    e = classify(error, uri)
    assert e.what == what
    assert words in e.hint
    assert uri.startswith("s3://") or "AWS" not in e.hint


class _Response:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class _HTTPStatusError(OSError):
    """An HTTP client's error as httpx and requests raise it: the response on it."""

    def __init__(self, status_code: int) -> None:
        super().__init__("Client error for url 'https://host/x'")
        self.response = _Response(status_code)


class _ClientResponseError(Exception):
    """aiohttp's: the status on the error itself."""

    def __init__(self, status: int) -> None:
        super().__init__("message='x', url='https://host:8404/x'")
        self.status = status


@pytest.mark.parametrize(
    ("status", "what"), [(401, DENIED), (403, DENIED), (404, NOT_FOUND), (500, None)]
)
@pytest.mark.parametrize("error", [_HTTPStatusError, _ClientResponseError])
def test_an_http_status_is_read_from_the_error(error, status, what):
    assert failure(error(status)) == what


def test_the_http_clients_errors_are_caught_once_loaded():
    httpx = need("httpx")  # (huggingface_hub's client: under CI a missing one fails)
    assert issubclass(httpx.ConnectError, store_errors())
    e = classify(httpx.ConnectError("[Errno 111] Connection refused"), "hf://datasets/o/d/x")
    assert (e.what, e.hint) == (UNREACHABLE, "check HF_ENDPOINT (when set) and the network")


@pytest.mark.parametrize(
    ("uri", "sent"),
    [
        ("gs://b/m.parquet", "gs://b/m.parquet?retry_limit_seconds=30"),
        ("gcs://b/d/", "gcs://b/d/?retry_limit_seconds=30"),
        ("gs://b/m.parquet?endpoint_override=h:1&scheme=http",
         "gs://b/m.parquet?endpoint_override=h:1&scheme=http&retry_limit_seconds=30"),
        ("gs://b/m.parquet?retry_limit_seconds=600", "gs://b/m.parquet?retry_limit_seconds=600"),
        ("s3://b/m.parquet", "s3://b/m.parquet"),
    ],
)  # fmt: skip
def test_a_gs_uri_retries_for_a_bounded_time_unless_it_says(uri, sent):
    from dflash_diag import storage

    assert storage.GCS_RETRY_SECONDS == 30
    assert storage._bounded_retries(uri) == sent


@pytest.mark.parametrize(
    ("uri", "glob"),
    [
        ("s3://b/m.parquet?endpoint_override=h:9000&scheme=http", False),
        ("s3://b/shards/*.parquet?scheme=http", True),
        ("s3://b/part-0000[12].parquet", True),
        ("gs://b/d/?retry_limit_seconds=5", False),
    ],
)
def test_a_uri_query_is_not_a_glob(uri, glob):
    assert has_glob(uri) is glob
    path, query = split_query(uri)
    assert path + query == uri and "?" not in path


def test_a_query_parameter_pyarrow_does_not_know_is_one_error_line():
    # (pyarrow raises ArrowInvalid; the clause that caught it named pyarrow.fs.ArrowInvalid,
    # which is not there: an internal error, exit 1)
    r = runner.invoke(
        app, ["batches", "gs://b/m.parquet?anonymous=true", "--strategy", "random",
              "--batch-size", "8"],
    )  # fmt: skip
    assert r.exit_code == 2
    assert r.stderr == (
        "error: gs://b/m.parquet: not a URI pyarrow can open; check it, and its query "
        "parameters: pyarrow's filesystem for this store must know each\n"
    )


# What pyarrow 25 raised on this machine (no Java; no Azure credentials; no network),
# as printed: the texts failure() reads.
NO_JVM = (
    "Unable to load libjvm\ndlopen(/usr/lib/jvm/default-java/libjvm.so) failed: "
    "/usr/lib/jvm/default-java/libjvm.so: cannot open shared object file"
)
AZURE_NO_TOKEN = (
    "Unknown error: Check for Hierarchical Namespace support on 'https://acct.blob.core."
    "windows.net/c' failed: N5Azure4Core11Credentials23AuthenticationExceptionE: Failed to "
    "get token from DefaultAzureCredential."
)
NO_DNS = "Could not resolve hostname"


@pytest.mark.parametrize(
    ("uri", "text", "what"),
    [
        ("hdfs://nn:8020/x.parquet", NO_JVM, "the HDFS client cannot be loaded"),
        ("viewfs://x/y.parquet", "Prior attempt to load libhdfs failed",
         "the HDFS client cannot be loaded"),
        ("abfs://c@a.dfs.core.windows.net/x", AZURE_NO_TOKEN, "no credentials found"),
        ("s3://b/k", NO_DNS, "the storage endpoint does not answer"),
    ],
)  # fmt: skip
def test_a_client_that_cannot_start_is_named(uri, text, what):
    assert classify(OSError(text), uri).what.startswith(what)


def _raise_in(module: str):
    """A function defined in a module named ``module`` that raises ValueError."""
    scope: dict = {"__name__": module}
    exec("def refuse():\n    raise ValueError('Repository id must be ...')", scope)
    return scope["refuse"]


@pytest.mark.parametrize(
    ("module", "store"),
    [("huggingface_hub.hf_file_system", True), ("fsspec.spec", True),
     ("dflash_diag.manifest", False), (__name__, False)],
)  # fmt: skip
def test_a_value_error_is_the_stores_only_when_its_client_raised_it(module, store):
    with pytest.raises(ValueError) as raised:
        _raise_in(module)()
    assert is_store_error(raised.value) is store
    if store:
        with pytest.raises(InputError) as said:
            with store_call("hf://datasets"):
                _raise_in(module)()
        assert said.value.what == "not a path this store takes"
    else:  # (a bug of this package's stays one)
        with pytest.raises(ValueError):
            with store_call("hf://datasets"):
                _raise_in(module)()


def test_a_uri_whose_fsspec_package_is_missing_names_it(monkeypatch):
    fsspec_registry = need("fsspec.registry")  # (the module: `fsspec.registry` is a mapping)

    entry = {"class": "nopkg_for_dflash_tests.FileSystem", "err": "install it"}
    monkeypatch.setitem(fsspec_registry.known_implementations, "az", entry)
    monkeypatch.delitem(fsspec_registry._registry, "az", raising=False)
    r = runner.invoke(app, ["batches", "az://c/x.parquet", "--strategy", "random",
                            "--batch-size", "8"])  # fmt: skip
    assert r.exit_code == 2
    assert r.stderr == (
        "error: az://c/x.parquet: reading this URI needs the optional package "
        "'nopkg_for_dflash_tests'; pip install nopkg_for_dflash_tests\n"
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="Linux's /dev/full: ENOSPC")
def test_a_full_disk_under_the_local_copy_is_not_the_stores_failure():
    # (writes to /dev/full fail with "No space left on device": a real ENOSPC)
    from dflash_diag.storage import StorageError, copy_file, locate

    log = Path(__file__).resolve().parents[2] / "sample_logs" / "run.log"
    loc = locate(str(log))
    with pytest.raises(InputError) as said:
        copy_file(loc, loc.path, "/dev/full")
    assert not isinstance(said.value, StorageError)
    assert str(said.value) == (
        f"/dev: cannot write the local copy of {log}: No space left on device; "
        "free space there, or set TMPDIR to another folder"
    )
