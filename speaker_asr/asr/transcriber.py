"""Whisper through the transformers ASR pipeline, with an optional speculative-decoding assistant.

Thin model code: loading (hub id or local folder, GPU float16 + SDPA when available, CPU float32
otherwise) and one call that turns 16 kHz audio into timestamped chunks. Works with transformers
4.5x (the Inference Endpoints image pins 4.51) and 5.x.

Two measured pitfalls are handled here:
* transformers 5's ASR pipeline defaults to ``num_beams=5``, which silently disables the assistant
  and costs time: every call passes ``num_beams=1`` (greedy, like the hub checkpoints' default).
* a full ``WhisperForConditionalGeneration`` assistant truncated timestamped output, while the same
  weights loaded decoder-only (``WhisperForCausalLM``, reusing the main model's encoder outputs)
  were complete, so the assistant is always loaded decoder-only.
"""

from __future__ import annotations

import inspect
import logging
import math
import threading
import time
from typing import Any, Optional, Sequence

import numpy as np

from speaker_asr.asr.assist_policy import AssistPolicy
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.asr.hallucination import drop_hallucinations
from speaker_asr.asr.stopping import DecodeCancelled, stopping_criteria
from speaker_asr.config import DEFAULT_BATCH_SIZE, DEFAULT_CPU_BATCH_SIZE, MAX_CHUNK_LENGTH_S, InferenceConfig, ModelCapabilities
from speaker_asr.settings import ModelSettings
from speaker_asr.compat import dtype_kwarg, transformers_major
from speaker_asr.formats import first_temperature
from speaker_asr.patches.draft_decoding import DRAFT, PROPOSED, DraftTokens, draft_allowed
from speaker_asr.patches.scope import RequestScope
from speaker_asr.progress import AsrWindows, ProgressCallback
from speaker_asr.scheduling import thread_waited
from speaker_asr.types import AssistDecision, Segment, Transcript, Word

logger = logging.getLogger(__name__)


def _pipeline_class():
    """The transformers ASR pipeline, returning Whisper's segments *and* its words from one
    generation: in word mode the generated tokens still hold the segment timestamps, so the same
    tokens are post-processed a second time as segments (text decoding only, no model call)."""
    from transformers.pipelines.automatic_speech_recognition import AutomaticSpeechRecognitionPipeline

    from speaker_asr.patches.chunk_windows import right_overlaps

    class SegmentsAndWordsPipeline(AutomaticSpeechRecognitionPipeline):
        def _forward(self, model_inputs, *args, **kwargs):
            stride = model_inputs.get("stride")  # popped by the stock _forward
            features = model_inputs.get("input_features")  # (recordings or windows, ...)
            rows = 1 if features is None else int(features.shape[0])
            # each window's right overlap, for the one-pass-per-window splitter (chunk_windows)
            with right_overlaps(stride, self.feature_extractor.hop_length):
                out = super()._forward(model_inputs, *args, **kwargs)
            windows = _WINDOWS.get()
            if windows is not None:  # a batch of chunked windows, or the whole audio, decoded
                if stride is None:  # whole recordings (one, or several batched)
                    windows.finished(rows)
                else:
                    windows.decoded(1 if isinstance(stride, tuple) else len(stride))
            return out

        def postprocess(self, model_outputs, decoder_kwargs=None, return_timestamps=None,
                        return_language=None):
            # postprocess rewrites the per-window dicts (strides, language tokens): give each
            # pass its own shallow copies
            result = super().postprocess([dict(o) for o in model_outputs], decoder_kwargs=decoder_kwargs,
                                         return_timestamps=return_timestamps,
                                         return_language=return_language)
            if return_timestamps == "word" and self.type == "seq2seq_whisper":
                segments = super().postprocess([dict(o) for o in model_outputs],
                                               decoder_kwargs=decoder_kwargs, return_timestamps=True,
                                               return_language=return_language)
                result["segments"] = segments.get("chunks", [])
            return result

    return SegmentsAndWordsPipeline


# the request's window count (progress.AsrWindows) on the thread decoding it, or None
_WINDOWS = RequestScope(None)


