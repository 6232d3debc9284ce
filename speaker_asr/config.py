"""The request parameters, typed.

* :class:`InferenceConfig` -- the per-request ``parameters``, validated with messages that say what
  is wrong and what is allowed. Validation that depends on the loaded models (is there an
  assistant? is the model English-only?) reads a :class:`ModelCapabilities` passed as context.
  Parameters given as text (a query string, form fields) are read by each field's declared type
  (:meth:`InferenceConfig.parameters_from_strings`): ``prompt=1984`` stays text.

The settings (environment variables) are speaker_asr/settings.py's. No torch import here: this
module is pure validation.
"""

from __future__ import annotations

import functools
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional, Sequence, Union

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, create_model,
                      model_validator)

from speaker_asr.error_text import bounds_text, shown, too_many_channels_text, value_error_text
from speaker_asr.errors import RequestError
from speaker_asr.formats import FORMATS, TASKS, first_temperature
from speaker_asr.settings import DEFAULT_DIARIZATION_MODEL, DOCUMENTED_ASSISTANT_MODEL
from speaker_asr.speaker_names import MAX_SPEAKERS, validate_speaker_names
from speaker_asr.types import (ASSIST_BATCH_SIZE, ASSIST_CHANNELS, ASSIST_LONG_AUDIO, ASSIST_NO_ASSISTANT,
                               ASSIST_NOT_REQUESTED, ASSIST_REQUESTED, ASSIST_SAMPLING,
                               AssistDecision)

if typing.TYPE_CHECKING:
    from speaker_asr.asr.assist_policy import AssistPolicy

DEFAULT_BATCH_SIZE = 24  # GPU: windows decoded at once for long audio
# CPU: batching buys little there (the matrix products are already large) while every window in
# the batch keeps its decoder's cross-attention weights for word timestamps, so the peak memory
# grows with the batch and the words stay the same (docs/measurements.md, "Figures behind the
# speed fixes' reasons"; reliability/long_audio.py --stage asr --param batch_size=N)
DEFAULT_CPU_BATCH_SIZE = 8
MAX_BATCH_SIZE = 64
MAX_CHUNK_LENGTH_S = 30.0
# shorter windows multiply the decoding work (a window every few samples would run for hours)
MIN_CHUNK_LENGTH_S = 5.0
MAX_PROMPT_CHARS = 800
# known speakers (named by reference clips): how many per request, and each clip's length (s);
# OpenAI's diarized transcription takes up to 4 clips of 2-10 s, all of which are valid here
MAX_KNOWN_SPEAKERS = 8
MIN_REFERENCE_SECONDS = 2.0
MAX_REFERENCE_SECONDS = 30.0
# multichannel: the most channels one recording may have (each is decoded and transcribed on its
# own: a 16-channel hour holds 3.7 GB of samples and costs 16 hours' ASR at most)
MAX_CHANNELS = 16
@dataclass(frozen=True)
class ModelCapabilities:
    """What the loaded models can do; request validation depends on it."""

    has_assistant: bool = False
    multilingual: bool = True
    # Whisper language codes the model knows (empty: accept every code Whisper defines)
    languages: frozenset = field(default_factory=frozenset)
    has_diarization: bool = True
    # transformers 4.51's ASR pipeline crashes on Whisper's no-speech detection (5.x works)
    no_speech_detection: bool = True


