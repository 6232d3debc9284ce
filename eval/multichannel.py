#!/usr/bin/env python
"""Channels as speakers on real meetings: ``multichannel=true`` against the default pipeline on the
same audio downmixed.

Each real meeting clip (``--meetings-dir``, ../shared/real-meetings' layout: ``audio.wav`` and
AMI's word-level ``ref.words.json``) with two or more speakers becomes a recording with one
channel per person: on channel k, the stretches where person k speaks (their words' reference
times, padded by ``--pad`` seconds, faded in and out over 20 ms) are heard at full level and the
rest of the meeting bleeds in at ``--bleed-db`` (default -20 dB); a pad never takes another
person's word. AMI's clips are the sum of the
close-talking microphones, so where two people talk at once they cannot be pulled apart: the
stretches where one person's word overlaps another's are cut out (silence on every channel) and
those words left out of the references of both modes (the table counts them). The downmix is the
mean of the channels.

For each clip, the endpoint's own handler (in-process, the kit's models) transcribes:

* ``multichannel``: the multichannel file with ``multichannel=true`` (the channels are the
  speakers);
* ``downmixed``: the downmix with the defaults (diarization finds the speakers, their number not
  given).

and each is scored against the reference words: WER, and WDER (speaker errors among the words
aligned to the reference, speakers mapped one-to-one as the evaluation does). Pooled over the
clips, with the words they rest on:

    .venv/bin/python eval/multichannel.py --models-dir ~/.cache/real-models --meetings-dir ../shared/real-meetings

``--source generated`` uses the generated dialogues instead (eval/generate.py), each speaker's own
voice on a channel (nothing cut out: overlaps are scored). A last column counts the multichannel
words put on a channel whose person is not speaking then (by the reference's times, whatever the
words' text).

``python -m speaker_asr.testing.kit DIR`` builds a tiny random stand-in for the models (a smoke
run: meaningless numbers).
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import sys
import time
from pathlib import Path

import numpy as np

from data import MEETINGS_DIR, meeting_words, read_wav  # eval/ is sys.path[0] when this runs
from evaluate import score

SR = 16_000
DEFAULT_MODELS = Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models"))


def wav_bytes(audio: np.ndarray) -> bytes:
    """``(samples,)`` or ``(samples, channels)`` float audio as 16-bit PCM WAV."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, SR, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def owners(words: list[dict], people: list[str], samples: int, pad: float) -> np.ndarray:
    """Per sample, the index of the person speaking there (-1: nobody, -2: cut out): each word's
    own time given to its speaker (where two people speak at once, the first word keeps it), then
    the padding around each word where no word lies (a pad never takes the start of the next
    person's word: a quick reply is on its own person's channel); the words that overlap another
    person's cut out."""
    owner = np.full(samples, -1, dtype=np.int16)
    for widen in (0.0, pad):  # in start order within each pass
        for w in words:
            a = max(0, int((w["start"] - widen) * SR))
            b = min(samples, int((w["end"] + widen) * SR))
            piece = owner[a:b]
            piece[piece == -1] = people.index(w["speaker"])
    for w, cut in zip(words, overlapped(words)):
        if cut:
            owner[max(0, int(w["start"] * SR)):min(samples, int(w["end"] * SR))] = -2
    return owner


def overlapped(words: list[dict]) -> list[bool]:
    """Whether each word overlaps a word of another person."""
    return [any(o["speaker"] != w["speaker"] and o["start"] < w["end"] and w["start"] < o["end"]
                for o in words) for w in words]


def build(folder: Path, pad: float, bleed_db: float) -> tuple[np.ndarray, list[dict], list[str]]:
    """The clip as ``(samples, channels)`` (one channel per person, in the order they first
    speak), its reference words and the people."""
    mix = read_wav(folder / "audio.wav")
    words = meeting_words(folder)
    people = list(dict.fromkeys(w["speaker"] for w in words))
    bleed = 10.0 ** (bleed_db / 20.0)
    owner = owners(words, people, len(mix), pad)
    ramp = np.ones(int(0.02 * SR), dtype=np.float32) / int(0.02 * SR)
    gains = [bleed + (1.0 - bleed) * np.clip(np.convolve((owner == k).astype(np.float32), ramp,
                                                         mode="same"), 0.0, 1.0)
             for k in range(len(people))]
    kept = np.clip(np.convolve((owner != -2).astype(np.float32), ramp, mode="same"), 0.0, 1.0)
    channels = np.stack([mix * g * kept for g in gains], axis=1)
    return channels.astype(np.float32), words, people


def meeting_cases(args):
    """The real clips with 2+ people: (name, channels, reference tokens, people, words left out,
    each person's speech as (start, end, person): their words' times padded by ``--pad``)."""
    folders = sorted(p for p in args.meetings_dir.iterdir() if (p / "ref.words.json").exists())
    if args.files:
        wanted = set(args.files.split(","))
        folders = [p for p in folders if p.name in wanted]
    if not folders:
        raise SystemExit(f"no clips with ref.words.json in {args.meetings_dir}")
    for folder in folders:
        channels, words, people = build(folder, args.pad, args.bleed_db)
        if len(people) < 2:
            continue
        both = overlapped(words)
        yield (folder.name.split("_")[1] if "_" in folder.name else folder.name, channels,
               tokens([w for w, o in zip(words, both) if not o]), people, sum(both),
               [(w["start"] - args.pad, w["end"] + args.pad, w["speaker"]) for w in words])


