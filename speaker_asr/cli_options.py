"""The command line's vocabulary: the ``transcribe`` and ``serve`` options (:func:`build_parser`)
and the one mapping from them to the request's parameters (:func:`request_parameters`,
:func:`requested_formats`), checked before anything loads (:func:`check_parameters`). The run
itself is speaker_asr/cli.py's."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any, Callable

from speaker_asr.formats import FORMATS, TASKS

TEXT_FORMATS = "/".join(name for name, f in FORMATS.items() if f.is_text)
STDIN_STEM = "stdin"  # the file name stem for FILE = -
DEFAULT_CONCURRENCY = 2
DEFAULT_MAX_WAIT_S = 600.0
DEFAULT_REQUEST_TIMEOUT_S = 3600.0
REMOTE_ONLY = ("token", "concurrency", "body", "max_wait", "request_timeout")
RAY_ONLY = ("ray_actors", "ray_gpus_per_actor", "ray_cpus_per_actor", "ray_retries")


def _number(kind: type, allowed: Callable[[Any], bool], rule: str) -> Callable[[str], Any]:
    """An option's type: the text read as ``kind`` (int or float) and refused, saying ``rule``,
    unless ``allowed``."""
    noun = "an integer" if kind is int else "a number"

    def read(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not allowed(value):
            # an integer as read, a number as given (its float would print otherwise: 1e-05)
            raise argparse.ArgumentTypeError(f"{value if kind is int else text} {rule}")
        return value

    return read


_positive_int = _number(int, lambda value: value >= 1, "must be 1 or more")
_positive_float = _number(float, lambda value: 0 < value < float("inf"),
                          "must be a number of seconds above 0")
# GPUs or CPUs per actor: fractions allowed (two actors sharing a GPU: 0.5)
_resource = _number(float, lambda value: 0 <= value < float("inf"),
                    "must be 0 or more (0.5: two actors share one)")
_count = _number(int, lambda value: value >= 0, "must be 0 or more")


def _format_list(text: str) -> list[str]:
    """``srt`` or ``srt,vtt`` -> the formats, each one of formats.FORMATS."""
    names = [part.strip().lower() for part in text.split(",")]
    for name in names:
        if name not in FORMATS:
            raise argparse.ArgumentTypeError(f"unknown format {name!r}: use one of "
                                             f"{', '.join(FORMATS)} (comma-separated for several)")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m speaker_asr", description="Speaker-attributed speech recognition: transcribe a "
        "file in-process or serve the Inference Endpoints HTTP contract.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = commands.add_parser(
        "transcribe", help="transcribe audio files or folders in-process (or with --url) and write the result",
        description="Transcribe FILE with the models named by ASR_MODEL, ASSISTANT_MODEL, "
                    "DIARIZATION_MODEL, HF_TOKEN, DEVICE, TORCH_DTYPE, QUANTIZATION, MAX_NEW_TOKENS "
                    "(loaded once), or send it to a server with --url. Several files or folders "
                    "make a batch run into --output-dir: resumable, with progress and a summary.")
    t.add_argument("file", nargs="+", metavar="FILE",
                   help="audio file (WAV, FLAC, MP3, Ogg, M4A, ...; - reads stdin), or several, or "
                        "folders: their files with an audio extension are transcribed")
    t.add_argument("--num-speakers", type=_positive_int, metavar="N", help="exact number of speakers")
    t.add_argument("--min-speakers", type=_positive_int, metavar="N", help="at least N speakers")
    t.add_argument("--max-speakers", type=_positive_int, metavar="N", help="at most N speakers")
    t.add_argument("--multichannel", action="store_true",
                   help="each channel is one speaker (a stereo call, a track per person): each "
                        "channel transcribed on its own, a word heard on several kept where it is "
                        "loudest, the speakers CHANNEL_0, CHANNEL_1, ... (request multichannel)")
    t.add_argument("--diarize-channels", action="store_true",
                   help="with --multichannel: also find the speakers within each channel "
                        "(request diarize_channels)")
    t.add_argument("--language", metavar="xx", help="Whisper language code or name (default: detect)")
    t.add_argument("--task", choices=TASKS, help=f"default: {TASKS[0]}")
    t.add_argument("--assisted", action="store_true",
                   help="speculative decoding with ASSISTANT_MODEL")
    t.add_argument("--batch-size", type=_positive_int, metavar="N", help="30 s windows decoded at once")
    t.add_argument("--prompt", metavar="TEXT",
                   help="initial prompt: vocabulary, names, spelling hints")
    t.add_argument("--word-timestamps", action="store_true",
                   help="include each chunk's words with times (request return_word_timestamps)")
    t.add_argument("--speaker-names", action="append", default=[], metavar="NAME[,NAME...]",
                   help="names for the speakers in order of first appearance (comma-separated "
                        "and/or repeated: --speaker-names Alice,Bob)")
    t.add_argument("--known-speaker", dest="known_speakers", action="append", default=[],
                   metavar="NAME=CLIP",
                   help="a person who may speak and an audio clip of their voice alone (2-30 s; "
                        "repeatable): the speaker whose voice matches is labelled NAME")
    t.add_argument("--speaker-match-threshold", type=float, metavar="X",
                   help="voice similarity (cosine, -1..1) a speaker needs to take a known name "
                        "(default: SPEAKER_MATCH_THRESHOLD)")
    t.add_argument("--speaker-embeddings", action="store_true",
                   help="include each speaker's voice embedding in JSON output (request "
                        "return_speaker_embeddings), to match speakers across files")
    t.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="any other request parameter (repeatable; each value read by the parameter's type, as the server reads a query string)")
    t.add_argument("--format", "-f", dest="formats", action="append", type=_format_list,
                   metavar="FORMAT",
                   help=f"response format, one of {', '.join(FORMATS)} (default json). "
                        f"{TEXT_FORMATS} are written as text (txt: one 'SPEAKER_00: text' line per "
                        "speaker turn), the others as JSON. Several (comma-separated or repeated) "
                        "need --output-dir")
    where = t.add_mutually_exclusive_group()
    where.add_argument("--output", "-o", metavar="PATH",
                       help="write the result to this file instead of stdout; an existing "
                            "directory (or PATH ending in /) means --output-dir PATH")
    where.add_argument("--output-dir", "-d", metavar="DIR",
                       help="write <audio stem>.<ext> into DIR (created if missing); ext: "
                            f"{', '.join(sorted({f.extension for f in FORMATS.values()}))}")
    t.add_argument("--verbose", "-v", action="store_true",
                   help="log model loading, retries and the libraries' own warnings on stderr")
    many = t.add_argument_group("many files (several FILEs or a folder; needs --output-dir)")
    many.add_argument("--recursive", "-r", action="store_true",
                      help="search the folders' subfolders too (their outputs keep the subfolders)")
    many.add_argument("--overwrite", action="store_true",
                      help="transcribe again what is done (by default a recording whose outputs "
                           "all exist is skipped: a rerun resumes)")
    many.add_argument("--manifest", metavar="FILE",
                      help="write one JSON line per recording: path, status (done, skipped, failed, "
                           "not_attempted), outputs, duration, seconds, error")
    remote = t.add_argument_group("remote (--url: our server or an Inference Endpoint)")
    remote.add_argument("--url", metavar="URL",
                        help="send the recordings to this endpoint instead of loading the models "
                             "here (e.g. http://127.0.0.1:8080 or https://xyz.endpoints.huggingface.cloud)")
    remote.add_argument("--token", metavar="TOKEN",
                        help="bearer token for --url (default: $HF_TOKEN, else $API_KEY); prefer "
                             "the environment: a command line is visible to other users")
    remote.add_argument("--concurrency", "-j", type=_positive_int, metavar="N",
                        help=f"recordings in flight at once (default {DEFAULT_CONCURRENCY}; about "
                             "twice the endpoint's replicas keeps each one busy)")
    remote.add_argument("--body", choices=("json", "raw"),
                        help="json: base64 JSON (default, every container takes it); raw: the file's "
                             "bytes with its audio Content-Type and the parameters in the query string "
                             "(a third smaller)")
    remote.add_argument("--max-wait", type=_positive_float, metavar="SECONDS",
                        help=f"how long one recording keeps retrying 429/502/503/504 and connection "
                             f"errors (a replica starting, scale-to-zero) before it gives up "
                             f"(default {DEFAULT_MAX_WAIT_S:g})")
    remote.add_argument("--request-timeout", type=_positive_float, metavar="SECONDS",
                        help=f"how long to wait for an answer once a recording is sent (default "
                             f"{DEFAULT_REQUEST_TIMEOUT_S:g}); not retried")
    ray = t.add_argument_group("on a Ray cluster (--ray: an actor pool, one model load per actor; "
                               "docs/ray.md)")
    ray.add_argument("--ray", metavar="ADDRESS",
                     help="transcribe on a Ray cluster: auto (the one running here or $RAY_ADDRESS), "
                          "local (one started in this process), HOST:PORT of its head, or "
                          "ray://HOST:PORT; the files must be readable by its workers (a shared "
                          "path, or an s3://, gs://, ... URI); the outputs are written here")
    ray.add_argument("--ray-actors", type=_positive_int, metavar="N",
                     help="actors, each with the models loaded once (default: one per GPU where the "
                          "cluster has GPUs, else one per node)")
    ray.add_argument("--ray-gpus-per-actor", type=_resource, metavar="G",
                     help="GPUs each actor takes (default 1 where the cluster has GPUs, else 0; "
                          "0.5 puts two actors on a GPU)")
    ray.add_argument("--ray-cpus-per-actor", type=_resource, metavar="C",
                     help="CPUs each actor takes, and its torch threads (default 1 beside a GPU, "
                          "else the cluster's CPUs shared out)")
    ray.add_argument("--ray-retries", type=_count, metavar="N",
                     help="times a recording is tried again on a new actor after the one "
                          "transcribing it died (killed, out of memory); default 2")

    s = commands.add_parser("serve", help="run the HTTP server",
                            description="Serve POST / and /predict, GET /health and GET /metrics. "
                                        "Environment: HOST, PORT, MAX_BODY_BYTES, LOG_LEVEL and the "
                                        "model settings.")
    s.add_argument("--host", help="interface to listen on (default: $HOST or 0.0.0.0)")
    s.add_argument("--port", type=int, help="port (default: $PORT or 8080)")
    return parser


def _split_names(values: list[str]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",")]


def request_parameters(args: argparse.Namespace) -> dict[str, Any]:
    """The request parameters the options spell, ``response_format`` left out (see
    :func:`requested_formats`); ``speaker_names`` as a list when given."""
    params: dict[str, Any] = {}
    for name in ("num_speakers", "min_speakers", "max_speakers", "language", "task", "batch_size",
                 "prompt"):
        value = getattr(args, name, None)
        if value is not None:
            params[name] = value
    if args.assisted:
        params["assisted"] = True
    if getattr(args, "word_timestamps", False):
        params["return_word_timestamps"] = True
    for name in ("multichannel", "diarize_channels"):
        if getattr(args, name, False):
            params[name] = True
    if args.param:
        from speaker_asr.text_parameters import parameters_from_text

        texts: list[tuple[str, str]] = []  # read by each parameter's declared type, as the server does
        for item in args.param:
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ValueError(f"--param {item!r}: use KEY=VALUE, e.g. --param chunk_length_s=20")
            if key == "speaker_names":  # a query-string value: a name or comma-separated names
                params.setdefault("speaker_names", []).extend(_split_names([value]))
            elif key == "response_format":
                params[key] = value.strip().lower()
            else:
                texts.append((key, value.strip()))
        params.update(parameters_from_text(texts))  # RequestError: a ValueError
    names = _split_names(getattr(args, "speaker_names", None) or [])
    if names:
        params.setdefault("speaker_names", []).extend(names)
    for item in getattr(args, "known_speakers", None) or []:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"--known-speaker {item!r}: use NAME=CLIP, e.g. --known-speaker "
                             "Alice=alice.wav")
        try:
            clip = Path(path.strip()).read_bytes()
        except OSError as exc:
            raise ValueError(f"--known-speaker {name.strip()}: cannot read {path.strip()}: "
                             f"{exc.strerror or exc}") from None
        params.setdefault("known_speaker_names", []).append(name.strip())
        params.setdefault("known_speaker_references", []).append(base64.b64encode(clip).decode("ascii"))
    if getattr(args, "speaker_match_threshold", None) is not None:
        params["speaker_match_threshold"] = args.speaker_match_threshold
    if getattr(args, "speaker_embeddings", False):
        params["return_speaker_embeddings"] = True
    return params


def requested_formats(args: argparse.Namespace, params: dict[str, Any]) -> list[str]:
    """The formats to write, without repeats; pops ``response_format`` (``--param``) from params:
    it is another way to say ``--format``."""
    formats: list[str] = []
    for group in getattr(args, "formats", None) or []:
        formats.extend(f for f in group if f not in formats)
    legacy = params.pop("response_format", None)
    if legacy is not None:
        if formats and formats != [legacy]:
            raise ValueError(f"--param response_format={legacy} and --format {','.join(formats)} "
                             "disagree: give the format once, with --format")
        if not formats:
            if legacy not in FORMATS:
                raise ValueError(f"unknown format {legacy!r}: use one of {', '.join(FORMATS)}")
            formats = [legacy]
    return formats or ["json"]


def check_parameters(params: dict[str, Any]) -> None:
    """Refuse what is wrong whatever the model (unknown names, ranges, language codes) before
    spending time on loading; what depends on the model is checked by the handler."""
    from speaker_asr.config import InferenceConfig, ModelCapabilities

    InferenceConfig.from_request(params, ModelCapabilities(has_assistant=True))
