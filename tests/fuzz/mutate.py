"""Structure-aware mutations of logs, manifests and configs, driven by a ``random.Random``.

One source of cases for the quick hypothesis tests (``tests/fuzz``, which hand in
hypothesis' own ``st.randoms()`` so a failure shrinks and replays) and for the long run
in ``benchmarks/fuzz.py`` (a seeded ``random.Random``).  Every maker returns a
:class:`Case`: a file name (its extension picks the reader) and the file's bytes.

- logs: a seed log's head (``tests/data/logs``, ``tests/data/real_logs``,
  ``sample_logs``), then one to three edits: byte edits (cut, delete, insert, flip,
  duplicate, swap lines) or edits that know the format (a number replaced by a huge,
  negative, NaN or string value; a record nested thousands deep; a line repeated);
- manifests: a small table of lengths in every format ``read_manifest`` reads
  (parquet, csv, tsv, jsonl, npy), values drawn from good and bad ones (2**64, -1, NaN,
  strings, floats), some files then damaged (truncated, header bytes flipped, an npy
  header claiming a shape of 2**64 or a string dtype);
- configs: a ``[schedule]`` table with each key given a value of the right or the wrong
  type or size, sometimes with a byte that is not UTF-8.
"""

from __future__ import annotations

import io
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOG_DIRS = (ROOT / "tests/data/logs", ROOT / "tests/data/real_logs", ROOT / "sample_logs")
LOG_SUFFIXES = (".log", ".json", ".jsonl", ".csv", ".tsv")
HEADS = (3000, 6000, 30_000, 120_000)  # bytes of a seed log kept: short logs are read
# line by line, longer ones (over 20 kB) by the fast paths

#: Values a mutation puts where a number was (JSON/TOML/CSV spelling).
ODD_NUMBERS = (
    "0",
    "-1",
    "-0",
    "1e308",
    "1e309",
    "-1e308",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "18446744073709551616",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "1" + "0" * 400,
    "0.5",
    "1e-320",
    '"x"',
    '"8"',
    "true",
    "null",
    "[]",
    "{}",
    "[1,2]",
)


@dataclass(frozen=True)
class Case:
    """One fuzz input: ``kind`` (log, manifest or config), a file name and its bytes."""

    kind: str
    name: str
    data: bytes


def seed_logs() -> list[Path]:
    """The seed logs, sorted by path."""
    return sorted(
        p for d in LOG_DIRS if d.is_dir() for p in d.iterdir() if p.suffix in LOG_SUFFIXES
    )


# ---------------------------------------------------------------- byte edits


def byte_edit(data: bytes, rnd: random.Random) -> bytes:
    """One blind edit: cut, delete, insert, flip, duplicate or swap lines."""
    n = len(data)
    kind = rnd.choice(["cut", "delete", "insert", "flip", "duplicate", "swap_lines"])
    i = rnd.randint(0, max(0, n - 1))
    j = rnd.randint(i, min(n, i + 200))
    if kind == "cut":
        return data[:i]
    if kind == "delete":
        return data[:i] + data[j:]
    if kind == "insert":
        return data[:i] + rnd.randbytes(rnd.randint(1, 40)) + data[i:]
    if kind == "flip":
        return data[:i] + bytes([data[i] ^ rnd.randint(1, 255)]) + data[i + 1 :] if n else data
    if kind == "duplicate":
        return data[:j] + data[i:j] + data[j:]
    lines = data.split(b"\n")
    rnd.shuffle(lines)
    return b"\n".join(lines)


_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def number_edit(data: bytes, rnd: random.Random) -> bytes:
    """A number in the text replaced by an odd value (huge, NaN, negative, a string)."""
    found = list(_NUMBER.finditer(data[:20_000]))
    if not found:
        return byte_edit(data, rnd)
    m = rnd.choice(found)
    return data[: m.start()] + rnd.choice(ODD_NUMBERS).encode() + data[m.end() :]


