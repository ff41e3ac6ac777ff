"""Progress bars as trainers draw them, and what they say about the step.

tqdm redraws a bar at most every ``mininterval`` (0.1 s), so the bar drawn *before* a
line printed during training often shows an older count.  The Hugging Face Trainer
prints its log dicts through ``tqdm.write``, which clears the bars (``\\r`` + spaces +
``\\r`` per bar), writes the dict, and redraws them: that redraw shows the count at the
moment of the write, the dict's own step.  The clears and redraws go to stderr; the
dicts go to stdout.  When stdout is a file or a pipe it is block-buffered, so the dicts
arrive in 8 KB lumps, far from the bars drawn while they were logged; but the clears
still mark each write, in order.  So the ``k``-th dict printed is the ``k``-th write,
and its step is the count the ``k``-th redraw shows (:func:`write_steps`).  The same
holds for a logger called from the Trainer's ``on_log`` (AutoTrain's loguru callback):
one line per write, in order.

Only the standard library is imported.
"""

from __future__ import annotations

import re
from collections import Counter

#: A tqdm bar: ``37%|███▋      | 74/200 [00:01<00:02, 58.7it/s, loss=2.1]``.
TQDM = re.compile(
    r"(?P<pct>\d{1,3})%\|(?P<bar>[^|]*)\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[(?P<info>[^\]]*)\]"
)
#: ``tqdm.write``'s clear of one bar: a carriage return, spaces, a carriage return.
#: (A bar closed with ``leave=False`` is cleared with spaces and a cursor-up escape
#: instead: that is not a write.)
CLEAR_OR_BAR = re.compile(r"\r +(?=\r)|" + TQDM.pattern)

#: Bars that are not the training loop's: Lightning's sanity check before training, its
#: validation / test / predict loops, and an evaluation loop's.
NOT_TRAINING = re.compile(
    r"(?i)\b(?:sanity|validation|validating|valid|val|eval|evaluation|evaluating|"
    r"test|testing|predict|predicting|prediction)\b"
)


def write_steps(raw: str) -> list[int]:
    """The training bar's count at each ``tqdm.write`` in a raw console log (escape codes
    kept), in order: per group of clears (one per bar), the count of the next redraw of
    the training bar.

    The training bar is the one most often redrawn after a clear (a datasets ``Map`` bar
    or an evaluation bar may come first or be drawn in between).  A group of clears not
    followed by a training-bar redraw counts no write.

    >>> bar = "\\r 50%|#####     | {n}/10 [00:01<00:01, 5.0it/s]"
    >>> write_steps(bar.format(n=4) + "\\r    \\r" + bar.format(n=5) + "{'loss': 2.0}\\n")
    [5]
    """
    if "\r" not in raw or "%|" not in raw:
        return []
    tokens: list[tuple[int, int] | None] = []  # None: a clear; (n, total): a bar draw
    for m in CLEAR_OR_BAR.finditer(raw):
        if m.group("n") is None:
            tokens.append(None)
        else:
            tokens.append((int(m.group("n")), int(m.group("total"))))
    after_clear: Counter[int] = Counter()
    for prev, tok in zip(tokens, tokens[1:], strict=False):
        if prev is None and tok is not None:
            after_clear[tok[1]] += 1
    if not after_clear:
        return []
    total = after_clear.most_common(1)[0][0]
    steps: list[int] = []
    open_write = False
    for tok in tokens:
        if tok is None:
            open_write = True
        elif tok[1] == total and open_write:
            steps.append(tok[0])
            open_write = False
    return steps


def is_training_bar(desc: str) -> bool:
    """Whether a bar's description (the text before its percentage) names a training
    loop: not Lightning's ``Sanity Checking DataLoader 0``, ``Validation DataLoader 0``,
    nor an evaluation or prediction bar.

    >>> is_training_bar("Epoch 1: "), is_training_bar("Sanity Checking DataLoader 0: ")
    (True, False)
    """
    return NOT_TRAINING.search(desc) is None


#: Lightning's ``TQDMProgressBar`` description, ``Epoch 3: `` (the bar's count is the
#: batches done; its loggers number a batch's step from 0, one lower).
LIGHTNING_EPOCH = re.compile(r"^\s*Epoch \d+:?\s*$")

#: A rich progress bar frame (Lightning's ``RichProgressBar``): ``Epoch 0/1  ━━━╸━━
#: 21/60 0:00:00 • 0:00:01 153.61it/s v_num: 0 train_loss: 1.412 lr: 0.010``.
RICH_BAR = re.compile(
    r"^\s*(?P<desc>\S.*?)\s+[\u2500-\u257f]+\s+(?P<n>\d+)/(?P<total>\d+)\s+"
    r"[\d:-]+\s+\u2022\s+[\d:-]+(?:\s+[\d.]+it/s)?(?P<postfix>.*)$"
)
RICH_POSTFIX = re.compile(r"(?:[\w./-]+: \S+\s*)+")
RICH_EPOCH = re.compile(r"^Epoch (\d+)/\d+$")
