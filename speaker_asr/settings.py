"""Every setting, typed, read from environment variables when it is needed (never at import):

* :class:`ModelSettings` -- what the models layer loads (speaker_asr/models.py), read when the
  handler is built;
* :class:`ServerSettings` -- our HTTP server's own settings (``HOST``, ``PORT``, ``API_KEY``,
  ``LOG_LEVEL``, ...), read when the server or the command line starts.

Nothing else reads the environment for a setting: the command line, the server and the models
take these. No torch import here.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from speaker_asr.error_text import bounds_text, shown, value_error_text
from speaker_asr.scheduling.policy import DEFAULT_MAX_WAIT_S, SchedulePolicy

DEFAULT_ASR_MODEL = "openai/whisper-large-v3"
DOCUMENTED_ASSISTANT_MODEL = "distil-whisper/distil-large-v3"
DEFAULT_DIARIZATION_MODEL = "pyannote/speaker-diarization-3.1"

# cosine similarity of voice embeddings at or above which a found speaker takes a known name
# (measured with the CAM++ pipeline on real and generated speech: docs/measurements.md)
DEFAULT_SPEAKER_MATCH_THRESHOLD = 0.6



class ModelSettings(BaseSettings):
    """Environment variables (case-insensitive). Every model setting takes a hub id or a local
    folder; for the diarization a folder holding ``config.yaml`` or the yaml file itself."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False, env_ignore_empty=False)

    asr_model: str = Field(DEFAULT_ASR_MODEL, description="Whisper checkpoint (hub id or folder)")
    assistant_model: Optional[str] = Field(
        None, description=f"draft model for speculative decoding, e.g. {DOCUMENTED_ASSISTANT_MODEL}")
    diarization_model: Optional[str] = Field(
        DEFAULT_DIARIZATION_MODEL, description="pyannote pipeline; empty disables diarization")
    hf_token: Optional[SecretStr] = Field(None, description="token for gated/private hub models")
    device: Optional[str] = Field(None, description="'cuda', 'cuda:1', 'cpu'; default: cuda if available")
    torch_dtype: Optional[Literal["float16", "bfloat16", "float32"]] = Field(
        None, description="default: float16 on GPU, float32 on CPU")
    quantization: Optional[Literal["int8"]] = Field(
        None, description="CPU only, opt-in: 'int8' runs Whisper (and the assistant) with int8 "
                          "weights, in the form this CPU runs fastest (asr/quantization.py): int8 "
                          "decoder weights in a bfloat16 model where the CPU has bfloat16 "
                          "instructions, dynamic int8 linear layers in a float32 model elsewhere; "
                          "faster, and like faster-whisper's int8 it changes the output")
    max_new_tokens: Optional[int] = Field(None, ge=1, le=444,
                                          description="cap on generated tokens per 30 s window")
    max_audio_seconds: float = Field(
        4 * 3600, gt=0, description="longer audio is rejected (checked from the header before "
                                    "decoding everything)")
    generation_speedups: bool = Field(
        True, description="Whisper speed fixes (speaker_asr/patches/, listed with what applied in GET "
                          "/health): output-preserving, and one pass per chunked window; false runs "
                          "transformers' stock code paths")
    diarization_speedups: bool = Field(
        True, description="pyannote speed fixes that keep its output (speaker_asr/patches/diarization.py): "
                          "no speaker embedding for a window's silent speaker slots; WeSpeaker ResNet "
                          "embeddings with the network once per window (on CPU in ONNX Runtime, one "
                          "window per batch); the clustering in linear time and memory past 45 minutes; "
                          "false runs pyannote's own code")
    diarization_embeddings: Literal["recipe", "approximate"] = Field(
        "recipe", description="recipe: every segmentation window's speakers embedded, as pyannote's 3.1 "
                              "recipe computes them. approximate (opt-in, CPU only, recordings over 5 "
                              "minutes): the speakers of every fifth window embedded, the others "
                              "pooled from the two around them, the clustering trained on the "
                              "embedded ones: about 3.5x faster diarization, measured against the "
                              "recipe in docs/measurements.md ('Diarization on CPU')")
    sentence_voices: bool = Field(
        True, description="check the diarization's speakers by the voices of the transcript's "
                          "sentences: a speaker whose sentences hold two clearly different voices, "
                          "neither of them another found speaker's, is split in two "
                          "(speaker_asr/attribution/sentence_voices.py); false keeps the "
                          "diarization's speakers as they are")
    speaker_match_threshold: float = Field(
        DEFAULT_SPEAKER_MATCH_THRESHOLD, ge=-1.0, le=1.0,
        description="default voice similarity (cosine) for naming a speaker after a reference clip")
    diarization_cuda_stream: bool = Field(
        False, description="on a GPU, run the diarization on a CUDA stream of its own beside the ASR "
                           "instead of sharing the default stream (bench/gpu_run.sh measures both)")
    diarization_telemetry: bool = Field(
        False, description="let pyannote.audio send its usage metrics (off: audio stays private)")
    warmup: bool = Field(
        True, description="after loading, decode and diarize 2 s of made-up audio once (plain, "
                          "and assisted when an assistant is loaded) so the first request does not "
                          "pay the libraries' lazy set-up (cuBLAS/cuDNN on a GPU); false starts "
                          "faster. Not counted by assisted='auto' or the metrics")
    schedule_file_order: Literal["least_served", "round_robin", "arrival"] = Field(
        "least_served", description="which file request's next unit of model work goes first "
                                    "(speaker_asr/scheduling/policy.py): least_served, the one with the "
                                    "least model time so far (a short file is not stuck behind a long "
                                    "one); round_robin, the one that ran longest ago; arrival, one whole "
                                    "request after another")
    schedule_max_wait_s: float = Field(
        DEFAULT_MAX_WAIT_S, gt=0, le=3600,
        description="seconds a file request's unit may wait before it goes ahead of partial decodes "
                    "and of the other files: no request starves")
    schedule_live_first: bool = Field(
        True, description="file work pauses at its next unit, on both lanes, while a live item's final "
                          "decode or its speakers wait or run (on a CPU the lanes share the cores)")

    @field_validator("asr_model")
    @classmethod
    def _asr_required(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("ASR_MODEL must name a Whisper model (hub id or local folder)")
        return v

    @field_validator("assistant_model", "diarization_model", "device", mode="before")
    @classmethod
    def _empty_is_none(cls, v):
        if isinstance(v, str) and not v.strip():
            return None
        return v.strip() if isinstance(v, str) else v

    @field_validator("quantization", mode="before")
    @classmethod
    def _no_quantization(cls, v):
        if isinstance(v, str) and v.strip().lower() in ("", "none", "false", "0"):
            return None
        return v.strip().lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _quantization_dtype(self) -> "ModelSettings":
        if self.quantization == "int8" and self.torch_dtype not in (None, "bfloat16", "float32"):
            raise ValueError(
                f"QUANTIZATION=int8 computes in bfloat16 or float32 (chosen from the CPU), but "
                f"TORCH_DTYPE={self.torch_dtype}: unset TORCH_DTYPE, or unset QUANTIZATION")
        return self

    @field_validator("hf_token", mode="before")
    @classmethod
    def _empty_token_is_none(cls, v):
        return None if isinstance(v, str) and not v.strip() else v

    def token(self) -> Optional[str]:
        return self.hf_token.get_secret_value() if self.hf_token else None

    def schedule_policy(self) -> SchedulePolicy:
        return SchedulePolicy(self.schedule_file_order, self.schedule_max_wait_s, self.schedule_live_first)


DEFAULT_MAX_BODY_BYTES = 100 * 1024 * 1024
# requests that may wait for the model beside the one it runs: each holds its body (up to
# MAX_BODY_BYTES, 100 MiB by default) in memory, so 8 bound the queued uploads to 800 MiB; and a
# ninth request would wait for eight transcriptions first (minutes for long audio), longer than
# most clients' timeouts
DEFAULT_MAX_QUEUE = 8
# requests the models work on at once (their units interleaved by the scheduler, so a short file
# is answered while a long one runs); each holds its decoded audio and the model's intermediate
# results in memory
DEFAULT_MAX_CONCURRENT = 4
# live sessions at once: each shares the ASR lane with the others and the file requests
# (a growing utterance is decoded again about once a second, and each decode of it takes a real
# part of a CPU's time: docs/measurements.md, "Figures behind the speed fixes' reasons"), so a few
# per CPU model
DEFAULT_MAX_SESSIONS = 4
DEFAULT_LIVE_MAX_SESSION_S = 3600  # OpenAI's Realtime sessions last 60 minutes at most
# one append's audio: 1 MiB is 21 s of 24 kHz PCM (clients send 20-100 ms); OpenAI allows 15 MiB
DEFAULT_LIVE_MAX_FRAME_BYTES = 1024 * 1024
# a session without audio holds one of MAX_SESSIONS' places: two minutes leave a push-to-talk
# client (manual commits) its pauses, and free the place of one that connected and went quiet
DEFAULT_LIVE_IDLE_TIMEOUT_S = 120.0
# a server event that cannot go out for this long (the socket's buffers full: the client reads
# nothing) ends the session; a client that reads at all takes an event within milliseconds
DEFAULT_LIVE_SEND_TIMEOUT_S = 10.0
# at SIGTERM, requests the model is on get this long to finish (live sessions are closed at once,
# with an error event): with the live closes' 2 s the process is gone within 10 s, before an
# orchestrator's own grace (Kubernetes: 30 s) sends SIGKILL
DEFAULT_SHUTDOWN_GRACE_S = 5.0
# what a live session reads ahead of its transcription while the model is behind (its queue of
# items full): reading answers the client's WebSocket pings, which go unanswered once the server
# stops reading (websockets' clients give up after 20 s). 4 MiB is 45 s of 24 kHz PCM in base64
# per session, past which the client's socket holds the rest (TCP backpressure)
DEFAULT_LIVE_READ_AHEAD_BYTES = 4 * 1024 * 1024
# a new live session is refused when the open ones' final decodes, measured, would hold the ASR
# lane more than this share of the time with one more like them: past it, queueing delays grow
# without bound as the utilisation nears 1
DEFAULT_LIVE_MAX_LOAD = 0.8
MIN_API_KEY_CHARS = 16
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
_API_KEY_CHARS = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: a header value


class ServerSettings(BaseSettings):
    """Our HTTP server's own settings (speaker_asr/serving/app.py), from environment variables
    (case-insensitive); the models' are :class:`ModelSettings`. :meth:`from_env` turns a bad
    value into one ValueError naming the variable and what it may be (never showing the key)."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False, env_ignore_empty=True,
                                      hide_input_in_errors=True)

    host: str = Field("0.0.0.0", description="interface to listen on")
    port: int = Field(8080, ge=0, le=65535, description="port to listen on")
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1,
                                description="largest request body in bytes (413 above)")
    max_queue: int = Field(DEFAULT_MAX_QUEUE, ge=0, le=10_000,
                           description="requests that may wait for the model beside the one it runs")
    max_concurrent: int = Field(DEFAULT_MAX_CONCURRENT, ge=1, le=64,
                                description="requests the models work on at once, their work interleaved "
                                            "unit by unit (SCHEDULE_FILE_ORDER); the others wait in the "
                                            "queue")
    api_key: Optional[SecretStr] = Field(
        None, description="when set, every route but /health and the /live page needs 'Authorization: "
                          "Bearer <key>'")
    max_sessions: int = Field(DEFAULT_MAX_SESSIONS, ge=0, le=1000,
                              description="live sessions (/v1/realtime) open at once; one more is "
                                          "refused with an error event")
    live_max_session_s: int = Field(DEFAULT_LIVE_MAX_SESSION_S, ge=1, le=7 * 24 * 3600,
                                    description="seconds a live session may last before it is closed "
                                                "(an error event with code session_expired)")
    live_max_frame_bytes: int = Field(DEFAULT_LIVE_MAX_FRAME_BYTES, ge=1024, le=15 * 1024 * 1024,
                                      description="largest audio of one input_audio_buffer.append, "
                                                  "in bytes (before base64)")
    live_idle_timeout_s: float = Field(DEFAULT_LIVE_IDLE_TIMEOUT_S, gt=0, le=7 * 24 * 3600,
                                       description="seconds a live session may go without audio while the "
                                                   "server waits for it before it is closed (an error "
                                                   "event with code session_idle_timeout)")
    live_send_timeout_s: float = Field(DEFAULT_LIVE_SEND_TIMEOUT_S, gt=0, le=3600,
                                       description="seconds a server event may wait to go out to a client "
                                                   "that reads nothing before its session is closed (code "
                                                   "client_not_reading)")
    live_read_ahead_bytes: int = Field(DEFAULT_LIVE_READ_AHEAD_BYTES, ge=0, le=256 * 1024 * 1024,
                                       description="bytes of messages a live session reads ahead while the "
                                                   "model is behind (its items' queue full) before the server "
                                                   "stops reading the client")
    live_max_load: float = Field(DEFAULT_LIVE_MAX_LOAD, gt=0, le=1,
                                 description="a new live session is refused (code server_at_capacity) when the "
                                             "open sessions' final decodes, measured while they ran (up to the "
                                             "last minute), "
                                             "would keep the speech model busy more than this share of the "
                                             "time with one more like them")
    shutdown_grace_s: float = Field(DEFAULT_SHUTDOWN_GRACE_S, ge=0, le=3600,
                                    description="seconds the requests in progress get to finish at SIGTERM "
                                                "(live sessions are closed at once, code server_shutting_down)")
    log_level: Literal[LOG_LEVELS] = Field("info", description="'debug' also logs health checks")

    @field_validator("host", mode="before")
    @classmethod
    def _host(cls, v):
        return v.strip() if isinstance(v, str) else v

    @field_validator("port", "max_body_bytes", "max_queue", "max_concurrent", "max_sessions", "live_max_session_s",
                     "live_max_frame_bytes", "live_read_ahead_bytes", mode="before")
    @classmethod
    def _whole_number(cls, v):
        # 100_000_000 reads as written; anything but digits is refused by the int field
        return v.strip().replace("_", "") if isinstance(v, str) else v

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, v):
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("api_key", mode="before")
    @classmethod
    def _api_key(cls, v):
        if isinstance(v, SecretStr):
            v = v.get_secret_value()
        if v is None or not isinstance(v, str) or not v.strip():
            return None
        key = v.strip()
        if not _API_KEY_CHARS.fullmatch(key):
            raise ValueError("API_KEY may hold only printable ASCII characters without spaces (it "
                             "travels in the Authorization header)")
        if len(key) < MIN_API_KEY_CHARS:
            raise ValueError(f"API_KEY is {len(key)} characters long; use at least "
                             f"{MIN_API_KEY_CHARS} (e.g. the output of: openssl rand -hex 32)")
        return SecretStr(key)

    def key(self) -> Optional[str]:
        return self.api_key.get_secret_value() if self.api_key else None

    @classmethod
    def from_env(cls, **overrides: Any) -> "ServerSettings":
        """The settings from the environment (``overrides`` win: ``--host``, ``--port``); a bad
        value raises ValueError naming the variable and what is allowed."""
        try:
            return cls(**overrides)
        except ValidationError as exc:
            problems = []
            for err in exc.errors(include_url=False):
                name = str(err["loc"][0]).upper() if err.get("loc") else "setting"
                text = value_error_text(err.get("msg", ""))
                if err.get("type") != "value_error":
                    value = "" if name == "API_KEY" else f"={shown(err.get('input'))}"
                    info = cls.model_fields.get(name.lower())
                    if name == "LOG_LEVEL":
                        allowed = f"use one of {', '.join(LOG_LEVELS)}"
                    elif info is not None and info.annotation is int:
                        allowed = f"use a whole number {bounds_text(info)}"
                    elif info is not None and info.annotation is float:
                        allowed = f"use a number of seconds {bounds_text(info)}"
                    else:
                        allowed = text
                    text = f"{name}{value} is not valid: {allowed}"
                problems.append(text)
            raise ValueError("; ".join(problems)) from None


class ClientSettings(BaseSettings):
    """What the command line sends to a server with ``--url`` when ``--token`` is not given: the
    Inference Endpoint's token (``HF_TOKEN``) or our server's key (``API_KEY``), from environment
    variables, never shown."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False, env_ignore_empty=True)

    hf_token: Optional[SecretStr] = None
    api_key: Optional[SecretStr] = None

    def tokens(self, endpoint_first: bool) -> list[tuple[str, str]]:
        """(variable, value) of each token that is set, HF_TOKEN first for an Inference Endpoint
        (``endpoint_first``), API_KEY first for any other server."""
        order = (("HF_TOKEN", self.hf_token), ("API_KEY", self.api_key))
        found = [(name, value.get_secret_value().strip()) for name, value in
                 (order if endpoint_first else order[::-1]) if value is not None]
        return [(name, value) for name, value in found if value]
