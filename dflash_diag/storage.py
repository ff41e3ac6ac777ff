"""Inputs where they live: a local path or a URI (``s3://``, ``gs://``, ``hdfs://``,
``abfs://``, ``file://``; ``hf://`` and other fsspec protocols where fsspec is installed).

URIs are opened through pyarrow's filesystems (``pyarrow.fs.FileSystem.from_uri``), so
credentials come from where each store's own tools take them: for S3 the
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` /
``AWS_PROFILE`` variables, ``~/.aws/credentials`` and ``~/.aws/config``, instance roles,
and ``AWS_ENDPOINT_URL`` for an S3-compatible server (MinIO, Ceph, R2); for GCS the
application-default credentials.  Nothing here prints, and no message carries a URI's
user part, its query (``?access_key=...``) or a store's own error text (which may name
keys): :func:`display` is what a message shows.

>>> is_uri("s3://bkt/data/"), is_uri("data/manifest.parquet")
(True, False)
>>> display("s3://KEY:SECRET@bkt/data/x.parquet?secret_key=S")
's3://bkt/data/x.parquet'
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from .errors import InputError

#: Schemes read as URIs (a local path never starts with one of these and ``:/``).
SCHEMES = (
    "s3",
    "gs",
    "gcs",
    "hdfs",
    "viewfs",
    "abfs",
    "abfss",
    "az",
    "file",
    "hf",
    "http",
    "https",
    "memory",
)
#: The characters that make a URI's last part a glob of shards.
GLOB_CHARS = "*?["

# (pathlib turns "s3://b/k" into "s3:/b/k": both spellings are taken back as the URI)
_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+):/{1,3}(?P<rest>.*)$", re.S)


class StorageError(InputError):
    """A URI that cannot be read: the endpoint does not answer, the credentials are
    refused, or nothing is there.  The message names the URI as :func:`display` shows it,
    never a credential or the store's own error text."""


@dataclass(frozen=True)
class Location:
    """A resolved input: ``fs`` (a ``pyarrow.fs.FileSystem``), ``path`` inside it, and
    ``uri`` as given (:func:`display` for messages)."""

    fs: Any
    path: str
    uri: str

    @property
    def shown(self) -> str:
        return display(self.uri)


def uri_text(x: str | os.PathLike[str]) -> str:
    """``x`` as text, a URI's ``scheme://`` restored where pathlib folded it to ``scheme:/``.

    >>> from pathlib import Path
    >>> uri_text(Path("s3://bkt/a.parquet"))
    's3://bkt/a.parquet'
    """
    text = os.fspath(x)
    m = _URI.match(text)
    if m and m["scheme"].lower() in SCHEMES:
        rest = m["rest"]
        if m["scheme"].lower() == "file":  # (file:///abs/path keeps its root)
            return "file:///" + rest.lstrip("/")
        return f"{m['scheme'].lower()}://{rest.lstrip('/')}"
    return text


def is_uri(x: str | os.PathLike[str]) -> bool:
    """True when ``x`` names a place by URI rather than a local path."""
    m = _URI.match(os.fspath(x))
    return bool(m and m["scheme"].lower() in SCHEMES)


def display(x: str | os.PathLike[str]) -> str:
    """``x`` as a message may show it: a URI without its user part (``key:secret@``) and
    its query (``?access_key=...``); a local path as it is."""
    if not is_uri(x):
        return os.fspath(x)
    text = uri_text(x)
    scheme, rest = text.split("://", 1)
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    host, sep, tail = rest.partition("/")
    host = host.rpartition("@")[2]
    return f"{scheme}://{host}{sep}{tail}"


def has_glob(x: str | os.PathLike[str]) -> bool:
    """True when the last part of ``x`` is a glob (``shards/*.parquet``); a URI's
    ``?query`` is not part of it (in a URI ``?`` starts the query, as pyarrow reads it)."""
    path = split_query(uri_text(x))[0]
    return any(c in path.rstrip("/").rsplit("/", 1)[-1] for c in GLOB_CHARS)


def split_query(text: str) -> tuple[str, str]:
    """A URI's path and its query, ``?`` included (``("s3://b/k", "?scheme=http")``);
    a local path and ``""``."""
    if not is_uri(text):
        return text, ""
    path, mark, query = text.partition("?")
    return path, mark + query


