"""What the loss curve alone can and cannot tell on the real Trainer runs: the figures
behind docs/samples.md's "What the loss curve alone cannot tell apart" and "Measured
ground".

    python benchmarks/samples_limits.py

Prints, from tests/data/trainer_runs (the per-sample truth in ``sample_loss.parquet``):

1. how many robust sigmas of the step-to-step noise each ordinary-length poison sample
   adds to its batch, epoch by epoch (``share x (loss - batch median) / sigma``, sigma the
   robust scale of the detrended token-weighted batch loss);
2. the poison's ranks under a matched filter on inferred ground, ``sum_e s_e z_e /
   sqrt(sum_e s_e^2)`` over epochs 2-4 (``z`` the points' z the sample tests use,
   ``s`` the sample's token share), which knows the effect is proportional to the share;
3. the clean samples named on inferred ground, with their measured excess and what they
   add to their batches in sigmas;
4. on measured ground, the poison's within-kind z against the largest clean one, and
   the shape of a generalised Pareto fitted to each kind's upper tail (above its 90th
   percentile) in the clean runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dflash_diag.composition import Request
from dflash_diag.reports import SpikesOptions, spikes_report
from dflash_diag.reports.samples import sample_table
from dflash_diag.spikes.culprits import point_z

RUNS = Path(__file__).resolve().parents[1] / "tests" / "data" / "trainer_runs"
POISONED = ("poison_ordinary", "poison_long", "grouped")


def truth(name: str) -> tuple[pd.DataFrame, set[int]]:
    """The per-sample truth, with each entry's excess over its batch's median, its token
    share, and its batch's noise scale; and the poison ids."""
    d = RUNS / name
    s = pd.read_parquet(d / "sample_loss.parquet")
    poison = set((json.loads((d / "truth.json").read_text()).get("poison") or {}).get("ids", []))
    s["excess"] = s["loss"] - s.groupby("step")["loss"].transform("median")
    s["share"] = s["targets"] / s.groupby("step")["targets"].transform("sum")
    mean = (s["loss"] * s["targets"]).groupby(s["step"]).sum() / s.groupby("step")["targets"].sum()
    resid = mean - mean.rolling(21, center=True, min_periods=1).median()
    sigma = 1.4826 * float(np.median(np.abs(resid - resid.median())))
    s["sigmas"] = s["share"] * s["excess"] / sigma
    return s, poison


def report(name: str, ground: str):
    """The run's spikes report and its samples' table (``samples``' table: the same
    findings)."""
    d = RUNS / name
    batches = Request(composition=d / "train.batches", manifest=d / "manifest.parquet")
    rep = spikes_report(d / "trainer_state.json", SpikesOptions(ground=ground), batches)
    return rep, sample_table(rep.attribution.samples, rep.composition)


def matched_filter_ranks(name: str, poison: set[int]) -> list[int]:
    r, _ = report(name, "inferred")
    att = r.attribution
    assert att is not None and att.samples is not None
    f = att.samples
    assert att is not None and att.model is not None
    pts = att.points
    sign = -1.0 if r.detection.direction == "down" else 1.0
    z, _ = point_z(
        sign * pts["residual"].to_numpy(),
        sign * pts["predicted"].to_numpy(),
        att.model.resid_scale,
        True,
    )
    m = f.membership
    pe = m.point_of_entry()
    share = m.entry_share()
    ok = np.isfinite(z[pe]) & (pe >= m.n_points // 4)  # epochs 2-4
    num = np.bincount(m.samples[ok], weights=(share * z[pe])[ok], minlength=m.n_samples)
    den = np.sqrt(np.bincount(m.samples[ok], weights=(share**2)[ok], minlength=m.n_samples))
    score = np.where(den > 0, num / np.where(den > 0, den, 1.0), -np.inf)
    order = np.argsort(-score, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(1, order.size + 1)
    ids = f.ids if f.ids is not None else np.arange(m.n_samples)
    where = {int(i): int(rank[k]) for k, i in enumerate(ids)}
    return sorted(where[p] for p in poison)


def main() -> None:
    s, poison = truth("poison_ordinary")
    print("1. poison_ordinary: sigmas each poison sample adds to its batch, by epoch")
    for p in sorted(poison):
        row = s[s["sample_id"] == p].sort_values("step")["sigmas"].astype(float).round(1).tolist()
        print(f"   sample {p:5}: {row}")
    late = s[(s["sample_id"].isin(poison)) & (s["step"] > 250)]["sigmas"]
    print(f"   epochs 2-4: {late.min():.1f} to {late.max():.1f} sigmas")
    print("2. matched filter on inferred ground, the poison's ranks of 2,000")
    for name in POISONED:
        print(f"   {name:16} {matched_filter_ranks(name, truth(name)[1])}")
    print("3. clean samples named on inferred ground: their measured excess, nats a token,")
    print("   and what they add to their batches, sigmas")
    for name in ("poison_ordinary", "poison_long"):
        s, poison = truth(name)
        t = report(name, "inferred")[1]
        for i in sorted(set(t.loc[t["named"], "sample_id"]) - poison):
            x = s[s["sample_id"] == i].sort_values("step")
            cat = t.loc[t["sample_id"] == i, "category"].iloc[0]
            print(
                f"   {name:16} {i:5} {cat:7} length {int(x['targets'].iloc[0]) + 1:3}: "
                f"excess {x['excess'].astype(float).round(1).tolist()}, "
                f"adds {x['sigmas'].astype(float).round(1).tolist()}"
            )
    print("4. measured ground: the within-kind z of the poison and of the largest clean sample")
    from scipy.stats import genpareto

    for name in (*POISONED, "lr_surge", "clean"):
        _, poison = truth(name)
        t = report(name, "measured")[1].set_index("sample_id")
        clean = t.drop(index=list(poison))
        got = t.loc[list(poison), "score"] if poison else pd.Series(dtype=float)
        shown = f"poison {got.min():.0f}-{got.max():.0f}, " if poison else ""
        print(f"   {name:16} {shown}largest clean {clean['score'].max():.1f}")
        if not poison:
            for cat, part in clean.groupby("category"):
                z = part["score"].dropna().to_numpy()
                z0 = np.quantile(z, 0.9)
                shape, _, _ = genpareto.fit(z[z > z0] - z0, floc=0)
                print(f"      {cat:7} generalised Pareto shape of the tail {shape:+.2f}")


if __name__ == "__main__":
    main()
