"""The safety classes of issue 27 as fuzz cases: each draws a random hostile input and
checks the promise it must keep.  :func:`run_case` returns ``"ok"``/``"error"`` or
raises :class:`~tests.fuzz.target.ContractBreak`; ``benchmarks/fuzz.py --safety N``
runs them in a subprocess, ``tests/fuzz/test_safety_fuzz.py`` through hypothesis.

- ``code``: a found ``dflash-diag.toml`` naming code (file or module, relative or
  absolute, with or without ``allow_code``) is refused and nothing is imported;
- ``links``: an output that is a symlink or hard link to an input is refused and the
  input is unchanged;
- ``escapes``: control characters in a TOML key, a file name or a label never reach
  the console's output;
- ``bomb``: a gzip whose text passes the budget is one InputError, never a MemoryError.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import zlib
from pathlib import Path

from .target import ContractBreak

CLASSES = ("code", "links", "escapes", "bomb")
_CONTROLS = [chr(c) for c in (*range(0, 9), *range(11, 32), 127, *range(0x80, 0xA0), 0x202E)]


def _code(rng: random.Random, folder: Path) -> str:
    from dflash_diag.errors import InputError
    from dflash_diag.schedule.config import CONFIG_NAME, resolve_schedule

    mark = folder / "RAN"
    (folder / "evil.py").write_text(f"open({str(mark)!r}, 'w').write('x')\ndef f(*a): return []\n")
    target = rng.choice(["evil.py", str(folder / "evil.py"), "./evil.py", "os.path"])
    extra = rng.choice(["", "allow_code = true\n", 'manifest = "m.parquet"\n'])
    (folder / CONFIG_NAME).write_text(f'[schedule]\nstrategy = "{target}:f"\n{extra}')
    try:
        resolve_schedule({}, near=(folder / "run.log", None))
    except InputError as e:
        if "runs Python code" not in str(e) or "\n" in str(e):
            raise ContractBreak(f"refused for another reason: {e}") from None
        if mark.exists():
            raise ContractBreak("the found config's code ran") from None
        return "error"
    raise ContractBreak(f"code named by a found config was accepted: {target}")


def _links(rng: random.Random, folder: Path) -> str:
    from dflash_diag.errors import InputError
    from dflash_diag.outpath import check_output_path

    src = folder / "run.log"
    src.write_bytes(rng.randbytes(64))
    suffix = rng.choice([".csv", ".html", ".png"])
    out = folder / f"out{suffix}"
    (os.symlink if rng.random() < 0.5 else os.link)(src, out)
    before = src.read_bytes()
    try:
        check_output_path(out, (suffix,), "output", protect=[src])
    except InputError:
        return "error"
    finally:
        if src.read_bytes() != before:
            raise ContractBreak("the input changed")
    raise ContractBreak("an output linked to the input was accepted")


def _escapes(rng: random.Random, folder: Path) -> str:
    from dflash_diag.printable import PrintableConsole

    text = "".join(rng.choice([*_CONTROLS, "a", "[", "]", ";", "\x1b["]) for _ in range(40))
    buf = io.StringIO()
    PrintableConsole(file=buf, force_terminal=True, color_system="standard").print(
        f"[bold]{text}[/bold]" if rng.random() < 0.5 else text, markup=False
    )
    out = buf.getvalue()
    # (rich's own style codes are ESC [ ... m; nothing else may hold a control)
    import re

    rest = re.sub(r"\x1b\[[0-9;]*m", "", out)
    bad = [c for c in rest if c in _CONTROLS and c != "\n"]
    if bad:
        raise ContractBreak(f"control characters reached the output: {bad[:5]!r}")
    return "ok"


def _bomb(rng: random.Random, folder: Path) -> str:
    from dflash_diag import limits
    from dflash_diag.errors import InputError

    line = rng.choice([b"\x00" * 16, b"step=1 loss=1\n", b"a" * 100])
    block = line * (4096 // len(line))  # (~4 KB; up to 2 MB in all, budget 1 MB)
    c = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    data = b"".join(c.compress(block) for _ in range(rng.randint(1, 512))) + c.flush()
    if rng.random() < 0.3:
        data += gzip.compress(b"step=2 loss=1\n")
    try:
        limits.gunzip(data[: rng.randint(10, len(data))], "bomb.gz", budget=1 << 20)
    except InputError as e:
        if "\n" in str(e) or len(str(e)) > 300:
            raise ContractBreak(f"a long error: {str(e)[:100]}") from None
        return "error"
    return "ok"


def run_case(kind: str, seed: int, folder: Path) -> str:
    """One case of class ``kind`` drawn from ``seed``, in the empty ``folder``."""
    rng = random.Random(seed)
    return {"code": _code, "links": _links, "escapes": _escapes, "bomb": _bomb}[kind](rng, folder)
