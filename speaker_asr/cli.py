"""Command line for the handler.

    python -m speaker_asr transcribe FILE [--num-speakers N | --min-speakers N --max-speakers N]
                                  [--language xx] [--task transcribe|translate] [--assisted]
                                  [--prompt TEXT] [--word-timestamps] [--speaker-names A,B]
                                  [--known-speaker NAME=CLIP ...] [--speaker-embeddings]
                                  [--format FORMAT[,FORMAT...]] [--output PATH | --output-dir DIR]
    python -m speaker_asr serve [--host HOST] [--port PORT]

``transcribe`` runs the handler in this process (models from ASR_MODEL, DIARIZATION_MODEL, ...,
exactly as the endpoint reads them) on one audio file (``-`` reads standard input) and writes the
result in one of the endpoint's response formats (``formats.FORMATS``: json, verbose_json,
diarized_json, srt, vtt, rttm, txt). Text formats (srt, vtt, rttm, txt) are written as the text
itself (the response's ``content``), JSON formats as indented JSON. ``--output PATH`` writes a
file; ``--output-dir DIR`` (or ``--output`` naming a directory) writes ``<audio stem>.<ext>``
there, and takes several formats at once (``--format srt,vtt,json``: one transcription, each
format rendered from it). ``serve`` runs the HTTP server (see speaker_asr/serving/app.py and docs/serving.md).

Exit codes: 0 done; 2 bad arguments, unreadable file or a request the handler refuses (the
message is printed on stderr); 1 the models could not be loaded or another error.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

from speaker_asr.formats import FORMATS, TASKS

TEXT_FORMATS = "/".join(name for name, f in FORMATS.items() if f.is_text)
STDIN_STEM = "stdin"  # the file name stem for FILE = -


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be 1 or more")
    return value


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
        "transcribe", help="transcribe one audio file in-process and print the result",
        description="Transcribe FILE with the models named by ASR_MODEL, ASSISTANT_MODEL, "
                    "DIARIZATION_MODEL, HF_TOKEN, DEVICE, TORCH_DTYPE, QUANTIZATION, MAX_NEW_TOKENS.")
    t.add_argument("file", metavar="FILE", help="audio file (WAV, FLAC, MP3, Ogg, M4A, ...); - reads stdin")
    t.add_argument("--num-speakers", type=_positive_int, metavar="N", help="exact number of speakers")
    t.add_argument("--min-speakers", type=_positive_int, metavar="N", help="at least N speakers")
    t.add_argument("--max-speakers", type=_positive_int, metavar="N", help="at most N speakers")
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
                   help="any other request parameter (repeatable; values coerced like query strings)")
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
    t.add_argument("--verbose", "-v", action="store_true", help="log model loading on stderr")

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
    if args.param:
        from speaker_asr.serving.negotiation import coerce_value

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
                params[key] = coerce_value(value)
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


def output_name(stem: str, fmt: str, formats: list[str]) -> str:
    """``<stem>.<ext>``; when several requested formats share the extension (json,
    verbose_json, diarized_json) all but ``json`` itself become ``<stem>.<format>.<ext>``."""
    ext = FORMATS[fmt].extension
    if fmt != "json" and sum(FORMATS[f].extension == ext for f in formats) > 1:
        return f"{stem}.{fmt}.{ext}"
    return f"{stem}.{ext}"


def destinations(args: argparse.Namespace, formats: list[str]) -> dict[str, Optional[Path]]:
    """format -> the file to write (None: stdout). Raises ValueError for several formats
    without a directory to write them into."""
    directory: Optional[Path] = None
    if args.output_dir:
        directory = Path(args.output_dir)
    elif args.output and (Path(args.output).is_dir() or args.output.endswith(("/", os.sep))):
        directory = Path(args.output)
    if directory is None:
        if len(formats) > 1:
            raise ValueError(f"{len(formats)} formats ({', '.join(formats)}) need a directory to "
                             "write them into: add --output-dir DIR")
        return {formats[0]: Path(args.output) if args.output else None}
    stem = STDIN_STEM if args.file == "-" else (Path(args.file).stem or STDIN_STEM)
    return {fmt: directory / output_name(stem, fmt, formats) for fmt in formats}


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


def _write_stdout(text: str) -> None:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(text)
    else:
        buffer.write(text.encode("utf-8"))
        buffer.flush()


def _fail(message: str, code: int) -> int:
    from speaker_asr.serving.logging_setup import scrub

    print(f"error: {scrub(message)}", file=sys.stderr)
    return code


def transcribe(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        params = request_parameters(args)
        formats = requested_formats(args, params)
        targets = destinations(args, formats)
        check_parameters({**params, "response_format": formats[0]})
    except ValueError as exc:
        return _fail(str(exc), 2)
    try:
        audio = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        return _fail(f"cannot read {args.file}: {exc.strerror or exc}", 2)
    if not audio:
        return _fail(f"{args.file} is empty", 2)

    from speaker_asr.endpoint import EndpointHandler

    try:
        handler = EndpointHandler()
    except Exception as exc:
        return _fail(f"could not load the models: {type(exc).__name__}: {exc}", 1)
    try:
        if len(formats) == 1:  # the handler renders it, exactly as the endpoint does
            single = {**params, "response_format": formats[0]}
            results = {formats[0]: handler({"inputs": audio, "parameters": single})}
        else:  # transcribe once, render each format from the plain response
            names = params.pop("speaker_names", None)
            response = handler({"inputs": audio, "parameters": params})
            results = {fmt: render_result(response, fmt, names, params.get("task", "transcribe"))
                       for fmt in formats}
        texts = {fmt: output_text(result, fmt) for fmt, result in results.items()}
    except ValueError as exc:
        return _fail(str(exc), 2)

    warnings = next((r.get("warnings") for r in results.values() if isinstance(r, dict)), None)
    for warning in warnings or []:
        print(f"warning: {warning}", file=sys.stderr)
    for fmt, text in texts.items():
        path = targets[fmt]
        if path is None:
            _write_stdout(text)
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="")
        except OSError as exc:
            return _fail(f"cannot write {path}: {exc.strerror or exc}", 2)
    return 0


def serve(args: argparse.Namespace) -> int:
    from speaker_asr.serving import app as server

    try:
        server.serve(host=args.host, port=args.port)
    except server.ConfigError as exc:
        return _fail(str(exc), 2)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "transcribe":
        return transcribe(args)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
