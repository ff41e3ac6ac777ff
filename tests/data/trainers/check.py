"""How the current reader does on the library-written fixtures (no torch needed).

    PYTHONPATH=$PWD python tests/data/trainers/check.py [NAME...]

For each fixture, ``read_log`` reads it and its table is compared with
``NAME.truth.jsonl`` at every step: a train record's step must be a row, each of its
values must be in that row's column (the column ``canonical_name`` gives, or a
candidate below) equal to the value as printed (or the library's raw value); an eval
record's ``eval_*``/``val_*`` values must be in eval columns at its step and nowhere
else; summary records make no row.  Printed per fixture:

- ``rows exp``: train steps in the truth; ``read``: rows in the table;
- ``steps ok``: truth train steps found as rows; ``extra``: rows at steps the truth
  does not have;
- ``wrong``: cells (train and eval) whose value differs; ``missing``: cells whose column
  or row is absent; ``stray``: values at steps where the truth logged none for that
  column (an eval value, or a metric logged every N steps, repeated on other rows);
- ``error``: the InputError (or other exception) if reading failed.

A second table counts the tqdm traps in Hugging Face Trainer logs: dicts whose last
bar drawn before them shows another step than the dict's (stale bar), and how many of
those bars are ahead of the dict (stdout buffered behind stderr).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dflash_diag.logs import read_log
from dflash_diag.logs.names import canonical_name

HERE = Path(__file__).resolve().parent

#: truth key -> the columns a correct reader may put it in (first present wins).
#: Running totals are never the per-step ``tokens`` (issue 12).
CANDIDATES: dict[str, tuple[str, ...]] = {
    "num_tokens": ("tokens_seen",),
    "num_input_tokens_seen": ("tokens_seen",),
    "mean_token_accuracy": ("acc",),
}
#: keys of eval records that are not evaluation metrics (shared with the train row)
_NOT_EVAL = {"epoch", "num_input_tokens_seen", "step"}


@dataclass
class Result:
    name: str
    fmt: str = ""
    expected: int = 0
    read: int = 0
    steps_ok: int = 0
    extra: int = 0
    wrong: int = 0
    missing: int = 0
    stray: int = 0
    error: str = ""
    examples: list[str] = field(default_factory=list)


def fixtures() -> dict[str, tuple[Path, Path]]:
    """name -> (data path, truth path), for every fixture with a truth file."""
    out: dict[str, tuple[Path, Path]] = {}
    for truth in sorted(HERE.glob("*.truth.jsonl")):
        stem = truth.name[: -len(".truth.jsonl")]
        for data in (HERE / f"{stem}.log", HERE / f"{stem}.csv", HERE / stem):
            if data.exists():
                out[stem] = (data, truth)
        state = HERE / f"{stem}.trainer_state.json"
        if state.exists():
            out[f"{stem}.trainer_state"] = (state, truth)
    return out


def load_truth(path: Path) -> list[dict]:
    """The truth records; a Lightning console's (a progress bar's truth: records with
    ``bar``, or its evaluations) at its loggers' step, ``trainer.global_step - 1``:
    the callback wrote the step after the batch counted, and Lightning's loggers (and
    the recorder) number a batch's step before (``lightning_metrics.truth.jsonl``, the
    same run's logger, holds the same values one lower)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if path.name.startswith("lightning_") and any("bar" in r for r in rows):
        for r in rows:
            r["step"] -= 1
    return rows


def as_float(v: object) -> float:
    return float(v) if v is not None else math.nan  # type: ignore[arg-type]


def float32(v: object) -> float:
    """The shortest decimal of a value stored as float32 (TensorBoard's scalars)."""
    import numpy as np

    return float(str(np.float32(as_float(v))))


def same(read: float, printed: object, raw: object) -> bool:
    """Equal to the value as printed, as the library computed it, or as TensorBoard
    stored it (float32); NaN == NaN."""
    for want in (as_float(printed), as_float(raw), float32(raw)):
        if math.isnan(want) and math.isnan(read):
            return True
        if math.isclose(read, want, rel_tol=1e-9, abs_tol=1e-15):
            return True
    return False


def columns_for(key: str, is_eval: bool) -> tuple[str, ...]:
    return CANDIDATES.get(key, (canonical_name(key, is_eval),))


def is_eval_key(key: str) -> bool:
    return key not in _NOT_EVAL