def nested(depth: int, rnd: random.Random) -> bytes:
    """A JSON value nested ``depth`` deep: objects, lists, or both."""
    style = rnd.choice(["object", "list", "mixed"])
    if style == "object":
        return b'{"a": ' * depth + b"1" + b"}" * depth
    if style == "list":
        return b"[" * depth + b"1" + b"]" * depth
    return b'{"a": [' * (depth // 2) + b"1" + b"]}" * (depth // 2)


def structure_edit(data: bytes, rnd: random.Random) -> bytes:
    """An edit that knows logs: deep nesting in or as a record, a line repeated many
    times, a very long line, a number changed."""
    kind = rnd.choice(["nest_value", "nest_line", "repeat", "long", "number", "number"])
    lines = data.split(b"\n")
    k = rnd.randrange(len(lines))
    if kind == "nest_value":
        depth = rnd.choice([50, 900, 1100, 5000, 100_000])
        lines[k] = b'{"loss": 1.5, "step": 3, "x": ' + nested(depth, rnd) + b"}"
    elif kind == "nest_line":
        lines.insert(k, nested(rnd.choice([1000, 20_000, 200_000]), rnd))
    elif kind == "repeat":
        lines[k:k] = [lines[k]] * rnd.randint(2, 300)
    elif kind == "long":
        lines[k] = lines[k] + b" " + b"9" * rnd.randint(100, 50_000)
    else:
        return number_edit(data, rnd)
    return b"\n".join(lines)


def deep_json_lines(rnd: random.Random, n: int = 1500) -> bytes:
    """``n`` JSON lines of step and loss (over 20 kB: the Arrow path), one of them
    holding a value nested thousands deep."""
    lines = [b'{"step": %d, "loss": %.3f}' % (i, 2 + (i * 37 % 100) / 100) for i in range(1, n + 1)]
    k = rnd.randrange(n)
    depth = rnd.choice([65, 1000, 5000, 100_000])
    lines[k] = b'{"step": %d, "loss": 1.5, "x": ' % (k + 1) + nested(depth, rnd) + b"}"
    return b"\n".join(lines) + b"\n"


def log_case(rnd: random.Random, seeds: list[Path] | None = None) -> Case:
    """A seed log's head with one to three edits; sometimes a JSON document built whole."""
    seeds = seeds if seeds is not None else seed_logs()
    if rnd.random() < 0.05:  # JSON lines long enough for Arrow's reader, one line deep
        return Case("log", "metrics.jsonl", deep_json_lines(rnd))
    if rnd.random() < 0.05:  # a whole file that is one deep value (detect, hf_state)
        name = rnd.choice(["trainer_state.json", "run.log", "metrics.jsonl"])
        depth = rnd.choice([1000, 50_000])
        body = nested(depth, rnd)
        if name == "trainer_state.json" and rnd.random() < 0.5:
            body = b'{"log_history": [' + body + b"]}"
        return Case("log", name, body)
    path = rnd.choice(seeds)
    data = path.read_bytes()[: rnd.choice(HEADS)]
    for _ in range(rnd.randint(1, 3)):
        edit = rnd.choice([byte_edit, byte_edit, number_edit, structure_edit])
        data = edit(data, rnd)
    return Case("log", path.name, data)


# ---------------------------------------------------------------- manifests

MANIFEST_FORMATS = ("parquet", "csv", "tsv", "jsonl", "npy")
_ODD_LENGTHS: tuple[object, ...] = (
    0,
    1,
    -1,
    2**31,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63),
    1.5,
    float("nan"),
    float("inf"),
    1e300,
    "12",
    "x",
    "",
    None,
    True,
)


def _lengths(rnd: random.Random) -> list[object]:
    n = rnd.choice([0, 1, 2, 5, 30])
    out: list[object] = [rnd.randint(0, 4000) for _ in range(n)]
    for _ in range(rnd.choice([0, 0, 1, 2])):
        if out:
            out[rnd.randrange(len(out))] = rnd.choice(_ODD_LENGTHS)
    return out


