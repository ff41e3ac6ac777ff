"""Does ``sample_evidence`` (and ``measured_evidence``) give the same tables as another
checkout?  The check behind its speed-ups, which must not change a result.

    PYTHONPATH=OLD python benchmarks/samples_same.py save DIR     # the reference
    PYTHONPATH=$PWD python benchmarks/samples_same.py check DIR   # compare with it

Each writes, or compares with, one parquet per evidence table of:

- the benchmark's input (``bench_samples.build``) at 1M samples x 6 epochs, tokens and
  excess given, as ``bench_samples.py`` times it;
- variants at 200k samples: 5% of the z's NaN with ``allow_low=1`` and a baseline; no
  tokens with ``min_appearances=3``; sorted-greedy-like batches (the same groups every
  epoch, so groups of 64); every variant also with ``explain_rounds=0``;
- every call of ``sample_evidence`` / ``measured_evidence`` made by the tests of
  ``tests/samples`` and ``tests/spikes`` (``save``/``check`` run pytest with a plugin
  that records each table under its test's id and call number).

Integer, bool and category columns must be equal; float columns equal, or within
``1e-12`` relative where summed in another order (``--rtol``), NaN where NaN.  Prints one
line per table that differs and the count that are the same; exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_samples import PER_POINT, build  # noqa: E402

from dflash_diag.samples import Membership, SampleOptions, sample_evidence  # noqa: E402

TABLES = Path("tables")


def bench_cases() -> dict[str, Callable[[], pd.DataFrame]]:
    """The cases over built memberships, by name."""
    cases: dict[str, Callable[[], pd.DataFrame]] = {}
    m, z, _ = build(1_000_000)
    cases["bench_1m"] = lambda: sample_evidence(m, z, excess=0.02 * z).table
    small, zs, _ = build(200_000, seed=3)
    rng = np.random.default_rng(5)
    znan = zs.copy()
    znan[rng.random(zs.size) < 0.05] = np.nan
    base = 1.0 + rng.random(zs.size)
    bare = Membership(small.offsets, small.samples, small.n_samples)
    greedy, zg = _greedy(20_480, rng)
    for rounds in (20, 0):
        low = SampleOptions(allow_low=1, explain_rounds=rounds)
        three = SampleOptions(min_appearances=3, explain_rounds=rounds)
        plain = SampleOptions(explain_rounds=rounds)
        cases[f"nan_low1_r{rounds}"] = lambda o=low: (
            sample_evidence(small, znan, excess=0.03 * znan, baseline=base, options=o).table
        )
        cases[f"notokens_r{rounds}"] = lambda o=three: sample_evidence(bare, zs, options=o).table
        cases[f"greedy_r{rounds}"] = lambda o=plain: (
            sample_evidence(greedy, zg, excess=0.02 * zg, options=o).table
        )
    return cases


def _greedy(n_samples: int, rng: np.random.Generator) -> tuple[Membership, np.ndarray]:
    """The same batches of 64 each epoch in a new order (+ a few strays), poison in one."""
    batches = rng.permutation(n_samples).reshape(-1, PER_POINT)
    samples = np.concatenate([batches[rng.permutation(len(batches))].ravel() for _ in range(6)])
    samples[rng.integers(0, samples.size, 50)] = rng.integers(0, n_samples, 50)
    point = np.arange(samples.size) // PER_POINT
    m = Membership.from_entries(point, samples, n_samples=n_samples)
    z = rng.standard_normal(m.n_points)
    hit = np.isin(samples, batches[7])
    np.add.at(z, point[hit], 5.0)
    return m, z


def run_cases(out: Path) -> list[str]:
    """Compute every case's table into ``out`` (parquet); their names."""
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for name, fn in bench_cases().items():
        _write(fn(), out / f"{name}.parquet")
        names.append(name)
    return names


def _write(table: pd.DataFrame, path: Path) -> None:
    table.to_parquet(path)


class Recorder:
    """A pytest plugin: every evidence table a test makes, to ``out``."""

    def __init__(self, out: Path) -> None:
        self.out, self.test, self.calls = out, "", 0

    def pytest_runtest_setup(self, item: Any) -> None:
        self.test, self.calls = item.nodeid, 0

    def pytest_configure(self, config: Any) -> None:
        from dflash_diag.samples import evidence, measured

        for module, name in ((evidence, "evidence_with_ground"), (measured, "measured_evidence")):
            setattr(module, name, self._wrap(getattr(module, name)))
        import dflash_diag.samples as package

        package.measured_evidence = measured.measured_evidence  # type: ignore[attr-defined]

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            ev = fn(*args, **kwargs)
            safe = "".join(c if c.isalnum() else "_" for c in self.test)
            _write(ev.table, self.out / f"test_{safe}_{self.calls}.parquet")
            self.calls += 1
            return ev

        return wrapped


def run_tests(out: Path) -> int:
    import pytest

    out.mkdir(parents=True, exist_ok=True)
    args = ["-q", "-x", "-p", "no:cacheprovider", "--hypothesis-seed=0"]
    args += ["tests/samples", "tests/spikes"]
    return int(pytest.main(args, plugins=[Recorder(out)]))


def compare(ref: pd.DataFrame, new: pd.DataFrame, rtol: float) -> str:
    """ "" when the tables agree, else what differs."""
    if list(ref.columns) != list(new.columns) or len(ref) != len(new):
        return f"columns or rows differ: {list(ref.columns)} {len(ref)} / {len(new)}"
    if not ref.index.equals(new.index):
        return "index differs"
    bad = []
    for c in ref.columns:
        a, b = ref[c], new[c]
        if a.dtype != b.dtype:
            bad.append(f"{c} dtype {a.dtype} / {b.dtype}")
        elif a.dtype.kind == "f":
            x, y = a.to_numpy(), b.to_numpy()
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            close = np.isclose(x, y, rtol=rtol, atol=0.0) | same
            if not close.all():
                bad.append(f"{c}: {(~close).sum()} rows differ")
            elif not same.all():
                bad.append(f"~{c}: {(~same).sum()} rows within rtol")
        elif not a.equals(b):
            bad.append(f"{c}: {(a != b).sum()} rows differ")
    return "; ".join(bad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["save", "check"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--rtol", type=float, default=1e-12)
    parser.add_argument("--no-tests", action="store_true", help="the built cases only")
    args = parser.parse_args()
    target = args.dir if args.action == "save" else args.dir / "new"
    if args.action == "check" and target.exists():
        shutil.rmtree(target)
    run_cases(target)
    if not args.no_tests and run_tests(target) != 0:
        sys.exit("the tests failed")
    if args.action == "save":
        return
    same, differ = 0, 0
    for ref_path in sorted(args.dir.glob("*.parquet")):
        if args.no_tests and ref_path.name.startswith("test_"):
            continue
        new_path = target / ref_path.name
        if not new_path.exists():
            print(f"{ref_path.stem}: missing in the new run")
            differ += 1
            continue
        what = compare(pd.read_parquet(ref_path), pd.read_parquet(new_path), args.rtol)
        if what and not all(part.startswith("~") for part in what.split("; ")):
            print(f"{ref_path.stem}: {what}")
            differ += 1
        else:
            same += 1
            if what:
                print(f"{ref_path.stem}: same within rtol ({what})")
    print(f"{same} tables the same, {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
