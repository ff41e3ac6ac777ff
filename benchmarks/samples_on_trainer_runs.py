"""How well ``samples`` and ``spikes`` name the poison on the real Trainer runs.

    python benchmarks/samples_on_trainer_runs.py [RUN ...] [--runs DIR]

For each run of ``tests/data/trainer_runs`` (default: all five) and each ground: the
poison samples named (of those its truth.json lists), the clean ones named, and the
spikes whose batch holds a poison sample with how many of them got a ``data`` verdict
naming it.  ``measured``: the recording's per-sample losses (``record_trainer(...,
sample_losses=True)``); ``inferred``: the same recording with the losses ignored
(``--ground inferred``), group testing over the logged points alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from dflash_diag.composition import Request
from dflash_diag.reports import SpikesOptions, spikes_report
from dflash_diag.reports.samples import sample_table

RUNS = Path(__file__).resolve().parents[1] / "tests" / "data" / "trainer_runs"
ALL = ("poison_ordinary", "poison_long", "grouped", "lr_surge", "clean")


def figures(d: Path, ground: str) -> str:
    truth = json.loads((d / "truth.json").read_text())
    poison = set((truth.get("poison") or {}).get("ids", []))
    batches = Request(composition=d / "train.batches", manifest=d / "manifest.parquet")
    r = spikes_report(d / "trainer_state.json", SpikesOptions(ground=ground), batches)
    comp, att = r.composition, r.attribution
    assert comp is not None and comp.ids is not None and att is not None and att.samples
    table = sample_table(att.samples, comp)  # (``samples``' table: the same findings)
    named = set(table.loc[table["named"], "sample_id"].tolist())
    steps = comp.replay.micro["step"].to_numpy()
    driven, data = 0, 0
    for s in r.spikes:
        rows = np.flatnonzero(steps == s.event.peak_step)
        held = {int(comp.ids[x]) for i in rows for x in comp.replay.batch(int(i))}
        if held & poison:
            driven += 1
            data += s.verdict == "data" and any(set(c.members) & poison for c in s.culprits)
    return (
        f"{d.name:16} {att.samples.evidence.ground:9} poison named "
        f"{len(named & poison):2}/{len(poison):2}  clean named "
        f"{len(named - poison):2}  spikes {len(r.spikes):2}  poison-driven {driven:2}, "
        f"data naming the poison {data:2}"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="*", default=list(ALL))
    ap.add_argument("--runs", type=Path, default=RUNS, help="the folder of the runs")
    a = ap.parse_args()
    for ground in ("measured", "inferred"):
        for run in a.run:
            print(figures(a.runs / run, ground))
