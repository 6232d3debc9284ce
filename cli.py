"""Command line for the handler.

    python -m cli transcribe FILE [--num-speakers N | --min-speakers N --max-speakers N]
                                  [--language xx] [--task transcribe|translate] [--assisted]
                                  [--format json|txt] [--output PATH]
    python -m cli serve [--host HOST] [--port PORT]

``transcribe`` runs the handler in this process (models from ASR_MODEL, DIARIZATION_MODEL, ...,
exactly as the endpoint reads them) on one audio file (``-`` reads standard input) and prints the
response. ``serve`` runs the HTTP server (see server.py and docs/serving.md).

Exit codes: 0 done; 2 bad arguments, unreadable file or a request the handler refuses (the
message is printed on stderr); 1 the models could not be loaded or another error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Optional


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be 1 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cli", description="Speaker-attributed speech recognition: transcribe a "
        "file in-process or serve the Inference Endpoints HTTP contract.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = commands.add_parser(
        "transcribe", help="transcribe one audio file in-process and print the result",
        description="Transcribe FILE with the models named by ASR_MODEL, ASSISTANT_MODEL, "
                    "DIARIZATION_MODEL, HF_TOKEN, DEVICE, TORCH_DTYPE, MAX_NEW_TOKENS.")
    t.add_argument("file", metavar="FILE", help="audio file (WAV, FLAC, MP3, Ogg, M4A, ...); - reads stdin")
    t.add_argument("--num-speakers", type=_positive_int, metavar="N", help="exact number of speakers")
    t.add_argument("--min-speakers", type=_positive_int, metavar="N", help="at least N speakers")
    t.add_argument("--max-speakers", type=_positive_int, metavar="N", help="at most N speakers")
    t.add_argument("--language", metavar="xx", help="Whisper language code or name (default: detect)")
    t.add_argument("--task", choices=("transcribe", "translate"), help="default: transcribe")
    t.add_argument("--assisted", action="store_true",
                   help="speculative decoding with ASSISTANT_MODEL")
    t.add_argument("--batch-size", type=_positive_int, metavar="N", help="30 s windows decoded at once")
    t.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="any other request parameter (repeatable; values coerced like query strings)")
    t.add_argument("--format", choices=("json", "txt"), default="json",
                   help="json: the endpoint's response; txt: one 'SPEAKER_00: text' line per turn "
                        "(or the subtitles/text of --param response_format=srt|vtt|txt|rttm)")
    t.add_argument("--output", "-o", metavar="PATH", help="write the result here instead of stdout")
    t.add_argument("--verbose", "-v", action="store_true", help="log model loading on stderr")

    s = commands.add_parser("serve", help="run the HTTP server",
                            description="Serve POST / and /predict, GET /health and GET /metrics. "
                                        "Environment: HOST, PORT, MAX_BODY_BYTES, LOG_LEVEL and the "
                                        "model settings.")
    s.add_argument("--host", help="interface to listen on (default: $HOST or 0.0.0.0)")
    s.add_argument("--port", type=int, help="port (default: $PORT or 8080)")
    return parser


def request_parameters(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in ("num_speakers", "min_speakers", "max_speakers", "language", "task", "batch_size"):
        value = getattr(args, name)
        if value is not None:
            params[name] = value
    if args.assisted:
        params["assisted"] = True
    if args.param:
        from server import coerce_value

        for item in args.param:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"--param {item!r}: use KEY=VALUE, e.g. --param chunk_length_s=20")
            params[key.strip()] = coerce_value(value)
    return params


def check_parameters(params: dict[str, Any]) -> None:
    """Refuse what is wrong whatever the model (unknown names, ranges, language codes) before
    spending time on loading; what depends on the model is checked by the handler."""
    from config import InferenceConfig, ModelCapabilities

    InferenceConfig.from_request(params, ModelCapabilities(has_assistant=True))


def format_text(result: dict[str, Any]) -> str:
    if isinstance(result.get("content"), str) and "format" in result:  # response_format=srt, ...
        return result["content"].rstrip("\n")
    speakers = result.get("speakers") or []
    if speakers:
        return "\n".join(f"{turn.get('speaker')}: {turn.get('text', '').strip()}" for turn in speakers)
    return (result.get("text") or "").strip()


def _fail(message: str, code: int) -> int:
    from server import scrub

    print(f"error: {scrub(message)}", file=sys.stderr)
    return code


def transcribe(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        params = request_parameters(args)
        check_parameters(params)
    except ValueError as exc:
        return _fail(str(exc), 2)
    try:
        audio = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        return _fail(f"cannot read {args.file}: {exc.strerror or exc}", 2)
    if not audio:
        return _fail(f"{args.file} is empty", 2)

    from handler import EndpointHandler

    try:
        handler = EndpointHandler()
    except Exception as exc:
        return _fail(f"could not load the models: {type(exc).__name__}: {exc}", 1)
    try:
        result = handler({"inputs": audio, "parameters": params})
    except ValueError as exc:
        return _fail(str(exc), 2)

    text = (json.dumps(result, ensure_ascii=False, indent=2) if args.format == "json"
            else format_text(result))
    if args.output:
        try:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            return _fail(f"cannot write {args.output}: {exc.strerror or exc}", 2)
    else:
        print(text)
    return 0


def serve(args: argparse.Namespace) -> int:
    import server

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
