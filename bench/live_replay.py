"""Live transcription measured: recordings streamed at their own pace through the official openai
SDK's realtime client (``client.realtime.connect``) to ``/v1/realtime?intent=transcription`` with
server VAD, as a microphone would send them (20 ms frames of 24 kHz PCM, OpenAI's format), and
the same recordings through the file endpoint for comparison.

    # the real AMI meetings (../shared/real-meetings), whisper tiny.en and base, real time
    .venv/bin/python bench/live_replay.py --models tiny.en,base
    # any WAV files (or folders in the real-meetings layout), against a server already running
    .venv/bin/python bench/live_replay.py talk.wav --url http://127.0.0.1:8080 --key "$API_KEY"

Per model it starts ``python -m speaker_asr serve`` on a free loopback port with the real models
(``$REAL_MODELS_DIR``: the Whisper folder, the kit's offline pyannote pipeline, no assistant) and
the warm-up on, then per recording:

1. the live session: ``session.update`` (``server_vad`` with ``--threshold``, ``--prefix-ms``,
   ``--silence-ms``; ``return_word_timestamps``), the audio in frames of ``--frame-ms`` sent on a
   fixed schedule (``--speed`` 1 = real time), then ``speaker_asr.session.finish`` (our
   extension: the server commits what is open, finishes every item and closes); every server
   event is kept with the time it came;
2. the file endpoint (``POST /``, the whole recording, the same models), after the live session
   has ended, so the two never share the CPU.

What is measured (times on this machine's clock; an audio time is turned into a wall time by
when the frame that carries it was sent):

* **end -> completed**: from the end of an utterance (``speech_stopped``'s ``audio_end_ms``, the
  end of its last speech) to its ``completed`` event. It includes the ``--silence-ms`` the VAD
  waits before it may call the speech over; ``commit -> completed`` leaves that wait out.
  Utterances ended by the 30 s cap or the session's finish have no ``speech_stopped`` and are
  not in these figures.
* **speech_stopped -> completed**: from the ``speech_stopped`` event's arrival to its item's
  ``completed`` (an item cut where another person took over gets its ``speech_stopped`` once the
  hand-over is seen, about a second after the cut). **reference word said -> its item
  completed**: for each reference word, from the end of the word to the ``completed`` of the
  item it was said in (what a caption reader waits for each word's final text, whether its
  item was ended by a pause, a hand-over or the cap). **completed -> first segment**: the speaker
  lag, from an item's ``completed`` to its first ``segment``.
* **speech -> first delta**: from the speech's start (``audio_start_ms`` plus the prefix padding
  the VAD put before it) to the item's first ``delta`` event, whether it came from a partial
  decode while the person spoke or with the final decode; ``before its end`` counts the items
  whose first delta came before their ``speech_stopped``.
* **live recall of the file's words**: the share of the file endpoint's words the live
  transcript has (aligned as WER aligns them); ``--commit-every S`` sends a commit every S
  seconds wherever the speech is (a push-to-talk client), to show that no speech is lost.
* **WER / WDER**: the live transcript (the items' ``segment`` events, each word with its
  segment's speaker; an item without one: its ``completed`` text without a speaker) and the file
  endpoint's against the recording's reference words when it has them (``ref.words.json``, the
  real-meetings layout; scored as eval/evaluate.py scores, speaker_asr/testing/scoring.py), otherwise the live
  transcript against the file endpoint's (its text and speakers as the reference).

Output: one table per model and a pooled one on stdout, everything in
``$BENCH_RESULTS_DIR/live-replay-<time>.json`` (events with their times included).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

import common

from speaker_asr.testing.scoring import (HypToken, RefToken, normalize_text, normalize_word, ratio,
                                         wder_counts, wer_counts)

MEETINGS = common.ROOT.parent / "shared" / "real-meetings"
SEGMENT = "conversation.item.input_audio_transcription.segment"
COMPLETED = "conversation.item.input_audio_transcription.completed"
DELTA = "conversation.item.input_audio_transcription.delta"
FAILED = "conversation.item.input_audio_transcription.failed"
RATE = 24_000  # what the client sends: OpenAI's audio/pcm


@dataclass
class Recording:
    name: str
    path: Path
    audio: np.ndarray  # 16 kHz float32
    reference: Optional[list[RefToken]]  # from ref.words.json, else None
    words: Optional[list[dict]] = None  # the reference words ({start, end, speaker, word}), else None


@dataclass
class Replay:
    """One live session: the events with the time each came, and when each frame was sent."""

    events: list[tuple[float, dict]] = field(default_factory=list)
    frame_sent: list[float] = field(default_factory=list)  # wall time after frame k was sent
    frame_ms: float = 20.0
    started: float = 0.0
    ended: float = 0.0

    def sent_at(self, audio_ms: float) -> Optional[float]:
        """When the frame carrying the audio up to ``audio_ms`` had been sent."""
        if not self.frame_sent:
            return None
        k = min(len(self.frame_sent) - 1, max(0, math.ceil(audio_ms / self.frame_ms) - 1))
        return self.frame_sent[k]

    def of(self, kind: str) -> list[tuple[float, dict]]:
        return [(t, e) for t, e in self.events if e["type"] == kind]


# --------------------------------------------------------------------------- inputs


def read_recording(path: Path, max_seconds: Optional[float]) -> Recording:
    """A WAV file, or a folder in the real-meetings layout (``audio.wav`` + ``ref.words.json``);
    a WAV file's references are a ``<stem>.words.json`` beside it when there is one (the layout
    of eval/longform.py's recordings: ``text`` for ``word``)."""
    folder = path if path.is_dir() else None
    wav = folder / "audio.wav" if folder else path
    audio = common._read16k(wav)
    if max_seconds:
        audio = audio[:int(max_seconds * common.SR)]
    words_file = folder / "ref.words.json" if folder else wav.with_suffix(".words.json")
    words = None
    if words_file.exists():
        words = sorted(({"start": w["start"], "end": w["end"], "speaker": w["speaker"],
                         "word": w.get("word", w.get("text", ""))} for w in json.loads(words_file.read_text())),
                       key=lambda w: w["start"])
        if max_seconds:
            words = [w for w in words if w["start"] < max_seconds]
    name = folder.name if folder else wav.stem
    return Recording(name.split("_0000")[0], wav, audio, reference_tokens(words), words)


