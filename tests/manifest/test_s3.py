"""Manifests, shard folders, globs and logs read by ``s3://`` URI from a real
S3-compatible server on loopback (moto's server mode, see conftest.py): the same results
as on the local copy; bad stores give one ``error:`` line, exit 2, and no credential."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.manifest import read_manifest
from dflash_diag.storage import StorageError, open_input

from .conftest import KEY_ID, SECRET, free_port, start_moto

# a real server or cluster on loopback, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_logs"
DATA = ROOT / "tests" / "data" / "datasets"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def without(doc: dict, *keys: str) -> dict:
    return {k: v for k, v in doc.items() if k not in keys}


def no_secret(text: str) -> None:
    assert KEY_ID not in text and SECRET not in text


@pytest.fixture
def bucket(s3, request) -> str:
    """A fresh bucket named after the test."""
    name = "b-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    name = "".join(c for c in name if c.isalnum() or c == "-")
    s3.client().create_bucket(Bucket=name)
    return name


def test_batches_by_uri_equals_the_local_copy(s3, bucket):
    s3.upload(bucket, SAMPLE / "manifest.parquet", "data/manifest.parquet")
    config = str(SAMPLE / "dflash-diag.toml")
    remote = run("batches", f"s3://{bucket}/data/manifest.parquet", "--config", config, "--json")
    local = run("batches", str(SAMPLE / "manifest.parquet"), "--config", config, "--json")
    assert remote.exit_code == 0, remote.output
    r, lo = json.loads(remote.stdout), json.loads(local.stdout)
    assert r["manifest"] == f"s3://{bucket}/data/manifest.parquet"
    assert without(r, "manifest") == without(lo, "manifest")


def test_spikes_with_a_manifest_and_a_log_by_uri_equal_the_local_copy(s3, bucket):
    s3.upload(bucket, SAMPLE / "manifest.parquet", "m/manifest.parquet")
    s3.upload(bucket, SAMPLE / "run.log", "logs/run.log")
    config = str(SAMPLE / "dflash-diag.toml")
    manifest = f"s3://{bucket}/m/manifest.parquet"
    remote = run("spikes", f"s3://{bucket}/logs/run.log", "--manifest", manifest,
                 "--config", config, "--json")  # fmt: skip
    local = run("spikes", str(SAMPLE / "run.log"), "--manifest", str(SAMPLE / "manifest.parquet"),
                "--config", config, "--json")  # fmt: skip
    assert remote.exit_code == 0, remote.output
    r, lo = json.loads(remote.stdout), json.loads(local.stdout)
    assert r["manifest"] == manifest
    assert r["log"] == f"s3://{bucket}/logs/run.log"
    assert without(r, "manifest", "log") == without(lo, "manifest", "log")
    assert r["spikes"] and r["spikes"] == lo["spikes"]  # (the run has spikes to compare)


@pytest.mark.parametrize(
    "given",
    [
        "ids.parquet",
        "ids.jsonl",
        "ids.arrow",
        "hf_dataset",
        "hf_dict",
        "shards",
        "shards/*.parquet",
    ],
)
def test_every_manifest_source_reads_the_same_by_uri(s3, bucket, given):
    folder = given.split("/")[0]
    s3.upload(bucket, DATA / folder, f"d/{folder}")
    remote = read_manifest(f"s3://{bucket}/d/{given}")
    local = read_manifest(DATA / given)
    assert remote.lengths.tolist() == local.lengths.tolist()
    assert remote.ids.tolist() == local.ids.tolist()
    assert remote.category_names == local.category_names
    assert remote.categories.tolist() == local.categories.tolist()
    assert remote.path == f"s3://{bucket}/d/{given}"


def test_a_glob_takes_only_the_shards_it_matches(s3, bucket, tmp_path):
    shards = sorted((DATA / "shards").glob("*.parquet"))
    s3.upload(bucket, DATA / "shards", "g")
    expected = [n for p in shards[1:3] for n in pq.read_table(p).column("input_ids").to_pylist()]
    m = read_manifest(f"s3://{bucket}/g/part-0000[12].parquet")
    assert m.lengths.tolist() == [len(r) for r in expected]


@pytest.fixture
def endpoint_in_the_uri(s3, monkeypatch) -> str:
    """The server's address as a URI query (docs/storage.md: an S3-compatible server
    named in the URI), ``AWS_ENDPOINT_URL`` unset."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    host = s3.endpoint.split("://", 1)[1]
    return f"?endpoint_override={host}&scheme=http"


def test_the_endpoint_given_in_the_uri_query(s3, bucket, endpoint_in_the_uri):
    # (a "?" once read as a glob: the bucket was listed without the query, elsewhere)
    s3.upload(bucket, SAMPLE / "manifest.parquet", "q/manifest.parquet")
    config = str(SAMPLE / "dflash-diag.toml")
    uri = f"s3://{bucket}/q/manifest.parquet{endpoint_in_the_uri}"
    remote = run("batches", uri, "--config", config, "--json")
    local = run("batches", str(SAMPLE / "manifest.parquet"), "--config", config, "--json")
    assert remote.exit_code == 0, remote.output
    r, lo = json.loads(remote.stdout), json.loads(local.stdout)
    assert r["manifest"] == f"s3://{bucket}/q/manifest.parquet"  # (the query not shown)
    assert without(r, "manifest") == without(lo, "manifest")


