"""The HF Trainer's dict lines whose keys and values are all quoted, cut into their
pairs.

A Trainer prints each log as the repr of a dict of strings: ``{'loss': '2.637',
'grad_norm': '0.9601', 'learning_rate': '3e-07', 'epoch': '3e-06'}``.  Read as JSON
(:func:`~dflash_diag.logs.fast.jsonlines.json_records`) such a line costs a copy of the
log with every ``'`` made a ``"``, the guards against what JSON could read otherwise,
and Arrow's JSON parse.  Cut at its ``,`` by Arrow's CSV reader (no quoting, no
escapes) a line of ``m`` keys is ``m`` cells, one pair each: ``{'loss': '2.637'``,
`` 'grad_norm': '0.9601'``, ..., `` 'epoch': '3e-06'}``.  Each column's distinct cells
are few (a Trainer prints 4 significant digits), so each is read once: it must be
``P'key': 'value'S`` (``P`` the column's ``{`` or space, ``S`` the last column's ``}``),
neither key nor value holding a ``'``; a line all of whose cells are so is the line
the cut at the quotes reads (``{``, then per key its name, ``: ``, its value and
``, ``, ``}`` after the last value), and holds exactly the strings the JSON reader
reads from it, when no cell holds a backslash (an escape in JSON) or a control byte
(refused in JSON strings): the caller knows the control bytes already and searches
:attr:`Cut.cells` (each distinct key and value once) for the rest.

Lines of another number of cells than the first line has keys (an evaluation dict,
the run's summary, a ``,`` in a value), and lines with a cell of another shape, are
cut at their quotes in Python, one by one; a line of any other shape (a value not
quoted, a nested dict, a duplicate key, other spacing) makes :func:`quoted_columns`
return None and the JSON reader reads the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Lines cut in Python, at most (more: the JSON reader reads the text).
MAX_ODD_LINES = 10_000

#: Bytes the CSV reader reads at once (the dict lines are handed to it a piece at a
#: time, and a line longer than this is left to the JSON reader).  Each block's cells
#: come with a dictionary of their own, merged at the end: a Trainer's values recur from
#: block to block, so fewer, larger blocks leave fewer entries to merge (docs/performance.md).
BLOCK = 1 << 23


@dataclass
class Cut:
    """What :func:`quoted_columns` read.

    :param columns: per key, in the order the keys first appear, ``(key, values,
        present)``: the values as a dictionary-encoded Arrow string array over every
        line (null where the line has no such key), ``present`` a numpy bool array.
    :param n_lines: the lines read.
    :param cells: every distinct key and value, and each line cut in Python,
        ``\\n``-joined: what a line holds but its fixed separators, to be searched
        at once.
    """

    columns: list[tuple[str, Any, Any]]
    n_lines: int
    cells: str


@dataclass
class _Column:
    """One column of cells over the lines the CSV reader kept: per line the code of
    its distinct cell; per distinct cell its text, the id of its key (-1 where the
    cell is not ``P'key': 'value'S``) and its value (null there)."""

    codes: Any
    cells: Any
    key_ids: Any
    values: Any


def quoted_columns(stream: Any, first: str) -> Cut | None:
    """The dict lines' columns, or None when a line is not a dict of quoted strings
    (see the module docstring).  ``stream``: the dict lines as a file (``read(n)``:
    bytes), each ending in ``\\n``, none holding a control byte; ``first``: the first
    line.  The caller searches :attr:`Cut.cells` for what JSON would read otherwise
    (a ``\\\\``)."""
    import numpy as np

    n_quotes = first.count("'")
    if n_quotes % 4 or not n_quotes:
        return None
    odd: list[tuple[int, str]] = []
    names: dict[str, int] = {}  # key -> its id
    try:
        n_keys = n_quotes // 4
        cols = [_column(j, n_keys, c, names) for j, c in enumerate(_cells(stream, n_keys, odd))]
    except _Refused:
        return None
    n_rows = len(cols[0].codes)
    n_lines = n_rows + len(odd)
    main = np.ones(n_lines, dtype=bool)
    main[[no - 1 for no, _ in odd]] = False
    lines = np.flatnonzero(main)  # (the kept rows, as lines from 0)
    by_layout = _layouts(cols, odd, lines)
    if by_layout is None:
        return None
    got = _slots(cols, by_layout, lines, list(names))
    if got is None:
        return None
    order, slots = got
    return _with_odd_lines(odd, slots, order, set(slots), n_lines)


class _Refused(Exception):
    """Arrow's CSV reader refused the text (a line longer than a block, too many odd
    lines)."""


def _cells(stream: Any, n_keys: int, odd: list[tuple[int, str]]) -> list[tuple[Any, Any]]:
    """Per column of the lines of ``n_keys`` cells, its codes over every block (numpy
    int32) and its distinct cells (Arrow): the blocks' dictionaries merged.

    :raises _Refused: Arrow refuses the text, or too many lines are others."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    parts: list[list[Any]] = [[] for _ in range(n_keys)]
    for table in _blocks(stream, n_keys, odd):
        for j in range(n_keys):
            parts[j].append(table.column(j).combine_chunks())
    out = []
    for encoded in parts:
        if not encoded:
            out.append((np.zeros(0, np.int32), pa.array([], pa.string())))
            continue
        merged = pc.dictionary_encode(pa.concat_arrays([e.dictionary for e in encoded]))
        remap = merged.indices.to_numpy(zero_copy_only=False)
        base = 0
        codes = []
        for e in encoded:
            codes.append(remap[e.indices.to_numpy(zero_copy_only=False) + base])
            base += len(e.dictionary)
        out.append((np.concatenate(codes).astype(np.int32, copy=False), merged.dictionary))
    return out


