"""The samples (or groups) named: :func:`name_culprits`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from .evidence import SampleEvidence

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = (
    "unit",
    "sample",
    "members",
    "n_members",
    "appearances",
    "high",
    "min_z",
    "median_z",
    "score",
    "share",
    "excess",
    "own_excess",
    "own_excess_nats",
    "p",
    "q",
    "ground",
)


def name_culprits(evidence: SampleEvidence, fdr: float = 0.05) -> pd.DataFrame:
    """The units with ``q <= fdr``, most significant first.

    A unit is a sample when it is the only one seen in its set of points, else its whole
    separable group: the members of a group have the same evidence, so none is named
    alone.  Columns:

    - ``unit`` str: ``sample`` or ``group``; ``sample`` int64: its id (-1 for a group);
    - ``members`` object: tuple of the member ids (one for a sample); ``n_members`` int64;
    - ``appearances``, ``high`` int64; ``min_z``, ``median_z``, ``score`` float64 (as in
      :class:`.SampleEvidence`, the same for every member);
    - ``share`` float64: the unit's mean share of its points' tokens (summed over
      members); ``excess`` float64: mean relative excess of its points;
      ``own_excess`` float64: the relative excess of the unit's own tokens if it alone
      raised its points (a group: ``excess / share``); ``own_excess_nats`` float64
      (samples only, NaN for groups or without a baseline);
    - ``p``, ``q`` float64; ``ground`` str: ``inferred`` or ``measured``.

    :param fdr: the false-discovery rate, in (0, 1).
    """
    import pandas as pd

    if not 0.0 < fdr < 1.0:
        raise InputError("fdr", f"is {fdr}", "give a rate in (0, 1), e.g. 0.05")
    if evidence.untested:  # (no sample tested: none named, the table not read)
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in COLUMNS})
    t = evidence.table
    named = t[t["testable"].to_numpy() & (t["q"].to_numpy() <= fdr)]
    if named.empty:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in COLUMNS})
    rows = [_unit(part, evidence.ground) for _, part in named.groupby("group", sort=False)]
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out = out.sort_values(["p", "score"], ascending=[True, False], kind="stable")
    return out.reset_index(drop=True).astype({c: _dtype(c) for c in COLUMNS})


def _unit(part: pd.DataFrame, ground: str) -> dict[str, object]:
    first = part.iloc[0]
    single = len(part) == 1
    share = float(part["share"].sum(min_count=1))
    excess = float(first["excess"])
    return {
        "unit": "sample" if single else "group",
        "sample": int(first["sample"]) if single else -1,
        "members": tuple(int(s) for s in part["sample"]),
        "n_members": len(part),
        "appearances": int(first["appearances"]),
        "high": int(first["high"]),
        "min_z": float(first["min_z"]),
        "median_z": float(first["median_z"]),
        "score": float(first["score"]),
        "share": share,
        "excess": excess,
        "own_excess": float(first["own_excess"]) if single else _ratio(excess, share),
        "own_excess_nats": float(first["own_excess_nats"]) if single else np.nan,
        "p": float(first["p"]),
        "q": float(first["q"]),
        "ground": ground,
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def _dtype(column: str) -> str:
    if column in ("unit", "members", "ground"):
        return "object"
    if column in ("sample", "n_members", "appearances", "high"):
        return "int64"
    return "float64"
