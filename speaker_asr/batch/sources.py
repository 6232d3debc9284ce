"""Where recordings are read from: a local path, or a URI of a filesystem fsspec knows
(``s3://bucket/calls/``, ``gs://...``, ``az://...``, ``file:///...``) where its package is
installed (s3fs, gcsfs, adlfs; fsspec itself comes with huggingface_hub). A recording's source is
a :class:`~pathlib.Path` when local, else the URI as a ``str``; the outputs are always written
locally (``--output-dir``).

One reader for every engine: the batch run reads a recording here before sending it (in this
process, to a server), and a Ray worker reads it here itself (speaker_asr/batch/ray_engine.py),
from a path or bucket the cluster shares.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Union

from speaker_asr.batch.errors import BatchError, FileError

Source = Union[Path, str]

_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_uri(text: Union[str, Path]) -> bool:
    """``scheme://...`` (a ``str``: a Path never is one)."""
    return isinstance(text, str) and bool(_URI.match(text))


def _filesystem(uri: str):
    """fsspec's filesystem for ``uri`` and the path within it. Raises BatchError naming the
    package to install when the scheme's filesystem is missing."""
    try:
        import fsspec
    except ImportError:  # pragma: no cover - huggingface_hub brings it
        raise BatchError(f"cannot read {uri}: URIs need fsspec (pip install fsspec)") from None
    try:
        return fsspec.core.url_to_fs(uri)
    except ImportError as exc:
        raise BatchError(f"cannot read {uri}: {exc}") from None
    except ValueError as exc:  # an unknown scheme
        raise BatchError(f"cannot read {uri}: {exc} (local paths, or URIs of the filesystems "
                         "fsspec has installed: s3:// with s3fs, gs:// with gcsfs, ...)") from None


def _join(uri: str, path: str) -> str:
    """The URI of ``path``, a file found under ``uri`` (fsspec's paths have no scheme)."""
    return f"{uri.split('://', 1)[0]}://{path}"


def walk_uri(uri: str, recursive: bool) -> tuple[list[tuple[str, PurePosixPath]], list[str], bool]:
    """What ``uri`` holds: its files as (URI, place relative to it) in name order (a file given:
    itself at the top; hidden names skipped), the subfolders left out without ``recursive``, and
    whether it is a folder. Raises BatchError when it does not exist or cannot be
    listed."""
    fs, root = _filesystem(uri)
    root = root.rstrip("/") or "/"
    try:
        if fs.isfile(root):
            return [(uri, PurePosixPath(PurePosixPath(root).name))], [], False
        if not fs.isdir(root):
            raise BatchError(f"cannot read {uri}: no such file or folder (give audio files or "
                             "folders that hold them)")
        found: list[tuple[str, PurePosixPath]] = []
        unsearched: list[str] = []
        listed = fs.find(root, maxdepth=None if recursive else 1, withdirs=True, detail=True)
    except BatchError:
        raise
    except Exception as exc:  # the filesystem's own errors: permissions, credentials, network
        raise BatchError(f"cannot read {uri}: {type(exc).__name__}: {exc}") from None
    for path in sorted(listed):
        relative = PurePosixPath(path).relative_to(root) if path != root else None
        if relative is None or not relative.parts:
            continue
        if any(part.startswith(".") for part in relative.parts):
            continue
        if listed[path].get("type") == "directory":
            if not recursive:
                unsearched.append(_join(uri, path))
            continue
        found.append((_join(uri, path), relative))
    return found, unsearched, True


def read_source(source: Source) -> bytes:
    """A recording's bytes. Raises FileError (refused: the input's fault) when it cannot be read
    or is empty."""
    try:
        if is_uri(source):
            fs, path = _filesystem(str(source))
            with fs.open(path, "rb") as f:
                audio = f.read()
        else:
            audio = Path(source).read_bytes()
    except BatchError as exc:
        raise FileError(str(exc), refused=True) from None
    except OSError as exc:
        raise FileError(f"cannot read {source}: {exc.strerror or exc}", refused=True) from None
    except Exception as exc:  # a remote filesystem's own errors
        raise FileError(f"cannot read {source}: {type(exc).__name__}: {exc}", refused=True) from None
    if not audio:
        raise FileError(f"{source} is empty", refused=True)
    return audio


def source_size(source: Source) -> int:
    """Its size in bytes (0 when it cannot be told)."""
    try:
        if is_uri(source):
            fs, path = _filesystem(str(source))
            return int(fs.size(path) or 0)
        return Path(source).stat().st_size
    except Exception:
        return 0


__all__ = ["Source", "is_uri", "read_source", "source_size", "walk_uri"]