def _whisper_languages() -> tuple[dict[str, str], dict[str, str]]:
    """(code -> name, name -> code) as Whisper defines them."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

    return LANGUAGES, TO_LANGUAGE_CODE


def normalize_language(value: str, capabilities: ModelCapabilities) -> str:
    """'en', 'English', 'english', '<|en|>' -> 'en'; raises ValueError naming what is allowed."""
    codes, names = _whisper_languages()
    key = value.strip().lower()
    if key.startswith("<|") and key.endswith("|>"):
        key = key[2:-2]
    code = key if key in codes else names.get(key)
    if code is None:
        raise ValueError(
            f"unknown language {value!r}: use a Whisper language code or name, e.g. 'en', 'fr', "
            f"'german' ({len(codes)} languages: {', '.join(sorted(codes))})")
    if not capabilities.multilingual and code != "en":
        raise ValueError(f"language {value!r} is not available: the model is English-only, so only "
                         "'en' (or no language) is accepted")
    if capabilities.languages and code not in capabilities.languages:
        raise ValueError(f"language {value!r} is not supported by this model; it knows: "
                         f"{', '.join(sorted(capabilities.languages))}")
    return code


class InferenceConfig(BaseModel):
    """Per-request ``parameters``. Unknown names are errors; types are checked strictly."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    task: Literal[TASKS] = "transcribe"
    language: Optional[str] = Field(None, description="Whisper language code or name; None: detect")
    batch_size: Optional[int] = Field(
        None, ge=1, le=MAX_BATCH_SIZE,
        description=f"30 s windows decoded at once; default {DEFAULT_BATCH_SIZE} on GPU, "
                    f"{DEFAULT_CPU_BATCH_SIZE} on CPU (1 when assisted)")
    assisted: Union[bool, Literal["auto"]] = Field(
        "auto", description="speculative decoding with the assistant model: true, false, or 'auto' "
                            "(for audio that fits one window: the mode measured faster on this deployment; "
                            "longer audio: batched plain decoding)")
    chunk_length_s: float = Field(MAX_CHUNK_LENGTH_S, ge=MIN_CHUNK_LENGTH_S, le=MAX_CHUNK_LENGTH_S,
                                  description="window length for chunked long-form decoding")
    long_form: Literal["chunked", "sequential"] = Field(
        "chunked", description="how audio longer than one window is decoded: 'chunked' (overlapping "
                               "windows decoded batch_size at a time, each once, and merged), 'sequential' "
                               "(Whisper's own long-form algorithm: one 30 s window at a time, each "
                               "starting where the last complete segment ended; works with the "
                               "assistant). Measured on CPU (bench/results.md): sequential no faster "
                               "than chunked on 60 s or 10 min, word error rates moving both ways")
    num_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    min_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    max_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    return_word_timestamps: bool = Field(False, description="include each chunk's words with times "
                                                            "(and speakers)")
    response_format: Literal[tuple(FORMATS)] = Field(
        "json", description="text formats come back as {'format', 'content'}")
    speaker_names: Optional[list[str]] = Field(
        None, description="names for the speakers in order of first appearance")
    known_speaker_names: Optional[list[str]] = Field(
        None, description=f"names of up to {MAX_KNOWN_SPEAKERS} people who may speak, each with a clip of "
                          "their voice in known_speaker_references (same order): a found speaker whose "
                          "voice matches a clip is labelled with that name")
    known_speaker_references: Optional[list[Union[str, list[float]]]] = Field(
        None, description=f"one per known_speaker_names entry: a base64 audio clip or data URI "
                          f"({MIN_REFERENCE_SECONDS:g}-{MAX_REFERENCE_SECONDS:g} s of that person "
                          "speaking alone), or a voice embedding returned earlier by "
                          "return_speaker_embeddings")
    speaker_match_threshold: Optional[float] = Field(
        None, ge=-1.0, le=1.0, description="voice similarity (cosine) a speaker needs to take a known "
                                           "name; default: the server's SPEAKER_MATCH_THRESHOLD")
    return_speaker_embeddings: bool = Field(
        False, description="include each speaker's voice embedding (and each reference clip's) in "
                           "the response, to match speakers across files")
    multichannel: bool = Field(
        False, description="each channel is one speaker (a stereo call, one track or microphone "
                           f"per person; 2 to {MAX_CHANNELS} channels): each channel is transcribed "
                           "on its own, every word carries its channel, a word heard on several "
                           "channels is kept once (on the one where it is loudest), and the "
                           "speakers are the channels (CHANNEL_0, CHANNEL_1, ...; speaker_names name "
                           "them in channel order)")
    diarize_channels: bool = Field(
        False, description="with multichannel: also find the speakers within each channel (a "
                           "speakerphone side of a call); labels CHANNEL_0_SPEAKER_00, ... "
                           "num_speakers / max_speakers then count every channel's speakers")
    hallucination_filter: bool = Field(
        True, description="remove runs of 4+ words that Whisper wrote with no audio under them "
                          "(word times of zero length: repeated text after the speech); named in "
                          "warnings. Needs word times: applies with diarization or "
                          "return_word_timestamps")
    vad_filter: bool = Field(True, description="return an empty transcript for audio without speech "
                                               "(digital silence, or no speech found by the "
                                               "diarization) instead of Whisper's hallucinations")
    prompt: Optional[str] = Field(None, min_length=1, max_length=MAX_PROMPT_CHARS,
                                  description="initial prompt: vocabulary, names, spelling hints")
    temperature: Union[float, list[float]] = Field(
        0.0, description="0 = greedy; a list such as [0, 0.2, 0.4] retries a window at the next "
                         "temperature when a guard below rejects it")
    compression_ratio_threshold: Optional[float] = Field(
        None, gt=0, le=100, description="reject a window whose text compresses better than this "
                                        "(repetition loops); 2.4 is the usual value")
    logprob_threshold: Optional[float] = Field(
        None, le=0, ge=-100, description="reject a window whose mean token log-probability is lower; "
                                         "-1.0 is the usual value")
    no_speech_threshold: Optional[float] = Field(
        None, ge=0, le=1, description="with logprob_threshold: treat a window as silence when the "
                                      "no-speech probability is higher; 0.6 is the usual value")

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> "InferenceConfig":
        caps: ModelCapabilities = (info.context or {}).get("capabilities") or ModelCapabilities()
        if self.num_speakers is not None and (self.min_speakers is not None
                                              or self.max_speakers is not None):
            raise ValueError("give either num_speakers or min_speakers/max_speakers, not both")
        if (self.min_speakers is not None and self.max_speakers is not None
                and self.min_speakers > self.max_speakers):
            raise ValueError(f"min_speakers ({self.min_speakers}) must not exceed max_speakers "
                             f"({self.max_speakers})")
        if self.assisted is True:
            if not caps.has_assistant:
                raise ValueError("assisted=true needs an assistant model: set ASSISTANT_MODEL "
                                 f"(e.g. {DOCUMENTED_ASSISTANT_MODEL}) when starting the endpoint")
            if self.batch_size is not None and self.batch_size != 1:
                raise ValueError(f"assisted decoding runs at batch_size 1; got batch_size="
                                 f"{self.batch_size} (leave it out or set 1)")
        if not caps.multilingual and self.task == "translate":
            raise ValueError("task 'translate' is not available: the model is English-only "
                             "(use a multilingual Whisper model to translate)")
        temps = self.temperature if isinstance(self.temperature, list) else [self.temperature]
        if not temps or any(not 0 <= t <= 1 for t in temps) or temps != sorted(temps):
            raise ValueError(f"temperature must be a number in [0, 1] or a non-empty increasing list "
                             f"of such numbers, got {self.temperature!r}")
        if self.no_speech_threshold is not None and not caps.no_speech_detection:
            raise ValueError("no_speech_threshold is not available on this server: its transformers "
                             "release cannot run Whisper's no-speech detection in the ASR pipeline "
                             "(it needs transformers 5); vad_filter (on by default) handles silence")
        if self.no_speech_threshold is not None and self.logprob_threshold is None:
            raise ValueError("no_speech_threshold works together with logprob_threshold: set both "
                             "(e.g. 0.6 and -1.0)")
        if self.long_form == "sequential":
            if self.batch_size is not None and self.batch_size != 1:
                raise ValueError(f"long_form 'sequential' decodes one window at a time; got batch_size="
                                 f"{self.batch_size} (leave it out, or use long_form 'chunked')")
            if self.chunk_length_s != MAX_CHUNK_LENGTH_S:
                raise ValueError(f"long_form 'sequential' uses Whisper's own {MAX_CHUNK_LENGTH_S:g} s "
                                 f"window; got chunk_length_s={self.chunk_length_s:g} (leave it out, "
                                 "or use long_form 'chunked')")
        if self.assisted is True and first_temperature(self.temperature) != 0:
            raise ValueError("assisted decoding is greedy: the first temperature must be 0")
        if self.speaker_names is not None:
            validate_speaker_names(self.speaker_names)
        if self.diarize_channels and not self.multichannel:
            raise ValueError("diarize_channels applies to multichannel recordings: set "
                             "multichannel=true too (or leave diarize_channels out)")
        if self.diarize_channels and not caps.has_diarization:
            raise ValueError("diarize_channels needs speaker diarization: set DIARIZATION_MODEL "
                             f"(e.g. {DEFAULT_DIARIZATION_MODEL}) when starting the endpoint")
        self._check_known_speakers(caps)
        if self.language is not None:
            code = normalize_language(self.language, caps)
            object.__setattr__(self, "language", code)
        return self

    def _check_known_speakers(self, caps: "ModelCapabilities") -> None:
        names, refs = self.known_speaker_names, self.known_speaker_references
        wanted = names is not None or refs is not None or self.return_speaker_embeddings \
            or self.speaker_match_threshold is not None
        if wanted and not caps.has_diarization:
            raise ValueError("known speakers and speaker embeddings need speaker diarization: set "
                             f"DIARIZATION_MODEL (e.g. {DEFAULT_DIARIZATION_MODEL}) when starting the "
                             "endpoint")
        if names is None and refs is None:
            if self.speaker_match_threshold is not None:
                raise ValueError("speaker_match_threshold applies to known speakers: give "
                                 "known_speaker_names and known_speaker_references too")
            return
        if names is None or refs is None:
            given, missing = (("known_speaker_names", "known_speaker_references") if refs is None
                              else ("known_speaker_references", "known_speaker_names"))
            raise ValueError(f"{given} needs {missing}: one reference clip per name, in the same order")
        if self.speaker_names is not None:
            raise ValueError("give either speaker_names (names in order of first appearance) or "
                             "known_speaker_names (names matched by voice), not both")
        clean = validate_speaker_names(names, "known_speaker_names", MAX_KNOWN_SPEAKERS)
        if not clean:
            raise ValueError("known_speaker_names is empty: give at least one name with its clip")
        for i, name in enumerate(clean):
            if re.fullmatch(r"SPEAKER_\d+", name):
                raise ValueError(f"known_speaker_names[{i}] {name!r} looks like the label of an "
                                 "unnamed speaker; pick a real name")
        if len(refs) != len(clean):
            raise ValueError(f"known_speaker_references has {len(refs)} entries for "
                             f"{len(clean)} known_speaker_names; give one clip per name, in order")
        for i, ref in enumerate(refs):
            if isinstance(ref, str) and not ref.strip():
                raise ValueError(f"known_speaker_references[{i}] (for {clean[i]!r}) is empty: send a "
                                 "base64 audio clip or data URI")
            if isinstance(ref, list) and (not ref or not all(math.isfinite(x) for x in ref)):
                raise ValueError(f"known_speaker_references[{i}] (for {clean[i]!r}) is not a usable "
                                 "voice embedding: expected a non-empty list of finite numbers")
        object.__setattr__(self, "known_speaker_names", clean)

    def check_channels(self, count: int) -> None:
        """With ``multichannel``: RequestError when a recording of ``count`` channels cannot be
        transcribed as asked (mono; more than :data:`MAX_CHANNELS`; a speaker count that
        contradicts one speaker per channel, or with ``diarize_channels`` at least one)."""
        if not self.multichannel:
            return
        if count < 2:
            raise RequestError(
                f"multichannel=true needs a recording with 2 or more channels (one per speaker); this "
                f"one has {count} channel{'s' if count != 1 else ''} (mono): leave multichannel out "
                "to find its speakers by voice, or send the multichannel original", param="multichannel")
        if count > MAX_CHANNELS:
            raise RequestError(too_many_channels_text(count, MAX_CHANNELS), param="multichannel")
        plural = f"{count} channels"
        if self.diarize_channels:
            for name in ("num_speakers", "max_speakers"):
                value = getattr(self, name)
                if value is not None and value < count:
                    raise RequestError(
                        f"{name}={value} conflicts with multichannel: the recording has {plural}, "
                        f"each with at least one speaker (with diarize_channels, {name} counts "
                        f"every channel's speakers: give {count} or more)", param=name)
            return
        wrong = [(name, value) for name, value, ok in (
            ("num_speakers", self.num_speakers, lambda v: v == count),
            ("min_speakers", self.min_speakers, lambda v: v <= count),
            ("max_speakers", self.max_speakers, lambda v: v >= count)) if value is not None and not ok(value)]
        if wrong:
            name, value = wrong[0]
            raise RequestError(
                f"{name}={value} conflicts with multichannel: the recording has {plural}, one "
                f"speaker each (leave {name} out, or set diarize_channels=true for channels that "
                "hold several people)", param=name)

    def channel_speakers(self, count: int) -> dict[str, Optional[int]]:
        """With ``diarize_channels``: the speaker counts one channel's diarization gets, out of a
        recording of ``count`` channels, as an update of this config: at most the request's
        count (``num_speakers`` or ``max_speakers``, every channel's speakers) less one for each
        other channel (each holds at least one speaker); never the request's own counts, which
        are the whole recording's."""
        total = self.num_speakers if self.num_speakers is not None else self.max_speakers
        return {"num_speakers": None, "min_speakers": None,
                "max_speakers": None if total is None else total - (count - 1)}

    def assist_eligible(self, duration_s: float, has_assistant: bool) -> bool:
        """Whether assisted and plain decoding are interchangeable for this request (see
        :meth:`plain_reason`): then ``auto`` lets the measurements choose."""
        return self.plain_reason(duration_s, has_assistant) is None

    def plain_reason(self, duration_s: float, has_assistant: bool) -> Optional[str]:
        """Why ``auto`` decodes this request without the assistant whatever was measured (one of
        :data:`~speaker_asr.types.ASSIST_REASONS`), or None when both modes are interchangeable:
        an assistant is loaded, the audio fits one window (assisted decoding runs at batch 1, so
        for longer audio batched plain windows win even where the assistant wins on one window:
        docs/measurements.md, "Figures behind the speed fixes' reasons"), decoding is greedy, no
        batch size above 1 was asked for and the channels are not decoded side by side
        (``multichannel``). With
        ``long_form='sequential'`` both run one window at a time, so any length is eligible."""
        if not has_assistant:
            return ASSIST_NO_ASSISTANT
        if duration_s > self.chunk_length_s and self.long_form != "sequential":
            return ASSIST_LONG_AUDIO
        if first_temperature(self.temperature) != 0:
            return ASSIST_SAMPLING
        if self.batch_size not in (None, 1):
            return ASSIST_BATCH_SIZE
        if self.multichannel:
            return ASSIST_CHANNELS
        return None

    def assist_decision(self, duration_s: float, has_assistant: bool,
                        policy: "AssistPolicy") -> AssistDecision:
        """Whether to decode with the assistant, and why: as asked (``true`` / ``false``), else
        (``auto``) plain for a :meth:`plain_reason`, else ``policy``'s choice of the mode it
        measured faster (:class:`~speaker_asr.asr.assist_policy.AssistPolicy`)."""
        if self.assisted is True:
            return AssistDecision(True, ASSIST_REQUESTED)
        if self.assisted is False:
            return AssistDecision(False, ASSIST_NOT_REQUESTED)
        reason = self.plain_reason(duration_s, has_assistant)
        return AssistDecision(False, reason) if reason is not None else policy.choose()

    def batch_size_for(self, assisted: bool, default: int = DEFAULT_BATCH_SIZE) -> int:
        """The batch size asked for, else 1 when assisted, else ``default`` (the device's)."""
        if self.batch_size is not None:
            return self.batch_size
        return 1 if assisted else default

    @classmethod
    def from_request(cls, parameters: Any, capabilities: ModelCapabilities) -> "InferenceConfig":
        """Validate ``data["parameters"]``; raises ValueError with a user-facing message."""
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, dict):
            raise RequestError(f"'parameters' must be a JSON object, got {type(parameters).__name__}")
        try:
            return cls.model_validate(parameters, context={"capabilities": capabilities})
        except ValidationError as exc:
            raise _request_error(exc) from None

    @classmethod
    def parameters_from_strings(cls, values: Mapping[str, Union[str, Sequence[str]]]) -> dict[str, Any]:
        """Parameters given as text (a query string, form fields; a key given several times as a
        list of its texts) -> the JSON values they stand for, each read by its field's declared
        type, not guessed from the text: ``num_speakers=2`` is the integer 2, ``temperature=0.2``
        a number, ``assisted=true`` a boolean (or ``auto``), ``prompt=1984`` and
        ``language=en`` text. A list field (``speaker_names``, ``known_speaker_names``, ...) is a
        list even when given once; ``temperature`` given several times is a list. A value that
        is not text (an uploaded clip already in base64) is taken as it is. Unknown names and
        values of the wrong type raise RequestError, as :meth:`from_request` does; the rules
        across parameters (and those that depend on the models) are left to it."""
        shaped: dict[str, Any] = {}
        for name, value in values.items():
            texts = list(value) if isinstance(value, (list, tuple)) else [value]
            shaped[name] = texts if len(texts) != 1 or name in _list_fields() else texts[0]
        try:
            read = _fields_from_strings().model_validate(shaped)
        except ValidationError as exc:
            raise _request_error(exc) from None
        return read.model_dump(exclude_unset=True)


