"""A log read with no loss at all is never shown in silence (issue 24)."""

from __future__ import annotations

from typer.testing import CliRunner

from dflash_diag.cli import app


def test_parse_says_what_it_found_and_what_it_needs(tmp_path):
    p = tmp_path / "nccl.log"
    p.write_text("step=1 nranks=8 cudaDev=3\nstep=2 nranks=8 cudaDev=3\n")
    r = CliRunner().invoke(app, ["parse", str(p)])
    assert r.exit_code == 2
    assert r.output.startswith(f"error: {p}: no loss found: 2 rows with cuda_dev, nranks")
    assert "parse needs records with a step and a loss" in r.output


def test_parse_run_n_of_appended_runs(tmp_path):
    p = tmp_path / "runs.log"
    p.write_text("".join(f"step {s}/{t} | loss {t / 10}\n" for t in (30, 50) for s in (10, 20, 30)))
    r = CliRunner().invoke(app, ["parse", str(p), "--run", "1", "--json"])
    assert r.exit_code == 0, r.output
    import json

    doc = json.loads(r.output)
    assert doc["run"] == 1 and [x["steps"] for x in doc["runs"]] == [[10, 30], [10, 30]]
    assert doc["skipped"]["other_run"] == 3
    r = CliRunner().invoke(app, ["parse", str(p), "--run", "3"])
    assert (
        r.exit_code == 2
        and r.output == "error: --run: no run 3: the log holds 2 runs; give 1 to 2\n"
    )


def test_a_csv_of_context_columns_only_names_them(tmp_path):
    """``step,lr`` holds numbers, but no metric: the error says which columns it read."""
    log = tmp_path / "metrics.csv"
    log.write_text("step,lr\n1,0.1\n2,0.1\n")
    result = CliRunner().invoke(app, ["spikes", str(log)])
    assert result.exit_code == 2
    assert "no numeric metric columns (only step, lr: a step's context" in result.stderr
