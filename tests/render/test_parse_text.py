"""``parse``'s column table prints a column's min and max in one format."""

from __future__ import annotations

from typer.testing import CliRunner

from dflash_diag.cli import app


def test_a_timestamp_columns_min_and_max_read_alike(tmp_path):
    # (W&B's _timestamp: min 1764600000.5 used to print 1.765e+09 beside max 1764600500)
    path = tmp_path / "export.csv"
    path.write_text(
        "step,loss,_timestamp\n1,2.5,1764600000.5\n2,2.4,1764600250.25\n3,2.3,1764600500\n"
    )
    result = CliRunner().invoke(app, ["parse", str(path)])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:] if line}
    assert rows["_timestamp"] == ["3", "1764600000.5", "1764600500.0"]
    assert rows["loss"] == ["3", "2.3", "2.5"] and rows["step"] == ["3", "1", "3"]
