"""One function per command that returns the whole report as plain data.

:func:`spikes_report`, :func:`batches_report`, :func:`compare_report` and
:func:`parse_report` take what the commands take (paths and option values) and return
frozen dataclasses; the CLI, the JSON, the text, the plots and the HTML all render the
same object, so a notebook gets exactly what the command shows:

>>> from dflash_diag.reports import spikes_report
>>> r = spikes_report("sample_logs/run.log")  # doctest: +SKIP
>>> [(s.event.peak_step, s.verdict) for s in r.spikes][:2]  # doctest: +SKIP
[(254, 'composition'), (258, 'composition')]
>>> r.samples[254][0].sample_ids[:3]  # doctest: +SKIP

Nothing here prints.  ``stage`` (optional in every function) is a context-manager
factory ``stage(description) -> progress callback or None``; the CLI passes one that
draws a progress bar on stderr.
"""

from __future__ import annotations

from .batches import BatchesOptions, BatchesReport, MicroLengths, batches_report, micro_lengths
from .common import (
    Context,
    MicroBatch,
    ProgressFn,
    Stage,
    check_steps_in,
    in_steps,
    quiet,
)
from .compare import compare_report
from .parse import ParseReport, parse_report
from .samples import SamplesReport, samples_report
from .spikes import SpikesOptions, SpikesReport, spike_batches, spikes_report

__all__ = [
    "BatchesOptions",
    "BatchesReport",
    "Context",
    "MicroBatch",
    "MicroLengths",
    "ParseReport",
    "ProgressFn",
    "SamplesReport",
    "SpikesOptions",
    "SpikesReport",
    "Stage",
    "batches_report",
    "check_steps_in",
    "compare_report",
    "in_steps",
    "micro_lengths",
    "parse_report",
    "quiet",
    "samples_report",
    "spike_batches",
    "spikes_report",
]