# The words that tell a store's failures apart, as whole tokens: a bare substring would
# find "403" in "port 40399" and call an endpoint that never answered a refusal.  (Left
# as text: `re` compiles them when a store fails, not at every start-up.)
_UNREACHABLE = (
    r"NETWORK_CONNECTION|curlCode|Could ?n[o']t (?:connect|resolve)|timed out|Timeout"
    r"|Connection refused"
)
_NOT_FOUND = r"NO_SUCH_BUCKET|NoSuchBucket|NoSuchKey|RESOURCE_NOT_FOUND"
_DENIED = (
    r"ACCESS_DENIED|AccessDenied|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH"
    r"|InvalidAccessKeyId|SignatureDoesNotMatch|EXPIRED_TOKEN|Forbidden"
    r"|(?<![\w.:/-])403(?![\w.:/-])"
)
#: The HTTP clients' errors of a request that reached no server (httpx, requests,
#: aiohttp and the builtins), by class name: fsspec's filesystems (``hf://``,
#: ``http://``) raise them as they are.
_NO_ANSWER_CLASSES = frozenset(
    {"ConnectError", "ConnectTimeout", "ConnectionError", "ClientConnectorError",
     "ClientConnectionError", "TimeoutException", "ServerTimeoutError", "TimeoutError",
     "Timeout"}
)  # fmt: skip
#: The HTTP clients whose errors a store raises through fsspec: (module, base class).
_HTTP_ERRORS = (
    ("httpx", "HTTPError"),
    ("httpx2", "HTTPError"),
    ("requests", "RequestException"),
    ("aiohttp", "ClientError"),
)

#: No credentials were found to sign a request with (GCS: no application-default
#: credentials, and no metadata server to ask for a token).
_NO_CREDENTIALS = r"OAuth2 access token|Failed to get token from|AuthenticationException"
#: The HDFS client cannot be loaded: pyarrow's needs Hadoop's libhdfs and a Java runtime.
_NO_HDFS_CLIENT = r"libjvm|libhdfs"
#: The modules of the store clients fsspec brings: a ValueError raised in their own code
#: is the store's refusal of a path (huggingface_hub: "Repository id must be ..."), not a
#: bug of this package.
_CLIENT_MODULES = frozenset({"fsspec", "huggingface_hub", "adlfs", "gcsfs", "s3fs"})

#: What went wrong, as a message says it: the endpoint does not answer, nothing is
#: there, access is denied, no credentials were found.
UNREACHABLE = "the storage endpoint does not answer"
NOT_FOUND = "not found"
DENIED = "access denied (the credentials were refused, or give no access to it)"
NO_CREDENTIALS = "no credentials found for this store"
OFFLINE = "offline mode is on, so the Hub was not asked"
NOT_A_PATH = "not a path this store takes"
NO_HDFS_CLIENT = "the HDFS client cannot be loaded (it needs libhdfs and a Java runtime)"

#: Per store, what to check for each failure: the settings that store's own tools read.
_HINTS: dict[str, dict[str, str]] = {
    "s3": {
        UNREACHABLE: "check AWS_ENDPOINT_URL (or the endpoint in the URI) and the network",
        NOT_FOUND: "check the bucket and the key",
        DENIED: "check AWS_PROFILE / AWS_ACCESS_KEY_ID or the store's credentials and its policy",
    },
    "gs": {
        UNREACHABLE: "check the endpoint in the URI and the network",
        NOT_FOUND: "check the bucket and the object's path",
        DENIED: "check GOOGLE_APPLICATION_CREDENTIALS (or `gcloud auth "
        "application-default login`) and the bucket's permissions",
    },
    "abfs": {
        UNREACHABLE: "check the account name, the endpoint in the URI and the network",
        NOT_FOUND: "check the container and the blob's path",
        DENIED: "check the account key or SAS (in the URI or the AZURE_* variables) "
        "and the container's access",
    },
    "hf": {
        NOT_A_PATH: "give hf://datasets/ORG/NAME/path (a dataset's file) or "
        "hf://ORG/NAME/path (a model's)",
        UNREACHABLE: "check HF_ENDPOINT (when set) and the network",
        NOT_FOUND: "check the repository, the revision and the path (a private or gated "
        "repository reads as not found without access: check HF_TOKEN and, for a gated "
        "one, that its terms are accepted)",
        DENIED: "check HF_TOKEN (or `hf auth login`) and, for a gated repository, that "
        "its terms are accepted",
    },
    "": {
        NOT_A_PATH: "check the URI",
        UNREACHABLE: "check the endpoint in the URI and the network",
        NOT_FOUND: "check the URI",
        DENIED: "check the store's credentials and its policy",
    },
}
for _hints in _HINTS.values():
    _hints[NO_CREDENTIALS] = _hints[DENIED]
    _hints.setdefault(NOT_A_PATH, "check the URI")
    _hints[NO_HDFS_CLIENT] = (
        "set JAVA_HOME, HADOOP_HOME and CLASSPATH (`hadoop classpath --glob`) as "
        "pyarrow's HDFS filesystem needs"
    )
    # (only Hugging Face's client has an offline mode: huggingface_hub's own variables)
    _hints[OFFLINE] = "unset HF_HUB_OFFLINE (and TRANSFORMERS_OFFLINE) to read from the Hub"
