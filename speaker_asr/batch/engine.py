"""What transcribes one recording: the :class:`Engine` interface, :class:`LocalEngine` (the
handler in this process) and :func:`transcribe_audio` (one recording, its texts in every format)."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Optional, Sequence

from speaker_asr.batch.errors import FileError, RunError
from speaker_asr.batch.outputs import output_text, render_result
from speaker_asr.errors import RequestError

if TYPE_CHECKING:
    from speaker_asr.batch.sources import Source
    from speaker_asr.progress import ProgressCallback

logger = logging.getLogger("speaker_asr.batch")


@dataclass
class Reply:
    """One recording's answer: what an engine returns (the handler's or endpoint's ``response``
    and the ``attempts``, requests, it took), to which :func:`transcribe_audio` adds ``texts``, the
    outputs as they are written (format -> text). The handler's warnings and the audio's duration
    are read from the response.

    The run's account of a recording is a :class:`FileResult`: it exists for every recording
    (skipped, failed and not attempted ones too) and knows its files; a Reply exists only when an
    engine answered, and knows nothing of files -- it is what a custom :class:`Engine` returns."""

    response: Any
    attempts: int = 1
    texts: dict[str, str] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        value = self.response.get("warnings") if isinstance(self.response, dict) else None
        return [str(w) for w in value] if isinstance(value, list) else []

    @property
    def duration(self) -> Optional[float]:
        """Seconds of audio (None when the response does not say)."""
        value = self.response.get("duration") if isinstance(self.response, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return None


class Engine(ABC):
    """Transcribes one recording's bytes with the request parameters given. Every engine
    subclasses it: the run calls each attribute and method below, and the optional ones have
    defaults here.

    ``concurrency``: how many recordings it takes at once (on that many threads; default 1).
    ``render_locally``: ask for the plain ``json`` response and write every format from it here
    (otherwise a single format is asked for as ``response_format``, as the endpoint renders it).
    ``reads_sources``: the engine reads each recording from its ``source`` itself and is given
    ``audio=None`` (Ray's: its workers read it from a path or bucket they share, batch/sources.py's
    ``read_source``); by default the run reads it and hands over the bytes.
    ``load()`` prepares it (raises RunError), ``respond(...)`` answers one recording (raises
    FileError, Unavailable, RunError or Interrupted), ``redact(text)`` takes the engine's own
    secrets out of a message (default: none to take out), ``close()`` releases what it holds once
    the run is over (default: nothing)."""

    concurrency: int = 1
    render_locally: bool = False
    reads_sources: bool = False

    @abstractmethod
    def load(self) -> None: ...

    @abstractmethod
    def respond(self, audio: Optional[bytes], parameters: dict[str, Any], source: Optional["Source"],
                stop: threading.Event) -> Reply: ...

    def redact(self, text: Any) -> str:
        return str(text)

    def close(self) -> None:
        pass


class LocalEngine(Engine):
    """The handler in this process (``speaker_asr.endpoint.EndpointHandler`` with the settings
    from the environment: ASR_MODEL, DIARIZATION_MODEL, ...), loaded once, on the first
    :meth:`load` or recording; one recording at a time.

    ``watch``: for a recording's name (its path, ``-`` for standard input), a context manager
    giving the progress callback for its request while it runs (``progress.LineProgress.recording``
    or ``BarProgress.recording``); the handler is called with ``progress=`` when it takes it."""

    def __init__(self, handler: Any = None,
                 watch: Optional[Callable[[str], ContextManager["ProgressCallback"]]] = None):
        self.handler = handler
        self.watch = watch

    def load(self) -> None:
        if self.handler is not None:
            return
        from speaker_asr.endpoint import EndpointHandler

        try:
            self.handler = EndpointHandler()
        except Exception as exc:
            raise RunError(f"could not load the models: {type(exc).__name__}: {exc}") from None

    def respond(self, audio: bytes, parameters: dict[str, Any], source: Optional["Source"],
                stop: threading.Event) -> Reply:
        self.load()
        from speaker_asr.progress import takes_progress

        data = {"inputs": audio, "parameters": parameters}
        try:
            if self.watch is None or not takes_progress(self.handler):
                return Reply(self.handler(data))
            with self.watch(str(source) if source is not None else "-") as progress:
                return Reply(self.handler(data, progress=progress))
        except (RequestError, ValueError) as exc:  # the input's fault, with the handler's message
            raise FileError(str(exc) or type(exc).__name__, refused=True) from None
        except Exception as exc:
            logger.debug("transcription failed", exc_info=True)
            raise FileError(f"the transcription failed: {type(exc).__name__}: {exc}") from None


def transcribe_audio(engine: Engine, audio: Optional[bytes], parameters: dict[str, Any],
                     formats: Sequence[str], *, source: Optional["Source"] = None,
                     stop: Optional[threading.Event] = None) -> Reply:
    """One recording through ``engine``, its :attr:`Reply.texts` in every one of ``formats``: a
    single format is asked for as the endpoint's ``response_format`` (unless the engine renders
    locally); several are rendered from one plain ``json`` answer, with ``speaker_names`` applied
    here. Raises FileError (an answer that cannot be written), or what the engine raises."""
    stop = stop or threading.Event()
    params = dict(parameters)
    task = params.get("task", "transcribe")
    if len(formats) == 1 and not engine.render_locally:
        reply = engine.respond(audio, {**params, "response_format": formats[0]}, source, stop)
        results = {formats[0]: reply.response}
    else:
        names = params.pop("speaker_names", None)
        params.pop("response_format", None)
        reply = engine.respond(audio, params, source, stop)
        results = {}
        for fmt in formats:
            try:
                results[fmt] = render_result(reply.response, fmt, names, task)
            except ValueError as exc:
                raise FileError(f"the answer could not be written as {fmt}: {exc}",
                                attempts=reply.attempts) from None
    try:
        reply.texts = {fmt: output_text(result, fmt) for fmt, result in results.items()}
    except ValueError as exc:
        raise FileError(str(exc), attempts=reply.attempts) from None
    return reply
