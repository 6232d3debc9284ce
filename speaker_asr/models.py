"""The one layer that owns the loaded models: every front end (the Endpoints handler, our server's
runner, live sessions, the command line's batch runs, the benches and the tests) reaches Whisper,
the diarization and the voice model through a :class:`Models` and its typed operations, and
nothing else.

The models' work is scheduled (speaker_asr/scheduling/): two *lanes*, each run by one thread at
a time, and one :class:`~speaker_asr.scheduling.Scheduler` that decides who holds each:

* **the ASR lane** (Whisper and its assistant): :meth:`Models.transcribe`'s decoding,
  :meth:`Models.decode` and :meth:`Models.detect_language`, on whatever thread calls them (our
  server's request threads and live calls, the Endpoints toolkit's request threads, a script's
  own);
* **the diarization lane** (the diarization and its voice model), on the diarization pool
  (:class:`DiarizationThread`): a request's diarization there beside its ASR (so a request costs
  about the longer of the two, not their sum; torch releases the GIL), live sessions' speaker
  work beside the next items' decodes, every voice embedding. :meth:`Models.diarize`,
  :meth:`Models.embed` and :meth:`Models.reference` submit to it and wait;
  :meth:`Models.on_diarization_thread` hands it any function and returns its future.

The model code gives a lane up at each unit's boundary (a decode step, a batch of the
segmentation or of the embeddings, a sentence's voice) when the policy ranks waiting work first
(a live final decode, a shorter file), and stops there when its job is cancelled (its client
gone). The job a call works for is the caller's context's (the server's request or live call);
a caller without one gets a file job of its own.

One recording's transcription, the steps in their order on these two threads, is
speaker_asr/file_pipeline.py's (:meth:`Models.transcribe` runs it).

A diarizer is anything with the :class:`Diarizer` interface; :class:`PyannoteDiarizer` is
pyannote.audio's pipeline with its embedding model. Another one (a streaming diarizer) plugs in
through :class:`Models` without a change to the front ends.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig, ModelCapabilities
from speaker_asr.diarization.frames import Activity
from speaker_asr.file_pipeline import FilePipeline
from speaker_asr.settings import ModelSettings
from speaker_asr.pipeline import (WARM_UP_MAX_NEW_TOKENS, WARM_UP_SECONDS, diarize_speakers,
                                  speaker_voices, warm_up_audio)
from speaker_asr.progress import ProgressCallback
from speaker_asr.result import Result
from speaker_asr.scheduling import Scheduler, checkpoint
from speaker_asr.types import Diarization, Transcript, Word

logger = logging.getLogger("handler")


@dataclass
class Decoded:
    """One decode of a stretch of audio (:meth:`Models.decode`): its text and words (times from
    the audio's start; words without times when the model has no alignment heads), the ASR's own
    :class:`~speaker_asr.types.Transcript` (None from a test's stand-in) and the tokens the model
    generated (the draft of a later decode of the same audio grown longer)."""

    text: str
    words: list[Word]
    transcript: Optional[Transcript] = None
    tokens: Optional[list[int]] = None


class Diarizer(Protocol):
    """Who speaks when, and what each voice sounds like. Called on the diarization thread only."""

    #: each change to the library's internals made at load (patches/registry.py), for /health
    patch_report: list
    #: what the diarization computes (the recipe's embeddings or the opt-in approximate ones), for /health
    settings_in_force: Optional[dict]
    #: whether it has a voice model (known speakers, speaker embeddings)
    has_voices: bool

    def diarize(self, audio: np.ndarray, config: InferenceConfig, with_voices: bool,
                progress: Optional[ProgressCallback] = None) -> Diarization: ...

    def embed(self, audio: np.ndarray) -> Optional[np.ndarray]: ...

    def embed_spans(self, audio: np.ndarray, spans: list[tuple[float, float]]) -> list[Optional[np.ndarray]]: ...

    def reference(self, index: int, name: str, clip: Any) -> np.ndarray: ...

    def activity(self, audio: np.ndarray) -> Optional[Activity]: ...

    def diarize_utterance(self, audio: np.ndarray, config: InferenceConfig) -> Diarization: ...


class PyannoteDiarizer:
    """pyannote.audio's pipeline (``pipeline``) and its voice model (``voices``, a
    :class:`~speaker_asr.diarization.embeddings.SpeakerVoices`; None: no known speakers), run on
    ``stream`` when given (a CUDA stream of its own beside the ASR's)."""

    def __init__(self, pipeline, voices=None, stream=None):
        self.pipeline, self.voices, self.stream = pipeline, voices, stream
        self.patch_report = list(getattr(pipeline, "patch_report", []))
        self.settings_in_force = getattr(pipeline, "diarization_settings", None)

    @classmethod
    def load(cls, settings: ModelSettings, device) -> "PyannoteDiarizer":
        from speaker_asr.diarization.embeddings import SpeakerVoices
        from speaker_asr.diarization.pipeline import load_diarization_pipeline

        pipeline = load_diarization_pipeline(
            settings.diarization_model, settings.token(), device,
            telemetry=settings.diarization_telemetry, speedups=settings.diarization_speedups,
            embeddings=settings.diarization_embeddings)
        try:
            voices = SpeakerVoices(pipeline)
        except RuntimeError as exc:  # a custom pipeline without an embedding model
            logger.warning("known speakers unavailable: %s", exc)
            voices = None
        stream = None
        if settings.diarization_cuda_stream and str(device).startswith("cuda"):
            import torch

            stream = torch.cuda.Stream(device)
        return cls(pipeline, voices, stream)

    @property
    def has_voices(self) -> bool:
        return self.voices is not None

    def diarize(self, audio: np.ndarray, config: InferenceConfig, with_voices: bool,
                progress: Optional[ProgressCallback] = None) -> Diarization:
        if self.stream is None:
            return diarize_speakers(self.pipeline, self.voices, audio, config, with_voices, progress)
        import torch

        with torch.cuda.stream(self.stream):
            found = diarize_speakers(self.pipeline, self.voices, audio, config, with_voices, progress)
        self.stream.synchronize()
        return found

    def embed(self, audio: np.ndarray) -> Optional[np.ndarray]:
        from speaker_asr.diarization.embeddings import embed_clip

        return embed_clip(self.voices.model, audio)

    def embed_spans(self, audio: np.ndarray, spans: list[tuple[float, float]]) -> list[Optional[np.ndarray]]:
        """The voice of each ``(start, end)`` span of ``audio`` (seconds; the sentences whose
        voices check the speakers), as :meth:`embed` gives it."""
        voices = []
        for a, b in spans:
            checkpoint()  # each sentence's voice is a unit
            voices.append(self.embed(audio[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)]))
        return voices

    def activity(self, audio: np.ndarray) -> Optional[Activity]:
        from speaker_asr.diarization.pipeline import frame_activity

        return frame_activity(self.pipeline, audio)

    def diarize_utterance(self, audio: np.ndarray, config: InferenceConfig) -> Diarization:
        """Who speaks in one utterance (a live item, at most 30 s), with each one's voice: the
        segmentation model's activity over it in one pass (speaker_asr/diarization/frames.py),
        each local speaker embedded from its exclusive turns -- a fraction of the whole
        pipeline's cost, which slides 10 s windows and embeds each window's every speaker. A
        pipeline whose segmentation cannot be run alone takes the whole pipeline's way."""
        from speaker_asr.diarization.frames import utterance_turns

        activity = self.activity(audio)
        if activity is None:
            return self.diarize(audio, config, with_voices=self.voices is not None)
        found = utterance_turns(activity)
        if self.voices is None or not found.exclusive_turns:
            return found
        return speaker_voices(found, self.voices, audio, found.exclusive_turns)

    def reference(self, index: int, name: str, clip: Any) -> np.ndarray:
        return self.voices.reference(index, name, clip)


class ModelThread:
    """One daemon worker thread that runs the jobs put to it in order (a job is a callable;
    ``None`` stops the thread). Our server's runner loads the models on it and then runs every
    model call there, so its event loop never waits for a model."""

    def __init__(self, name: str = "model-worker"):
        self._jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self.started = False

    def start(self) -> None:
        if not self.started:
            self.started = True
            self._thread.start()

    def put(self, job: Optional[Callable[[], None]]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            del job  # a finished job's data must not live on in this frame until the next one


class DiarizationThread:
    """The diarizer's worker pool (none when no diarization is loaded: there is no voice work to
    keep apart then, and what would run there runs where it is called). Each call runs in its
    caller's context (the job it works for) and holds the diarization lane of ``scheduler``; the
    pool has several threads so that the scheduler, not the pool's queue, decides whose unit runs
    (a live item's speakers do not wait for a whole file's diarization)."""

    WORKERS = 8

    def __init__(self, loaded: bool, scheduler: Optional[Scheduler] = None):
        self._pool = ThreadPoolExecutor(max_workers=self.WORKERS, thread_name_prefix="diarization") \
            if loaded else None
        self._scheduler = scheduler or Scheduler()
        self._on = threading.local()

    def submit(self, fn: Callable[[], Any]) -> Future:
        """``fn()`` on the pool, in the caller's context, holding the diarization lane; its future
        (cancel it to drop it while queued)."""
        if self._pool is None:
            raise RuntimeError("no diarization is loaded")
        context = contextvars.copy_context()

        def run():
            self._on.active = True
            try:
                with self._scheduler.unit("diarization"):
                    return fn()
            finally:
                self._on.active = False

        return self._pool.submit(context.run, run)

    def call(self, fn: Callable, *args) -> Any:
        """``fn(*args)`` on the thread, waited for (at once when already on it, or when there is
        no thread)."""
        if self._pool is None or getattr(self._on, "active", False):
            return fn(*args)
        return self.submit(lambda: fn(*args)).result()

    def beside(self, asr: Callable[[], Any], diarize: Optional[Callable[[], Any]],
               failed: Callable[[Exception], Any]) -> tuple[Any, Any]:
        """``asr()`` on this thread, holding the ASR lane, while ``diarize()`` (None: no
        diarization) runs on the diarization pool: their results, ``failed(exc)`` in place of the diarization's when it
        raised (a fault in the model, not in the request: the transcript is still worth
        returning). The diarization thread is never left running into the next call."""
        pending = self.submit(diarize) if diarize is not None else None
        try:
            with self._scheduler.unit("asr"):
                heard = asr()
        finally:
            if pending is not None:
                wait([pending])
        if pending is None:
            return heard, None
        try:
            return heard, pending.result()
        except Exception as exc:
            logger.exception("diarization failed")
            return heard, failed(exc)


class Models:
    """The loaded ASR (``asr``: a :class:`~speaker_asr.asr.transcriber.WhisperTranscriber`) and
    diarizer (``diarizer``: a :class:`Diarizer`, None: no speakers), the settings they were
    loaded with and what they can do (:attr:`capabilities`). See the module's docstring for the
    two threads."""

    def __init__(self, asr, diarizer: Optional[Diarizer] = None,
                 settings: Optional[ModelSettings] = None):
        self.asr, self.diarizer = asr, diarizer
        self.settings = settings if settings is not None else ModelSettings()
        self.capabilities: ModelCapabilities = asr.capabilities(has_diarization=diarizer is not None)
        #: who holds the ASR and diarization lanes (speaker_asr/scheduling/)
        self.scheduler = Scheduler(self.settings.schedule_policy())
        self._diarization = DiarizationThread(loaded=diarizer is not None, scheduler=self.scheduler)
        self._file_pipeline = FilePipeline(self, self._diarization)
        #: seconds per part of the load's warm-up (:meth:`warm_up`); None before it ran
        self.warm_up_seconds: Optional[dict[str, float]] = None

    @classmethod
    def load(cls, settings: ModelSettings) -> "Models":
        """Whisper (and its assistant), the diarization and its voice model as ``settings`` say,
        each change to the libraries' internals decided once (logged)."""
        from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device
        from speaker_asr.diarization.pipeline import configure_pyannote_telemetry
        from speaker_asr.patches.registry import describe

        configure_pyannote_telemetry(settings.diarization_telemetry)
        started = time.perf_counter()
        device, dtype = resolve_device(settings)
        asr = WhisperTranscriber(settings, device, dtype)
        diarizer = PyannoteDiarizer.load(settings, device) if settings.diarization_model else None
        models = cls(asr, diarizer, settings)
        logger.info("patches: %s", describe(models.patch_report))
        logger.info("models loaded in %.1f s (asr=%s assistant=%s diarization=%s device=%s dtype=%s%s)",
                    time.perf_counter() - started, settings.asr_model, settings.assistant_model,
                    settings.diarization_model, device, str(dtype).removeprefix("torch."),
                    f" quantization={settings.quantization}" if settings.quantization else "")
        return models

    # -- what is loaded ------------------------------------------------------------------------

    @property
    def has_voices(self) -> bool:
        return self.diarizer is not None and self.diarizer.has_voices

    @property
    def multilingual(self) -> bool:
        return bool(self.capabilities.multilingual)

    @property
    def model_name(self) -> str:
        return self.settings.asr_model

    @property
    def patch_report(self) -> list:
        """Every change to transformers' and pyannote's internals made at load, and why the
        others were not (logged, in /health and /metrics)."""
        return list(self.asr.patch_report) + (list(self.diarizer.patch_report) if self.diarizer else [])

    def health(self) -> dict[str, Any]:
        """What ``GET /health`` says of the models besides ``status``: the patches, the
        diarization settings in force, the int8 form this CPU got (each only when there is one)."""
        body: dict[str, Any] = {}
        if self.patch_report:
            body["patches"] = [r.as_dict() for r in self.patch_report]
        if self.diarizer is not None and self.diarizer.settings_in_force:
            body["diarization"] = self.diarizer.settings_in_force
        if self.asr.quantization:
            body["quantization"] = self.asr.quantization
        return body

    def assist_speeds(self) -> dict[str, Optional[float]]:
        """With an assistant: the median decode seconds per audio second by mode that
        ``assisted="auto"`` chooses from (None before it measured one); without: empty."""
        if self.asr.assistant is None:
            return {}
        return {mode: v["median_s_per_audio_s"] for mode, v in self.asr.assist_policy.snapshot().items()}

    def asr_lane(self):
        """Hold the ASR lane for the block (its decode steps give it up to work the scheduler
        ranks first): every call of the ASR model runs inside one."""
        return self.scheduler.unit("asr")

    # -- the ASR (on its lane) -------------------------------------------------------------

    def transcribe(self, audio: np.ndarray, config: InferenceConfig,
                   on_start: Optional[Callable[[], None]] = None,
                   progress: Optional[ProgressCallback] = None) -> Result:
        """One recording's :class:`~speaker_asr.result.Result`: the known speakers' clips checked
        and embedded (a bad one refused before any decoding; ``on_start`` called after), the ASR
        beside the diarization, every word given a speaker, the known speakers named.
        ``progress`` hears the ASR's windows (on this thread) and the diarization's steps (on its
        own, at the same time): it must be thread-safe (``progress.RequestProgress`` is).
        ``config.multichannel``: ``audio`` is ``(channels, samples)``, each channel a speaker
        (speaker_asr/multichannel.py). The steps and their threads: speaker_asr/file_pipeline.py."""
        return self._file_pipeline.transcribe(audio, config, on_start, progress)

    def decode(self, audio: np.ndarray, config: InferenceConfig, draft: Optional[list[int]] = None,
               max_new_tokens: Optional[int] = None, cancel: Optional[threading.Event] = None) -> Decoded:
        """The audio's transcript as one decode (no assist statistics kept), with word times where
        the model has alignment heads. ``draft``: the tokens of an earlier decode of the same
        audio's beginning, which the model verifies as its draft (patches/draft_decoding.py: the
        same text in fewer decoder steps; the assistant is not used then). ``max_new_tokens``
        bounds the decode (None: the model's limit); a decode whose tokens go round in a loop (a
        phrase repeated back to back: :func:`~speaker_asr.asr.hallucination.looping`) ends
        there. ``cancel``: set, it stops the decode at its next token
        (:class:`~speaker_asr.asr.stopping.DecodeCancelled`)."""
        from speaker_asr.patches.draft_decoding import DraftTokens

        tokens = DraftTokens(given=draft or None)
        if tokens.given:  # an earlier decode drafts better than an assistant model could
            config = config.model_copy(update={"assisted": False})
        with self.asr_lane():
            transcript = self.asr.transcribe(audio, config, word_timestamps=self.asr.has_alignment_heads,
                                             record=False, draft=tokens, max_new_tokens=max_new_tokens,
                                             cancel=cancel, stop_loops=True)
        text = (transcript.text or "").strip()
        words = [w for w in (transcript.words or []) if w.text.strip()]
        if not words and text:  # no alignment heads: the words without times
            words = [Word(" " + part, None, None) for part in text.split()]
        return Decoded(text, words, transcript, tokens.generated)

    def detect_language(self, audio: np.ndarray) -> Optional[str]:
        """Whisper's language detection on the audio's first 30 s (None: not one it writes)."""
        with self.asr_lane():
            return self.asr.detect_language(audio)

    # -- the diarizer (on the diarization thread) ---------------------------------------------

    def on_diarization_thread(self, fn: Callable[[], Any]) -> Future:
        """``fn()`` on the diarization thread; its future (cancel it to drop it while queued)."""
        return self._diarization.submit(fn)

    def diarize(self, audio: np.ndarray, config: InferenceConfig, with_voices: bool = False,
                progress: Optional[ProgressCallback] = None) -> Diarization:
        """Who speaks when in the audio, speakers labelled ``SPEAKER_00``, ... in order of first
        appearance, each one's voice ``with_voices``."""
        return self._diarization.call(self._required().diarize, audio, config, with_voices,
                                                progress)

    def embed(self, audio: np.ndarray) -> Optional[np.ndarray]:
        """The voice vector (unit length) of the audio as a whole; None with too little speech."""
        return self._diarization.call(self._voice_model().embed, audio)

    def reference(self, index: int, name: str, clip: Any) -> np.ndarray:
        """The voice vector of ``known_speaker_references[index]`` (a clip, a data URI or an
        embedding); RequestError naming what is wrong with it."""
        return self._diarization.call(self._voice_model().reference,
                                                index, name, clip)

    def activity(self, audio: np.ndarray) -> Optional[Activity]:
        """Which (local) speakers talk in each frame of ``audio`` (one utterance, at most 30 s):
        the diarization's segmentation model in one pass; None where it cannot run alone."""
        return self._diarization.call(self._required().activity, audio)

    def diarize_utterance(self, audio: np.ndarray, config: InferenceConfig) -> Diarization:
        """Who speaks in one utterance of at most 30 s, each with their voice, from the
        segmentation's activity over it (:meth:`PyannoteDiarizer.diarize_utterance`): a live
        item's speakers, found after its final decode."""
        return self._diarization.call(self._required().diarize_utterance, audio, config)

    # -- the load's warm-up -------------------------------------------------------------------

    def warm_up(self, audio: Optional[np.ndarray] = None) -> dict[str, float]:
        """Run the models once on ``audio`` (default :func:`~speaker_asr.pipeline.warm_up_audio`)
        as a diarized request runs them, so that the libraries' lazy set-up (cuBLAS and cuDNN
        handles, kernel choice, the memory pool on a GPU) is paid at load instead of by the first
        request: one plain decode, one assisted decode when an assistant is loaded (word
        timestamps on, at most ``WARM_UP_MAX_NEW_TOKENS`` tokens, a request's defaults
        otherwise), then the diarization on its thread, and a live item's speakers
        (:meth:`diarize_utterance`, so that a live session's first item costs what the others
        do). Seconds per part (``plain``, ``assisted``, ``diarization``, ``utterance``), also kept
        as :attr:`warm_up_seconds`.

        Nothing a request's statistics count sees it: the decodes are not timed for
        ``assisted="auto"`` (``record=False``), no progress is reported, and the server's metrics
        count requests only. What the models make of the audio is not looked at (random test
        models write anything, or nothing); an exception in a model propagates."""
        audio = warm_up_audio() if audio is None else audio
        seconds: dict[str, float] = {}
        with self.asr_lane():
            for assisted in (False, True) if self.capabilities.has_assistant else (False,):
                config = InferenceConfig.from_request({"assisted": assisted}, self.capabilities)
                started = time.perf_counter()
                self.asr.transcribe(audio, config, word_timestamps=True, record=False,
                                    max_new_tokens=WARM_UP_MAX_NEW_TOKENS)
                seconds["assisted" if assisted else "plain"] = time.perf_counter() - started
        if self.diarizer is not None:
            started = time.perf_counter()
            config = InferenceConfig.from_request({}, self.capabilities)
            self.diarize(audio, config)
            seconds["diarization"] = time.perf_counter() - started
            # a live item's speakers: the segmentation alone, then its speakers' voices
            started, item = time.perf_counter(), audio[:int(10 * SAMPLE_RATE)]
            if self.activity(item) is not None:
                self.diarize_utterance(item, config)
                seconds["utterance"] = time.perf_counter() - started
        self.warm_up_seconds = seconds
        return seconds

    # -- inside -------------------------------------------------------------------------------

    def _required(self) -> Diarizer:
        if self.diarizer is None:
            raise RuntimeError("no diarization is loaded")
        return self.diarizer

    def _voice_model(self) -> Diarizer:
        if not self.has_voices:
            raise RuntimeError("the diarization has no speaker embedding model")
        return self.diarizer

__all__ = ["Decoded", "DiarizationThread", "Diarizer", "ModelThread", "Models", "PyannoteDiarizer",
           "WARM_UP_SECONDS"]
