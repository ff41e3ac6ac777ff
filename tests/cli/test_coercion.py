"""A command-line value the CLI reads itself is the value typer's own coercion gives."""

from __future__ import annotations

import math

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.cli import app
from dflash_diag.cli.coercion import TYPERS, plain_value
from tests.budget import examples


def _params_by_kind() -> dict[str, object]:
    """One parameter of ``spikes`` per annotation: str, int, float, bool, Path, an
    Enum (``detector``)."""
    command = typer.main.get_command(app).commands["spikes"]
    found = {}
    for param in command.params:
        kind = getattr(param.type_descriptor.annotation, "__name__", "")
        if param.name == "detector":
            kind = "Enum"
        if kind in ("str", "int", "float", "bool", "Path", "Enum") and not param.multiple:
            found.setdefault(kind, param)
    return found


PARAMS = _params_by_kind()


def _typers(value, param):
    """typer's own coercion of ``value``, or the exception it raises."""
    param._runtime_param = None
    try:
        return param.get_runtime_param().coerce(value, param=param, ctx=None)
    except Exception as e:  # noqa: BLE001 - the answer compared
        return e


NUMBERISH = st.text(alphabet="0123456789+-.eE_ xinfa", max_size=12)
MEMBERS = st.sampled_from(list(PARAMS["Enum"].type_descriptor.annotation))


@settings(max_examples=examples(500), deadline=None)
@given(
    st.sampled_from(sorted(PARAMS)),
    st.one_of(NUMBERISH, st.text(max_size=8), st.booleans(), MEMBERS),
)
def test_what_is_read_here_is_what_typer_reads(kind, value):
    param = PARAMS[kind]
    ours = plain_value(value, param.type_descriptor)
    if ours is TYPERS:
        return
    theirs = _typers(value, param)
    assert type(ours) is type(theirs), (value, theirs)
    assert ours == theirs or (isinstance(ours, float) and math.isnan(ours) and math.isnan(theirs))


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [("int", "16384", 16384), ("int", "-3", -3), ("float", "0.25", 0.25),
     ("float", "1e-4", 1e-4), ("str", "loss", "loss"), ("bool", True, True),
     ("Enum", *[list(PARAMS["Enum"].type_descriptor.annotation)[0]] * 2)],
)  # fmt: skip
def test_the_usual_values_are_read_here(kind, value, expected):
    assert plain_value(value, PARAMS[kind].type_descriptor) == expected


def test_a_path_is_read_here_when_typer_would_only_check_it_is_readable(tmp_path):
    from pathlib import Path

    desc = PARAMS["Path"].type_descriptor
    log = tmp_path / "run.log"
    log.write_text("x")
    assert plain_value(str(log), desc) == log
    assert plain_value(str(tmp_path / "absent.log"), desc) == tmp_path / "absent.log"
    assert plain_value("", desc) is TYPERS  # typer says what an empty path is
    assert plain_value("a\0b", desc) is TYPERS
    assert isinstance(plain_value("-", desc), Path)


@pytest.mark.parametrize(
    ("kind", "value"),
    [("int", "1_000"), ("int", " 2"), ("int", "1.0"), ("int", "9" * 30), ("float", "nan"),
     ("float", "1_0.5"), ("float", "inf"), ("bool", "yes"), ("Enum", "robust")],
)  # fmt: skip
def test_anything_else_is_left_to_typer(kind, value):
    assert plain_value(value, PARAMS[kind].type_descriptor) is TYPERS


def test_a_bad_number_still_gets_typers_error(tmp_path):
    from typer.testing import CliRunner

    log = tmp_path / "run.log"
    log.write_text("".join(f"step={i} loss={3.0 - i / 10}\n" for i in range(1, 11)))
    result = CliRunner().invoke(app, ["spikes", str(log), "--window", "ten"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "--window" in result.stderr
