"""Evaluation data: pyannote's 30 s sample and generated multi-speaker dialogues.

Every file comes with its reference: utterances (speaker, start, end, text) -- the
speaker-attributed reference words -- and the reference speaker turns that stand in for the
diarization in "oracle" mode.

* ``sample`` -- pyannote.audio's sample.wav. Reference words and speakers from sample.stm (one line
  per utterance, Diane / Sheila); oracle turns from sample.rttm (speaker90 / speaker91, including
  one short overlapped backchannel that has no words in the STM).
* ``d1`` ... ``d5`` -- dialogues assembled deterministically (fixed seeds) from speech whose text is
  known exactly:
  - espeak-ng utterances (several voices; the text is what was synthesized);
  - the LibriVox reader (five clips of Sense and Sensibility, one reader, with their
    transcriptions), as whole clips or phrase-level pieces. Pieces: candidate cut points are
    energy dips inside a clip; Whisper base word timestamps on the whole clip say how many
    words precede a dip; that word count is mapped onto the reference transcription through the
    alignment of Whisper's words with it (cuts next to a Whisper error are refused); a cut is
    kept only if Whisper base, run again on both halves, reproduces exactly the whole-clip
    words split at that point -- so no word straddles a cut and each piece's reference text is
    the transcription's words. The same reader is made into extra speakers by sox pitch shifts.
  Each utterance is trimmed to its speech (energy threshold), loudness-normalized, and placed on
  a timeline after the previous one with a seeded random gap (0-0.4 s; some dialogues overlap
  neighbouring turns by 0.1-0.3 s); backchannels ("Yes.", "Right.", ...) from a listener may be
  inserted between the pieces of a clip. Faint seeded white noise is added. Oracle turns are the
  utterances' exact extents. The reference word order is utterance start order.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import soundfile as sf

from speaker_asr.audio.decode import SAMPLE_RATE, decode_audio
from speaker_asr.audio.resample import resample
from speaker_asr.testing.scoring import aligned_pairs, normalize_text, normalize_word

GENERATOR_VERSION = "3"
PIECES_VERSION = "1"
LIBRIVOX_IDS = ["0870", "0880", "0890", "0920", "0930"]
_LIBRIVOX_PREFIX = "sense_and_sensibility_01_austen_64kb-"


@dataclass
class Utterance:
    speaker: str
    start: float
    end: float
    text: str
    source: str = ""


@dataclass
class EvalFile:
    id: str
    audio: str  # path of a 16 kHz mono WAV
    duration: float
    num_speakers: int
    utterances: list[Utterance]
    turns: list[tuple[float, float, str]]  # oracle speaker turns
    description: str = ""

    @classmethod
    def from_json(cls, d: dict) -> "EvalFile":
        d = dict(d)
        d["utterances"] = [Utterance(**u) for u in d["utterances"]]
        d["turns"] = [tuple(t) for t in d["turns"]]
        return cls(**d)


# --------------------------------------------------------------------------- dialogue scripts

# said inside another speaker's turn (generated dialogues, eval/generate.py)
INSIDE_BACKCHANNELS = ["Mm-hm.", "Yes.", "Right.", "Okay.", "Yeah.", "I see."]
BACKCHANNELS = ["Yes.", "Right.", "I see.", "Okay.", "Really?", "Sure.", "Go on.", "Exactly.",
                "Oh, wow.", "Indeed."]

# speaker kinds: ("tts", voice, words per minute) or ("reader", pitch shift in cents)
# a script line is (speaker, text) or (speaker, "@<librivox id>"): that clip's pieces in order
DIALOGUES = [
    dict(id="d1", seed=101, description="2 speakers: LibriVox reader + espeak-ng (en-us+f3) asking",
         speakers={"A": ("reader", 0), "B": ("tts", "en-us+f3", 165)},
         gap=(0.0, 0.4), overlap_prob=0.0, listener="B", backchannel_prob=0.6,
         script=[("B", "So, what happens at the start of the story?"), ("A", "@0870"),
                 ("B", "And is he a good man?"), ("A", "@0880"), ("B", "Really?"), ("A", "@0890"),
                 ("B", "That is a harsh thing to say about anyone."), ("A", "@0920"),
                 ("B", "Who did he marry, then?"), ("A", "@0930"),
                 ("B", "Well, I suppose we will find out soon.")]),
    dict(id="d2", seed=202, description="2 espeak-ng speakers (en-us+m3, en-gb+f2), quick short turns",
         speakers={"A": ("tts", "en-us+m3", 170), "B": ("tts", "en-gb+f2", 165)},
         gap=(0.0, 0.3), overlap_prob=0.0, listener=None, backchannel_prob=0.0,
         script=[("A", "Are you free on Friday afternoon?"), ("B", "Yes."),
                 ("A", "Great. Could we meet at the library?"), ("B", "Which one?"),
                 ("A", "The one near the station."), ("B", "Sure."),
                 ("A", "Bring the notes from last week, please."), ("B", "I left them at home."),
                 ("A", "Oh no."), ("B", "I can print them again tonight."),
                 ("A", "Thanks. That would help a lot."), ("B", "No problem."),
                 ("A", "What time works for you?"), ("B", "After lunch, I think."),
                 ("A", "Perfect."), ("B", "See you then."),
                 ("B", "Oh, wait. Should I bring my laptop too?"), ("A", "Yes, please. And the charger."),
                 ("B", "Got it."), ("A", "Do you know if Sam is coming?"), ("B", "I don't think so."),
                 ("A", "Too bad."), ("B", "Maybe next time."), ("A", "Okay. See you on Friday."),
                 ("B", "Bye.")]),
    dict(id="d3", seed=303,
         description="3 speakers: reader, same reader pitch-shifted -350 cents, espeak-ng (en-gb-x-rp+f4)",
         speakers={"A": ("reader", 0), "B": ("reader", -350), "C": ("tts", "en-gb-x-rp+f4", 160)},
         gap=(0.0, 0.4), overlap_prob=0.0, listener="C", backchannel_prob=0.5,
         script=[("C", "Let's read the next part aloud, one sentence each."), ("A", "@0870"),
                 ("C", "Thank you. Your turn now."), ("B", "@0880"), ("A", "@0890"),
                 ("C", "Hold on, who said that?"), ("B", "@0920"), ("C", "Nice."), ("A", "@0930"),
                 ("C", "Good. That is the end of the page.")]),
    dict(id="d4", seed=404,
         description="3 espeak-ng speakers (en-us+m1, en-gb-x-rp+f4, en-us+klatt4), some overlap",
         speakers={"A": ("tts", "en-us+m1", 170), "B": ("tts", "en-gb-x-rp+f4", 160),
                   "C": ("tts", "en-us+klatt4", 175)},
         gap=(0.0, 0.35), overlap_prob=0.3, listener=None, backchannel_prob=0.0,
         script=[("A", "Okay everyone, let's start with the budget for the spring festival."),
                 ("B", "I sent the numbers yesterday."), ("C", "I didn't get them."),
                 ("B", "Really? I'll forward the email again after this call."),
                 ("A", "Thanks. The main question is whether we can afford a second stage."),
                 ("C", "I think we can, if we cut the fireworks."), ("B", "No way."),
                 ("C", "Why not?"), ("B", "People come for the fireworks, that's the whole point."),
                 ("A", "Let's not decide that today. Can someone ask the city about the permits?"),
                 ("C", "I can do that."), ("A", "Great."),
                 ("B", "And I'll talk to the sound company about the second stage."),
                 ("A", "Perfect. Anything else?"),
                 ("C", "Just one thing. The parking lot will be closed on Saturday morning."),
                 ("B", "Oh, good to know."), ("A", "Okay, thanks everyone.")]),
    dict(id="d5", seed=505,
         description="3 speakers, long (> 2 Whisper windows): reader pitch-shifted +250 cents, "
                     "espeak-ng en-us+m3 and en-gb-scotland+m2",
         speakers={"A": ("reader", 250), "B": ("tts", "en-us+m3", 160),
                   "C": ("tts", "en-gb-scotland+m2", 170)},
         gap=(0.0, 0.4), overlap_prob=0.0, listener="B", backchannel_prob=0.4,
         script=[("B", "Welcome back to the book club. Today we are looking at the opening chapter "
                       "of Sense and Sensibility. Could you read the passage about John Dashwood?"),
                 ("A", "@0870"), ("B", "So he is thinking about money already."), ("A", "@0880"),
                 ("C", "That sounds generous."), ("A", "@0890"),
                 ("C", "Oh, that changes things. What does the narrator say about his wife?"),
                 ("A", "@0920"), ("B", "Interesting."), ("A", "@0930"),
                 ("B", "I like how the narrator is polite and cruel at the same time."),
                 ("C", "I agree. Every compliment comes with a small knife."),
                 ("B", "That is a good way to put it."),
                 ("C", "And his wife is even worse, if I remember correctly."),
                 ("B", "She is. We will see that in the next chapter."),
                 ("C", "Should we move on to the sisters next week?"),
                 ("B", "Yes. I think they are the heart of the story."), ("C", "Great."),
                 ("B", "Thanks for coming, everyone. See you next week.")]),
]


# --------------------------------------------------------------------------- audio helpers


def read_wav(path) -> np.ndarray:
    return decode_audio(Path(path).read_bytes())


def write_wav(path, audio: np.ndarray) -> None:
    sf.write(str(path), np.clip(audio, -1.0, 1.0), SAMPLE_RATE, subtype="PCM_16")


def frame_db(audio: np.ndarray, hop: float = 0.01) -> np.ndarray:
    n = int(hop * SAMPLE_RATE)
    k = len(audio) // n
    frames = audio[: k * n].reshape(k, n).astype(np.float64)
    return 20 * np.log10(np.sqrt((frames ** 2).mean(axis=1)) + 1e-10)


def _threshold(db: np.ndarray) -> float:
    return max(db.max() - 45.0, np.percentile(db, 10) + 6.0)


def speech_extent(audio: np.ndarray, pad: float = 0.05) -> tuple[int, int]:
    """(first, last) sample of speech: the first and last 10 ms frame within 45 dB of the peak
    and 6 dB above the noise floor (10th percentile), widened by ``pad`` seconds (soft word
    edges such as a final "them" sit close to the floor of the LibriVox recordings)."""
    db = frame_db(audio)
    active = np.flatnonzero(db > _threshold(db))
    n = int(0.01 * SAMPLE_RATE)
    if not len(active):
        return 0, len(audio)
    p = int(pad * SAMPLE_RATE)
    return max(0, int(active[0] * n) - p), int(min(len(audio), (active[-1] + 1) * n + p))


def active_rms(audio: np.ndarray) -> float:
    db = frame_db(audio)
    n = int(0.01 * SAMPLE_RATE)
    frames = audio[: len(db) * n].reshape(len(db), n)[db > _threshold(db)]
    return float(np.sqrt((frames.astype(np.float64) ** 2).mean())) if len(frames) else 1e-4


def espeak(text: str, voice: str, wpm: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tts.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(path), text],
                       check=True, capture_output=True)
        audio, sr = sf.read(str(path), dtype="float32", always_2d=True)
    return resample(audio.mean(axis=1), sr, SAMPLE_RATE)


def pitch_shift(audio: np.ndarray, cents: int) -> np.ndarray:
    if not cents:
        return audio
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.wav", Path(tmp) / "out.wav"
        sf.write(str(src), audio, SAMPLE_RATE, subtype="FLOAT")
        subprocess.run(["sox", "-R", "-D", str(src), "-e", "floating-point", "-b", "32", str(dst),
                        "pitch", str(cents)], check=True, capture_output=True)
        out, sr = sf.read(str(dst), dtype="float32")
    return resample(out, sr, SAMPLE_RATE)


# --------------------------------------------------------------------------- reference files


def load_sample(models_dir: Path) -> EvalFile:
    base = models_dir / "audio"
    utts = []
    for line in (base / "sample.stm").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or line.startswith(";;"):
            continue
        _, _, speaker, start, end, text = parts
        utts.append(Utterance(speaker, float(start), float(end), text, "sample.stm"))
    utts.sort(key=lambda u: (u.start, u.end))
    turns = read_rttm(base / "sample.rttm")
    audio = read_wav(base / "sample.wav")
    return EvalFile("sample", str(base / "sample.wav"), len(audio) / SAMPLE_RATE, 2, utts,
                    sorted(turns), "pyannote sample: 2 speakers, telephone, 30 s (STM/RTTM reference)")


def librivox_texts(models_dir: Path) -> dict[str, str]:
    out = {}
    for line in (models_dir / "audio" / "librivox" / "transcription").read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        text, _, ident = line.rpartition("(")
        ident = ident.rstrip(")").strip()
        text = text.replace("<s>", "").replace("</s>", "").strip()
        out[ident.removeprefix(_LIBRIVOX_PREFIX)] = text
    return out


# --------------------------------------------------------------------------- LibriVox pieces

Transcribe = Callable[[np.ndarray], list[tuple[str, Optional[float], Optional[float]]]]


def _word_tokens(words) -> tuple[list[str], list[int]]:
    """Normalized tokens of Whisper words and, per token, the index of its word."""
    toks, owner = [], []
    for i, (text, _, _) in enumerate(words):
        for t in normalize_word(text):
            toks.append(t)
            owner.append(i)
    return toks, owner


def _dips(audio: np.ndarray, margin: float = 0.4) -> list[float]:
    """Candidate cut points: the quietest moments (50 ms smoothed energy within 8 dB of the noise
    floor) at least 0.3 s apart and ``margin`` s from either end."""
    db = frame_db(audio)
    smooth = np.convolve(db, np.ones(5) / 5, mode="same")
    floor = np.percentile(db, 10)
    order = np.argsort(smooth, kind="stable")
    chosen: list[int] = []
    edge = int(margin / 0.01)
    for i in order:
        if smooth[i] > floor + 8:
            break
        if i < edge or i > len(db) - edge:
            continue
        if all(abs(i - j) >= 30 for j in chosen):
            chosen.append(int(i))
        if len(chosen) >= 6:
            break
    return sorted((i + 0.5) * 0.01 for i in chosen)


def librivox_pieces(models_dir: Path, transcribe: Transcribe, log=print
                    ) -> dict[str, list[dict]]:
    """Per clip: its speech pieces [{"audio": np.ndarray, "text": str, "span": [s, e]}] (whole
    clip when no cut is verified)."""
    texts = librivox_texts(models_dir)
    out: dict[str, list[dict]] = {}
    for clip in LIBRIVOX_IDS:
        audio = read_wav(models_dir / "audio" / "librivox" / f"{_LIBRIVOX_PREFIX}{clip}.wav")
        s0, s1 = speech_extent(audio)
        audio = audio[s0:s1]
        ref = texts[clip].split()
        ref_toks = [normalize_word(w) for w in ref]
        flat_ref, ref_owner = [], []
        for i, toks in enumerate(ref_toks):
            flat_ref += toks
            ref_owner += [i] * len(toks)
        words = transcribe(audio)
        hyp, hyp_owner = _word_tokens(words)
        pairs = {j: (i, eq) for i, j, eq in aligned_pairs(flat_ref, hyp)}
        log(f"  librivox {clip}: Whisper base on the whole clip: {' '.join(hyp)!r}")
        cuts = []  # (time, number of reference words before it)
        for t in _dips(audio):
            k = sum(1 for _, s, e in words if s is not None and e is not None and (s + e) / 2 < t)
            if k == 0 or k == len(words):
                continue
            # Whisper's boundary between words k-1 and k must be near the dip
            boundary = ((words[k - 1][2] or 0.0) + (words[k][1] or 0.0)) / 2
            if abs(boundary - t) > 0.2:
                continue
            # token boundary in Whisper's tokens; both neighbours must be correct words
            h = next((n for n, o in enumerate(hyp_owner) if o >= k), len(hyp))
            if h == 0 or h >= len(hyp) or not pairs.get(h - 1, (0, False))[1] \
                    or not pairs.get(h, (0, False))[1]:
                continue
            r_left, r_right = pairs[h - 1][0], pairs[h][0]
            if r_right != r_left + 1 or ref_owner[r_left] == ref_owner[r_right]:
                continue
            n_ref = ref_owner[r_right]
            cut = int(t * SAMPLE_RATE)
            left = [w for text, _, _ in transcribe(audio[:cut]) for w in normalize_word(text)]
            right = [w for text, _, _ in transcribe(audio[cut:]) for w in normalize_word(text)]
            if left == hyp[:h] and right == hyp[h:]:
                cuts.append((t, n_ref))
                log(f"  librivox {clip}: cut at {t:.2f} s after {' '.join(ref[:n_ref])!r}")
            else:
                log(f"  librivox {clip}: cut at {t:.2f} s refused (halves: {' '.join(left)!r} | "
                    f"{' '.join(right)!r})")
        cuts = sorted(set(cuts))
        bounds = [0.0] + [t for t, _ in cuts] + [len(audio) / SAMPLE_RATE]
        word_bounds = [0] + [n for _, n in cuts] + [len(ref)]
        pieces = []
        for (a, b), (wa, wb) in zip(zip(bounds, bounds[1:]), zip(word_bounds, word_bounds[1:])):
            seg = audio[int(a * SAMPLE_RATE): int(b * SAMPLE_RATE)]
            p0, p1 = speech_extent(seg)
            pieces.append({"audio": seg[p0:p1], "text": " ".join(ref[wa:wb]),
                           "span": [round((s0 + p0) / SAMPLE_RATE + a, 3),
                                    round((s0 + p1) / SAMPLE_RATE + a, 3)]})
        out[clip] = pieces
    return out


# --------------------------------------------------------------------------- assembly

TARGET_RMS = 0.05  # about -26 dBFS over active speech
NOISE_RMS = 0.0005  # about -66 dBFS


def build_dialogue(spec: dict, pieces: dict[str, list[dict]], out_dir: Path,
                   tracks: Optional[dict[str, np.ndarray]] = None) -> EvalFile:
    """The dialogue's mix written into ``out_dir`` and its references. ``tracks``, when given, is
    filled with each speaker's own voice as placed in the mix (float64, the mix's length, before
    the room noise and the telephone: eval/multichannel.py puts each on a channel of its own)."""
    rng = np.random.default_rng(spec["seed"])
    speakers = spec["speakers"]
    utter: list[tuple[str, np.ndarray, str, str]] = []  # (speaker, audio, text, source)

    def tts(spk: str, text: str) -> tuple[str, np.ndarray, str, str]:
        _, voice, wpm = speakers[spk]
        a = espeak(text, voice, wpm)
        s, e = speech_extent(a, pad=0.02)
        return spk, a[s:e], text, f"espeak-ng {voice}"

    for spk, line in spec["script"]:
        kind = speakers[spk]
        if line.startswith("@"):
            assert kind[0] == "reader", (spec["id"], spk, line)
            clip = line[1:]
            for n, p in enumerate(pieces[clip]):
                if n and spec.get("listener") and rng.random() < spec["backchannel_prob"]:
                    bc = BACKCHANNELS[int(rng.integers(len(BACKCHANNELS)))]
                    utter.append(tts(spec["listener"], bc))
                a = pitch_shift(p["audio"], kind[1])
                s, e = speech_extent(a)
                utter.append((spk, a[s:e], p["text"],
                              f"librivox {clip} {p['span'][0]:.2f}-{p['span'][1]:.2f} s"
                              + (f" pitch {kind[1]:+d}" if kind[1] else "")))
        else:
            if kind[0] == "tts":
                utter.append(tts(spk, line))
            else:
                raise ValueError(f"{spec['id']}: reader speaker {spk} can only read @clips")

    t = 0.5
    placed: list[tuple[float, str, np.ndarray, str, str]] = []
    prev_spk, prev_len = None, 0.0
    gains = spec.get("gains_db") or {}
    inside = spec.get("inside_backchannel_prob", 0.0)
    tts_speakers = [n for n, kind in speakers.items() if kind[0] == "tts"]
    for spk, audio, text, source in utter:
        length = len(audio) / SAMPLE_RATE
        if prev_spk is None:
            start = t
        elif spk == prev_spk:
            start = t + float(rng.uniform(0.1, 0.3))
        else:
            lo, hi = spec["gap"]
            gap = float(rng.uniform(lo, hi))
            if spec["overlap_prob"] and rng.random() < spec["overlap_prob"] \
                    and min(length, prev_len) >= 1.0:
                gap = -min(float(rng.uniform(0.1, 0.3)), 0.4 * min(length, prev_len))
            start = t + gap
        start = round(start, 2)
        scaled = audio * (TARGET_RMS * 10 ** (gains.get(spk, 0.0) / 20) / active_rms(audio))
        placed.append((start, spk, scaled, text, source))
        # a listener's backchannel said inside this turn (overlapped speech)
        others = [n for n in tts_speakers if n != spk]
        if inside and others and length >= 2.5 and rng.random() < inside:
            who = str(rng.choice(others))
            _, bc_audio, bc_text, bc_source = tts(who, str(rng.choice(INSIDE_BACKCHANNELS)))
            bc_start = round(start + float(rng.uniform(0.4, 0.7)) * length, 2)
            bc_audio = bc_audio * (TARGET_RMS * 10 ** (gains.get(who, 0.0) / 20) / active_rms(bc_audio))
            placed.append((bc_start, who, bc_audio, bc_text, bc_source))
        t = max(t, start + length)
        prev_spk, prev_len = spk, length
    placed.sort(key=lambda p: p[0])
    duration = t + 0.5
    mix = np.zeros(int(math.ceil(duration * SAMPLE_RATE)), np.float64)
    utts, turns = [], []
    for start, spk, audio, text, source in placed:
        i = int(round(start * SAMPLE_RATE))
        mix[i:i + len(audio)] += audio
        if tracks is not None:
            tracks.setdefault(spk, np.zeros(len(mix), np.float64))[i:i + len(audio)] += audio
        end = round(start + len(audio) / SAMPLE_RATE, 3)
        utts.append(Utterance(spk, start, end, text, source))
        turns.append((start, end, spk))
    mix += np.random.default_rng(spec["seed"] + 1).normal(0, NOISE_RMS, len(mix))
    if spec.get("phone"):
        from generate import phone_quality

        mix = phone_quality(mix.astype(np.float32), SAMPLE_RATE)[:len(mix)]
    path = out_dir / f"{spec['id']}.wav"
    write_wav(path, mix.astype(np.float32))
    return EvalFile(spec["id"], str(path), len(mix) / SAMPLE_RATE, len(speakers), utts, turns,
                    spec["description"])


def cached_librivox_pieces(models_dir: Path, cache_dir: Path,
                           transcribe_factory: Callable[[], Transcribe], rebuild: bool, log=print
                           ) -> dict[str, list[dict]]:
    """:func:`librivox_pieces`, computed once (it runs Whisper base some 30 times) and kept as
    float WAVs + JSON under ``cache_dir``."""
    clips = [models_dir / "audio" / "librivox" / f"{_LIBRIVOX_PREFIX}{c}.wav" for c in LIBRIVOX_IDS]
    h = hashlib.sha1(PIECES_VERSION.encode())
    for c in clips:
        h.update(c.read_bytes())
    key = h.hexdigest()[:10]
    folder = cache_dir / "data" / f"librivox-{key}"
    index = folder / "pieces.json"
    if index.is_file() and not rebuild:
        meta = json.loads(index.read_text())
        return {clip: [{"audio": sf.read(str(folder / p["file"]), dtype="float32")[0],
                        "text": p["text"], "span": p["span"]} for p in ps]
                for clip, ps in meta.items()}
    log("cutting LibriVox clips into phrases (verified with Whisper base)...")
    pieces = librivox_pieces(models_dir, transcribe_factory(), log=log)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {}
    for clip, ps in pieces.items():
        meta[clip] = []
        for n, p in enumerate(ps):
            name = f"{clip}-{n}.wav"
            sf.write(str(folder / name), p["audio"], SAMPLE_RATE, subtype="FLOAT")
            meta[clip].append({"file": name, "text": p["text"], "span": p["span"]})
    index.write_text(json.dumps(meta, indent=1))
    return pieces


def dialogue_specs(seed_offset: int = 0, part: str = "original", count: int = 12) -> list[dict]:
    """The dialogue specs. ``part`` "original": d1-d5 (a nonzero ``seed_offset`` gives a variant
    of each: same scripts and voices, other gaps, overlaps, backchannels and noise); "tuning" /
    "heldout": ``count`` generated dialogues of that part (eval/generate.py)."""
    if part != "original":
        from generate import generated_specs

        return generated_specs(part, count)
    if not seed_offset:
        return DIALOGUES
    return [dict(d, seed=d["seed"] + seed_offset) for d in DIALOGUES]


def _spec_hash(specs: list[dict]) -> str:
    blob = json.dumps([GENERATOR_VERSION, PIECES_VERSION, specs, BACKCHANNELS, TARGET_RMS, NOISE_RMS],
                      sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def build_dataset(models_dir: Path, cache_dir: Path, transcribe_factory: Callable[[], Transcribe],
                  rebuild: bool = False, log=print, seed_offset: int = 0, part: str = "original",
                  count: int = 12) -> list[EvalFile]:
    """The sample plus the dialogues of ``part`` (built once into ``cache_dir``, then reused; the
    held-out part has no real recording: the sample belongs to the data the rules were tuned on);
    ``seed_offset`` selects a variant of the original dialogues (:func:`dialogue_specs`)."""
    files = [] if part == "heldout" else [load_sample(models_dir)]
    specs = dialogue_specs(seed_offset, part, count)
    out_dir = cache_dir / "data" / _spec_hash(specs)
    manifest = out_dir / "manifest.json"
    if manifest.is_file() and not rebuild:
        dialogues = [EvalFile.from_json(d) for d in json.loads(manifest.read_text())]
        if all(Path(d.audio).is_file() for d in dialogues):
            return files + dialogues
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"building dialogues into {out_dir}...")
    pieces = cached_librivox_pieces(models_dir, cache_dir, transcribe_factory, rebuild, log)
    dialogues = [build_dialogue(spec, pieces, out_dir) for spec in specs]
    manifest.write_text(json.dumps([asdict(d) for d in dialogues], indent=1))
    for d in dialogues:
        log(f"  {d.id}: {d.duration:.1f} s, {d.num_speakers} speakers, {len(d.utterances)} utterances")
    return files + dialogues


# --------------------------------------------------------------------------- real meetings

# the real AMI clips (../shared/real-meetings, read its README), beside the repository
MEETINGS_DIR = Path(__file__).resolve().parents[2] / "shared" / "real-meetings"


def read_rttm(path: Path) -> list[tuple[float, float, str]]:
    """The SPEAKER lines of an RTTM file as (start, end, speaker), in file order."""
    turns = []
    for line in Path(path).read_text().splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] == "SPEAKER":
            turns.append((float(f[3]), round(float(f[3]) + float(f[4]), 3), f[7]))
    return turns


def meeting_words(folder: Path) -> list[dict]:
    """A clip's ref.words.json ({speaker, start, end, word}) in start order."""
    return sorted(json.loads((Path(folder) / "ref.words.json").read_text()),
                  key=lambda w: (w["start"], w["end"]))