_HINTS["gcs"] = _HINTS["gs"]
_HINTS["abfss"] = _HINTS["az"] = _HINTS["abfs"]


def classify(e: BaseException, shown: str) -> StorageError:
    """A store's exception as a StorageError that names the cause (:func:`failure`)
    and what to check for that store (its scheme's settings), never the store's text."""
    what = failure(e)
    if what is None:
        return StorageError(shown, f"cannot read ({type(e).__name__})", "check the URI and access")
    return named(shown, what)


def named(shown: str, what: str) -> StorageError:
    """The StorageError for ``what`` (:data:`UNREACHABLE`, :data:`NOT_FOUND`,
    :data:`DENIED`) at the URI ``shown``, with what to check for its store."""
    scheme = shown.split("://", 1)[0] if "://" in shown else ""
    return StorageError(shown, what, _HINTS.get(scheme, _HINTS[""])[what])


def failure(e: BaseException) -> str | None:
    """What went wrong, as :data:`UNREACHABLE`, :data:`NOT_FOUND`, :data:`DENIED`,
    :data:`NO_CREDENTIALS`, :data:`OFFLINE`, :data:`NOT_A_PATH` or
    :data:`NO_HDFS_CLIENT` says it, for a store's exception; None when it says none.

    Read from the exception's class (``FileNotFoundError``, ``PermissionError``, an
    HTTP client's connection error, huggingface_hub's ``...NotFoundError`` and
    ``GatedRepoError``), its HTTP status (404; 401, 403) and the S3 error names in its
    text.  An endpoint that did not answer is told first: nothing answered, so no
    status code or error name in the text (a port, a host) can be the store's.
    """
    names = {c.__name__ for c in type(e).__mro__}
    text = str(e)
    if "OfflineModeIsEnabled" in names:  # (huggingface_hub's: a ConnectionError too)
        return OFFLINE
    if isinstance(e, ValueError):  # (:func:`is_store_error`: a client's refusal of a path)
        return NOT_A_PATH
    if re.search(_NO_HDFS_CLIENT, text):
        return NO_HDFS_CLIENT
    if re.search(_NO_CREDENTIALS, text):  # (before the metadata server's own failure)
        return NO_CREDENTIALS
    if names & _NO_ANSWER_CLASSES or re.search(_UNREACHABLE, text):
        return UNREACHABLE
    status = _status(e)
    if (
        isinstance(e, FileNotFoundError)
        or status == 404
        or any(n.endswith("NotFoundError") for n in names)
        or re.search(_NOT_FOUND, text)
    ):
        return NOT_FOUND
    if (
        isinstance(e, PermissionError)
        or status in (401, 403)
        or "GatedRepoError" in names
        or re.search(_DENIED, text)
    ):
        return DENIED
    return None


def _status(e: BaseException) -> int | None:
    """The HTTP status an HTTP client's error carries (``e.response.status_code``:
    httpx, requests; ``e.status``: aiohttp), or None."""
    response = getattr(e, "response", None)
    for code in (getattr(response, "status_code", None), getattr(e, "status", None)):
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    return None


def store_errors() -> tuple[type[BaseException], ...]:
    """What a store's filesystem raises when it cannot be read: pyarrow's (``OSError``,
    ``ArrowException``) and, through fsspec, the HTTP clients' errors (httpx, requests,
    aiohttp: those already imported, which is where a filesystem raised them)."""
    import pyarrow as pa

    found: list[type[BaseException]] = [OSError, pa.ArrowException]
    for module, name in _HTTP_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def is_store_error(e: BaseException) -> bool:
    """Whether ``e`` is a store's failure: one of :func:`store_errors`, or a
    ``ValueError`` raised in a store client's own code (:data:`_CLIENT_MODULES`), never
    one of this package's (a bug stays a bug)."""
    if isinstance(e, store_errors()):
        return True
    if not isinstance(e, ValueError) or e.__traceback__ is None:
        return False
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0] in _CLIENT_MODULES


