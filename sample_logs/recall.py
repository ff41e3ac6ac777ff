"""How the `spikes` verdicts on the sample runs compare with the truth the generator put in.

    python sample_logs/recall.py

For each sample log: the spikes found, how many got each verdict, and against the truth
(README.md, "The truth"): in ``run.log`` every spike is composition except the optimizer
event at step 1999; ``v1.log`` and ``run_bucketed.log`` have no optimizer event, so every
spike there is composition.  "Recall" is the share of the truth's composition spikes
found that are called ``composition``; "wrongly blamed" counts spikes called
``unexplained`` (look at the optimizer) where the generator put no optimizer event.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPTIMIZER_EVENTS = {"run.log": {1999}, "v1.log": set(), "run_bucketed.log": set()}
CONFIGS = {"run_bucketed.log": ["--config", str(HERE / "bucketed.toml")]}
# v1.log's schedule (seed 7) is not the one in dflash-diag.toml beside it.
CONFIGS["v1.log"] = ["--config", str(HERE / "dflash-diag.toml"), "--seed", "7"]


def verdicts(log: str) -> list[dict]:
    cmd = [sys.executable, "-m", "dflash_diag", "spikes", str(HERE / log), "--json"]
    out = subprocess.run([*cmd, *CONFIGS.get(log, [])], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{log}: {out.stderr.strip()}")
    return json.loads(out.stdout)["spikes"]


def main() -> None:
    head = f"{'log':<18}{'spikes':>7}{'comp':>6}{'data':>6}{'inconc':>7}{'unexpl':>7}"
    print(head + f"{'recall':>8}{'optimizer found':>17}{'wrongly blamed':>16}")
    for log, events in OPTIMIZER_EVENTS.items():
        spikes = verdicts(log)
        kinds = ("composition", "data", "inconclusive")
        by = {v: [s for s in spikes if s["verdict"] == v] for v in kinds}
        unexpl = [s for s in spikes if s["verdict"] == "unexplained"]
        truth_comp = [s for s in spikes if s["step"] not in events]
        recall = sum(s["verdict"] == "composition" for s in truth_comp) / max(len(truth_comp), 1)
        found = sum(
            any(s["step"] == e and s["verdict"] == "unexplained" for s in spikes) for e in events
        )
        wrong = sum(s["step"] not in events for s in unexpl)
        print(
            f"{log:<18}{len(spikes):>7}{len(by['composition']):>6}{len(by['data']):>6}"
            f"{len(by['inconclusive']):>7}"
            f"{len(unexpl):>7}{recall:>8.0%}{f'{found} of {len(events)}':>17}{wrong:>16}"
        )


if __name__ == "__main__":
    main()