def reference_tokens(words: Optional[list[dict]]) -> Optional[list[RefToken]]:
    if words is None:
        return None
    return [RefToken(tok, w["speaker"], i, "middle") for i, w in enumerate(words)
            for tok in normalize_word(w["word"])]


def joined(recordings: list[Recording], gap_s: float = 1.0) -> Optional[Recording]:
    """The recordings with references one after another (``gap_s`` of silence between), as one
    long session in which people come back: the real meetings' speakers keep AMI's global ids,
    and several clips share people (EN2001a/e, EN2006a/b, EN2005a and EN2009b, EN2001b/d). The
    order interleaves the clips so that a returning speaker comes back after others spoke."""
    clips = [r for r in recordings if r.words is not None]
    if len(clips) < 2:
        return None
    order = clips[0::2] + clips[1::2]
    gap = np.zeros(int(gap_s * common.SR), np.float32)
    parts, words, t = [], [], 0.0
    for r in order:
        parts += [r.audio, gap]
        words += [dict(w, start=round(w["start"] + t, 3), end=round(w["end"] + t, 3)) for w in r.words]
        t += (len(r.audio) + len(gap)) / common.SR
    return Recording(f"joined ({len(order)} clips)", Path("joined"), np.concatenate(parts),
                     reference_tokens(words), words)


def inputs(args) -> list[Recording]:
    paths = [Path(p) for p in args.inputs] or sorted(p for p in Path(args.meetings_dir).iterdir()
                                                     if (p / "audio.wav").exists())
    recordings = [read_recording(p, args.max_seconds) for p in paths]
    if args.joined:
        long = joined(recordings)
        if long is None:
            raise SystemExit("--joined needs at least two recordings with references")
        recordings.append(long)
    return recordings


