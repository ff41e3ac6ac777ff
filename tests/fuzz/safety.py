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
- ``bomb``: a gzip whose text passes the budget is one InputError, never a MemoryError;
- ``disk``: an output written under a small ``RLIMIT_FSIZE`` (a full disk: the write
  fails with EFBIG) is one InputError; the previous file stays whole and no temporary
  file is left (in a subprocess: the limit is the process's);
- ``lines``: a JSON-lines line that claims more than a row may (over a drawn limit) is
  one InputError naming its line and what it needs; a file of shorter lines passes;
- ``html``: control characters in a title, a table cell or the text fold never reach
  the HTML page;
- ``runs``: a CSV log holding a long run of one separator or blank (tab, comma,
  semicolon, space) is read, or refused, in time linear in its bytes (under
  :data:`RUN_SECONDS`).
"""

from __future__ import annotations

import gzip
import io
import os
import random
import zlib
from pathlib import Path
from typing import Any

from .target import ContractBreak

CLASSES = ("code", "links", "escapes", "bomb", "disk", "lines", "html", "runs")
#: Seconds a ``runs`` case may take: a linear read of its < 200 KB takes ~0.1 s.
RUN_SECONDS = 3.0
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


#: The ``disk`` case's child: limit the file size, ignore SIGXFSZ (the write then fails
#: with EFBIG, as a full disk fails with ENOSPC), write, and say what happened.
_LIMITED_WRITE = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit, size, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
from dflash_diag.errors import InputError
from dflash_diag.outpath import atomic_output
try:
    with atomic_output(path, "output") as tmp:
        with open(tmp, "wb") as fh:
            for _ in range(size // 1000):
                fh.write(b"x" * 999 + b"\\n")
    print("ok")
except InputError as e:
    print("error " + str(e))
"""


def _disk(rng: random.Random, folder: Path) -> str:
    import subprocess
    import sys

    out = folder / rng.choice(["t.csv", "t.html", "t.svg", "run.parquet"])
    before = b"the previous output\n" * rng.randint(0, 50) if rng.random() < 0.8 else None
    if before is not None:
        out.write_bytes(before)
    limit, size = rng.choice([512, 4096, 65536]), rng.choice([0, 1000, 20_000, 200_000])
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED_WRITE, str(limit), str(size), str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=60,
    )
    said = done.stdout.strip()
    left = sorted(p.name for p in folder.iterdir() if p.name != out.name)
    if done.returncode != 0 or not said or done.stderr.strip():
        raise ContractBreak(f"exit {done.returncode}: {done.stderr.strip()[-200:]!r}")
    if left:
        raise ContractBreak(f"temporary files left: {left}")
    if said == "ok":
        if size >= limit + 1000:
            raise ContractBreak(f"{size} bytes written under a {limit}-byte limit")
        return "ok"
    if "\n" in said or len(said) > 300 or "cannot write" not in said:
        raise ContractBreak(f"not one error line: {said[:200]!r}")
    if (out.read_bytes() if out.exists() else None) != before:
        raise ContractBreak("the previous output was changed, or a partial one left")
    return "error"


def _lines(rng: random.Random, folder: Path) -> str:
    from dflash_diag import limits
    from dflash_diag.errors import InputError

    limit = rng.choice([64, 1000, 4096])
    lengths = [0, 5, limit // 2, limit - 2]  # (half the cases: every line under the limit)
    if rng.random() < 0.5:
        lengths += [limit, 2 * limit, 5 * limit]
    sizes = [rng.choice(lengths) for _ in range(8)]
    data = b"".join(b"{" + b"a" * n + b"}\n" for n in sizes)
    if rng.random() < 0.3:
        data = data.rstrip(b"\n")  # (a last line with no newline)
    longest = max(n + 2 for n in sizes)
    try:
        limits.check_line_claims(data, "m.jsonl", 1.0, "manifest row", limit=limit)
    except InputError as e:
        text = str(e)
        if "\n" in text or len(text) > 300 or "needs ~" not in text:
            raise ContractBreak(f"not one short line saying the need: {text[:200]!r}") from None
        if longest < limit:
            raise ContractBreak(f"lines of at most {longest} bytes refused at {limit}") from None
        return "error"
    if longest >= 2 * limit:
        raise ContractBreak(f"a line of {longest} bytes passed a {limit}-byte limit")
    return "ok"


def _html(rng: random.Random, folder: Path) -> str:
    import re

    from dflash_diag.render.html import page, table, text_output

    def nasty() -> str:
        return "".join(rng.choice([*_CONTROLS, "a", "<", "&", "'", "\x1b["]) for _ in range(20))

    body = [
        table(("step", "verdict"), [(nasty(), nasty()) for _ in range(3)], left=("verdict",)),
        text_output(lambda c: c.print(nasty(), markup=False)),
    ]
    out = page(nasty(), body)
    bad = re.findall("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", out)
    if bad:
        raise ContractBreak(f"control characters reached the page: {bad[:5]!r}")
    return "ok"


def _runs(rng: random.Random, folder: Path) -> str:
    import time

    from dflash_diag.errors import InputError
    from dflash_diag.logs import read_log

    char = rng.choice(["\t", ",", ";", " "])
    rows = [f"{k},{2.5 - k / 100:.3f}" for k in range(1, rng.randint(3, 40))]
    k = rng.randrange(len(rows))
    n = rng.choice([2_000, 20_000, 60_000])
    rows[k] = rows[k].replace(",", "," + char * n, 1)
    path = folder / "metrics.csv"
    path.write_text("step,loss\n" + "\n".join(rows) + "\n")
    start = time.perf_counter()
    status = _within(3 * RUN_SECONDS, lambda: read_log(path), InputError)
    took = time.perf_counter() - start
    if status == "hang" or took > RUN_SECONDS:
        raise ContractBreak(f"a run of {n:,} {char!r} took {took:.1f} s to read (or more)")
    return status


class _Late(BaseException):
    """Raised by the alarm in :func:`_within` (not an Exception: nothing catches it)."""


def _within(seconds: float, work: Any, refused: type[BaseException]) -> str:
    """``ok`` when ``work()`` returns, ``error`` when it raises ``refused``, ``hang``
    when it is still running after ``seconds`` (stopped by SIGALRM; the main thread)."""
    import signal

    def late(*_: object) -> None:
        raise _Late

    old = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        work()
        return "ok"
    except refused:
        return "error"
    except _Late:
        return "hang"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_case(kind: str, seed: int, folder: Path) -> str:
    """One case of class ``kind`` drawn from ``seed``, in the empty ``folder``."""
    rng = random.Random(seed)
    cases = {
        "code": _code,
        "links": _links,
        "escapes": _escapes,
        "bomb": _bomb,
        "disk": _disk,
        "lines": _lines,
        "html": _html,
        "runs": _runs,
    }
    return cases[kind](rng, folder)
