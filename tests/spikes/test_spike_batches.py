"""The micro-batches shown behind each spike: those of its logged point, in order."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dflash_diag.reports.spikes import MicroBatch, spike_batches, spikes_report
from dflash_diag.spikes.features import micro_points


def plain_spike_batches(replay, ids, detection, spikes, covers, metric_rank):
    """A pass over every micro-batch for each spike."""
    d = detection
    idx = micro_points(replay, d.steps, d.log_interval, covers, metric_rank)
    where = {int(s): i for i, s in enumerate(d.steps)}
    micro = replay.micro
    out = {}
    for s in spikes:
        peak = int(s.event.peak_step)
        if peak not in where:
            continue
        rows = np.flatnonzero(idx == where[peak])
        out[peak] = tuple(
            MicroBatch(
                int(micro["step"].iloc[r]),
                int(micro["rank"].iloc[r]),
                int(micro["micro"].iloc[r]),
                tuple(
                    int(x)
                    for x in (replay.batch(int(r)) if ids is None else ids[replay.batch(int(r))])
                ),
            )
            for r in rows
        )
    return out


@pytest.fixture(scope="module")
def report():
    return spikes_report("sample_logs/run.log")


@pytest.mark.parametrize("metric_rank", [None, 0, 5])
def test_spike_batches_are_those_of_each_spikes_point(report, metric_rank) -> None:
    # every rank's micro-batches, or one rank's (the others' rows interleaved, -1)
    comp, att = report.composition, report.attribution
    assert comp is not None and att is not None and report.spikes
    shown = SimpleNamespace(metric_rank=metric_rank)
    args = (comp.replay, comp.ids, report.detection, att.spikes, att.covers)
    got = spike_batches(*args, shown)
    assert got == plain_spike_batches(*args, metric_rank)
    assert all(got.values())