def group_words(words: list[dict], source: str = "ref.words.json") -> list[Utterance]:
    """Words ({speaker, start, end, word}, in start order) as utterances: consecutive words of one
    speaker make one."""
    utts: list[Utterance] = []
    for w in words:
        last = utts[-1] if utts else None
        if last is not None and last.speaker == w["speaker"]:
            utts[-1] = Utterance(last.speaker, last.start, max(last.end, w["end"]),
                                 f"{last.text} {w['word']}", last.source)
        else:
            utts.append(Utterance(w["speaker"], w["start"], w["end"], w["word"], source))
    return utts


def load_meeting(folder: Path) -> EvalFile:
    """One real meeting clip: AMI's own words (speaker, start, end, word) as the reference, its
    RTTM turns (``only_words``: a speaker's adjacent words merged) as the oracle turns. The
    reference words in start order, grouped into utterances of consecutive words of one speaker
    (so a word's position in its utterance means what it means for the generated dialogues)."""
    words = meeting_words(folder)
    utts = group_words(words)
    turns = read_rttm(folder / "ref.rttm")
    info = json.loads((folder / "info.json").read_text())
    audio = read_wav(folder / "audio.wav")
    meeting = info.get("ami", {}).get("meeting", folder.name)
    speakers = sorted({t[2] for t in turns} | {u.speaker for u in utts})
    return EvalFile(meeting, str(folder / "audio.wav"), len(audio) / SAMPLE_RATE, len(speakers),
                    utts, sorted(turns), f"AMI {meeting} (Mix-Headset), first 30 s, "
                    f"{len(speakers)} speakers, {len(words)} reference words")