def _column_name(rnd: random.Random) -> str:
    return rnd.choice(["length", "len", "num_tokens", "seq_len", "tokens", "", "length "])


def _text_table(values: list[object], sep: str, name: str, rnd: random.Random) -> bytes:
    rows = [f"{name}{sep}source"]
    for v in values:
        cell = "" if v is None else str(v)
        rows.append(f"{cell}{sep}{rnd.choice(['chat', 'code', '', 'a,b', chr(34)])}")
    return ("\n".join(rows) + rnd.choice(["\n", ""])).encode()


def _jsonl(values: list[object], name: str) -> bytes:
    lines = []
    for v in values:
        if isinstance(v, float) and v != v:
            lines.append(f'{{"{name}": NaN}}')
        elif isinstance(v, float) and abs(v) == float("inf"):
            lines.append(f'{{"{name}": {"Infinity" if v > 0 else "-Infinity"}}}')
        else:
            lines.append(json.dumps({name: v}))
    return ("\n".join(lines) + "\n").encode()


def _arrow_column(values: list[object], rnd: random.Random) -> object:
    import pyarrow as pa

    typed = rnd.choice(["int64", "float64", "string", "infer", "uint64"])
    try:
        if typed == "infer":
            return pa.array(values)
        if typed == "string":
            return pa.array([None if v is None else str(v) for v in values], pa.string())
        return pa.array(values, getattr(pa, typed)())
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())


def _parquet(values: list[object], name: str, rnd: random.Random) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    col = _arrow_column(values, rnd)
    table = pa.table({name or "length": col, "source": pa.array(["c"] * len(values))})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=max(1, rnd.choice([1, 2, 1000])))
    return buf.getvalue()