@contextmanager
def store_call(shown: str) -> Iterator[None]:
    """Around requests to a store: a failure of the store's (:func:`is_store_error`)
    becomes the StorageError :func:`classify` makes for ``shown``; anything else goes
    on as it was raised."""
    try:
        yield
    except Exception as e:
        if not is_store_error(e):
            raise
        raise classify(e, shown) from None


def _fsspec_location(uri: str) -> Location:
    """A URI pyarrow has no filesystem for (``hf://``, ``http://``...), through fsspec."""
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem
    except ImportError:
        raise InputError(
            display(uri), "reading this URI needs the optional package 'fsspec'", ""
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except ImportError:
        package = _fsspec_package(uri.split("://", 1)[0])
        if package is None:
            raise StorageError(display(uri), "no filesystem for this URI", "") from None
        raise InputError(
            display(uri),
            f"reading this URI needs the optional package '{package}'",
            f"pip install {package}",
        ) from None
    except ValueError as e:
        raise StorageError(
            display(uri), f"no filesystem for this URI ({type(e).__name__})", ""
        ) from None
    return Location(PyFileSystem(FSSpecHandler(fs)), path, uri)


def _fsspec_package(scheme: str) -> str | None:
    """The package fsspec names for ``scheme``'s filesystem (``az`` -> ``adlfs``), or
    None when it knows none."""
    from fsspec.registry import known_implementations

    found = known_implementations.get(scheme, {}).get("class", "")
    return found.split(".", 1)[0] or None


def locate(x: str | os.PathLike[str]) -> Location:
    """The filesystem and path of ``x`` (a local path: the local filesystem).

    :raises StorageError: the URI names no filesystem pyarrow or fsspec knows, or its
        store refuses it while it is opened (S3 resolves a bucket's region here).
    """
    import pyarrow as pa
    import pyarrow.fs as pafs

    if not is_uri(x):
        return Location(pafs.LocalFileSystem(), os.path.abspath(os.fspath(x)), os.fspath(x))
    uri = uri_text(x)
    try:
        fs, path = pafs.FileSystem.from_uri(_bounded_retries(uri))
    except pa.ArrowInvalid as e:
        if "Unrecognized filesystem type" in str(e):
            return _fsspec_location(uri)
        raise StorageError(
            display(uri),
            "not a URI pyarrow can open",
            "check it, and its query parameters: pyarrow's filesystem for this store must "
            "know each",
        ) from None
    except Exception as e:
        if not is_store_error(e):
            raise
        raise classify(e, display(uri)) from None
    return Location(fs, path, uri)


#: Seconds a ``gs://`` request is retried for unless the URI says
#: (``?retry_limit_seconds=N``): the GCS client's own limit is far longer, spent in
#: silence where credentials are missing (docs/storage.md).
GCS_RETRY_SECONDS = 30


def _bounded_retries(uri: str) -> str:
    """``uri``, a ``gs://`` one given :data:`GCS_RETRY_SECONDS` of retries unless its
    query sets ``retry_limit_seconds``."""
    scheme, _, rest = uri.partition("://")
    if scheme not in ("gs", "gcs") or "retry_limit_seconds=" in rest.partition("?")[2]:
        return uri
    return f"{uri}{'&' if '?' in rest else '?'}retry_limit_seconds={GCS_RETRY_SECONDS}"


def info(loc: Location) -> str:
    """``file``, ``dir`` or ``missing`` for ``loc`` (one request to the store).

    An S3 prefix with objects below it is a ``dir``; a bucket that is not there is
    ``missing``.
    """
    import pyarrow.fs as pafs

    with store_call(loc.shown):
        kind = loc.fs.get_file_info(loc.path).type
    if kind == pafs.FileType.File:
        return "file"
    if kind == pafs.FileType.Directory:
        return "dir"
    return "missing"


def open_input(x: str | os.PathLike[str]) -> Any:
    """A seekable binary file (``pyarrow.NativeFile``) reading ``x``, a path or a URI:
    the one call a reader makes where it would ``open(path, "rb")``.

    :raises StorageError: the endpoint does not answer, access is denied, or nothing is
        there (for a local path: an ``InputError`` ``not found``).
    """
    loc = locate(x)
    with store_call(loc.shown):
        return loc.fs.open_input_file(loc.path)


def _child(loc: Location, path: str) -> str:
    """The URI of ``path`` inside ``loc``'s filesystem, shown as the user gave the root."""
    if not is_uri(loc.uri):
        return path
    root = uri_text(loc.uri).rstrip("/")
    scheme = root.split("://", 1)[0]
    return f"{scheme}://{path}" if scheme in ("s3", "gs", "gcs") else f"{root}/{path}"


def list_files(loc: Location) -> list[str]:
    """Every file below the folder ``loc`` (paths in its filesystem), sorted as strings,
    as fsspec's ``find`` sorts them (the order ``datasets`` resolves data files in)."""
    import pyarrow.fs as pafs

    with store_call(loc.shown):
        found = loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=True))
    return sorted(f.path for f in found if f.type == pafs.FileType.File)


