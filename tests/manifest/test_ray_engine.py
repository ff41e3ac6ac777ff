"""``manifest --engine ray`` equals the local engine, row for row and in dataset order, on
a local Ray cluster (``ray.init(num_cpus=2)`` on loopback, no dashboard): token-id
lists, padded ids with an attention mask, text by a tokenizer.json, shards by s3:// URI.

Under CI (``CI=true``) these run: a missing ``ray`` fails them instead of skipping.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.manifest import read_manifest

from .conftest import KEY_ID, SECRET, need
from .test_manifest_datasets import word_tokenizer

# a real server or cluster on loopback, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
runner = CliRunner()

need("ray")  # (under CI the extra is installed: a missing ray fails, never skips)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster(s3_server):
    """Two CPUs; the workers' environment points at the loopback S3 server, as a real
    cluster's workers carry their own credentials (instance roles, env, config files)."""
    import ray

    env = {
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": env},
    )
    yield
    ray.shutdown()


def ray_manifest(*args, **kwargs):
    from dflash_diag.manifest.ray_engine import ray_manifest

    return ray_manifest(*args, **kwargs).manifest


def same(a, b) -> None:
    assert a.lengths.tolist() == b.lengths.tolist()
    assert a.ids.tolist() == b.ids.tolist()
    assert a.category_names == b.category_names
    assert (a.categories is None) == (b.categories is None)
    if a.categories is not None:
        assert a.categories.tolist() == b.categories.tolist()
    assert a.description.removesuffix(" (engine: ray)") == b.description


def scrambled_shards(folder: Path, n: int = 7, seed: int = 3) -> Path:
    """``n`` shards of several row groups, written in an order their sorted names are
    not, some in a subfolder; rows carry sample ids and a category."""
    rng = np.random.default_rng(seed)
    names = [f"{'sub/' if k % 3 == 0 else ''}p-{(k * 5) % n}.parquet" for k in range(n)]
    start = 0
    for name in names:
        rows = int(rng.integers(1, 400))
        ids = [[0] * int(x) for x in rng.integers(0, 300, rows)]
        table = pa.table(
            {
                "input_ids": ids,
                "sample_id": np.arange(start, start + rows) * 7 + 1,
                "source": rng.choice(["chat", "code", "math"], rows),
            }
        )
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / name, row_group_size=64)
        start += rows
    return folder


def test_ray_equals_local_on_scrambled_shards(tmp_path):
    folder = scrambled_shards(tmp_path / "shards")
    local = read_manifest(folder)
    ray_m = ray_manifest(folder)
    same(ray_m, local)
    assert len(local) > 500  # (many rows, several blocks)


@pytest.mark.parametrize("given", ["shards", "ids.parquet", "padded.parquet", "shards/*.parquet"])
def test_ray_equals_local_on_the_datasets_fixtures(given):
    same(ray_manifest(DATA / given), read_manifest(DATA / given))


def test_ray_counts_text_with_a_tokenizer_like_the_local_engine(tmp_path):
    tok = word_tokenizer(tmp_path / "tokenizer.json")
    for special in (True, False):
        kw = {"tokenizer": tok, "special_tokens": special}
        same(ray_manifest(DATA / "shards", **kw), read_manifest(DATA / "shards", **kw))


def test_ray_reads_shards_by_s3_uri(s3, tmp_path):
    folder = scrambled_shards(tmp_path / "shards", n=4)
    s3.client().create_bucket(Bucket="rayb")
    s3.upload("rayb", folder, "corpus")
    same(ray_manifest("s3://rayb/corpus/"), read_manifest(folder))


def test_cli_writes_shards_and_one_file_equal_to_the_local_engine(tmp_path):
    folder = scrambled_shards(tmp_path / "shards")
    one, parts = tmp_path / "ray.parquet", tmp_path / "ray-shards"
    r = runner.invoke(
        app,
        ["manifest", str(folder), "--engine", "ray", "--to", str(one), "--shards", str(parts)],
    )
    assert r.exit_code == 0, r.output
    assert "(engine: ray)" in r.stdout
    local = tmp_path / "local.parquet"
    assert runner.invoke(app, ["manifest", str(folder), "--to", str(local)]).exit_code == 0
    assert pq.read_table(one).equals(pq.read_table(local))
    # the shards, read back as a folder (sorted names), are the same manifest
    same_rows = read_manifest(parts).lengths.tolist() == read_manifest(local).lengths.tolist()
    assert same_rows


def test_shards_are_cut_at_the_row_count_in_order(tmp_path):
    from dflash_diag.manifest.write import write_shards

    m = read_manifest(scrambled_shards(tmp_path / "s"))
    files = write_shards(m, tmp_path / "out", rows=100)
    assert len(files) == -(-len(m) // 100) > 1
    assert read_manifest(tmp_path / "out").ids.tolist() == m.ids.tolist()


def test_ray_refuses_what_is_not_parquet_and_mixed_schemas(tmp_path):
    with pytest.raises(InputError, match="the ray engine reads Parquet files"):
        ray_manifest(DATA / "hf_dataset")
    folder = tmp_path / "mixed"
    shutil.copytree(DATA / "shards", folder)
    pq.write_table(pa.table({"input_ids": [[1.0]]}), folder / "z.parquet")
    r = runner.invoke(
        app, ["manifest", str(folder), "--engine", "ray", "--to", str(tmp_path / "o.parquet")]
    )
    assert r.exit_code == 2
    assert r.stderr == (
        f"error: {folder}: shards of mixed schemas: z.parquet differs from the first shard; "
        "write the shards with one schema\n"
    )
