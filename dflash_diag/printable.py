"""Text from files and names made safe for a terminal.

Category values, TOML keys, file names and labels come from files the user may not have
written; printed as they are, an ``ESC`` in one of them is a terminal command (set the
title, clear the screen, OSC 52: write the clipboard).  :func:`printable` shows every
control character as its escape (``\\x1b``), and :class:`PrintableConsole` applies it
at the text renderer's edge, to every piece of text a rich console writes, while the
console's own styles (its colours) are written as usual.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment

#: C0 controls but tab and newline, DEL, C1 controls (``\x9b`` is a one-byte CSI), and
#: the bidirectional overrides that reorder what a line shows.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character shown as its escape.

    >>> printable("code\\x1b]0;pwned\\x07 ok\\n")
    'code\\\\x1b]0;pwned\\\\x07 ok\\n'
    """
    return _CONTROL.sub(_visible, text) if _CONTROL.search(text) else text


class PrintableConsole(Console):
    """A rich Console whose output holds no control character it did not put there
    itself: the text of every segment passes :func:`printable`; control segments
    (cursor moves of a progress bar) and styles are rich's own."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        safe = (
            seg if seg.control else Segment(printable(seg.text), seg.style, seg.control)
            for seg in buffer
        )
        return super()._render_buffer(safe)


def listed(items: Iterable[object], most: int = 8, width: int = 120) -> str:
    """``items`` joined by commas for a one-line message: at most ``most`` of them and
    about ``width`` characters, the rest counted (``a, b, c and 2,997 more``), each made
    :func:`printable` and cut at 40 characters.

    >>> listed([f"c{k}" for k in range(3000)], most=3)
    'c0, c1, c2 and 2,997 more'
    """
    names = [str(x) for x in items]
    shown: list[str] = []
    used = 0
    for name in names[:most]:
        name = printable(name if len(name) <= 40 else name[:37] + "...")
        if shown and used + len(name) + 2 > width:
            break
        shown.append(name)
        used += len(name) + 2
    rest = len(names) - len(shown)
    return ", ".join(shown) + (f" and {rest:,} more" if rest else "")
