"""Audio in, speakers out, alignment.

* :func:`preprocess_inputs` -- the request's ``inputs`` (base64 string, data URI or raw bytes) ->
  16 kHz mono float32, decoded once and shared by ASR and diarization.
* :func:`load_diarization_pipeline` / :func:`diarize` -- pyannote.audio 4.x, and 3.3.x (what the
  default Inference Endpoints image's torch 2.5 takes).
* :func:`build_response` -- ASR chunks + speaker turns -> the response object, through the pure
  :mod:`alignment` core.

torch and pyannote are imported inside the functions that need them, so the pre- and
post-processing can be used (and tested) without them.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from alignment import (Piece, SpeakerIndex, Turn, assign_speakers, attribute_words, exclusive_turns,
                       merge_by_speaker, resolve_times, split_segments, tidy_word_times)
from audio_decode import SAMPLE_RATE, decode_audio

logger = logging.getLogger(__name__)

_DATA_URI = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,",
                       re.IGNORECASE)
_B64_ALPHABET = re.compile(rb"^[A-Za-z0-9+/]*={0,2}$")

# repositories whose conditions must be accepted on the hub for each known pipeline
GATED_REPOS = {
    "pyannote/speaker-diarization-3.1": ["pyannote/speaker-diarization-3.1", "pyannote/segmentation-3.0"],
    "pyannote/speaker-diarization-3.0": ["pyannote/speaker-diarization-3.0", "pyannote/segmentation-3.0"],
    "pyannote/speaker-diarization-community-1": ["pyannote/speaker-diarization-community-1"],
}


def decode_base64(text: str) -> bytes:
    """Strict base64 (standard alphabet; whitespace and line breaks ignored; a
    ``data:audio/...;base64,`` prefix accepted). Raises ValueError saying what is wrong."""
    text = text.strip()
    match = _DATA_URI.match(text)
    if match:
        if not match.group("b64"):
            raise ValueError("'inputs' is a data URI without ';base64': send the audio base64-encoded")
        mime = (match.group("mime") or "").lower()
        if mime and not (mime.startswith("audio/") or mime.startswith("video/")
                         or mime == "application/octet-stream"):
            raise ValueError(f"'inputs' is a data URI of type {mime!r}; expected audio/*")
        text = text[match.end():]
    compact = re.sub(r"\s+", "", text).encode("ascii", "replace")
    if not compact:
        raise ValueError("'inputs' is empty: send the audio file's bytes as a base64 string")
    if not _B64_ALPHABET.match(compact) or len(compact) % 4 != 0:
        hint = " (URL-safe base64 is not accepted: use the standard alphabet with + and /)" \
            if (b"-" in compact or b"_" in compact) else ""
        raise ValueError(f"'inputs' is not valid base64{hint}: encode the audio file's bytes with "
                         "standard base64 (e.g. base64.b64encode(open(path, 'rb').read()).decode())")
    try:
        return base64.b64decode(compact, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"'inputs' is not valid base64 ({exc})") from None


def input_bytes(inputs: Any) -> bytes:
    """The audio file's bytes from ``data["inputs"]`` (base64 str, data URI, bytes)."""
    if isinstance(inputs, (bytes, bytearray, memoryview)):
        data = bytes(inputs)
        if not data:
            raise ValueError("'inputs' is empty: send an audio file")
        return data
    if isinstance(inputs, str):
        return decode_base64(inputs)
    if inputs is None:
        raise ValueError("missing 'inputs': send {\"inputs\": \"<base64 audio>\", \"parameters\": {...}} "
                         "or the audio file itself as the request body")
    raise ValueError(f"'inputs' must be a base64 string of an audio file (or raw bytes), got "
                     f"{type(inputs).__name__}")


def unwrap_json_body(data: dict) -> dict:
    """The request as sent, where a server handed a JSON body over as raw bytes.

    The Inference Endpoints toolkit passes any body whose Content-Type is ``audio/*`` on as
    ``{"inputs": <bytes>}``; huggingface_hub's ``InferenceClient`` sends its JSON body
    (``{"inputs": <base64>, "parameters": {...}}``, when given ``extra_body``) without a
    Content-Type of its own, so with ``headers={"Content-Type": "audio/..."}`` set for its raw
    uploads, that JSON arrives here as bytes. No audio format starts with ``{``: such bytes that
    parse as a JSON object with ``inputs`` are read as that request (query-string parameters, if
    any, win over the body's)."""
    inputs = data.get("inputs")
    if not isinstance(inputs, (bytes, bytearray)) or inputs[:1] != b"{":
        return data
    try:
        body = json.loads(bytes(inputs))
    except ValueError:
        return data
    if not isinstance(body, dict) or "inputs" not in body:
        return data
    parameters = body.get("parameters")
    if isinstance(parameters, dict) and isinstance(data.get("parameters"), dict):
        parameters = {**parameters, **data["parameters"]}
    elif data.get("parameters") is not None:
        parameters = data["parameters"]
    return {"inputs": body["inputs"], "parameters": parameters}