def generated_cases(args):
    """The generated dialogues of ``--part`` (eval/generate.py: espeak-ng voices and a LibriVox
    reader, overlapping turn starts, backchannels inside another's turn, speakers at different
    levels, some at telephone quality), each speaker's own voice on a channel of its own with the
    others bleeding in at ``--bleed-db``, and room noise of its own on every channel (a telephone
    dialogue passed through the telephone channel by channel, as a stereo call is recorded).
    Nothing is left out: overlapping speech is on both people's channels."""
    import tempfile

    from data import NOISE_RMS, build_dialogue, cached_librivox_pieces
    from evaluate import Asr, model_path
    from generate import generated_specs, phone_quality

    def base_words():  # only when the LibriVox cuts are not cached yet (eval/evaluate.py's way)
        return Asr(model_path(args.models_dir, "base")).words

    pieces = cached_librivox_pieces(args.models_dir, args.cache_dir, base_words, False, log=print)
    bleed = 10.0 ** (args.bleed_db / 20.0)
    with tempfile.TemporaryDirectory() as tmp:
        for spec in generated_specs(args.part, args.count):
            tracks: dict = {}
            f = build_dialogue(spec, pieces, Path(tmp), tracks)
            people = sorted(tracks)
            total = sum(tracks.values())
            noise = np.random.default_rng(spec["seed"] + 7)
            channels = []
            for k in people:
                c = tracks[k] + bleed * (total - tracks[k]) + noise.normal(0, NOISE_RMS, len(total))
                if spec.get("phone"):
                    c = phone_quality(c.astype(np.float32), SR)[:len(total)]
                channels.append(c)
            if len(people) >= 2:
                yield (f.id, np.stack(channels, axis=1).astype(np.float32), timed_tokens(f), people, 0,
                       [(u.start, u.end, u.speaker) for u in f.utterances])


def timed_tokens(f) -> list:
    """A generated dialogue's reference words in the order they are said: each utterance's words
    spread evenly over its time, all sorted by it. Where two people overlap, their words
    interleave, as in a real meeting's word-level reference and as the multichannel answer gives
    them (eval/evaluate.py's ``reference_tokens`` keeps each utterance's words together, which
    counts every interleaved word against the channels)."""
    from speaker_asr.testing.scoring import RefToken, normalize_word

    timed = []
    for u_idx, u in enumerate(f.utterances):
        toks = [t for w in u.text.split() for t in normalize_word(w)]
        for k, t in enumerate(toks):
            middle = u.start + (k + 0.5) / len(toks) * (u.end - u.start)
            timed.append((middle, RefToken(t, u.speaker, u_idx, "only")))
    return [token for _, token in sorted(timed, key=lambda x: x[0])]


def off_time(response: dict, people: list[str], speech: list[tuple[float, float, str]],
             slack: float = 0.25) -> tuple[int, int]:
    """(words of a multichannel answer put on a channel whose person says nothing within
    ``slack`` s of the word's middle, words with a channel and times): who said it judged by the
    clock alone, whatever the ASR made of the words (WDER needs them aligned to the reference's
    text, which garbled overlapping speech defeats)."""
    off = total = 0
    for c in response.get("chunks", []):
        for w in c.get("words", []):
            if w.get("channel") is None or w.get("start") is None or w.get("end") is None:
                continue
            total += 1
            middle, person = (w["start"] + w["end"]) / 2, people[w["channel"]]
            off += not any(p == person and a - slack <= middle <= b + slack for a, b, p in speech)
    return off, total


def tokens(words: list[dict]):
    from speaker_asr.testing.scoring import RefToken, normalize_word

    out = []
    for i, w in enumerate(words):
        for t in normalize_word(w["word"]):
            out.append(RefToken(t, w["speaker"], i, "only"))
    return out


def hyp_tokens(response: dict):
    from speaker_asr.testing.scoring import HypToken, normalize_word

    out = []
    for c in response.get("chunks", []):
        for w in c.get("words", []):
            for t in normalize_word(w["word"]):
                out.append(HypToken(t, w.get("speaker"), w.get("start"), w.get("end")))
    return out