def npy_header(shape: tuple[int, ...] | str, descr: str = "<i8") -> bytes:
    """A .npy file's bytes with a header written by hand (any shape or dtype text)."""
    head = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    head = head + " " * (63 - (len(head) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode("latin1")


def _npy(values: list[object], rnd: random.Random) -> bytes:
    import numpy as np

    kind = rnd.choice(["ints", "floats", "strings", "2d", "structured", "forged", "bool"])
    if kind == "forged":
        shape = rnd.choice(["(18446744073709551616,)", "(-1,)", "(2**64,)", "(3, 3)", "()"])
        descr = rnd.choice(["<i8", "<U5", "|O", "<f8", "zz", "<i8'"])
        return npy_header(shape, descr) + b"\x00" * rnd.choice([0, 8, 24])
    ints = [v if isinstance(v, int) and -(2**63) <= v < 2**63 else 7 for v in values]
    if kind == "ints":
        arr = np.array(ints, dtype=np.int64)
    elif kind == "floats":
        arr = np.array([float(v) if isinstance(v, (int, float)) else 0.5 for v in values])
    elif kind == "strings":
        arr = np.array([str(v) for v in values])
    elif kind == "bool":
        arr = np.array([bool(v) for v in values])
    elif kind == "2d":
        arr = np.array(ints + ints, dtype=np.int64).reshape(2, -1)
    else:
        arr = np.zeros(len(ints), dtype=[("length", "<i8"), ("source", "<U4")])
        arr["length"] = ints
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def manifest_case(rnd: random.Random) -> Case:
    """A small manifest of one of the formats, with odd values and maybe damage."""
    fmt = rnd.choice(MANIFEST_FORMATS)
    values = _lengths(rnd)
    name = _column_name(rnd)
    if fmt == "parquet":
        data = _parquet(values, name, rnd)
    elif fmt == "npy":
        data = _npy(values, rnd)
    elif fmt == "jsonl":
        data = _jsonl(values, name or "length")
    else:
        data = _text_table(values, "\t" if fmt == "tsv" else ",", name, rnd)
    damage = rnd.random()
    if damage < 0.08:
        data = b""
    elif damage < 0.4:
        for _ in range(rnd.randint(1, 3)):
            data = byte_edit(data, rnd)
    elif damage < 0.5 and fmt != "npy":
        data = number_edit(data, rnd)
    return Case("manifest", f"manifest.{fmt}", data)


# ---------------------------------------------------------------- configs

_GOOD: dict[str, list[str]] = {
    "strategy": ['"sorted-greedy"', '"bucketed"', '"random"', '"fairseq"', '"length-grouped"'],
    "seed": ["0", "1234", "-5"],
    "token_budget": ["4096", "65536"],
    "budget_mode": ['"padded"', '"tokens"'],
    "max_seq_len": ["8192", "2048"],
    "max_batch_size": ["8", "64"],
    "batch_size": ["4", "16"],
    "buckets": ["[0, 770, 1216, 8192]", '"0,770,8192"'],
    "rng": ['"python"', '"numpy"', '"numpy-legacy"', '"torch"'],
    "seeding": ['"once"', '"per-epoch"'],
    "world_size": ["1", "2", "8"],
    "grad_accum": ["1", "2"],
    "shard": ['"strided"', '"contiguous"'],
    "first_step": ["0", "1"],
    "epochs": ["1", "3"],
    "required_batch_size_multiple": ["1", "8"],
    "mega_batch_mult": ["2", "50"],
    "metric_rank": ['"all"', '"auto"', "0"],
    "length_column": ['"length"'],
    "category_column": ['"source"'],
    "manifest": ['"manifest.csv"'],
}
#: Values of the wrong type or size, in TOML.
BAD_VALUES = (
    "'lots'",
    '"8"',
    "1e308",
    "inf",
    "nan",
    "-1",
    "0",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "1099511627776",
    "{a = 1}",
    "[1, 2]",
    "[]",
    "true",
    "1.5",
    "'1e3'",
    "1979-05-27",
    "07:32:00",
    '""',
    '"a:b"',
    '"0,1,x"',
    "[0, 0]",
    "[3, 2, 1]",
    '["a", "b"]',
)


def config_text(rnd: random.Random) -> str:
    """A ``[schedule]`` table: each key present or not, none to three of them given a
    value of the wrong type or size."""
    heads = ["[schedule]"] * 18 + ["[other]", "schedule = 3"]
    lines = [rnd.choice(heads)]
    keys = [k for k in _GOOD if rnd.random() < 0.5]
    bad = set(rnd.sample(keys, min(len(keys), rnd.choice([0, 0, 1, 1, 2, 3]))))
    for key in keys:
        spelled = key.replace("_", "-") if rnd.random() < 0.2 else key
        value = rnd.choice(BAD_VALUES) if key in bad else rnd.choice(_GOOD[key])
        lines.append(f"{spelled} = {value}")
    if rnd.random() < 0.03:
        lines.append("unknown_key = 1")
    return "\n".join(lines) + "\n"


def config_case(rnd: random.Random) -> Case:
    """A TOML config, sometimes with a byte edit (a non-UTF-8 byte, a cut)."""
    data = config_text(rnd).encode()
    r = rnd.random()
    if r < 0.07:
        i = rnd.randrange(len(data))
        data = data[:i] + rnd.choice([b"\xff", b"\xc3", b"\xe9", b"\x00"]) + data[i:]
    elif r < 0.15:
        data = byte_edit(data, rnd)
    return Case("config", "dflash-diag.toml", data)


MAKERS = {"log": log_case, "manifest": manifest_case, "config": config_case}


def make_case(kind: str, rnd: random.Random) -> Case:
    """A case of ``kind`` (``log``, ``manifest`` or ``config``)."""
    return MAKERS[kind](rnd)  # type: ignore[operator]
