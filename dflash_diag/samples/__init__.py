"""Which samples make the loss spike: per-sample evidence over logged points.

- :class:`Membership`: which samples each logged point covers (CSR);
- :func:`sample_evidence`: group testing of every sample against its points' robust z
  (:class:`SampleEvidence`, :class:`SampleOptions`); :func:`measured_evidence` the same
  on per-sample losses a recorder logged;
- :func:`separable_groups`: who always travels together (the unit when inseparable);
- :func:`name_culprits`: the samples or groups named at a false-discovery rate.

The method, its null and its limits: ``docs/samples.md``.
"""

from .culprits import name_culprits
from .evidence import (
    REASONS,
    SampleEvidence,
    SampleOptions,
    sample_evidence,
    untestable_once,
    untested_evidence,
)
from .groups import separable_groups
from .measured import batch_residual, measured_evidence, measured_z, sample_medians
from .membership import Membership
from .nulls import bh_qvalues, order_pvalue

__all__ = [
    "REASONS",
    "Membership",
    "SampleEvidence",
    "SampleOptions",
    "batch_residual",
    "bh_qvalues",
    "measured_evidence",
    "measured_z",
    "name_culprits",
    "order_pvalue",
    "sample_evidence",
    "sample_medians",
    "separable_groups",
    "untestable_once",
    "untested_evidence",
]