def list_shards(
    x: str | os.PathLike[str], suffixes: tuple[str, ...] = (".parquet", ".pq")
) -> tuple[Location, list[str]]:
    """The shards of a folder or a glob of shards (``s3://b/data/``, ``data/*.parquet``):
    the folder's :class:`Location` and the shard paths in it, sorted as strings.

    A folder gives every file at any depth whose name ends in one of ``suffixes``; a
    glob gives the files its last part matches (``*`` and ``?`` stop at ``/``; in a URI
    ``?`` starts the query, which goes with the folder: ``s3://b/d/*.parquet?scheme=http``).

    :raises StorageError: the store cannot be read; InputError: nothing matches.
    """
    text = uri_text(x)
    if has_glob(text):
        path, query = split_query(text)  # (the query goes with the folder listed)
        base, _, pattern = path.rstrip("/").rpartition("/")
        loc = locate((base or ".") + query)
        files = [f for f in list_files(loc) if _glob_match(f[len(loc.path) :], pattern)]
    else:
        loc = locate(text)
        files = [f for f in list_files(loc) if f.lower().endswith(suffixes)]
    if not files:
        raise InputError(display(text), "no shards there", f"give a folder of {suffixes[0]} files")
    return loc, files


def _glob_match(rel: str, pattern: str) -> bool:
    """``rel`` (``/name`` below the glob's folder) matches ``pattern`` in one part."""
    rel = rel.lstrip("/")
    return "/" not in rel and fnmatch.fnmatchcase(rel, pattern)


def local_path(x: str | os.PathLike[str]) -> str | None:
    """The local path of ``x`` (a path, or a ``file://`` URI), or None for a remote URI."""
    if not is_uri(x):
        return os.fspath(x)
    text = uri_text(x)
    if text.startswith("file://"):
        return str(PurePath("/" + text[len("file://") :].lstrip("/")))
    return None


def stage(x: str | os.PathLike[str]) -> str:
    """A local path for ``x``: itself for a local path (``file://`` unwrapped), else a
    copy of the file at the URI in a temporary folder removed when the process ends.

    The one call a reader of whole files (a log, a recording) makes at its open:
    ``Path(stage(name))`` instead of ``Path(name)``.

    :raises StorageError: the endpoint does not answer, access is denied, or nothing is
        there.
    """
    import atexit
    import shutil
    import tempfile

    local = local_path(x)
    if local is not None:
        return local
    loc = locate(x)
    kind = info(loc)
    if kind == "missing":  # (an fsspec store's refusal comes as nothing there, too)
        raise named(loc.shown, NOT_FOUND)
    if kind != "file":
        raise StorageError(loc.shown, "a folder, not a file", "give the URI of one file")
    folder = tempfile.mkdtemp(prefix="dflash-diag-")
    atexit.register(shutil.rmtree, folder, True)
    dest = os.path.join(folder, loc.path.rsplit("/", 1)[-1] or "data")
    copy_file(loc, loc.path, dest)
    return dest


def copy_file(loc: Location, path: str, dest: str) -> None:
    """The file ``path`` of ``loc``'s filesystem copied to the local path ``dest``, 4 MiB
    at a time.

    :raises StorageError: the store cannot be read; InputError: ``dest`` cannot be
        written (a full disk is not the store's failure)."""
    try:
        with open(dest, "wb") as out:
            with store_call(loc.shown):
                src = loc.fs.open_input_stream(path)
            with src:
                while True:
                    with store_call(loc.shown):
                        chunk = src.read(1 << 22)
                    if not chunk:
                        break
                    out.write(chunk)
    except OSError as e:  # (the store's own failures left store_call as StorageError)
        raise InputError(
            os.path.dirname(dest) or ".",
            f"cannot write the local copy of {loc.shown}: {e.strerror or type(e).__name__}",
            "free space there, or set TMPDIR to another folder",
        ) from None
