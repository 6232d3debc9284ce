"""A recording's outputs: their names, the texts written from an answer, and atomic writes (a killed
run never leaves a half-written file under a final name)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from contextlib import suppress
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from speaker_asr.formats import FORMATS

logger = logging.getLogger("speaker_asr.batch")


PARTIAL_SUFFIX = ".partial"  # the temporary files of write_atomic: .<final name>.<random>.partial


def output_name(stem: str, fmt: str, formats: Sequence[str]) -> str:
    """``<stem>.<ext>``; when several requested formats share the extension (json,
    verbose_json, diarized_json) all but ``json`` itself become ``<stem>.<format>.<ext>``."""
    ext = FORMATS[fmt].extension
    if fmt != "json" and sum(FORMATS[f].extension == ext for f in formats) > 1:
        return f"{stem}.{fmt}.{ext}"
    return f"{stem}.{ext}"


def render_result(response: dict[str, Any], fmt: str, speaker_names: Optional[list[str]],
                  task: str) -> dict[str, Any]:
    """What the handler answers for ``response_format=fmt`` (and ``speaker_names``), from its
    plain json ``response``: for writing several formats from one transcription."""
    from speaker_asr.formats import render_response

    return render_response(response, fmt, speaker_names=speaker_names or None, task=task)


def output_text(result: Any, fmt: str) -> str:
    """A result as written: the text itself for text formats, indented JSON for the others."""
    if FORMATS[fmt].is_text:
        if not isinstance(result, dict) or not isinstance(result.get("content"), str):
            raise ValueError(f"the handler answered without the {fmt} text")
        return result["content"]
    return json.dumps(result, ensure_ascii=False, indent=2) + "\n"


_umask: Optional[int] = None
_umask_lock = threading.Lock()


def _file_mode() -> int:
    """The mode a newly created file gets here (0o666 less the umask): mkstemp makes 0o600."""
    global _umask
    with _umask_lock:
        if _umask is None:
            _umask = os.umask(0o022)
            os.umask(_umask)
    return 0o666 & ~_umask


def write_atomic(path: Union[str, Path], content: Union[str, Iterable[str]]) -> None:
    """Write ``content`` (a text, or its pieces) to ``path`` so that ``path`` is either absent,
    as it was, or complete: into ``.<name>.<random>.partial`` beside it, flushed to disk, then
    renamed over ``path``. The folder is created when missing; the temporary file is removed
    when anything goes wrong. A path that exists and is not a regular file (``/dev/stdout``, a
    pipe) is written directly."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8", newline="") as f:
            for piece in [content] if isinstance(content, str) else content:
                f.write(piece)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            for piece in [content] if isinstance(content, str) else content:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def is_partial(name: str) -> bool:
    """Whether a file name is one of :func:`write_atomic`'s temporary files."""
    return name.startswith(".") and name.endswith(PARTIAL_SUFFIX)