def preprocess_inputs(inputs: Any, max_duration_s: Optional[float] = None) -> np.ndarray:
    """``data["inputs"]`` -> 16 kHz mono float32 audio."""
    return decode_audio(input_bytes(inputs), max_duration_s=max_duration_s)


# --------------------------------------------------------------------------- diarization


def configure_pyannote_telemetry(enabled: bool) -> None:
    """pyannote.audio 4 sends usage metrics unless told not to. Set before the first import, and
    again through its API in case it was imported already."""
    os.environ["PYANNOTE_METRICS_ENABLED"] = "true" if enabled else "false"
    try:
        from pyannote.audio.telemetry import set_telemetry_metrics

        set_telemetry_metrics(enabled)
    except Exception:  # pyannote 3.x has no telemetry
        pass


def _local_pipeline_path(model: str) -> Optional[Path]:
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.yaml").is_file():
            raise RuntimeError(f"DIARIZATION_MODEL={model} is a folder without config.yaml")
        return path
    if path.is_file():
        return path
    if model.endswith((".yaml", ".yml")) or model.startswith((".", "/", "~")):
        raise RuntimeError(f"DIARIZATION_MODEL={model}: no such file or folder")
    return None


def pyannote_major() -> int:
    """The installed pyannote.audio's major version (3 on the default Endpoints image's torch 2.5,
    4 where torch >= 2.8)."""
    from pyannote.audio import __version__

    return int(str(__version__).split(".")[0])


def pyannote3_config(path: Path) -> str:
    """The pipeline file pyannote.audio 3.x loads for a local ``path``.

    3.x takes only a yaml file (a folder would be read as a hub id), resolves no ``$model/`` in it
    and knows no ``plda`` parameter (4.x's 3.1-recipe folders name one; the 3.1 recipe's clustering
    never reads it). A folder's ``config-pyannote3.yaml`` is used as it is; else its
    ``config.yaml`` (or the yaml file given), rewritten to a temporary file where it uses either
    4.x feature."""
    if path.is_dir():
        own = path / "config-pyannote3.yaml"
        if own.is_file():
            return str(own)
        path = path / "config.yaml"
    import tempfile

    import yaml

    config_file = path
    text = config_file.read_text()
    config = yaml.safe_load(text.replace("$model/", f"{path.parent.resolve()}/"))
    params = (config.get("pipeline") or {}).get("params") or {}
    if "$model/" not in text and "plda" not in params:
        return str(config_file)
    params.pop("plda", None)
    for name in ("segmentation", "embedding"):  # 4.x names a model's folder, 3.x its checkpoint
        if isinstance(params.get(name), str) and (Path(params[name]) / "pytorch_model.bin").is_file():
            params[name] = str(Path(params[name]) / "pytorch_model.bin")
    config.pop("dependencies", None)
    folder = Path(tempfile.mkdtemp(prefix="pyannote3-pipeline-"))
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return str(folder / "config.yaml")


def _gated_message(model: str, reason: str = "") -> str:
    repos = GATED_REPOS.get(model, [model])
    accept = ", ".join(f"https://hf.co/{r}" for r in repos)
    return (f"could not load the diarization pipeline {model!r}{': ' + reason if reason else ''}. "
            f"It is gated: accept its conditions on the hub ({accept}) with the account whose "
            "token you use, and set HF_TOKEN to a valid read token (or set DIARIZATION_MODEL to a "
            "local pipeline folder, or to an empty value to disable diarization)")


def load_diarization_pipeline(model: str, token: Optional[str], device=None, telemetry: bool = False,
                              speedups: bool = True):
    """pyannote ``Pipeline.from_pretrained`` for a hub id, a folder with config.yaml, or the yaml
    file; on ``device``, with the speed fixes of :mod:`diarization_speedups` unless ``speedups``
    is false. Fails with a message naming what to accept and set -- never the token."""
    configure_pyannote_telemetry(telemetry)
    from pyannote.audio import Pipeline

    local = _local_pipeline_path(model)
    source = str(local) if local else model
    if local is not None and pyannote_major() < 4:
        source = pyannote3_config(local)
    params = inspect.signature(Pipeline.from_pretrained).parameters
    auth = {"token": token} if "token" in params else {"use_auth_token": token}
    try:
        pipeline = Pipeline.from_pretrained(source, **auth)
    except Exception as exc:  # hub errors (gated, missing, offline) and bad local files
        reason = f"{type(exc).__name__}: {exc}"
        if token:
            reason = reason.replace(token, "<HF_TOKEN>")
        if local:
            raise RuntimeError(f"could not load the diarization pipeline from {source}: {reason}") from None
        raise RuntimeError(_gated_message(model, reason.splitlines()[0][:300])) from None
    if pipeline is None:  # pyannote returns None when a gated download is refused
        raise RuntimeError(_gated_message(model))
    if device is not None:
        import torch

        pipeline.to(torch.device(device))
    if speedups:
        from diarization_speedups import apply_speedups

        applied = apply_speedups(pipeline, device)
        logger.info("diarization speed fixes: %s", ", ".join(applied) or "none applied")
    return pipeline