def pcm24k(audio16k: np.ndarray) -> bytes:
    from scipy.signal import resample_poly

    audio = resample_poly(audio16k.astype(np.float64), 3, 2)
    return (np.clip(audio, -1.0, 1.0) * 32767).round().astype("<i2").tobytes()


# --------------------------------------------------------------------------- the live session


async def replay(url: str, key: str, audio16k: np.ndarray, args) -> Replay:
    from openai import AsyncOpenAI

    ws = url.replace("http://", "ws://").replace("https://", "wss://")
    client = AsyncOpenAI(base_url=url + "/v1", api_key=key or "unused", websocket_base_url=ws + "/v1",
                         max_retries=0)
    pcm = pcm24k(audio16k)
    step = int(RATE * args.frame_ms / 1000) * 2  # bytes per frame
    out = Replay(frame_ms=args.frame_ms)
    commit_every = int(round(args.commit_every * 1000 / args.frame_ms)) if args.commit_every else 0  # frames
    async with client.realtime.connect(model="whisper", extra_query={"intent": "transcription"}) as conn:
        await conn.session.update(session={
            "type": "transcription",
            "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": RATE},
                "turn_detection": {"type": "server_vad", "threshold": args.threshold,
                                   "prefix_padding_ms": args.prefix_ms,
                                   "silence_duration_ms": args.silence_ms}}},
            "speaker_asr": {"return_word_timestamps": True}})
        async def receive():
            async for event in conn:  # until the server closes the session (after the finish)
                data = event.to_dict()
                out.events.append((time.perf_counter(), data))
                if data["type"] == "error":
                    print(f"  error event: {data['error'].get('message')}", file=sys.stderr)

        receiver = asyncio.ensure_future(receive())
        out.started = start = time.perf_counter()
        for k, i in enumerate(range(0, len(pcm), step)):
            due = start + k * args.frame_ms / 1000 / args.speed
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + step]).decode())
            out.frame_sent.append(time.perf_counter())
            if commit_every and (k + 1) % commit_every == 0:  # a push-to-talk client, wherever the speech is
                await conn.input_audio_buffer.commit()
            if receiver.done():
                break
        # our extension: commit what is open, finish every item (segments included), close
        await conn.send({"type": "speaker_asr.session.finish"})
        try:
            await asyncio.wait_for(receiver, args.drain_timeout)
        except asyncio.TimeoutError:
            print(f"  the session did not finish within {args.drain_timeout:g} s of the audio's end", file=sys.stderr)
        out.ended = time.perf_counter()
    return out


# --------------------------------------------------------------------------- measures


def live_tokens(out: Replay) -> list[HypToken]:
    """The live transcript as tokens: each item's segments (their speakers), in commit order; an
    item without a segment: its completed text, no speaker."""
    order = [e["item_id"] for _, e in out.of("input_audio_buffer.committed")]
    completed = {e["item_id"]: e["transcript"] for _, e in out.of(COMPLETED)}
    segments: dict[str, list[dict]] = {}
    for _, e in out.of(SEGMENT):
        segments.setdefault(e["item_id"], []).append(e)
    tokens = []
    for item in order:
        parts = [(s["text"], s["speaker"]) for s in segments.get(item, [])] or [(completed.get(item, ""), None)]
        for text, speaker in parts:
            tokens += [HypToken(t, speaker) for t in normalize_text(text)]
    return tokens


def file_tokens(result: dict) -> list[HypToken]:
    """The file endpoint's ``json`` answer as tokens: its chunks (segments split where the
    speaker changes), each token with its chunk's speaker."""
    return [HypToken(t, chunk.get("speaker")) for chunk in result.get("chunks", [])
            for t in normalize_text(chunk.get("text", ""))]


