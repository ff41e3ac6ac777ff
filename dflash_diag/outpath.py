"""Every output the tool writes goes through here: one check, one writer.

:func:`check_output_path` validates an output path before any work is done (``--plot``,
``--html``, ``parse --to``, ``batches --export``, ``manifest --to``): a known suffix, a
folder that exists and can be written, and not one of the inputs.  "Not an input" is
decided by identity, ``(st_dev, st_ino)``, so a symbolic or hard link to the log is the
log.  :func:`atomic_output` writes: into a temporary file in the same folder, flushed to
disk (``fsync``) and renamed over the final name, so a full disk, a read-only folder or
a missing permission leaves the old file as it was, no temporary file behind, and one
``error:`` line (an :class:`~dflash_diag.errors.InputError`, exit 2).
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .errors import InputError

#: ``errno`` -> what went wrong and what to do, in words.
_WRITE_ERRORS = {
    errno.ENOSPC: ("no space left on the device", "free some space or write elsewhere"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or write elsewhere"),
    errno.EFBIG: ("the file grew past the size allowed", "write elsewhere (ulimit -f?)"),
    errno.EROFS: ("the folder is on a read-only file system", "write elsewhere"),
    errno.EACCES: ("permission denied", "write to a folder you can write to"),
    errno.EPERM: ("permission denied", "write to a folder you can write to"),
}


def _or(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` names (links followed), or None when
    there is none (or it is ``-``, standard input)."""
    if os.fspath(path) == "-":
        return None
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` are one file: the same device and inode, so a symlink or
    a hard link to a file is that file.

    >>> same_file("-", "-")
    False
    """
    ia = identity(a)
    return ia is not None and ia == identity(b)


def check_output_path(
    path: str | Path,
    suffixes: Sequence[str],
    noun: str,
    protect: Sequence[str | Path | None] = (),
    clash: tuple[str, str] = ("refusing to overwrite an input file", "choose another file"),
) -> Path:
    """The output ``path`` if it can be written: a known suffix (case-insensitive), an
    existing folder that can be written, and none of the ``protect`` input files (by
    identity, :func:`same_file`); else an InputError.

    :param suffixes: allowed extensions, e.g. ``(".png", ".svg", ".pdf")``.
    :param noun: what is written (``plot``, ``output``, ``export``), for the messages.
    :param protect: the inputs (``None`` and ``-`` are skipped); a folder protects the
        files in it (a dataset folder).
    :param clash: ``(what, hint)`` of the error when ``path`` is one of ``protect``.

    >>> check_output_path("loss.PNG", (".png", ".svg", ".pdf"), "plot").name
    'loss.PNG'
    """
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise InputError(
            str(p),
            f"cannot tell the {noun} format from {p.suffix or 'no extension'!r}",
            f"name the file {_or(list(suffixes))}",
        )
    folder = p.parent
    if not folder.is_dir():
        raise InputError(str(p), f"the folder for the {noun} does not exist", "create it first")
    if p.is_dir():
        raise InputError(str(p), "is a folder", f"name a file for the {noun}")
    for q in protect:
        if q is None or str(q) == "-":
            continue
        if same_file(p, q) or (Path(q).is_dir() and _inside(p, Path(q))):
            raise InputError(str(p), *clash)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(
            str(p), f"cannot write the {noun}: the folder is not writable", "write elsewhere"
        )
    return p


def _inside(p: Path, folder: Path) -> bool:
    """Whether ``p`` is (or would be) a file under ``folder``."""
    try:
        return p.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def write_error(path: str | os.PathLike[str], e: OSError, noun: str = "output") -> InputError:
    """An OSError met while writing ``path`` as the one-line InputError."""
    code = e.errno
    if code is None and "no space left" in str(e).lower():  # (pyarrow's IOError has none)
        code = errno.ENOSPC
    default = (e.strerror or type(e).__name__, "write elsewhere")
    what, hint = _WRITE_ERRORS.get(code or 0, default)
    return InputError(os.fspath(path), f"cannot write the {noun}: {what}", hint)


@contextmanager
def atomic_output(path: str | os.PathLike[str], noun: str = "output") -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder to write the whole output to; on a
    clean exit it is flushed to disk and renamed over ``path`` (readers see the old
    file or the new one, never half of one).  On any failure the temporary file is
    removed and ``path`` is left as it was; an OSError becomes a one-line InputError.

    The new file gets the permissions a plain ``open(path, "w")`` would give it
    (``0o666`` less the umask), not ``mkstemp``'s ``0o600``.
    """
    p = Path(path)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise write_error(p, e, noun) from None
    os.close(fd)
    tmp = Path(name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        yield tmp
        _fsync(tmp)
        os.replace(tmp, p)
    except OSError as e:
        raise write_error(p, e, noun) from None
    finally:
        if tmp.exists():
            tmp.unlink()


def _fsync(path: Path) -> None:
    """Flush ``path``'s bytes to the device."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(
    path: str | os.PathLike[str], write: Callable[[Path], object], noun: str = "output"
) -> Path:
    """Call ``write(tmp)`` to write the whole output to a temporary file, then put it in
    place (:func:`atomic_output`).  Returns ``path``."""
    with atomic_output(path, noun) as tmp:
        write(tmp)
    return Path(path)


def write_table(table: object, to: Path) -> None:
    """Write the table as Parquet, CSV or JSON lines, by ``to``'s suffix, atomically."""
    suffix = to.suffix.lower()
    with atomic_output(to) as tmp:
        if suffix == ".parquet":
            table.to_parquet(tmp, index=False)  # type: ignore[attr-defined]
        elif suffix == ".csv":
            table.to_csv(tmp, index=False)  # type: ignore[attr-defined]
        else:
            table.to_json(tmp, orient="records", lines=True)  # type: ignore[attr-defined]
