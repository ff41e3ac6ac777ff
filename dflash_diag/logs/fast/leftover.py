"""The lines the fast path leaves over, held as one Arrow array (:class:`Leftover`).

A log whose trainer prints two or three line shapes leaves the fast path's first
template as many lines as it reads.  Kept as Python ``(number, text)`` pairs they cost
microseconds a line to make and again to join for the next template; here they stay in
one ``large_binary`` array, each element a line's bytes *with* its newline, so the
array's data buffer is the lines written out again, ready for the next template's
reader.  Python pairs are made once, for the lines no template reads (the general
parser's input).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class NotUtf8(ValueError):
    """A leftover line is not UTF-8 (the general parser reads the log, replacing bytes)."""


@dataclass
class Leftover:
    """Lines in log order.

    :param numbers: int64 line numbers, ascending (from 1: in the log, or in the byte
        range or text they were read from).
    :param text: ``pyarrow.large_binary``: element ``i`` is line ``numbers[i]``'s bytes
        with its ``\\n`` (``\\r\\n`` as written), but for a log's unterminated last line.
    """

    numbers: Any
    text: Any

    def __len__(self) -> int:
        return len(self.numbers)

    @staticmethod
    def empty() -> Leftover:
        import numpy as np
        import pyarrow as pa

        return Leftover(np.zeros(0, dtype=np.int64), pa.array([], pa.large_binary()))

    @staticmethod
    def of_pairs(pairs: list[tuple[int, str]]) -> Leftover:
        """From ``(number, text)`` pairs in any order; every text gets a newline."""
        import numpy as np
        import pyarrow as pa

        pairs = sorted(pairs)
        numbers = np.array([no for no, _ in pairs], dtype=np.int64)
        text = pa.array([t.encode() + b"\n" for _, t in pairs], pa.large_binary())
        return Leftover(numbers, text)

    @staticmethod
    def merge(parts: list[Leftover]) -> Leftover:
        """One Leftover of several (numbers already on one scale), in line order."""
        import numpy as np
        import pyarrow as pa

        parts = [p for p in parts if len(p)]
        if not parts:
            return Leftover.empty()
        if len(parts) == 1:
            return parts[0]
        numbers = np.concatenate([p.numbers for p in parts])
        text = pa.concat_arrays([p.text for p in parts])
        if len(numbers) > 1 and (numbers[1:] < numbers[:-1]).any():
            order = np.argsort(numbers, kind="stable")
            numbers, text = numbers[order], text.take(order)
        return Leftover(numbers, text)

    def shifted(self, by: int) -> Leftover:
        """Line numbers plus ``by`` (a byte range's numbers onto the log's)."""
        return Leftover(self.numbers + by, self.text) if by else self

    def renumbered(self, numbers: Any) -> Leftover:
        """Line numbers looked up in ``numbers`` (numbers from 1 index it)."""
        return Leftover(numbers[self.numbers - 1], self.text)

    def split_last(self) -> tuple[Leftover, Leftover]:
        """``(all but the last line, the last line)``."""
        n = len(self)
        return (
            Leftover(self.numbers[: n - 1], self.text.slice(0, n - 1)),
            Leftover(self.numbers[n - 1 :], self.text.slice(n - 1)),
        )

    def data(self) -> bytes:
        """The lines written out again, one after another (as they end: with ``\\n``)."""
        import numpy as np

        if not len(self):
            return b""
        offsets = np.frombuffer(
            self.text.buffers()[1], np.int64, len(self) + 1, 8 * self.text.offset
        )
        lo, hi = int(offsets[0]), int(offsets[-1])
        return self.text.buffers()[2].slice(lo, hi - lo).to_pybytes() if hi > lo else b""

    def holds_byte(self, byte: int) -> bool:
        """Whether any line holds ``byte`` (without copying the lines)."""
        import pyarrow.compute as pc

        return bool(pc.any(pc.match_substring(self.text, chr(byte))).as_py())

    def pairs(self) -> list[tuple[int, str]]:
        """``(number, text)`` of every line, without its line end.

        :raises NotUtf8: a line is not UTF-8.
        """
        out = []
        for no, raw in zip(self.numbers.tolist(), self.text.to_pylist(), strict=True):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise NotUtf8(f"line {no}") from None
            out.append((no, line.removesuffix("\n").removesuffix("\r")))
        return out
