"""What ``samples`` says when it names no sample."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from dflash_diag.render.samples import answer


def test_no_name_says_on_what_the_samples_were_tested() -> None:
    """ "none makes its batches high" is said of the loss the samples were tested on (a
    model that explains the long samples' batches leaves them nothing to stand out by)."""
    basis = "the loss left once the composition model has predicted the batch"
    findings = SimpleNamespace(
        note=lambda: None, evidence=SimpleNamespace(n_tested=400), basis=basis
    )
    report = SimpleNamespace(
        table=pd.DataFrame({"named": [False]}), findings=findings, high_kinds=()
    )
    (line,) = answer(report)
    assert line.startswith("No sample is named: of 400 tested")
    assert line.endswith(f"tested on {basis}).")