def load_meetings(folder: Path = MEETINGS_DIR) -> list[EvalFile]:
    """Every clip folder (with ref.words.json) under ``folder``, by name."""
    clips = sorted(p for p in Path(folder).iterdir() if (p / "ref.words.json").is_file())
    if not clips:
        raise FileNotFoundError(f"no real meeting clips (folders with ref.words.json) in {folder}")
    return [load_meeting(p) for p in clips]


# --------------------------------------------------------------------------- harder meetings

# The variants of each real meeting clip (--part meetings-hard): the same words, speakers and
# turns, heard as a far microphone, a noisier room, a level that moves, or another meeting
# talking underneath. Each is drawn from a fixed seed per clip, so the audio is the same on every
# machine and run.
VARIANTS = ("far", "noisy", "levels", "crosstalk")


def room_response(rt60: float, rng: np.random.Generator, direct: float = 0.3) -> np.ndarray:
    """A synthetic room impulse response: the direct path, then exponentially decaying noise
    reaching -60 dB at ``rt60`` seconds (a far microphone in a meeting room: 0.4-0.8 s). The
    direct path's share of the energy is ``direct``."""
    n = int(rt60 * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    tail = rng.standard_normal(n) * np.exp(-6.9 * t / rt60)  # ln(1000) = 6.9: -60 dB at rt60
    tail[: int(0.002 * SAMPLE_RATE)] = 0.0  # the first reflections come after the direct path
    tail *= np.sqrt((1 - direct) / direct / max(np.sum(tail ** 2), 1e-12))
    tail[0] = 1.0
    return tail.astype(np.float32)


def _at_level(audio: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``audio`` scaled to the active level of ``reference``."""
    return audio * (active_rms(reference) / max(active_rms(audio), 1e-9))


def _noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """Pink-ish noise (white noise through a one-pole low-pass): a room's hum and air."""
    from scipy.signal import lfilter

    return lfilter([1.0], [1.0, -0.95], rng.standard_normal(n)).astype(np.float32)


def _with_snr(audio: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    scale = active_rms(audio) / max(float(np.sqrt(np.mean(noise ** 2))), 1e-9) / 10 ** (snr_db / 20)
    return audio + scale * noise


def meeting_variant(audio: np.ndarray, kind: str, seed: int, other: Optional[np.ndarray] = None) -> np.ndarray:
    """One harder version of a meeting clip's ``audio`` (see :data:`VARIANTS`); ``other``: another
    meeting's clip, for ``crosstalk``."""
    from scipy.signal import fftconvolve

    rng = np.random.default_rng(seed)
    if kind == "far":  # a far microphone: reverberation, then the room's noise at 15 dB
        wet = fftconvolve(audio, room_response(rng.uniform(0.5, 0.8), rng))[: len(audio)]
        out = _with_snr(_at_level(wet, audio), _noise(len(audio), rng), 15.0)
    elif kind == "noisy":  # a near microphone in a loud room: noise at 5 dB
        out = _with_snr(audio, _noise(len(audio), rng), 5.0)
    elif kind == "levels":  # the level moves by up to 12 dB every 2-5 s (people turn, lean back)
        gain = np.empty(len(audio), np.float32)
        at = 0
        while at < len(audio):
            step = int(rng.uniform(2.0, 5.0) * SAMPLE_RATE)
            gain[at:at + step] = 10 ** (rng.uniform(-12.0, 0.0) / 20)
            at += step
        out = audio * gain
    elif kind == "crosstalk":  # another meeting's talk underneath, 10 dB down (not in the reference)
        if other is None:
            raise ValueError("crosstalk needs another clip")
        under = np.resize(other, len(audio))
        out = audio + _at_level(under, audio) * 10 ** (-10 / 20)
    else:
        raise ValueError(f"unknown variant {kind!r}: one of {', '.join(VARIANTS)}")
    peak = float(np.max(np.abs(out))) or 1.0
    return (out / peak * min(peak, 0.99)).astype(np.float32)


def load_meeting_variants(folder: Path, out_dir: Path, kinds: Sequence[str] = VARIANTS) -> list[EvalFile]:
    """Every meeting clip under ``folder`` in each variant of ``kinds``, written once under
    ``out_dir`` (16 kHz WAVs): ids ``<meeting>-<kind>``, the clip's own words and turns as the
    reference. The crosstalk under a clip is the next clip's audio (in name order)."""
    files = load_meetings(folder)
    audios = [read_wav(f.audio) for f in files]
    out_dir.mkdir(parents=True, exist_ok=True)
    variants: list[EvalFile] = []
    for i, (f, audio) in enumerate(zip(files, audios)):
        for kind in kinds:
            path = out_dir / f"{f.id}-{kind}.wav"
            if not path.is_file():
                seed = int(hashlib.sha256(f"{f.id}/{kind}".encode()).hexdigest()[:8], 16)
                write_wav(path, meeting_variant(audio, kind, seed, other=audios[(i + 1) % len(audios)]))
            variants.append(replace(f, id=f"{f.id}-{kind}", audio=str(path),
                                    description=f"{f.description}; {kind}"))
    return variants