def _column(j: int, n_keys: int, got: tuple[Any, Any], names: dict[str, int]) -> _Column:
    """Column ``j`` of ``n_keys``: its distinct cells read as ``P'key': 'value'S``
    (``P`` a ``{`` in the first column, else a space; ``S`` a ``}`` in the last), each
    key given an id in ``names`` (new keys added)."""
    import pyarrow.compute as pc

    codes, cells = got
    head = r"\{" if j == 0 else " "
    tail = r"\}" if j == n_keys - 1 else ""
    pairs = pc.extract_regex(cells, rf"^{head}'(?P<key>[^']*)': '(?P<value>[^']*)'{tail}$")
    return _Column(codes, cells, _key_ids(pairs, names), pairs.field("value"))


def _key_ids(pairs: Any, names: dict[str, int]) -> Any:
    """Per cell the id of its key in ``names`` (keys new to it added, in the order
    the cells first hold them), -1 where the cell is no pair (``pairs`` null)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = pc.if_else(pairs.is_valid(), pairs.field("key"), pa.scalar(None, pa.string()))
    encoded = pc.dictionary_encode(keys)  # (each key once, in the order of its first cell)
    ids = [names.setdefault(k, len(names)) for k in encoded.dictionary.to_pylist()]
    table = np.array([*ids, -1], np.int64)
    return table[encoded.indices.fill_null(len(ids)).to_numpy(zero_copy_only=False)]


def _layouts(
    cols: list[_Column], odd: list[tuple[int, str]], lines: Any
) -> list[tuple[tuple[int, ...], Any]] | None:
    """Per set of key ids the kept rows hold, in the order of their first row: the ids
    and the rows (ascending; None: every row); the rows with a cell that is not a pair
    moved to ``odd`` (joined again at their ``,``), to be cut in Python.  None when
    that makes too many odd lines."""
    import numpy as np

    n_rows = len(cols[0].codes)
    if not n_rows:
        return []
    if all(len(c.key_ids) and (c.key_ids == c.key_ids[0]).all() for c in cols):
        if all(c.key_ids[0] >= 0 for c in cols):  # (every row one set: a Trainer's)
            return [(tuple(int(c.key_ids[0]) for c in cols), None)]
    per_row = np.column_stack([c.key_ids[c.codes] for c in cols])
    bad = (per_row < 0).any(axis=1)
    if len(odd) + int(bad.sum()) > MAX_ODD_LINES:
        return None
    for r in np.flatnonzero(bad).tolist():  # (a cell of another shape: cut in Python)
        odd.append((int(lines[r]) + 1, ",".join(c.cells[int(c.codes[r])].as_py() for c in cols)))
    rows = np.flatnonzero(~bad)
    if not len(rows):
        return []
    stack = per_row[rows]
    _, first, which = np.unique(stack, axis=0, return_index=True, return_inverse=True)
    which = which.reshape(-1)
    return [
        (tuple(int(x) for x in stack[first[u]]), rows[which == u])
        for u in np.argsort(first, kind="stable")
    ]


def _slots(
    cols: list[_Column],
    by_layout: list[tuple[tuple[int, ...], Any]],
    lines: Any,
    names: list[str],
) -> tuple[list[tuple[int, str]], dict[str, list[tuple[Any, Any, Any]]]] | None:
    """The order the keys first appear in (``(line, key)``) and per key the ``(lines,
    codes, values)`` of the rows holding it (:func:`_layouts`), ``values`` the
    distinct values of that key's cells in one column; None when a row holds a key
    twice."""
    import numpy as np
    import pyarrow as pa

    order: list[tuple[int, str]] = []
    slots: dict[str, list[tuple[Any, Any, Any]]] = {}
    pools: dict[tuple[int, int], tuple[Any, Any]] = {}  # (column, key id) -> recode, values
    for layout, at in by_layout:
        if len(set(layout)) != len(layout):
            return None
        first = int(lines[0 if at is None else at[0]])
        for j, key_id in enumerate(layout):
            col = cols[j]
            if (j, key_id) not in pools:
                mine = np.flatnonzero(col.key_ids == key_id)
                recode = np.full(len(col.key_ids), -1, np.int32)
                recode[mine] = np.arange(len(mine), dtype=np.int32)
                every = len(mine) == len(col.key_ids)  # (then the codes as they are)
                pools[j, key_id] = None if every else recode, col.values.take(pa.array(mine))
            recode, values = pools[j, key_id]
            codes = col.codes if at is None else col.codes[at]
            codes = codes if recode is None else recode[codes]
            slots.setdefault(names[key_id], []).append(
                (lines if at is None else lines[at], codes, values)
            )
            order.append((first, names[key_id]))
    return order, slots


def _with_odd_lines(
    odd: list[tuple[int, str]],
    slots: dict[str, list[tuple[Any, Any, Any]]],
    order: list[tuple[int, str]],
    keys: set[str],
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
    cells = [*keys, *words, *(text for _, text in odd)]
    return Cut(columns, n_lines, "\n".join(cells))


def _blocks(stream: Any, n_keys: int, odd: list[tuple[int, str]]) -> Iterator[Any]:
    """The lines of ``n_keys`` cells (cut at their ``,``) as tables of
    dictionary-encoded strings, one per block read (names ``f0``...; one block's
    cells at a time are held, not all), the ``(line number, text)`` of the others
    appended to ``odd`` as they come.

    :raises _Refused: Arrow refuses the text, or too many lines are others."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    def other(row: Any) -> str:
        if row.number is None or len(odd) >= MAX_ODD_LINES:
            return "error"
        odd.append((row.number, row.text))
        return "skip"

    # (each block's cells dictionary-encoded as they are read: its distinct cells are few)
    types = {f"f{i}": pa.dictionary(pa.int32(), pa.string()) for i in range(n_keys)}
    try:
        reader = pcsv.open_csv(
            stream,
            read_options=pcsv.ReadOptions(  # (a line of more cells is another's too)
                column_names=list(types), use_threads=False, block_size=BLOCK
            ),
            parse_options=pcsv.ParseOptions(
                delimiter=",",
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
            _place(where, lines, codes, base[id(some)])
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


def _place(where: Any, lines: Any, codes: Any, base: int) -> None:
    """``where[lines] = codes + base`` (``lines`` ascending, each once), written as a
    slice when ``lines`` is a stretch of consecutive lines (every dict line but the
    summary at the end, in a Trainer's log): no index a line."""
    import numpy as np

    if len(lines) and int(lines[-1]) - int(lines[0]) + 1 == len(lines):
        np.add(codes, base, out=where[int(lines[0]) : int(lines[-1]) + 1], casting="unsafe")
    else:
        where[lines] = codes + base