def chunked_windows(samples: int, chunk_len: int, stride_left: int, stride_right: int) -> int:
    """How many windows transformers' chunked ASR pipeline cuts ``samples`` into: its
    ``chunk_iter`` (windows of ``chunk_len`` samples, each starting ``chunk_len - stride_left -
    stride_right`` after the last; a last piece no longer than its left stride is left out),
    counted without computing any features."""
    step = chunk_len - stride_left - stride_right
    count = 0
    for start in range(0, samples, step):
        end = start + chunk_len
        if min(end, samples) - start > (0 if start == 0 else stride_left):
            count += 1
        if end >= samples:
            break
    return count


def _times(c: dict) -> tuple[Optional[float], Optional[float]]:
    start, end = (tuple(c.get("timestamp") or ()) + (None, None))[:2]
    return start, end


def _segment(c: dict) -> Segment:
    return Segment(c.get("text", ""), *_times(c))


def _word(c: dict) -> Word:
    return Word(c.get("text", ""), *_times(c))


class _TokenLimitNotice(logging.Filter):
    """Drops transformers' warning that ``max_new_tokens`` and ``max_length`` are both set:
    Whisper checkpoints' generation config sets ``max_length`` (448), a call with a token limit
    (``MAX_NEW_TOKENS``, every live decode) sets ``max_new_tokens``, which wins as intended; the
    warning would come once per decode."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("`max_new_tokens`" in message and "seem to have been set" in message)


_TOKEN_LIMIT_NOTICE = _TokenLimitNotice()


def _clear_forced_decoder_ids(model) -> None:
    """Drop the hub checkpoints' legacy ``forced_decoder_ids`` (the language / task /
    no-timestamps prompt, e.g. tiny.en's ``[[1, <|notimestamps|>]]``): Whisper's generate builds
    that prompt itself from ``language``, ``task`` and ``return_timestamps``, and transformers
    4.51 refuses to generate (plain, or drafting with the assistant) while they are set."""
    gen = getattr(model, "generation_config", None)
    if getattr(gen, "forced_decoder_ids", None) is not None:
        gen.forced_decoder_ids = None


def resolve_device(settings: ModelSettings):
    """(torch.device, torch.dtype): GPU + float16 when available, else CPU + float32, unless the
    settings say otherwise."""
    import torch

    if settings.device:
        device = torch.device(settings.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"DEVICE={settings.device} but no CUDA device is available")
    else:
        device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if settings.quantization:
        if device.type != "cpu":
            raise RuntimeError(
                f"QUANTIZATION={settings.quantization} is a CPU mode, but the device is {device}: "
                "on a GPU unset QUANTIZATION (float16 is the fast path there), or set DEVICE=cpu")
        from speaker_asr.asr.quantization import choose_int8_path

        path, _ = choose_int8_path(settings.torch_dtype)
        # bfloat16 only where the CPU computes it natively; the dynamic int8 form is float32
        dtype = torch.bfloat16 if path == "bf16" else torch.float32
    elif settings.torch_dtype:
        dtype = getattr(torch, settings.torch_dtype)
    else:
        dtype = torch.float16 if device.type == "cuda" else torch.float32
    return device, dtype


def _quantize(model, settings: ModelSettings, dtype) -> dict:
    """``QUANTIZATION=int8`` in the form this CPU runs fastest (asr/quantization.py): int8 decoder
    weights in a bfloat16 model where bfloat16 is native, dynamic int8 in a float32 model
    elsewhere. Returns what was chosen and why (logged, and in ``GET /health``)."""
    import torch

    from speaker_asr.asr.quantization import (INT8_PATHS, choose_int8_path, dynamic_engine,
                                              quantize_decoder, quantize_dynamic_int8)

    path, reason = choose_int8_path(settings.torch_dtype)
    if path == "bf16" and dtype == torch.bfloat16:
        layers = quantize_decoder(model)
    else:
        path = "dynamic"
        layers = quantize_dynamic_int8(model)
    kernels = INT8_PATHS[path].format(engine=dynamic_engine())
    return {"mode": "int8", "path": path, "kernels": kernels, "reason": reason,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "layers": layers}


class WhisperTranscriber:
    """Loads Whisper (+ assistant) once; :meth:`transcribe` serves one request."""

    def __init__(self, settings: ModelSettings, device, dtype):
        import transformers
        from transformers import (AutoProcessor, WhisperForCausalLM, WhisperForConditionalGeneration,
                                  pipeline)

        token = settings.token()
        self.device, self.dtype = device, dtype
        self.default_batch_size = DEFAULT_BATCH_SIZE if str(device).startswith("cuda") \
            else DEFAULT_CPU_BATCH_SIZE
        self.max_new_tokens = settings.max_new_tokens
        logging.getLogger("transformers.generation.utils").addFilter(_TOKEN_LIMIT_NOTICE)  # a no-op when added before
        self.processor = AutoProcessor.from_pretrained(settings.asr_model, token=token)
        self.model = WhisperForConditionalGeneration.from_pretrained(
            settings.asr_model, token=token, attn_implementation="sdpa", low_cpu_mem_usage=True,
            **dtype_kwarg(dtype)).to(device).eval()
        _clear_forced_decoder_ids(self.model)
        self.quantization: Optional[dict] = None
        if settings.quantization == "int8":
            self.quantization = _quantize(self.model, settings, dtype)
            logger.info("QUANTIZATION=int8: %s (%s)", self.quantization["kernels"],
                        self.quantization["reason"])
        # every change to transformers' internals, in a fixed order, decided here once
        # (patches/registry.py); GENERATION_SPEEDUPS=false leaves transformers' stock code
        from speaker_asr.patches import registry

        self.patch_report = registry.install("whisper", self.model, settings.generation_speedups)
        applied = {r.name for r in self.patch_report if r.applied}
        self.fast_lm_head = "fast_lm_head" in applied
        self.lean_decoder = "lean_decoder" in applied
        gen = self.model.generation_config
        self.multilingual = bool(getattr(gen, "is_multilingual", False)) and bool(
            getattr(gen, "lang_to_id", None))
        self.languages = frozenset(k.strip("<|>") for k in (getattr(gen, "lang_to_id", None) or {}))
        self.has_alignment_heads = bool(getattr(gen, "alignment_heads", None))
        # whether generate reports its sequential loop's progress (transformers' monitor_progress)
        self.monitors_progress = "monitor_progress" in inspect.signature(self.model.generate).parameters

        self.assistant = None
        self.assist_policy = AssistPolicy()
        if settings.assistant_model:
            previous = transformers.logging.get_verbosity()
            # loading a full Whisper checkpoint decoder-only lists every encoder weight as unused
            transformers.logging.set_verbosity_error()
            try:
                self.assistant = WhisperForCausalLM.from_pretrained(
                    settings.assistant_model, token=token, attn_implementation="sdpa",
                    low_cpu_mem_usage=True, **dtype_kwarg(dtype)).to(device).eval()
            finally:
                transformers.logging.set_verbosity(previous)
            _clear_forced_decoder_ids(self.assistant)
            if settings.quantization == "int8":
                _quantize(self.assistant, settings, dtype)
            if self.assistant.config.vocab_size != self.model.config.vocab_size:
                raise RuntimeError(
                    f"ASSISTANT_MODEL {settings.assistant_model} has a vocabulary of "
                    f"{self.assistant.config.vocab_size} tokens, ASR_MODEL "
                    f"{settings.asr_model} has {self.model.config.vocab_size}: the assistant must "
                    "share the main model's tokenizer (e.g. distil-large-v3 for whisper-large-v3)")
            if self.assistant.config.d_model != self.model.config.d_model:
                raise RuntimeError(
                    f"ASSISTANT_MODEL {settings.assistant_model} expects encoder states of size "
                    f"{self.assistant.config.d_model}, ASR_MODEL has {self.model.config.d_model}: "
                    "the assistant must be distilled from the main model (same encoder)")
            self.patch_report += registry.install("assistant", self.assistant,
                                                  settings.generation_speedups)

        self.pipe = pipeline(
            "automatic-speech-recognition", model=self.model, tokenizer=self.processor.tokenizer,
            feature_extractor=self.processor.feature_extractor, device=device,
            pipeline_class=_pipeline_class(), **dtype_kwarg(dtype))

    def capabilities(self, has_diarization: bool) -> ModelCapabilities:
        return ModelCapabilities(has_assistant=self.assistant is not None,
                                 multilingual=self.multilingual,
                                 languages=self.languages if self.multilingual else frozenset({"en"}),
                                 has_diarization=has_diarization,
                                 no_speech_detection=transformers_major() >= 5)

    def generate_kwargs(self, cfg: InferenceConfig, language: Optional[str] = None,
                        assisted: bool = False) -> dict:
        kwargs: dict[str, Any] = {"num_beams": 1, "do_sample": False}
        if self.multilingual:
            kwargs["task"] = cfg.task
            if language:
                kwargs["language"] = language
        if self.max_new_tokens:
            kwargs["max_new_tokens"] = self.max_new_tokens
        if isinstance(cfg.temperature, list) and len(cfg.temperature) > 1:
            kwargs["temperature"] = tuple(cfg.temperature)
            kwargs["do_sample"] = False  # the first pass stays greedy; retries sample
        elif first_temperature(cfg.temperature) > 0:
            kwargs["temperature"] = first_temperature(cfg.temperature)
            kwargs["do_sample"] = True
        for name in ("compression_ratio_threshold", "logprob_threshold", "no_speech_threshold"):
            if getattr(cfg, name) is not None:
                kwargs[name] = getattr(cfg, name)
        if cfg.logprob_threshold is not None and "temperature" not in kwargs:
            # Whisper's generate rescales the log-probabilities by the temperature, and failed on
            # the greedy default (None: "'>' not supported between 'NoneType' and 'float'")
            kwargs["temperature"] = 0.0
        if cfg.prompt:
            import torch

            ids = self.processor.tokenizer.get_prompt_ids(cfg.prompt, return_tensors="np")
            kwargs["prompt_ids"] = torch.as_tensor(ids, device=self.device)
        if assisted:
            kwargs["assistant_model"] = self.assistant
        return kwargs

    def window_count(self, samples: int, cfg: InferenceConfig, chunked: bool) -> int:
        """The 30 s windows decoding ``samples`` takes: the chunked pipeline's windows (with the
        pipeline's own rounding and its default stride, a sixth of a window on each side), else
        the audio's length in windows (Whisper's sequential loop, or one window)."""
        if not chunked:
            return max(1, math.ceil(samples / (MAX_CHUNK_LENGTH_S * SAMPLE_RATE)))
        rate = self.pipe.feature_extractor.sampling_rate
        align = getattr(self.model.config, "inputs_to_logits_ratio", 1)

        def aligned(seconds: float) -> int:
            return int(round(seconds * rate / align) * align)

        stride = aligned(cfg.chunk_length_s / 6)
        return chunked_windows(samples, aligned(cfg.chunk_length_s), stride, stride)

    def transcribe(self, audio: np.ndarray, cfg: InferenceConfig, word_timestamps: bool = False,
                   progress: Optional[ProgressCallback] = None, record: bool = True,
                   max_new_tokens: Optional[int] = None, draft: Optional[DraftTokens] = None,
                   cancel: Optional[threading.Event] = None, stop_loops: bool = False) -> Transcript:
        """Timestamped segments, and words when ``word_timestamps`` and the model has alignment
        heads (check :attr:`has_alignment_heads`). ``progress`` hears the windows decoded (on
        this thread): after each batch of chunked decoding, within Whisper's sequential loop as
        it moves on (where generate reports it), and at the end. ``record=False`` (the warm-up at
        load): the decode's time is not given to :attr:`assist_policy` (give ``assisted`` as
        true or false then: ``auto`` would still ask the policy); ``max_new_tokens``: at most this
        many tokens per window (the warm-up's cap, below ``MAX_NEW_TOKENS``). ``draft`` (a growing
        live utterance, speaker_asr/patches/draft_decoding.py): its ``given`` tokens, the previous
        decode of this audio's beginning, are proposed to the model, which keeps the ones it would
        pick itself (the same greedy tokens, fewer decoder steps; only for one greedy window without
        an assistant), and ``generated`` receives this decode's tokens. ``cancel``: once it is
        set, the decode stops at its next token with :class:`DecodeCancelled` (a live session's
        partial decode that its utterance's end made useless). ``stop_loops``: the decode ends
        where its tokens start going round in a loop (:func:`~speaker_asr.asr.hallucination.looping`:
        a phrase repeated back to back) instead of running on to its token limit."""
        if cancel is not None and cancel.is_set():
            raise DecodeCancelled("cancelled before it started")
        windows = None
        if progress is not None:
            windows = AsrWindows(self.window_count(len(audio), cfg, self._chunked(audio, cfg)), progress)
        return self._transcribe([audio], cfg, word_timestamps, windows, record, max_new_tokens,
                                draft, cancel, stop_loops)[0]

    def transcribe_many(self, audios: Sequence[np.ndarray], cfg: InferenceConfig,
                        word_timestamps: bool = False, progress: Optional[ProgressCallback] = None,
                        stop_loops: bool = False) -> list[Transcript]:
        """Recordings of one length (the channels of one file, ``multichannel``), each its own
        :class:`Transcript` as :meth:`transcribe` gives it, decoded together: in one batched pass
        (their windows side by side, ``cfg``'s batch size at a time) where they share a language
        and the decoding allows it, i.e. without the assistant (it runs at batch 1) and, for audio
        longer than a window, chunked; else one after another. ``progress`` hears the windows of
        all of them; ``stop_loops``: as :meth:`transcribe`'s, for each recording."""
        if not audios:
            return []
        length = len(audios[0])
        if any(len(a) != length for a in audios):
            raise ValueError("transcribe_many takes recordings of one length")
        languages = [cfg.language if cfg.language is not None or not self.multilingual
                     else self.detect_language(a) for a in audios]
        chunked = self._chunked(audios[0], cfg)
        windows = None
        if progress is not None:
            windows = AsrWindows(len(audios) * self.window_count(length, cfg, chunked), progress,
                                 recordings=len(audios))
        decision = cfg.assist_decision(length / SAMPLE_RATE, self.assistant is not None, self.assist_policy)
        batched = (len(audios) > 1 and len(set(languages)) == 1 and not decision.used
                   and (chunked or length <= MAX_CHUNK_LENGTH_S * SAMPLE_RATE))
        if batched:
            return self._transcribe(list(audios), cfg.model_copy(update={"language": languages[0]}),
                                    word_timestamps, windows, record=False, stop_loops=stop_loops,
                                    decision=decision)
        return [self._transcribe([a], cfg.model_copy(update={"language": lang}), word_timestamps, windows,
                                 stop_loops=stop_loops, decision=decision)[0]
                for a, lang in zip(audios, languages)]

    @staticmethod
    def _chunked(audio: np.ndarray, cfg: InferenceConfig) -> bool:
        """Whether ``audio`` is decoded in batched overlapping chunks (config.InferenceConfig.long_form):
        audio that fits one window is decoded whole (chunking it would cut a short file into
        overlapping windows whose merge can repeat or lose words at the seams); longer audio
        chunked, or sequentially (Whisper's own long-form loop)."""
        return len(audio) > cfg.chunk_length_s * SAMPLE_RATE and cfg.long_form == "chunked"

    def _transcribe(self, audios: list[np.ndarray], cfg: InferenceConfig, word_timestamps: bool,
                    windows: Optional[AsrWindows], record: bool = True,
                    max_new_tokens: Optional[int] = None, draft: Optional[DraftTokens] = None,
                    cancel: Optional[threading.Event] = None, stop_loops: bool = False,
                    decision: Optional[AssistDecision] = None) -> list[Transcript]:
        """:meth:`transcribe` of ``audios`` (of one length) in one call of the pipeline: one
        recording, or several batched (:meth:`transcribe_many`). ``decision``: whether to use
        the assistant, where the caller already asked (asking ``auto``'s policy again would
        count a second decision, and could give another answer)."""
        import torch

        words_mode = word_timestamps and self.has_alignment_heads
        # one language for the whole file, detected on the first 30 s when not given: windows
        # cannot flip language midway, and the response can report it (the pipeline's own
        # return_language breaks batched decoding in transformers 5)
        language = cfg.language
        if language is None and self.multilingual:
            language = self.detect_language(audios[0])
        chunked = self._chunked(audios[0], cfg)
        seconds = len(audios[0]) / SAMPLE_RATE
        # for audio that fits one window both modes give the same text: "auto" takes the one
        # this deployment has measured to be faster (assist_policy.py)
        eligible = cfg.assist_eligible(seconds, self.assistant is not None)
        if decision is None:
            decision = cfg.assist_decision(seconds, self.assistant is not None, self.assist_policy)
        assisted = decision.used
        if cfg.assisted == "auto" and not assisted:
            # INFO where an assistant could have drafted; without one every request says the same
            logger.log(logging.INFO if self.assistant is not None else logging.DEBUG,
                       "assisted='auto': decoding without the assistant (%s)", decision.reason)
        batch_size = cfg.batch_size_for(assisted, self.default_batch_size)
        window = {"chunk_length_s": cfg.chunk_length_s, "batch_size": batch_size} if chunked \
            else {"batch_size": batch_size} if len(audios) > 1 else {}
        generate_kwargs = self.generate_kwargs(cfg, language, assisted)
        if draft is not None and draft.given and not chunked and len(audios) == 1 \
                and seconds <= MAX_CHUNK_LENGTH_S and draft_allowed(generate_kwargs):
            generate_kwargs["prompt_lookup_num_tokens"] = PROPOSED  # assisted generation, our draft
            draft.verify = True
        if max_new_tokens is not None:
            generate_kwargs["max_new_tokens"] = min(max_new_tokens,
                                                    generate_kwargs.get("max_new_tokens", max_new_tokens))
        # always: each generated token is a unit of the scheduler's
        generate_kwargs["stopping_criteria"] = stopping_criteria(cancel, stop_loops, self._timestamp_begin())
        if windows is not None and len(audios) == 1 and not chunked \
                and self.window_count(len(audios[0]), cfg, chunked) > 1 and self.monitors_progress:
            # Whisper's sequential loop says where each window starts: (seek, max frames)
            generate_kwargs["monitor_progress"] = \
                lambda p: windows.reached(float(p[0, 0]) / max(1.0, float(p[0, 1])))
        started, waited = time.perf_counter(), thread_waited()
        from speaker_asr.patches.chunk_windows import one_pass_per_window
        from speaker_asr.patches.whisper import fast_lm_head_allowed, fast_lm_head_scope

        inputs = [{"raw": a, "sampling_rate": SAMPLE_RATE} for a in audios]
        # request-scoped (this thread), never model state: the bfloat16 projection only for
        # greedy decoding that reads no probabilities; the windows counted for ``progress``
        with torch.inference_mode(), one_pass_per_window(chunked), \
                fast_lm_head_scope(fast_lm_head_allowed(generate_kwargs)), _WINDOWS.set(windows), \
                DRAFT.set(draft):
            outs = self.pipe(
                inputs if len(inputs) > 1 else inputs[0],
                **window,
                return_timestamps="word" if words_mode else True,
                generate_kwargs=generate_kwargs,
            )
        if len(inputs) == 1:
            outs = [outs]
        if eligible and record:
            # the decode's own time: what it waited for the lane (other work's units) left out
            self.assist_policy.record(assisted, seconds,
                                      time.perf_counter() - started - (thread_waited() - waited))
        return [self._transcript(out, words_mode, language if self.multilingual else "en", cfg, decision)
                for out in outs]

    @staticmethod
    def _transcript(out: dict, words_mode: bool, language: Optional[str], cfg: InferenceConfig,
                    decision: AssistDecision) -> Transcript:
        """One recording's pipeline output as a :class:`Transcript` (the hallucination filter's
        drops made, where asked)."""
        segments = out.get("segments") if words_mode else out.get("chunks")
        chunks = [_segment(c) for c in segments or []]
        if not chunks and out.get("text"):
            chunks = [Segment(out["text"], None, None)]
        words = [_word(c) for c in out.get("chunks") or []] if words_mode else None
        text, dropped = out.get("text", ""), []
        if words and cfg.hallucination_filter:
            cleaned = drop_hallucinations(chunks, words)
            if cleaned is not None:
                text, chunks, words, dropped = cleaned.text, cleaned.segments, cleaned.words, cleaned.dropped
        return Transcript(text=text, chunks=chunks, language=language, words=words,
                         assisted=decision, dropped=dropped)

    def _timestamp_begin(self) -> Optional[int]:
        """The first of Whisper's timestamp tokens (every id from it on is a time, not text)."""
        no_timestamps = getattr(self.model.generation_config, "no_timestamps_token_id", None)
        return None if no_timestamps is None else int(no_timestamps) + 1

    def detect_language(self, audio: np.ndarray) -> Optional[str]:
        """Whisper's language detection on the first 30 s."""
        import torch

        if not hasattr(self.model, "detect_language"):
            return None
        features = self.processor.feature_extractor(
            audio[: 30 * SAMPLE_RATE], sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
        with torch.inference_mode():
            ids = self.model.detect_language(features.to(self.device, self.dtype))
        token = self.processor.tokenizer.convert_ids_to_tokens(int(ids.reshape(-1)[0]))
        code = str(token).strip("<|>")
        return code if code in self.languages else None