def test_a_glob_with_the_endpoint_in_the_uri_query(s3, bucket, endpoint_in_the_uri):
    shards = sorted((DATA / "shards").glob("*.parquet"))
    s3.upload(bucket, DATA / "shards", "gq")
    m = read_manifest(f"s3://{bucket}/gq/part-0000[12].parquet{endpoint_in_the_uri}")
    expected = [n for p in shards[1:3] for n in pq.read_table(p).column("input_ids").to_pylist()]
    assert m.lengths.tolist() == [len(r) for r in expected]


def test_open_input_reads_the_bytes(s3, bucket):
    s3.upload(bucket, SAMPLE / "run.log", "x/run.log")
    with open_input(f"s3://{bucket}/x/run.log") as f:
        assert f.read() == (SAMPLE / "run.log").read_bytes()


def test_a_missing_key_and_a_missing_bucket_are_not_found(s3, bucket):
    for uri in (f"s3://{bucket}/none.parquet", "s3://no-such-bucket-here/m.parquet"):
        r = run("batches", uri, "--strategy", "random", "--token-budget", "4096")
        assert r.exit_code == 2
        assert r.stderr == f"error: {uri}: not found; check the bucket and the key\n"


def free_port_holding_403() -> int:
    """A free loopback port whose digits hold "403" (40300-40399, 14030-14039...)."""
    for port in [*range(40300, 40400), *range(14030, 14040), *range(24030, 24040)]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.fail("no free port holding 403 on loopback")


@pytest.mark.parametrize("port", [free_port, free_port_holding_403])
def test_an_unreachable_endpoint_is_one_line_without_credentials(s3, monkeypatch, port):
    # (a port holding "403" once read as "access denied")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port()}")
    r = run("batches", "s3://bkt/m.parquet", "--strategy", "random", "--token-budget", "4096")
    assert r.exit_code == 2
    assert r.stderr == (
        "error: s3://bkt/m.parquet: the storage endpoint does not answer; check "
        "AWS_ENDPOINT_URL (or the endpoint in the URI) and the network\n"
    )


def test_credentials_in_the_uri_are_never_shown(s3, bucket):
    uri = f"s3://{KEY_ID}:{SECRET}@{bucket}/none.parquet?secret_key={SECRET}"
    r = run("manifest", uri, "--to", "out.parquet")
    assert r.exit_code == 2
    no_secret(r.stderr)
    assert r.stderr.startswith(f"error: s3://{bucket}/none.parquet: ")
    assert r.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def locked_server():
    """A second server that refuses every request after its first two (auth enforced:
    the key pair is not one it issued): a bucket without access."""
    server = start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "2"})
    c = server.client()
    c.create_bucket(Bucket="locked")
    c.put_object(Bucket="locked", Key="m.parquet", Body=b"PAR1")
    yield server
    server.process.terminate()
    server.process.wait(10)


def test_a_bucket_without_access_is_access_denied(s3, locked_server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", locked_server.endpoint)
    for uri in ("s3://locked/m.parquet", "s3://locked/"):
        r = run("manifest", uri, "--to", "out.parquet")
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith(f"error: {uri}: access denied"), r.stderr
        assert r.stderr.count("\n") == 1
        no_secret(r.stderr)
    with pytest.raises(StorageError):
        read_manifest("s3://locked/m.parquet")


def mixed_shards(folder: Path) -> Path:
    folder.mkdir()
    pq.write_table(pa.table({"input_ids": [[1, 2], [3]]}), folder / "a.parquet")
    pq.write_table(pa.table({"input_ids": [[1.5]], "x": [1]}), folder / "b.parquet")
    return folder


def test_shards_of_mixed_schemas_are_one_error_local_and_by_uri(s3, bucket, tmp_path):
    folder = mixed_shards(tmp_path / "mixed")
    s3.upload(bucket, folder, "mixed")
    for given in (str(folder), f"s3://{bucket}/mixed/"):
        r = run("manifest", given, "--to", str(tmp_path / "out.parquet"))
        assert r.exit_code == 2
        assert r.stderr.startswith(f"error: {given.rstrip('/') if '://' not in given else given}")
        assert "shards of mixed schemas: b.parquet has input_ids: list<element: double>" in r.stderr
        assert r.stderr.count("\n") == 1
    with pytest.raises(InputError, match="mixed schemas"):
        read_manifest(folder)


def test_a_remote_save_to_disk_copy_names_the_uri_in_its_errors(s3, bucket, tmp_path):
    folder = tmp_path / "ds"
    shutil.copytree(DATA / "hf_dataset", folder)
    (folder / "data-00001-of-00003.arrow").unlink()
    s3.upload(bucket, folder, "broken")
    with pytest.raises(InputError) as e:
        read_manifest(f"s3://{bucket}/broken")
    assert str(e.value).startswith(f"s3://{bucket}/broken: state.json names missing data files")
    assert "dflash-diag-" not in str(e.value)  # (not the temporary copy's path)