@dataclass
class Diarization:
    turns: list[Turn] = field(default_factory=list)
    # pyannote 4's turns without overlapping speech, meant for aligning with a transcript
    exclusive_turns: Optional[list[Turn]] = None


def _annotation_turns(annotation) -> list[Turn]:
    return [Turn(float(seg.start), float(seg.end), str(label))
            for seg, _, label in annotation.itertracks(yield_label=True)]


def diarize(pipeline, audio: np.ndarray, num_speakers: Optional[int] = None,
            min_speakers: Optional[int] = None, max_speakers: Optional[int] = None) -> Diarization:
    """Run the pipeline on the in-memory waveform (no second decode, no resampling mismatch)."""
    import torch

    kwargs = {k: v for k, v in (("num_speakers", num_speakers), ("min_speakers", min_speakers),
                                ("max_speakers", max_speakers)) if v is not None}
    waveform = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None]
    with torch.inference_mode():
        output = pipeline({"waveform": waveform, "sample_rate": SAMPLE_RATE}, **kwargs)
    if hasattr(output, "speaker_diarization"):  # pyannote.audio 4.x DiarizeOutput
        exclusive = getattr(output, "exclusive_speaker_diarization", None)
        return Diarization(_annotation_turns(output.speaker_diarization),
                           _annotation_turns(exclusive) if exclusive is not None else None)
    # pyannote.audio 3.x: an Annotation, without an exclusive diarization: derived from its turns
    turns = _annotation_turns(output)
    return Diarization(turns, exclusive_turns(turns))


# --------------------------------------------------------------------------- response


def rename_speakers(turns: list[Turn]) -> list[Turn]:
    """Relabel speakers SPEAKER_00, SPEAKER_01, ... in order of first appearance."""
    mapping: dict[str, str] = {}
    for t in sorted(turns, key=lambda t: (t.start, t.end)):
        mapping.setdefault(t.speaker, f"SPEAKER_{len(mapping):02d}")
    return [Turn(t.start, t.end, mapping[t.speaker]) for t in turns]


def _r(x: float) -> float:
    return round(float(x), 3)


def _word_dict(w: Piece, with_speaker: bool) -> dict:
    d = {"word": w.text, "start": _r(w.start), "end": _r(w.end)}
    if with_speaker:
        d["speaker"] = w.speaker
    return d


def build_response(text: str, segments: list[tuple[str, Optional[float], Optional[float]]],
                   turns: Optional[list[Turn]], duration: float, language: Optional[str],
                   words: Optional[list[tuple[str, Optional[float], Optional[float]]]] = None,
                   return_words: bool = False, extra: Optional[dict] = None) -> dict:
    """The response object.

    ``turns=None`` means diarization is off: chunks carry no speaker and ``speakers`` is empty.
    With ``words`` (Whisper's word timestamps) every word gets a speaker and chunks are Whisper's
    segments split wherever the speaker changes, timed by their words; without, each segment
    takes the speaker it overlaps most. Every piece of text is kept; missing times are filled in
    and clamped to the audio.
    """
    diarized = turns is not None
    index = SpeakerIndex(turns or [])
    if words is not None:
        spans = resolve_times([(s, e) for _, s, e in words], duration)
        pieces = tidy_word_times([Piece(t, s, e) for (t, _, _), (s, e) in zip(words, spans)])
        if diarized:
            pieces = attribute_words(pieces, index, tidy=False)
        groups = [g for g in split_segments([t for t, _, _ in segments], pieces) if g.words]
        chunks = []
        for g in groups:
            chunk = {"text": g.text, "timestamp": [_r(g.start), _r(g.end)]}
            if diarized:
                chunk["speaker"] = g.speaker
            if return_words:
                chunk["words"] = [_word_dict(w, diarized) for w in g.words]
            chunks.append(chunk)
        merged_input = [Piece(c["text"], *c["timestamp"], c.get("speaker")) for c in chunks]
    else:
        spans = resolve_times([(s, e) for _, s, e in segments], duration)
        pieces = [Piece(t, s, e) for (t, _, _), (s, e) in zip(segments, spans)]
        if diarized:
            pieces = assign_speakers(pieces, index)
        chunks = []
        for p in pieces:
            chunk = {"text": p.text, "timestamp": [_r(p.start), _r(p.end)]}
            if diarized:
                chunk["speaker"] = p.speaker
            chunks.append(chunk)
        merged_input = pieces
    response: dict[str, Any] = {"text": text, "chunks": chunks}
    response["speakers"] = [
        {"speaker": p.speaker, "text": p.text.strip(), "timestamp": [_r(p.start), _r(p.end)]}
        for p in merge_by_speaker(merged_input)] if diarized else []
    response["language"] = language
    response["duration"] = _r(duration)
    response["alignment"] = "word" if words is not None else "segment"
    if extra:
        response.update(extra)
    return response