def pct(num: int, den: int) -> str:
    return f"{100.0 * num / den:.1f}" if den else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS)
    ap.add_argument("--meetings-dir", type=Path, default=MEETINGS_DIR)
    ap.add_argument("--model", default="whisper-tiny.en", help="the ASR model's folder in --models-dir")
    ap.add_argument("--bleed-db", type=float, default=-20.0, help="the others' level on a person's channel")
    ap.add_argument("--pad", type=float, default=0.15, help="seconds around a person's words on their channel")
    ap.add_argument("--files", help="comma-separated clip folder names (default: every clip with 2+ speakers)")
    ap.add_argument("--source", choices=("meetings", "generated"), default="meetings",
                    help="the real AMI clips (one person per channel cut from their mix), or the "
                         "generated dialogues (each speaker's own voice on a channel)")
    ap.add_argument("--part", choices=("tuning", "heldout"), default="heldout",
                    help="which generated dialogues (eval/generate.py; --source generated)")
    ap.add_argument("--count", type=int, default=12, help="generated dialogues (--source generated)")
    ap.add_argument("--cache-dir", type=Path, default=Path(__file__).resolve().parent / ".cache",
                    help="where the LibriVox cuts the generated dialogues use are cached")
    ap.add_argument("--out", type=Path, help="write the table here too (markdown)")
    args = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
    from speaker_asr.endpoint import EndpointHandler
    from speaker_asr.settings import ModelSettings

    handler = EndpointHandler(settings=ModelSettings(
        asr_model=str(args.models_dir / args.model),
        diarization_model=str(args.models_dir / "pyannote-campp-3.1"), warmup=False))

    def ask(audio: np.ndarray, **parameters) -> tuple[dict, float]:
        started = time.perf_counter()
        r = handler({"inputs": base64.b64encode(wav_bytes(audio)).decode(),
                     "parameters": {"return_word_timestamps": True, **parameters}})
        return r, time.perf_counter() - started

    rows, totals = [], {m: {"wer_errors": 0, "ref_words": 0, "spk_errors": 0, "spk_scored": 0}
                        for m in ("multichannel", "downmixed")}
    cases = meeting_cases(args) if args.source == "meetings" else generated_cases(args)
    for name, channels, ref, people, left_out, speech in cases:
        multi, multi_s = ask(channels, multichannel=True)
        mixed, mixed_s = ask(channels.mean(axis=1))
        every_word_has_channel = all("channel" in w for c in multi["chunks"] for w in c.get("words", []))
        row = {"file": name, "people": len(people), "seconds": round(len(channels) / SR, 1),
               "overlapped": left_out, "off_time": off_time(multi, people, speech),
               "channel on every word": every_word_has_channel}
        for mode, r, s in (("multichannel", multi, multi_s), ("downmixed", mixed, mixed_s)):
            counts = {k: v for k, v in score(ref, hyp_tokens(r))[0].items()
                      if k in ("wer_errors", "ref_words", "spk_errors", "spk_scored")}
            row[mode] = {**counts, "seconds": round(s, 2)}
            for k in totals[mode]:
                totals[mode][k] += counts[k]
        rows.append(row)
        print(f"{row['file']}: multichannel WDER {pct(row['multichannel']['spk_errors'], row['multichannel']['spk_scored'])} % "
              f"downmixed {pct(row['downmixed']['spk_errors'], row['downmixed']['spk_scored'])} %",
              file=sys.stderr, flush=True)

    what = ("real meeting clips" if args.source == "meetings" else f"generated dialogues ({args.part})")
    left = ("words said over another person's left out of both modes' scores" if args.source == "meetings"
            else "every word scored, overlaps included")
    lines = [f"Channels as speakers: {len(rows)} {what}, one channel per person, the others "
             f"bleeding in at {args.bleed_db:g} dB; ASR {args.model}; {left}", "",
             "| file | people | s | words left out | WDER multichannel | WDER downmixed | WER multichannel | WER downmixed "
             "| s multichannel | s downmixed | every word has a channel | multichannel words off their channel's speech |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        m, d = r["multichannel"], r["downmixed"]
        lines.append(f"| {r['file']} | {r['people']} | {r['seconds']} | {r['overlapped']} | "
                     f"{pct(m['spk_errors'], m['spk_scored'])} ({m['spk_errors']}/{m['spk_scored']}) | "
                     f"{pct(d['spk_errors'], d['spk_scored'])} ({d['spk_errors']}/{d['spk_scored']}) | "
                     f"{pct(m['wer_errors'], m['ref_words'])} | {pct(d['wer_errors'], d['ref_words'])} | "
                     f"{m['seconds']} | {d['seconds']} | {'yes' if r['channel on every word'] else 'NO'} | "
                     f"{pct(*r['off_time'])} ({r['off_time'][0]}/{r['off_time'][1]}) |")
    m, d = totals["multichannel"], totals["downmixed"]
    offs = (sum(r["off_time"][0] for r in rows), sum(r["off_time"][1] for r in rows))
    lines.append(f"| **pooled** | | | {sum(r['overlapped'] for r in rows)} | **{pct(m['spk_errors'], m['spk_scored'])}** ({m['spk_errors']}/{m['spk_scored']}) | "
                 f"**{pct(d['spk_errors'], d['spk_scored'])}** ({d['spk_errors']}/{d['spk_scored']}) | "
                 f"{pct(m['wer_errors'], m['ref_words'])} | {pct(d['wer_errors'], d['ref_words'])} | | | | "
                 f"{pct(*offs)} ({offs[0]}/{offs[1]}) |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
