"""compare on a run that shares no metric with its baseline: the error names a few of
the run's columns and counts the rest, so the line stays short (<= 300 characters)."""

from typer.testing import CliRunner

from dflash_diag.cli import app


def test_no_shared_metric_is_a_short_error_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v1.log").write_text("".join(f"step={i} loss={3 - i / 10}\n" for i in range(1, 30)))
    names = [f"optimizer_setting_number_{k}" for k in range(20)]
    (tmp_path / "run.log").write_text(
        "".join(f"step={i} " + " ".join(f"{n}={i}" for n in names) + "\n" for i in range(1, 30))
    )
    result = CliRunner().invoke(app, ["compare", "v1.log", "run.log"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and len(result.stderr.rstrip("\n")) <= 300, result.stderr