def _list_fields() -> frozenset:
    """The parameters whose value is always a list (``speaker_names``, ...)."""
    names = set()
    for name, info in InferenceConfig.model_fields.items():
        args = [a for a in typing.get_args(info.annotation) if a is not type(None)] or [info.annotation]
        if len(args) == 1 and typing.get_origin(args[0]) is list:
            names.add(name)
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def _fields_from_strings() -> type[BaseModel]:
    """InferenceConfig's fields (types, bounds) without its rules across fields, in pydantic's
    lax mode: text is converted by each field's type (``"2"`` to an int field is 2, to a text
    field ``"2"``); NaN and infinities are refused."""
    fields = {name: (info.annotation, info) for name, info in InferenceConfig.model_fields.items()}
    return create_model("ParametersFromStrings", __config__=ConfigDict(
        extra="forbid", strict=False, allow_inf_nan=False, hide_input_in_errors=False), **fields)


def _request_error(exc: ValidationError) -> RequestError:
    """The RequestError for a failed validation of the parameters: its message, the parameter
    at fault and, for an unknown name, the code ``unknown_parameter``."""
    errors = exc.errors(include_url=False)
    code = "unknown_parameter" if errors and errors[0].get("type") == "extra_forbidden" else None
    return RequestError(describe_validation_error(exc), param=_first_parameter(exc), code=code)


