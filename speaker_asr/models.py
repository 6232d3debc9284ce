"""The one layer that owns the loaded models: every front end (the Endpoints handler, our server's
runner, live sessions, the command line's batch runs, the benches and the tests) reaches Whisper,
the diarization and the voice model through a :class:`Models` and its typed operations, and
nothing else.

Two threads touch the models, and this module is where their rules are kept:

* **the ASR** (Whisper and its assistant) runs one call at a time, under :attr:`Models.lock`, on
  whatever thread calls :meth:`Models.transcribe`, :meth:`Models.decode` or
  :meth:`Models.detect_language` (our server calls from its one :class:`ModelThread`, the
  Endpoints toolkit from its request threads, a script from its own): two callers never decode at
  once;
* **the diarizer** (the diarization and its voice model) runs on its own single worker thread,
  the *diarization thread*: a request's diarization there beside its ASR (so a request costs about
  the longer of the two, not their sum; torch releases the GIL), live sessions' speaker work
  there beside their decodes, and every voice embedding (reference clips, item voices) there too.
  :meth:`Models.diarize`, :meth:`Models.embed` and :meth:`Models.reference` submit to it and wait;
  :meth:`Models.on_diarization_thread` hands it any function and returns its future.

A diarizer is anything with the :class:`Diarizer` interface; :class:`PyannoteDiarizer` is
pyannote.audio's pipeline with its embedding model. Another one (a streaming diarizer) plugs in
through :class:`Models` without a change to the front ends.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Protocol

import numpy as np

from speaker_asr.attribution.naming import name_known_speakers
from speaker_asr.attribution.response import attribute
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import MAX_CHUNK_LENGTH_S, InferenceConfig, ModelCapabilities
from speaker_asr.diarization.frames import Activity
from speaker_asr.settings import ModelSettings
from speaker_asr.pipeline import (WARM_UP_MAX_NEW_TOKENS, WARM_UP_SECONDS, diarize_speakers,
                                  failure_warnings, heard_nobody, is_silent, no_speech_warning,
                                  reference_voices, warm_up_audio)
from speaker_asr.progress import ProgressCallback
from speaker_asr.result import Result
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
        try:
            centroids = self.voices.centroids(audio, found.exclusive_turns)
        except Exception as exc:  # a fault in the embedding model: the speakers stay, unnamed
            logger.exception("speaker embeddings failed")
            return replace(found, embedding_error=type(exc).__name__)
        return replace(found, voices={k: None if v is None else v.tolist() for k, v in centroids.items()})

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
        #: held by every ASR call: the models, the assistant policy and the decoding scopes are
        #: shared state
        self.lock = threading.Lock()
        self._diarization_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diarization") \
            if diarizer is not None else None
        self._on_diarization = threading.local()
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

    # -- the ASR (under the lock) -------------------------------------------------------------

    def transcribe(self, audio: np.ndarray, config: InferenceConfig,
                   on_start: Optional[Callable[[], None]] = None,
                   progress: Optional[ProgressCallback] = None) -> Result:
        """One recording's :class:`~speaker_asr.result.Result`: the known speakers' clips checked
        and embedded (a bad one refused before any decoding; ``on_start`` called after), the ASR
        beside the diarization, every word given a speaker, the known speakers named.
        ``progress`` hears the ASR's windows (on this thread) and the diarization's steps (on its
        own, at the same time): it must be thread-safe (``progress.RequestProgress`` is).
        ``config.multichannel``: ``audio`` is ``(channels, samples)``, each channel a speaker
        (:meth:`_transcribe_channels`)."""
        if config.multichannel:
            return self._transcribe_channels(audio, config, on_start, progress)
        with self.lock:
            references = self._on_diarization_thread_wait(reference_voices, self._voice_model(), config)
            if on_start is not None:
                on_start()
            with_voices = references is not None or config.return_speaker_embeddings
            if is_silent(audio, config):  # nothing to transcribe: Whisper would only make something up
                transcript = Transcript("", [], config.language if self.asr.multilingual else "en")
                found = Diarization() if self.diarizer is not None else None
            else:
                transcript, found = self._transcribe_and_diarize(audio, config, with_voices, progress)
        warnings = failure_warnings(transcript, found)
        if found is not None and heard_nobody(found, transcript, config):
            warnings.append(no_speech_warning(transcript.text))
            transcript = replace(transcript, text="", chunks=[],
                                 words=[] if transcript.words is not None else None)
        result = attribute(transcript, len(audio) / SAMPLE_RATE, found,
                           with_words=config.return_word_timestamps,
                           embed=self._sentence_embedder(audio, found),
                           max_speakers=config.num_speakers or config.max_speakers)
        if with_voices:
            result = self._named(result, found.voices, references, config)
        return replace(result, warnings=warnings)

    def decode(self, audio: np.ndarray, config: InferenceConfig, draft: Optional[list[int]] = None,
               max_new_tokens: Optional[int] = None, cancel: Optional[threading.Event] = None) -> Decoded:
        """The audio's transcript as one decode (no assist statistics kept), with word times where
        the model has alignment heads. ``draft``: the tokens of an earlier decode of the same
        audio's beginning, which the model verifies as its draft (patches/draft_decoding.py: the
        same text in fewer decoder steps; the assistant is not used then). ``max_new_tokens``
        bounds the decode (None: the model's limit); a decode whose tokens go round in a loop (a
        phrase repeated back to back: :func:`~speaker_asr.asr.hallucination.looping`) ends
        there. ``cancel``: set, it stops the decode at its next token
        (:class:`~speaker_asr.asr.transcriber.DecodeCancelled`)."""
        from speaker_asr.patches.draft_decoding import DraftTokens

        tokens = DraftTokens(given=draft or None)
        if tokens.given:  # an earlier decode drafts better than an assistant model could
            config = config.model_copy(update={"assisted": False})
        with self.lock:
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
        with self.lock:
            return self.asr.detect_language(audio)

    # -- the diarizer (on the diarization thread) ---------------------------------------------

    def on_diarization_thread(self, fn: Callable[[], Any]) -> Future:
        """``fn()`` on the diarization thread; its future (cancel it to drop it while queued)."""
        if self._diarization_thread is None:
            raise RuntimeError("no diarization is loaded")

        def run():
            self._on_diarization.active = True
            try:
                return fn()
            finally:
                self._on_diarization.active = False

        return self._diarization_thread.submit(run)

    def diarize(self, audio: np.ndarray, config: InferenceConfig, with_voices: bool = False,
                progress: Optional[ProgressCallback] = None) -> Diarization:
        """Who speaks when in the audio, speakers labelled ``SPEAKER_00``, ... in order of first
        appearance, each one's voice ``with_voices``."""
        return self._on_diarization_thread_wait(self._required().diarize, audio, config, with_voices,
                                                progress)

    def embed(self, audio: np.ndarray) -> Optional[np.ndarray]:
        """The voice vector (unit length) of the audio as a whole; None with too little speech."""
        return self._on_diarization_thread_wait(self._voice_model(required=True).embed, audio)

    def reference(self, index: int, name: str, clip: Any) -> np.ndarray:
        """The voice vector of ``known_speaker_references[index]`` (a clip, a data URI or an
        embedding); RequestError naming what is wrong with it."""
        return self._on_diarization_thread_wait(self._voice_model(required=True).reference,
                                                index, name, clip)

    def activity(self, audio: np.ndarray) -> Optional[Activity]:
        """Which (local) speakers talk in each frame of ``audio`` (one utterance, at most 30 s):
        the diarization's segmentation model in one pass; None where it cannot run alone."""
        return self._on_diarization_thread_wait(self._required().activity, audio)

    def diarize_utterance(self, audio: np.ndarray, config: InferenceConfig) -> Diarization:
        """Who speaks in one utterance of at most 30 s, each with their voice, from the
        segmentation's activity over it (:meth:`PyannoteDiarizer.diarize_utterance`): a live
        item's speakers, found beside its final decode."""
        return self._on_diarization_thread_wait(self._required().diarize_utterance, audio, config)

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
        with self.lock:
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

    # -- channels as speakers -----------------------------------------------------------------

    def _transcribe_channels(self, audio: np.ndarray, config: InferenceConfig,
                             on_start: Optional[Callable[[], None]] = None,
                             progress: Optional[ProgressCallback] = None) -> Result:
        """``multichannel``: each channel of ``audio`` (``(channels, samples)``) transcribed on its
        own (a silent one skipped; those heard batched side by side, ``progress`` hearing their
        windows), its words given its label (``diarize_channels``: the
        speakers its own diarization finds, on the diarization thread beside the ASR), and every
        word kept once, on the channel whose voice it is (attribution/channels.py)."""
        from speaker_asr.attribution import channels as ch

        count = audio.shape[0]
        config.check_channels(count)
        duration = audio.shape[1] / SAMPLE_RATE
        energy = ch.frame_energy(audio, SAMPLE_RATE)
        silent = set(ch.silent_channels(energy))
        heard = [c for c in range(count) if c not in silent]
        per_channel_config = config.model_copy(update=config.channel_speakers(count))
        with self.lock:
            references = self._on_diarization_thread_wait(reference_voices, self._voice_model(), config)
            if on_start is not None:
                on_start()
            with_voices = references is not None or config.return_speaker_embeddings
            diarize = None
            if config.diarize_channels and heard:
                def diarize():
                    return {c: self.diarizer.diarize(audio[c], per_channel_config, with_voices)
                            for c in heard}
            transcripts, found = self._beside_diarization(
                lambda: dict(zip(heard, self.asr.transcribe_many([audio[c] for c in heard],
                                                                self._recording_language(audio, heard, config),
                                                                word_timestamps=True, progress=progress,
                                                                stop_loops=True))),
                diarize, lambda exc: {c: Diarization(error=type(exc).__name__) for c in heard})
        found = found or {}
        warnings = [ch.silent_channel_warning(c) for c in sorted(silent)]
        results: dict[int, Result] = {}
        voices: dict[str, Optional[list[float]]] = {}
        for c in heard:
            warnings += [f"channel {c}: {w}" for w in failure_warnings(transcripts[c], found.get(c))]
            speakers = self._channel_speakers(c, duration, found.get(c))
            results[c] = attribute(transcripts[c], duration, speakers, with_words=True)
            voices.update(speakers.voices)
        per_channel = [results[c].segments if c in results else [] for c in range(count)]
        segments = ch.joined_segments(per_channel, ch.frame_db(energy))
        warnings += [ch.only_bleed_warning(c) for c in heard if not any(s.channel == c for s in segments)]
        spoken = list(results.values())
        result = Result(
            text="".join(s.text for s in segments).strip(), segments=segments,
            language=max(spoken, key=lambda r: sum(len(s.words) or 1 for s in r.segments)).language
            if spoken else (config.language if self.asr.multilingual else "en"),
            duration=round(duration, 3), alignment=spoken[0].alignment if spoken else "word",
            diarized=True, with_words=config.return_word_timestamps,
            assisted=spoken[0].assisted if spoken else None, channels=count,
            speaker_order=ch.channel_order(count, segments, config.diarize_channels))
        if with_voices:
            if not config.diarize_channels:
                voices = {ch.channel_label(c): self._channel_voice(audio[c], c, segments) for c in heard}
            result = self._named(result, voices, references, config)
        if not config.return_word_timestamps:  # after the voices: they are embedded from the words
            result = replace(result, segments=[replace(s, words=[]) for s in result.segments])
        return replace(result, warnings=warnings)

    def _recording_language(self, audio: np.ndarray, heard: list[int],
                            config: InferenceConfig) -> InferenceConfig:
        """``config`` with the recording's language (detected on its ``heard`` channels' first
        window, summed) where none is given and the model is multilingual: detected channel by
        channel, a channel holding mostly the others' bleed, its own person quiet, took another
        language (whisper base wrote Welsh for one of an English meeting's channels)."""
        if config.language is not None or not self.asr.multilingual or len(heard) < 2:
            return config
        first = audio[heard, :int(MAX_CHUNK_LENGTH_S * SAMPLE_RATE)]
        language = self.asr.detect_language(first.mean(axis=0))
        return config.model_copy(update={"language": language}) if language else config

    @staticmethod
    def _channel_speakers(channel: int, duration: float, found: Optional[Diarization]) -> Diarization:
        """Who speaks on one channel: the channel itself, the whole time (no diarization asked
        for, or it failed), else the speakers its diarization found, labelled by channel."""
        from speaker_asr.attribution.channels import channel_label, channel_speaker_label
        from speaker_asr.types import Turn

        if found is None or found.error is not None or not found.turns:
            whole = [Turn(0.0, duration, channel_label(channel))]
            return Diarization(whole, whole)

        def label(t: Turn) -> Turn:
            return Turn(t.start, t.end, channel_speaker_label(channel, t.speaker))

        return Diarization([label(t) for t in found.turns],
                           None if found.exclusive_turns is None else [label(t) for t in found.exclusive_turns],
                           {channel_speaker_label(channel, k): v for k, v in found.voices.items()})

    def _channel_voice(self, samples: np.ndarray, channel: int, segments: list) -> Optional[list[float]]:
        """The voice of one channel's speaker: its kept words' audio embedded (None: too little)."""
        spans = [(w.start, w.end) for s in segments if s.channel == channel
                 for w in (s.words or [s]) if w.start is not None and w.end is not None]
        if not spans:
            return None
        own = np.concatenate([samples[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)] for a, b in spans])
        vector = self.embed(own) if own.size else None
        return None if vector is None else [float(x) for x in vector]

    # -- inside -------------------------------------------------------------------------------

    def _required(self) -> Diarizer:
        if self.diarizer is None:
            raise RuntimeError("no diarization is loaded")
        return self.diarizer

    def _voice_model(self, required: bool = False) -> Optional[Diarizer]:
        if self.has_voices:
            return self.diarizer
        if required:
            raise RuntimeError("the diarization has no speaker embedding model")
        return None

    def _on_diarization_thread_wait(self, fn: Callable, *args) -> Any:
        """``fn(*args)`` on the diarization thread, waited for (at once when already on it, or
        when no diarization is loaded: there is no voice work to keep apart then)."""
        if self._diarization_thread is None or getattr(self._on_diarization, "active", False):
            return fn(*args)
        return self.on_diarization_thread(lambda: fn(*args)).result()

    def _sentence_embedder(self, audio: np.ndarray, found: Optional[Diarization]
                           ) -> Optional[Callable[[list[tuple[float, float]]], list]]:
        """What embeds the sentences whose voices check the speakers (SENTENCE_VOICES), on the
        diarization thread; None where that check is off or cannot run. A fault in the
        embedding model leaves the speakers as the diarization gave them."""
        if (not self.settings.sentence_voices or found is None or not found.turns
                or self.diarizer is None or not self.diarizer.has_voices):
            return None

        def embed_spans(spans: list[tuple[float, float]]) -> list:
            def run() -> list:
                return [self.diarizer.embed(audio[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)])
                        for a, b in spans]
            try:
                return self._on_diarization_thread_wait(run)
            except Exception:
                logger.exception("sentence voices: the embedding failed; the speakers stay as found")
                return [None] * len(spans)

        return embed_spans

    def _named(self, result: Result, voices: dict, references: Optional[dict],
               config: InferenceConfig) -> Result:
        """The result with the known speakers named by voice (and, when asked for, the voice
        embeddings), at the request's threshold or the settings' default."""
        threshold = (config.speaker_match_threshold if config.speaker_match_threshold is not None
                     else self.settings.speaker_match_threshold)
        return name_known_speakers(result, voices, references, threshold,
                                   config.return_speaker_embeddings)

    def _beside_diarization(self, asr: Callable[[], Any], diarize: Optional[Callable[[], Any]],
                            failed: Callable[[Exception], Any]) -> tuple[Any, Any]:
        """``asr()`` on this thread while ``diarize()`` (None: no diarization) runs on the
        diarization thread: their results, ``failed(exc)`` in place of the diarization's when it
        raised (a fault in the model, not in the request: the transcript is still worth
        returning). The diarization thread is never left running into the next call."""
        pending = self.on_diarization_thread(diarize) if diarize is not None else None
        try:
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

    def _transcribe_and_diarize(self, audio: np.ndarray, config: InferenceConfig, with_voices: bool,
                                progress: Optional[ProgressCallback] = None
                                ) -> tuple[Transcript, Optional[Diarization]]:
        """The ASR's transcript and, with a diarizer, what it found (a fault in it is the
        Diarization's ``error``)."""
        diarize = None
        if self.diarizer is not None:
            def diarize():
                return self.diarizer.diarize(audio, config, with_voices, progress)
        # word timestamps drive speaker attribution; without diarization only when asked for
        return self._beside_diarization(
            lambda: self.asr.transcribe(audio, config, word_timestamps=diarize is not None
                                        or config.return_word_timestamps, progress=progress),
            diarize, lambda exc: Diarization(error=type(exc).__name__))


__all__ = ["Decoded", "Diarizer", "ModelThread", "Models", "PyannoteDiarizer", "WARM_UP_SECONDS"]