def compare(name: str, data: Path, truth: list[dict]) -> Result:
    res = Result(name)
    try:
        run = read_log(data)
    except Exception as exc:  # noqa: BLE001 - the table reports any failure
        res.error = f"{type(exc).__name__}: {exc}"[:160]
        res.expected = len({r["step"] for r in truth if r["kind"] == "train"})
        return res
    table = run.table
    res.fmt, res.read = run.format, len(table)
    rows = {int(s): i for i, s in enumerate(table["step"].tolist())}
    train_steps = {r["step"] for r in truth if r["kind"] == "train"}
    eval_steps = {r["step"] for r in truth if r["kind"] == "eval"}
    res.expected = len(train_steps)
    res.steps_ok = len(train_steps & rows.keys())
    res.extra = len(rows.keys() - train_steps - eval_steps)
    logged: dict[str, set[int]] = {}  # column -> steps the truth logged a value for it
    for rec in truth:
        if rec["kind"] == "summary":
            continue
        is_eval = rec["kind"] == "eval"
        for key, raw in rec["values"].items():
            if is_eval and not is_eval_key(key):
                continue
            cols = [c for c in columns_for(key, is_eval) if c in table.columns]
            cols.sort(key=lambda c: bool(table[c].isna().all()))  # a filled candidate first
            if cols:
                logged.setdefault(cols[0], set()).add(rec["step"])
            if rec["step"] not in rows or not cols:
                res.missing += 1
                continue
            got = float(table[cols[0]].iloc[rows[rec["step"]]])
            printed = rec.get("printed", {}).get(key, raw)
            if not same(got, printed, raw):
                res.wrong += 1
                if len(res.examples) < 3:
                    res.examples.append(f"step {rec['step']} {key}: read {got}, printed {printed}")
    for col, steps in logged.items():
        present = table.loc[table[col].notna(), "step"].astype(int)
        res.stray += int((~present.isin(list(steps))).sum())
    return res


# the Trainer's printed dict: its first value is a quoted float ('4.857'); a logger's
# dict of raw floats (loguru's line) is not counted
_TOKEN = re.compile(r"\|\s*(\d+)/(\d+) \[|(\{'\w+': '[^}]*\})")


def bar_traps(log: Path, truth: list[dict]) -> tuple[int, int, int]:
    """For a Trainer log: (dicts, dicts whose last bar before them shows another step,
    dicts whose last bar before them is ahead of them).  Only the main training bar
    (its total = max_steps) counts; the eval bar is skipped.  A dict may start a line
    or be glued to the end of a bar."""
    text = log.read_text(encoding="utf-8", errors="replace")
    total = max(r["step"] for r in truth)
    dicts = stale = ahead = 0
    last: int | None = None
    steps = iter(truth)
    for m in _TOKEN.finditer(text):
        if m[3] is None:
            if int(m[2]) == total:
                last = int(m[1])
            continue
        rec = next(steps)
        dicts += 1
        if last != rec["step"]:
            stale += 1
            ahead += last is not None and last > rec["step"]
    return dicts, stale, ahead


def main(names: list[str]) -> None:
    found = fixtures()
    chosen = names or list(found)
    cols = ("exp", "read", "ok", "extra", "wrong", "miss", "stray")
    head = f"{'fixture':38} {'format':11} " + " ".join(f"{c:>5}" for c in cols) + "  error"
    print(head)
    print("-" * len(head))
    notes: list[str] = []
    for name in chosen:
        data, truth_path = found[name]
        r = compare(name, data, load_truth(truth_path))
        print(
            f"{name:38} {r.fmt:11} {r.expected:>5} {r.read:>5} {r.steps_ok:>5} {r.extra:>5}"
            f" {r.wrong:>5} {r.missing:>5} {r.stray:>5}  {r.error}"
        )
        notes += [f"  {name}: {e}" for e in r.examples[:2]]
    if notes:
        print("\nfirst wrong values:")
        print("\n".join(notes))
    hf = [
        n
        for n in chosen
        if n.startswith(("hf_trainer", "trl_sft")) and found[n][0].suffix == ".log"
    ]
    if hf:
        print(f"\n{'tqdm bar before each printed dict':38} {'dicts':>5} {'stale':>5} {'ahead':>5}")
        for name in hf:
            data, truth_path = found[name]
            d, s, a = bar_traps(data, load_truth(truth_path))
            print(f"{name:38} {d:>5} {s:>5} {a:>5}")


if __name__ == "__main__":
    main(sys.argv[1:])
