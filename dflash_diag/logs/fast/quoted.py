"""The HF Trainer's dict lines whose keys and values are all quoted, cut at the quotes.

A Trainer prints each log as the repr of a dict of strings: ``{'loss': '2.637',
'grad_norm': '0.9601', 'learning_rate': '3e-07', 'epoch': '3e-06'}``.  Read as JSON
(:func:`~dflash_diag.logs.fast.jsonlines.json_records`) such a line costs a copy of the
log with every ``'`` made a ``"``, the guards against what JSON could read otherwise,
and Arrow's JSON parse.  Cut at its ``'`` by Arrow's CSV reader (``'`` the delimiter,
no quoting, no escapes) a line of ``m`` keys is ``4m + 1`` cells: ``{``, then per key
its name, ``: ``, its value and ``, `` (``}`` after the last value).  A line cut so
holds exactly the strings the JSON reader reads from it, when no cell holds a
backslash (an escape in JSON) or a control byte (refused in JSON strings): the caller
knows the control bytes already and searches :attr:`Cut.cells` (each distinct cell
once, a few thousand strings instead of the text) for the rest.  The separators are
checked column by column without Arrow's string comparison: every cell as long as the
separator, and the column's bytes the separator repeated.

Lines of another number of keys than the first line's (an evaluation dict, the run's
summary) are handed back by the CSV reader one by one and cut in Python; a line of any
other shape (a value not quoted, a nested dict, a duplicate key, other spacing) makes
:func:`quoted_columns` return None and the JSON reader reads the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Lines of another number of keys than the first line's cut in Python, at most (more:
#: the JSON reader reads the text).
MAX_ODD_LINES = 10_000

#: Bytes the CSV reader reads at once (the dict lines are handed to it a piece at a
#: time, and a line longer than this is left to the JSON reader).
BLOCK = 1 << 21


@dataclass
class Cut:
    """What :func:`quoted_columns` read.

    :param columns: per key, in the order the keys first appear, ``(key, values,
        present)``: the values as a dictionary-encoded Arrow string array over every
        line (null where the line has no such key), ``present`` a numpy bool array.
    :param n_lines: the lines read.
    :param cells: every distinct cell (keys, values, separators), ``\\n``-joined: what
        a line holds, to be searched at once.
    """

    columns: list[tuple[str, Any, Any]]
    n_lines: int
    cells: str


def quoted_columns(stream: Any, first: str) -> Cut | None:
    """The dict lines' columns, or None when a line is not a dict of quoted strings
    (see the module docstring).  ``stream``: the dict lines as a file (``read(n)``:
    bytes), each ending in ``\\n``, none holding a control byte; ``first``: the first
    line.  The caller searches :attr:`Cut.cells` for what JSON would read otherwise
    (a ``\\\\``)."""
    import numpy as np

    n_cells = first.count("'") + 1
    if n_cells % 4 != 1 or n_cells < 5:
        return None
    odd: list[tuple[int, str]] = []
    slots: dict[str, list[tuple[Any, Any, Any]]] = {}  # key -> (rows, codes, words)
    order: list[tuple[int, str]] = []  # (first row, key)
    keys_seen: set[str] = set()
    at = 0  # (rows of the blocks before: the table's rows, odd lines not counted)
    try:
        for table in _blocks(stream, n_cells, odd):
            got = _piece(table, n_cells // 4)
            if got is None:
                return None
            layouts, values = got
            for keys, which in layouts:
                keys_seen.update(keys)
                for j, key in enumerate(keys):
                    codes, words = values[j]
                    slots.setdefault(key, []).append((at + which, codes[which], words))
                    order.append((at + int(which[0]), key))
            at += table.num_rows
    except _Refused:
        return None
    n_lines = at + len(odd)
    main = np.ones(n_lines, dtype=bool)
    main[[no - 1 for no, _ in odd]] = False
    lines = np.flatnonzero(main)  # (the table's rows, as lines from 0)
    slots = {k: [(lines[r], c, w) for r, c, w in v] for k, v in slots.items()}
    order = [(int(lines[r]), k) for r, k in order]
    return _with_odd_lines(odd, slots, order, keys_seen, n_cells // 4, n_lines)


class _Refused(Exception):
    """Arrow's CSV reader refused the text (a line longer than a block, too many odd
    lines)."""


def _piece(table: Any, n_keys: int) -> tuple[list[Any], list[tuple[Any, Any]]] | None:
    """One block's lines: their layouts (:func:`_layouts`) and per value column its
    codes (numpy int32) and distinct strings (Arrow); None where :func:`_layouts` is."""
    import pyarrow.compute as pc

    layouts = _layouts(table, n_keys)
    if layouts is None:
        return None
    values = []
    for j in range(n_keys):
        encoded = pc.dictionary_encode(table.column(4 * j + 3).combine_chunks())
        values.append((encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary))
    return layouts, values


def _with_odd_lines(
    odd: list[tuple[int, str]],
    slots: dict[str, list[tuple[Any, Any, Any]]],
    order: list[tuple[int, str]],
    keys: set[str],
    n_keys: int,
    n_lines: int,
) -> Cut | None:
    """The :class:`Cut`, once the odd lines (cut in Python) are added to the slots;
    None when one is not a dict of quoted strings."""
    import numpy as np
    import pyarrow as pa

    for no, text in odd:
        pairs = _cut(text)
        if pairs is None:
            return None
        for key, value in pairs:
            one = pa.array([value], pa.string())
            slots.setdefault(key, []).append((np.array([no - 1]), np.zeros(1, np.int32), one))
            order.append((no - 1, key))
    columns, words = _assemble(slots, order, n_lines)
    cells = [*keys, *_separators(n_keys).values(), *words, *(text for _, text in odd)]
    return Cut(columns, n_lines, "\n".join(cells))


def _blocks(stream: Any, n_cells: int, odd: list[tuple[int, str]]) -> Iterator[Any]:
    """The lines of ``n_cells`` cells as tables of strings, one per block read (names
    ``f0``...; one block's cells at a time are held, not all), the ``(line number,
    text)`` of the others appended to ``odd`` as they come.

    :raises _Refused: Arrow refuses the text, or too many lines are others."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    def other(row: Any) -> str:
        if row.number is None or len(odd) >= MAX_ODD_LINES:
            return "error"
        odd.append((row.number, row.text))
        return "skip"

    types = {f"f{i}": pa.string() for i in range(n_cells)}
    try:
        reader = pcsv.open_csv(
            stream,
            read_options=pcsv.ReadOptions(
                autogenerate_column_names=True, use_threads=False, block_size=BLOCK
            ),
            parse_options=pcsv.ParseOptions(
                delimiter="'",
                quote_char=False,
                escape_char=False,
                ignore_empty_lines=False,
                invalid_row_handler=other,
            ),
            convert_options=pcsv.ConvertOptions(
                column_types=types,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                check_utf8=False,
            ),
        )
        for batch in reader:
            if batch.num_rows:
                yield pa.Table.from_batches([batch])
    except pa.ArrowException:  # (a line longer than a block too)
        raise _Refused from None