_ALLOWED_TEXT = {
    "temperature": "a number in [0, 1] or an increasing list of such numbers",
    "speaker_names": 'a list of strings, e.g. ["Alice", "Bob"]',
    "known_speaker_names": 'a list of strings, e.g. ["Alice", "Bob"]',
    "known_speaker_references": "a list with one base64 audio clip (or data URI, or voice "
                                "embedding: a list of numbers) per known speaker name",
    "prompt": f"a string of 1 to {MAX_PROMPT_CHARS} characters",
    "language": "a Whisper language code or name, e.g. 'en' or 'french'",
}


def _allowed(name: str) -> str:
    if name in _ALLOWED_TEXT:
        return _ALLOWED_TEXT[name]
    f = InferenceConfig.model_fields[name]
    ann = f.annotation
    hints = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    args = getattr(ann, "__args__", ())
    base = next((a for a in (ann, *args) if a in hints), None)
    text = hints.get(base, "")
    literals = [x for a in args if getattr(a, "__origin__", None) is Literal for x in a.__args__]
    if base is bool and literals:
        return "true, false or " + " or ".join(repr(x) for x in literals)
    bounds = bounds_text(f)
    if bounds:
        text += " " + bounds
    if getattr(ann, "__origin__", None) is Literal:
        text = " or ".join(repr(a) for a in ann.__args__)
    for a in args:
        if getattr(a, "__origin__", None) is Literal:
            text = " or ".join(repr(x) for x in a.__args__)
    return text.strip()


def describe_validation_error(exc: ValidationError) -> str:
    """One readable sentence per problem, naming the parameter and what is allowed."""
    known = sorted(InferenceConfig.model_fields)
    messages: list[str] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        loc = err.get("loc", ())
        name = str(loc[0]) if loc else ""
        kind = err.get("type", "")
        if name in seen:  # a union reports once per member: one message per parameter
            continue
        seen.add(name)
        if kind == "extra_forbidden":
            import difflib

            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            messages.append(f"unknown parameter {name!r}{hint}; allowed parameters: {', '.join(known)}")
        elif not name:  # model-level rule
            messages.append(value_error_text(err.get("msg", "")))
        elif name in InferenceConfig.model_fields and kind != "value_error":
            messages.append(f"invalid value for {name!r}: {shown(err.get('input'))}; "
                            f"expected {_allowed(name)}")
        else:
            messages.append(f"invalid value for {name!r}: "
                            f"{value_error_text(err.get('msg', ''))}")
    return "; ".join(messages)


def _first_parameter(exc: ValidationError) -> Optional[str]:
    """The parameter the first problem is about (None for a rule across parameters)."""
    for err in exc.errors(include_url=False):
        loc = err.get("loc", ())
        return str(loc[0]) if loc else None
    return None
