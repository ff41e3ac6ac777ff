"""The dense layout of each sample's entries (``samples.layout``) against the plain passes
over the entries (Hypothesis): the same counts, rank sums, order statistics, entries of a
few samples and evidence tables, bit for bit."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pandas as pd
from budget import examples
from chunking import small_chunks
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.samples import Membership, SampleOptions, sample_evidence
from dflash_diag.samples.appearances import appearances
from dflash_diag.samples.layout import windows
from dflash_diag.samples.membership import entries_with

from .test_invariants import runs


@st.composite
def epochs(draw: st.DrawFn) -> tuple[Membership, np.ndarray]:
    """A shuffled run: each epoch a permutation of the samples (some dropped at its end,
    some entries of no logged point), cut into points of a few samples, z with ties and
    NaNs; or, now and then, any membership (:func:`runs`)."""
    if draw(st.integers(0, 4)) == 0:
        return draw(runs())
    n_samples = draw(st.integers(1, 12))
    n_epochs = draw(st.integers(1, 5))
    per_point = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    drop = draw(st.integers(0, min(2, n_samples - 1)))
    sample = np.concatenate([rng.permutation(n_samples)[drop:] for _ in range(n_epochs)])
    point = np.arange(sample.size) // per_point
    n_points = int(point[-1]) + 1
    point[rng.random(sample.size) < 0.05] = -1
    z = rng.choice([np.nan, -1.0, 0.0, 0.5, 2.0, 3.5], n_points)
    return Membership.from_entries(point, sample, n_samples, n_points), z


def plain(app):
    """The same appearances without their layout (the passes over the entries)."""
    return replace(app, layout=None)


@settings(max_examples=examples(150), deadline=None)
@given(epochs(), st.integers(1, 7), st.integers(0, 2))
def test_the_layout_gives_the_counts_sums_and_order_statistics_of_the_plain_passes(
    run, chunk, allow_low
):
    # (chunks of a few entries, so windows and repeats cross chunk edges; the layout
    # tried whatever the entries a sample)
    m, z = run
    with small_chunks(chunk), mock.patch("dflash_diag.samples.layout.DENSE_FROM", 0):
        app = appearances(m, z)
    if app.layout is None:  # (past the budget: nothing to compare)
        return
    ref = plain(app)
    assert app.counts().tolist() == ref.counts().tolist()
    for got, want in zip(app.counts_and_rank_sums(), ref.counts_and_rank_sums(), strict=True):
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    for got, want in zip(app.lowest(allow_low), ref.lowest(allow_low), strict=True):
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    assert app.layout.seen.tolist() == np.isin(np.arange(m.n_samples), m.samples).tolist()
    for ids in (np.arange(m.n_samples), np.arange(0, m.n_samples, 3)):
        got = app.layout.entries(ids)
        assert got.dtype == np.int64
        assert got.tolist() == entries_with(m.samples, ids, m.n_samples).tolist()


@settings(max_examples=examples(150), deadline=None)
@given(epochs(), st.integers(1, 7))
def test_windows_hold_every_entry_once_and_no_sample_twice(run, chunk):
    m, _ = run
    with small_chunks(chunk), mock.patch("dflash_diag.samples.layout.BUDGET", 10**6):
        slots = windows(m.samples, m.n_samples)
    assert slots is not None
    # each window: a sample's slot holds one of its own entries; together every entry
    # exactly once
    placed = np.concatenate([col[col >= 0] for col in slots]) if slots else np.zeros(0)
    assert sorted(placed.tolist()) == list(range(m.n_entries))
    for col in slots:
        has = np.flatnonzero(col >= 0)
        assert (m.samples[col[has]] == has).all()


@settings(max_examples=examples(60), deadline=None)
@given(epochs(), st.integers(1, 7), st.integers(0, 1), st.booleans())
def test_evidence_over_the_layout_is_the_plain_evidence(run, chunk, allow_low, tokens):
    m, z = run
    if tokens:
        m = replace(m, tokens=1.0 + np.arange(m.n_entries, dtype=np.float64) % 5)
    opts = SampleOptions(allow_low=allow_low, min_appearances=1 + allow_low, detail_p=0.5)
    with small_chunks(chunk), mock.patch("dflash_diag.samples.layout.DENSE_FROM", 0):
        got = sample_evidence(m, z, excess=np.nan_to_num(z) / 10, options=opts).table
    with mock.patch("dflash_diag.samples.appearances.dense_layout", lambda *a: None):
        want = sample_evidence(m, z, excess=np.nan_to_num(z) / 10, options=opts).table
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_a_shuffled_run_gets_one_window_an_epoch():
    # 4 epochs of 50 samples, each a permutation, points of 5: the fast path is taken
    rng = np.random.default_rng(3)
    sample = np.concatenate([rng.permutation(50) for _ in range(4)])
    m = Membership.from_entries(np.arange(200) // 5, sample, 50, 40)
    app = appearances(m, rng.normal(size=40))
    assert app.layout is not None and len(app.layout.slots) == 4