def as_reference(tokens: list[HypToken]) -> list[RefToken]:
    return [RefToken(t.text, t.speaker or "<none>", i, "middle") for i, t in enumerate(tokens)]


def timings(out: Replay, prefix_ms: int, words: Optional[list[dict]] = None) -> dict:
    """The latencies of one session (seconds), see the module's docstring, and per item: its
    audio, latencies, the speakers of its segments and, with reference ``words``, the reference
    speakers of the words said in it (by their midpoints)."""
    completed = {e["item_id"]: t for t, e in out.of(COMPLETED)}
    transcripts = {e["item_id"]: e.get("transcript") or "" for _, e in out.of(COMPLETED)}
    committed = {e["item_id"]: t for t, e in out.of("input_audio_buffer.committed")}
    stopped = {e["item_id"]: e["audio_end_ms"] for _, e in out.of("input_audio_buffer.speech_stopped")}
    stopped_at = {e["item_id"]: t for t, e in out.of("input_audio_buffer.speech_stopped")}
    started = {e["item_id"]: e["audio_start_ms"] for _, e in out.of("input_audio_buffer.speech_started")}
    first_delta: dict[str, float] = {}
    for t, e in out.of(DELTA):
        first_delta.setdefault(e["item_id"], t)
    first_segment: dict[str, float] = {}
    segment_speakers: dict[str, list[str]] = {}
    for t, e in out.of(SEGMENT):
        first_segment.setdefault(e["item_id"], t)
        segment_speakers.setdefault(e["item_id"], []).append(e.get("speaker"))
    starts = sorted(started.values())
    done_at = {e["item"]["id"]: t for t, e in out.of("conversation.item.done")}
    order = [e["item_id"] for _, e in out.of("input_audio_buffer.committed")]
    # how long each item waited at its commit for the one before it to be finished
    queued = {item: max(0.0, done_at.get(before, committed[item]) - committed[item])
              for before, item in zip(order, order[1:])}
    (end_to_completed, stopped_to_completed, commit_to_completed, speech_to_delta, speaker_lag,
     early, per_item, unlabelled, word_final) = [], [], [], [], [], 0, [], 0, []
    for item, t_done in completed.items():
        record = {"item_id": item, "audio_start_ms": started.get(item), "audio_end_ms": stopped.get(item),
                  "segment_speakers": segment_speakers.get(item, [])}
        per_item.append(record)
        if item in stopped:
            sent = out.sent_at(stopped[item])
            if sent is not None:
                end_to_completed.append(t_done - sent)
                record["end_to_completed"] = round(t_done - sent, 3)
            stopped_to_completed.append(t_done - stopped_at[item])
            record["stopped_to_completed"] = round(t_done - stopped_at[item], 3)
        if item in committed:
            commit_to_completed.append(t_done - committed[item])
            record["queued"] = round(queued.get(item, 0.0), 3)
            record["first"] = bool(order) and order[0] == item
        if item in first_segment:
            speaker_lag.append(first_segment[item] - t_done)
            record["speaker_lag"] = round(first_segment[item] - t_done, 3)
        elif transcripts.get(item, "").strip():
            unlabelled += 1
        if item in first_delta and item in started:
            onset = started[item] + prefix_ms if started[item] > 0 else started[item]
            sent = out.sent_at(onset)
            if sent is not None:
                speech_to_delta.append(first_delta[item] - sent)
            if item in stopped_at and first_delta[item] < stopped_at[item]:
                early += 1
        if words is not None and item in started:
            a = started[item] / 1000
            later = [x for x in starts if x > started[item]]
            b = stopped[item] / 1000 if item in stopped else (later[0] / 1000 if later else math.inf)
            inside = [w for w in words if a <= (w["start"] + w["end"]) / 2 < b]
            said = [w["speaker"] for w in inside]
            record["reference_speakers"] = {k: said.count(k) for k in dict.fromkeys(said)}
            for w in inside:  # each reference word: from its end to its item's final text
                sent = out.sent_at(w["end"] * 1000)
                if sent is not None:
                    word_final.append(t_done - sent)
    return {"end_to_completed": end_to_completed, "stopped_to_completed": stopped_to_completed,
            "word_to_completed": word_final,
            "commit_to_completed": commit_to_completed, "speaker_lag": speaker_lag,
            "unlabelled": unlabelled, "speech_to_first_delta": speech_to_delta, "first_delta_before_end": early,
            "items": len(committed), "completed": len(completed),
            "failed": len(out.of(FAILED)), "deltas": len(out.of(DELTA)), "segments": len(out.of(SEGMENT)),
            "speakers": sorted({e["speaker"] for _, e in out.of(SEGMENT)}),
            "mixed": mixed_items(per_item),
            "errors": [e["error"].get("message") for _, e in out.of("error")], "per_item": per_item}