def _layouts(table: Any, n_keys: int) -> list[tuple[tuple[str, ...], Any]] | None:
    """Per set of keys the table's lines hold, in the order of their first line: the
    keys and the lines (table rows, ascending); None when a separator cell is not
    ``{``, ``: ``, ``, `` or ``}`` where it must be, or a line repeats a key."""
    import numpy as np
    import pyarrow.compute as pc

    seps = _separators(n_keys)
    if not all(_all_equal(table.column(i), want) for i, want in seps.items()):
        return None
    key_cols = [table.column(4 * j + 1) for j in range(n_keys)]
    keys = tuple(str(c[0]) for c in key_cols)
    if all(_all_equal(c, k) for c, k in zip(key_cols, keys, strict=True)):  # (one set)
        return [(keys, np.arange(table.num_rows))] if len(set(keys)) == n_keys else None
    encoded = [pc.dictionary_encode(c.combine_chunks()) for c in key_cols]
    names = [e.dictionary.to_pylist() for e in encoded]
    codes = np.column_stack([e.indices.to_numpy(zero_copy_only=False) for e in encoded])
    _, first, which = np.unique(codes, axis=0, return_index=True, return_inverse=True)
    which = which.reshape(-1)
    out = []
    for u in np.argsort(first, kind="stable"):
        keys = tuple(names[j][codes[first[u], j]] for j in range(n_keys))
        if len(set(keys)) != n_keys:
            return None
        out.append((keys, np.flatnonzero(which == u)))
    return out