def mixed_items(per_item: list[dict]) -> Optional[dict]:
    """How many items hold more than one reference speaker, counting a speaker with at least 2
    of the item's words (a backchannel of one word does not make an item mixed), and the share
    of the items' reference words said by someone other than the item's main speaker."""
    scored = [r["reference_speakers"] for r in per_item if r.get("reference_speakers")]
    if not scored:
        return None
    words = sum(sum(s.values()) for s in scored)
    others = sum(sum(s.values()) - max(s.values()) for s in scored)
    return {"items": len(scored), "mixed": sum(sum(n >= 2 for n in s.values()) >= 2 for s in scored),
            "words": words, "other_speakers_words": others}


def quantile(values: list[float], q: float) -> Optional[float]:
    return float(np.quantile(values, q)) if values else None


def score(reference: list[RefToken], hyp: list[HypToken]) -> dict:
    w = wer_counts([t.text for t in reference], [t.text for t in hyp])
    sp = wder_counts(reference, hyp)
    return {"wer_errors": w.errors, "ref_words": w.length, "spk_errors": sp.errors, "spk_scored": sp.scored,
            "hits": w.length - w.substitutions - w.deletions}


# --------------------------------------------------------------------------- one model


def post_file(url: str, key: str, audio16k: np.ndarray) -> dict:
    import requests

    headers = {"Content-Type": "audio/wav"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    session = requests.Session()
    session.trust_env = False
    r = session.post(url + "/", data=common.wav_bytes(audio16k), headers=headers, timeout=3600)
    r.raise_for_status()
    return r.json()


def run_model(url: str, key: str, recordings: list[Recording], args) -> list[dict]:
    rows = []
    for rec in recordings:
        print(f"  {rec.name}: live ({len(rec.audio) / common.SR:.1f} s at {args.speed:g}x)", file=sys.stderr)
        out = asyncio.run(replay(url, key, rec.audio, args))
        row = {"name": rec.name, "seconds": len(rec.audio) / common.SR, **timings(out, args.prefix_ms, rec.words),
               "live_text": " ".join(t.text for t in live_tokens(out))}
        if not args.no_file:
            print(f"  {rec.name}: file endpoint", file=sys.stderr)
            t0 = time.perf_counter()
            result = post_file(url, key, rec.audio)
            row["file_seconds"] = time.perf_counter() - t0
            hyp_file = file_tokens(result)
            row["file_text"] = " ".join(t.text for t in hyp_file)
            if rec.reference is not None:
                row["live"] = score(rec.reference, live_tokens(out))
                row["file"] = score(rec.reference, hyp_file)
            row["live_vs_file"] = score(as_reference(hyp_file), live_tokens(out))
        elif rec.reference is not None:
            row["live"] = score(rec.reference, live_tokens(out))
        row["events"] = [(round(t - out.started, 4), e) for t, e in out.events]
        rows.append(row)
    return rows


def start_server(model: str, args, log_dir: Path):
    from speaker_asr.testing.server import ServerProcess

    env = dict(os.environ)
    env.update(ASR_MODEL=str(common.MODELS[model]["hf"]) if model in common.MODELS else model,
               ASSISTANT_MODEL="", DIARIZATION_MODEL=str(common.PIPELINE), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false", TOKENIZERS_PARALLELISM="false",
               LOG_LEVEL="warning", MAX_SESSIONS="1")
    env.pop("API_KEY", None)
    env.update(dict(setting.split("=", 1) for setting in args.server_env))
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    server = ServerProcess(f"live-{Path(model).name}", env, log_dir,
                           root=Path(args.server_root).resolve() if args.server_root else None)
    loaded = server.wait_ready(timeout=900)
    print(f"{model}: server ready in {loaded:.1f} s", file=sys.stderr)
    return server


# --------------------------------------------------------------------------- tables


def fmt(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def pct(errors: int, total: int) -> str:
    r = ratio(errors, total)
    return "-" if r is None else f"{100 * r:.1f} % ({errors}/{total})"


def pooled(rows: list[dict], key: str) -> Optional[dict]:
    scored = [r[key] for r in rows if key in r]
    if not scored:
        return None
    return {k: sum(s[k] for s in scored) for k in ("wer_errors", "ref_words", "spk_errors", "spk_scored", "hits")}


def table(model: str, rows: list[dict]) -> list[str]:
    lines = [f"### {model}", "",
             "| file | audio s | items | deltas | segments | speakers | end -> completed p50 / max s "
             "| speech -> first delta p50 s | live WER | file WER | live WDER | file WDER | live vs file WER "
             "| live recall of the file's words |",
             "|---|---:|---:|---:|---:|---:|---|---:|---|---|---|---|---|---:|"]
    for r in rows:
        live, file, vs = r.get("live"), r.get("file"), r.get("live_vs_file")
        lines.append(
            f"| {r['name']} | {r['seconds']:.1f} | {r['completed']}/{r['items']} | {r['deltas']} | {r['segments']} "
            f"| {len(r['speakers'])} | {fmt(quantile(r['end_to_completed'], 0.5))} / "
            f"{fmt(max(r['end_to_completed'], default=None))} | {fmt(quantile(r['speech_to_first_delta'], 0.5))} "
            f"| {pct(live['wer_errors'], live['ref_words']) if live else '-'} "
            f"| {pct(file['wer_errors'], file['ref_words']) if file else '-'} "
            f"| {pct(live['spk_errors'], live['spk_scored']) if live else '-'} "
            f"| {pct(file['spk_errors'], file['spk_scored']) if file else '-'} "
            f"| {pct(vs['wer_errors'], vs['ref_words']) if vs else '-'} "
            f"| {fmt(ratio(vs['hits'], vs['ref_words'])) if vs else '-'} |")
    return lines


def summary(model: str, rows: list[dict]) -> dict:
    gather = lambda k: [x for r in rows for x in r[k]]  # noqa: E731
    mixed = [r["mixed"] for r in rows if r.get("mixed")]
    return {"model": model, "files": len(rows), "items": sum(r["items"] for r in rows),
            "completed": sum(r["completed"] for r in rows), "failed": sum(r["failed"] for r in rows),
            "end_to_completed": gather("end_to_completed"), "stopped_to_completed": gather("stopped_to_completed"),
            "word_to_completed": gather("word_to_completed"),
            "commit_to_completed": gather("commit_to_completed"), "speaker_lag": gather("speaker_lag"),
            "unlabelled": sum(r["unlabelled"] for r in rows),
            "speech_to_first_delta": gather("speech_to_first_delta"),
            "first_delta_before_end": sum(r["first_delta_before_end"] for r in rows),
            "mixed": {k: sum(m[k] for m in mixed) for k in ("items", "mixed", "words", "other_speakers_words")}
            if mixed else None,
            "first_items": [i["stopped_to_completed"] for r in rows for i in r["per_item"]
                            if i.get("first") and "stopped_to_completed" in i],
            "live": pooled(rows, "live"), "file": pooled(rows, "file"), "live_vs_file": pooled(rows, "live_vs_file")}


def spread(values: list[float]) -> str:
    return f"{fmt(quantile(values, 0.5))} / {fmt(quantile(values, 0.95))} / {fmt(max(values, default=None))}"


def summary_table(summaries: list[dict]) -> list[str]:
    lines = ["| model | files | items (failed) | end -> completed p50 / p95 / max s "
             "| speech_stopped -> completed p50 / p95 / max s | reference word said -> its item completed p50 / p95 / max s "
             "| completed -> first segment p50 / p95 / max s "
             "| items with text, no segment | items with 2+ reference speakers | speech -> first delta p50 / p95 s "
             "| live WER | file WER | live WDER | file WDER | live WDER / file WDER | live recall of the file's words |",
             "|---|---:|---|---|---|---|---|---:|---|---|---|---|---|---|---:|---:|"]
    for s in summaries:
        live, file, mixed, vs = s["live"], s["file"], s["mixed"], s["live_vs_file"]
        rel = None
        if live and file and ratio(file["spk_errors"], file["spk_scored"]):
            rel = ratio(live["spk_errors"], live["spk_scored"]) / ratio(file["spk_errors"], file["spk_scored"])
        s2d = s["speech_to_first_delta"]
        mixed_text = f"{mixed['mixed']}/{mixed['items']}" if mixed else "-"
        lines.append(
            f"| {s['model']} | {s['files']} | {s['completed']}/{s['items']} ({s['failed']}) "
            f"| {spread(s['end_to_completed'])} | {spread(s['stopped_to_completed'])} "
            f"| {spread(s['word_to_completed'])} | {spread(s['speaker_lag'])} "
            f"| {s['unlabelled']} | {mixed_text} "
            f"| {fmt(quantile(s2d, 0.5))} / {fmt(quantile(s2d, 0.95))} "
            f"| {pct(live['wer_errors'], live['ref_words']) if live else '-'} "
            f"| {pct(file['wer_errors'], file['ref_words']) if file else '-'} "
            f"| {pct(live['spk_errors'], live['spk_scored']) if live else '-'} "
            f"| {pct(file['spk_errors'], file['spk_scored']) if file else '-'} | {fmt(rel)} "
            f"| {fmt(ratio(vs['hits'], vs['ref_words'])) if vs else '-'} |")
    return lines


def slowest(rows: list[dict], count: int) -> list[str]:
    """The items slowest to complete (from ``speech_stopped``), with their audio and speaker lag."""
    items = sorted(((r["name"], i) for r in rows for i in r["per_item"] if "stopped_to_completed" in i),
                   key=lambda x: -x[1]["stopped_to_completed"])[:count]
    lines = ["| file | item audio (s) | speech_stopped -> completed s | of which waiting for the item before s "
             "| completed -> first segment s | segment speakers | reference speakers (words) |",
             "|---|---|---:|---:|---:|---|---|"]
    for name, i in items:
        a, b = i["audio_start_ms"], i["audio_end_ms"]
        where = f"{a / 1000:.1f}-{b / 1000:.1f}" if a is not None and b is not None else "-"
        where += " (first)" if i.get("first") else ""
        ref = ", ".join(f"{k} ({n})" for k, n in (i.get("reference_speakers") or {}).items()) or "-"
        lines.append(f"| {name} | {where} | {i['stopped_to_completed']:.2f} | {fmt(i.get('queued'))} "
                     f"| {fmt(i.get('speaker_lag'))} | {', '.join(dict.fromkeys(i['segment_speakers'])) or '-'} | {ref} |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="*", help="WAV files or real-meetings folders (default: every clip of --meetings-dir)")
    p.add_argument("--meetings-dir", default=str(MEETINGS))
    p.add_argument("--models", default="tiny.en,base", help="tiny.en, base (the real-models kit) or Whisper folders")
    p.add_argument("--url", help="a server already running (its models; --models is then only a label)")
    p.add_argument("--key", default=os.environ.get("API_KEY", ""), help="that server's API_KEY (default $API_KEY)")
    p.add_argument("--speed", type=float, default=1.0, help="1 = real time (the measurement); more for smoke runs")
    p.add_argument("--frame-ms", type=float, default=20.0)
    p.add_argument("--threshold", type=float, default=0.5)
    p.add_argument("--prefix-ms", type=int, default=300)
    p.add_argument("--silence-ms", type=int, default=500)
    p.add_argument("--max-seconds", type=float, help="only the first seconds of each recording")
    p.add_argument("--commit-every", type=float, metavar="S",
                   help="an input_audio_buffer.commit every S seconds of audio sent, wherever the speech is "
                        "(a push-to-talk client beside the server VAD)")
    p.add_argument("--drain-timeout", type=float, default=120.0,
                   help="seconds to wait after the audio's end for the last items")
    p.add_argument("--no-file", action="store_true", help="no file-endpoint comparison")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the server (default: torch's)")
    p.add_argument("--joined", action="store_true",
                   help="also the recordings with references joined into one long session (speakers return)")
    p.add_argument("--repeats", type=int, default=1, help="runs of every recording (the spread between runs)")
    p.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting for the server started here (e.g. QUANTIZATION=int8); repeatable")
    p.add_argument("--slowest", type=int, default=8, help="the slowest items listed per model")
    p.add_argument("--server-root", metavar="DIR",
                   help="start the server from this checkout (another revision's `git worktree`, to compare)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats is at least 1")
    for setting in args.server_env:
        if "=" not in setting:
            p.error(f"--server-env takes NAME=VALUE, got {setting!r}")
    common.setup_env()

    recordings = inputs(args)
    if not recordings:
        p.error("no recordings: give WAV files or a --meetings-dir with clips")
    models = [m for m in args.models.split(",") if m]
    machine = common.machine()
    print(f"# Live replay\n\nCPU: {machine['cpu_model']} ({machine['nproc']} cores; "
          f"{machine.get('cpu_capability', '?')}); load average before: {common.loadavg()}; "
          f"{len(recordings)} recordings, {sum(len(r.audio) for r in recordings) / common.SR:.0f} s, "
          f"{args.frame_ms:g} ms frames at {args.speed:g}x real time; server VAD threshold {args.threshold:g}, "
          f"prefix {args.prefix_ms} ms, silence {args.silence_ms} ms; {args.repeats} run(s)"
          + (f"; server settings {' '.join(args.server_env)}" if args.server_env else "")
          + (f"; server code from {args.server_root}" if args.server_root else "") + "\n")
    results, summaries, lines, slow = {}, [], [], []
    with tempfile.TemporaryDirectory() as logs:
        for model in models:
            server = None if args.url else start_server(model, args, Path(logs))
            runs = []
            try:
                for run in range(args.repeats):
                    runs.append(run_model(args.url or server.url, args.key if args.url else "", recordings, args))
            finally:
                if server is not None:
                    server.stop()
            results[model] = runs if args.repeats > 1 else runs[0]
            for k, rows in enumerate(runs):
                label = model if args.repeats == 1 else f"{model} run {k + 1}"
                summaries.append(summary(label, rows))
                lines += table(label, rows) + [""]
            if args.repeats > 1:
                summaries.append(summary(f"{model} all {args.repeats} runs", [r for rows in runs for r in rows]))
            slow += [f"### {model}", ""] + slowest([r for rows in runs for r in rows], args.slowest) + [""]
    firsts = [f"* {s['model']}: each session's first item, speech_stopped -> completed: "
              f"{', '.join(f'{x:.2f}' for x in s['first_items']) or '-'} s" for s in summaries]
    print("\n".join(["## Pooled", ""] + summary_table(summaries) + [""] + firsts + ["", "## Slowest items", ""] + slow
                    + ["## Per file", ""] + lines))
    print(f"load average after: {common.loadavg()}")
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    path = common.RESULTS / f"live-replay-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"machine": machine, "args": vars(args), "summaries": summaries,
                                "results": results}, indent=1, default=str))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