def _separators(n_keys: int) -> dict[int, str]:
    """The cells between a line's quoted strings, by column: ``{``, then per key ``: ``
    and ``, `` (``}`` after the last value)."""
    seps = {0: "{", 4 * n_keys: "}"}
    for j in range(n_keys):
        seps[4 * j + 2] = ": "
        if j + 1 < n_keys:
            seps[4 * j + 4] = ", "
    return seps


def _all_equal(col: Any, want: str) -> bool:
    """Whether every cell of a string column is ``want``: each cell as long, and the
    cells' bytes, one after another, ``want`` repeated (a cheaper test than Arrow's
    string comparison)."""
    import numpy as np

    expected = want.encode()
    for chunk in col.chunks:
        if not len(chunk):
            continue
        at = np.frombuffer(chunk.buffers()[1], np.int32, len(chunk) + 1, 4 * chunk.offset)
        if not (np.diff(at) == len(expected)).all():
            return False
        held = chunk.buffers()[2]
        if held is None or bytes(held)[at[0] : at[-1]] != expected * len(chunk):
            return False
    return True


def _cut(text: str) -> list[tuple[str, str]] | None:
    """``(key, value)`` of one line cut at its quotes, or None when it is not a dict of
    quoted strings or repeats a key."""
    cells = text.removesuffix("\n").split("'")
    m = (len(cells) - 1) // 4
    if len(cells) != 4 * m + 1 or m == 0 or cells[0] != "{" or cells[-1] != "}":
        return None
    if any(cells[4 * j + 2] != ": " for j in range(m)):
        return None
    if any(cells[4 * j + 4] != ", " for j in range(m - 1)):
        return None
    pairs = [(cells[4 * j + 1], cells[4 * j + 3]) for j in range(m)]
    return pairs if len({k for k, _ in pairs}) == m else None


def _assemble(
    slots: dict[str, list[tuple[Any, Any, Any]]],
    order: list[tuple[int, str]],
    n_lines: int,
) -> tuple[list[tuple[str, Any, Any]], list[str]]:
    """The columns of :func:`quoted_columns`, each a dictionary-encoded Arrow array
    (each distinct value once: :func:`~.jsonlines.column_records` reads each once; the
    blocks' dictionaries merged), and every distinct value."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    seen: set[str] = set()
    out = []
    words: list[str] = []
    for _, key in sorted(order, key=lambda x: x[0]):
        if key in seen:
            continue
        seen.add(key)
        where = np.full(n_lines, -1, dtype=np.int32)
        parts: list[Any] = []
        base: dict[int, int] = {}  # (a block's dictionary once, for all its layouts)
        for lines, codes, some in slots[key]:
            if id(some) not in base:
                base[id(some)] = sum(len(p) for p in parts)
                parts.append(some)
            where[lines] = codes + base[id(some)]
        present = where >= 0
        pool = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
        if len(parts) > 1:  # (one dictionary of the blocks')
            merged = pc.dictionary_encode(pool)
            remap = merged.indices.to_numpy(zero_copy_only=False)
            where[present] = remap[where[present]]
            pool = merged.dictionary
        out.append(
            (key, pa.DictionaryArray.from_arrays(pa.array(where, mask=~present), pool), present)
        )
        words += pool.to_pylist()
    return out, words
