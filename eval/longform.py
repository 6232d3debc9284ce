"""Long recordings where speakers come back after long gaps: ``--part long``.

Does a speaker keep one label across an hour? Real speech with known speakers is scarce here (ten
30 s AMI clips, pyannote's 30 s sample, five short LibriVox clips: about 6 minutes of distinct
speech), so each recording is a deterministic (seeded) sequence of *blocks*, each block one piece
of that real audio with its own references moved to the block's place:

* **return blocks** -- the test: people who talk near the start and come back 20-45 minutes later
  with *other* utterances: AMI EN2001a's participants at the start and EN2001e's (the same people,
  another meeting of theirs) half an hour later; EN2006a then EN2006b; FEE083 in EN2005a then in
  EN2009b; the LibriVox reader's first two clips then the other three; the first 22 s of
  pyannote's sample then its last 8 s. None of their speakers appears in any other block of the
  recording (checked when a recording is built).
* **filler blocks** -- the others talking in between: a few other clips, taken in turn (a fresh
  seeded order each round, never the same clip twice in a row), so each repeats many times --
  the *same* audio each time, at a seeded gain (+-3 dB), after a seeded pause (0.3-1.5 s, which
  also moves the clip against the diarization's analysis windows), under fresh faint noise.

A block is placed after the previous one with that pause; a return block goes where its target
minute falls (the filler before it stops within half a filler block of it). Every block is
loudness-normalized (to half ``data.TARGET_RMS``, about -32 dBFS over its active frames) before
its gain, and turned down where its peak would pass 0.9 (only EN2006b, whose loud transient puts
it 3-6 dB below the others); seeded white noise (``data.NOISE_RMS``, -66 dBFS) covers the whole
recording. Words, turns and speakers are the sources' own references (AMI's words and RTTM with
its global speaker ids, the sample's STM and RTTM, the LibriVox transcription), shifted by the
block's start; a cropped clip keeps the words whose midpoint lies inside and its turns cut to
the window.

:func:`build_long_recordings` writes ``<id>.wav``, ``<id>.rttm`` (reference turns),
``<id>.words.json`` (reference words -- AMI -- or utterances -- the sample's STM lines, the
LibriVox clips -- with speakers and times) and ``<id>.blocks.json`` under
``<cache>/data/long-<hash>/`` (git-ignored), once. ``max_minutes`` builds a shorter version with
the same structure (smoke runs): the target minutes and the length scale down, and every block is
cut to its first ``max_minutes`` x 60 / (2 x the number of return blocks) seconds at most.

:func:`returning_speakers` tells, for every speaker with more than one appearance (a block
where they have reference speech), which hypothesis label each appearance mostly got and
whether that label is the same in every appearance ("kept").
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from data import (LIBRIVOX_IDS, NOISE_RMS, SAMPLE_RATE, TARGET_RMS, EvalFile, Utterance,
                  _LIBRIVOX_PREFIX, active_rms, group_words, librivox_texts, load_meetings,
                  load_sample, meeting_words, read_wav, speech_extent, write_wav)

LONG_VERSION = "1"
READER = "LibriVox-reader"
PAUSE_S = (0.3, 1.5)  # between blocks
GAIN_DB = 3.0  # each block at +-GAIN_DB around the common level
LEVEL_RMS = TARGET_RMS / 2  # the common level: about -32 dBFS over active speech
PEAK = 0.9  # a block whose peak would pass this is turned down until it does not
READER_PAUSE_S = 0.5  # between the LibriVox clips of one block
MIN_RETURN_GAP_MIN = 20.0  # what the recordings are built to test
SOLID_SPEECH_S = 2.0  # an appearance with less speech than this is reported, but marked thin

# the blocks: a meeting clip (cropped to ``window`` seconds), a part of the sample (split at the
# silent point nearest 70 % of it: 0-21.6 s | 21.6-30 s), or LibriVox clips read one after another
UNITS = {
    "EN2001a": dict(meeting="EN2001a"),
    "EN2001e": dict(meeting="EN2001e"),
    "EN2003a": dict(meeting="EN2003a", window=(13.5, None)),  # silent before 13.5 s
    "EN2004a": dict(meeting="EN2004a"),
    "EN2005a": dict(meeting="EN2005a"),
    "EN2006a": dict(meeting="EN2006a", window=(8.0, None)),  # 0-8 s: loud untranscribed audio
    "EN2006b": dict(meeting="EN2006b", window=(4.5, None)),  # silent before 4.5 s
    "EN2009b": dict(meeting="EN2009b"),
    "sample": dict(sample=0),
    "sample-1": dict(sample=1),
    "sample-2": dict(sample=2),
    "reader": dict(reader=tuple(LIBRIVOX_IDS)),
    "reader-1": dict(reader=("0870", "0880")),
    "reader-2": dict(reader=("0890", "0920", "0930")),
}
SAMPLE_SPLIT = 0.7

# ``returns``: (target start minute, unit); ``filler``: the units that talk in between
LONG_RECORDINGS = [
    dict(id="long32", seed=2801, minutes=32.0,
         description="EN2001a's people at the start, EN2001e's (two of them) after 31 min; "
                     "the sample's first 22 s at 1 min, its last 8 s at 25 min; filler: EN2003a, "
                     "EN2004a, EN2006b, the LibriVox reader",
         returns=[(0.0, "EN2001a"), (1.0, "sample-1"), (25.0, "sample-2"), (31.4, "EN2001e")],
         filler=["EN2003a", "EN2004a", "EN2006b", "reader"]),
    dict(id="long45", seed=2802, minutes=45.0,
         description="EN2006a at the start, EN2006b after 44 min; EN2005a at 1 min, EN2009b "
                     "(FEE083 again) at 30 min; the reader's first two clips at 2 min, the other "
                     "three at 38 min; filler: EN2003a, EN2004a, EN2001a, the sample",
         returns=[(0.0, "EN2006a"), (1.0, "EN2005a"), (2.0, "reader-1"), (30.0, "EN2009b"),
                  (38.0, "reader-2"), (44.4, "EN2006b")],
         filler=["EN2003a", "EN2004a", "EN2001a", "sample"]),
    # several minutes of real meetings joined: three groups of people return after
    # 6-7 minutes, while the fillers' people come back every minute or two
    dict(id="joined8", seed=3801, minutes=8.0,
         description="EN2001a, EN2006a and EN2005a in the first minute; EN2001e, EN2009b (FEE083 "
                     "again) and EN2006b after 6.5-7.5 min; filler: EN2003a, EN2004a, the sample, "
                     "the LibriVox reader",
         returns=[(0.0, "EN2001a"), (0.4, "EN2006a"), (0.8, "EN2005a"), (6.5, "EN2001e"),
                  (7.0, "EN2009b"), (7.5, "EN2006b")],
         filler=["EN2003a", "EN2004a", "sample", "reader"]),
]


@dataclass
class Unit:
    """A piece of real audio with its references: ``items`` are words (``level`` "word") or
    utterances ("utterance") as {speaker, start, end, text, level}; ``turns`` (start, end, speaker)."""
    name: str
    audio: np.ndarray
    items: list[dict]
    turns: list[tuple[float, float, str]]
    source: str

    @property
    def duration(self) -> float:
        return len(self.audio) / SAMPLE_RATE

    @property
    def speakers(self) -> set[str]:
        return {t[2] for t in self.turns} | {i["speaker"] for i in self.items}


@dataclass
class Block:
    index: int
    unit: str
    role: str  # "return" or "filler"
    start: float
    end: float
    gain_db: float
    speakers: list[str] = field(default_factory=list)


def crop(unit: Unit, a: float, b: Optional[float]) -> Unit:
    """``unit`` cut to [a, b) s: the words/utterances whose midpoint lies inside, the turns cut to
    the window, times relative to ``a``."""
    b = unit.duration if b is None else min(b, unit.duration)
    items = [dict(i, start=round(max(0.0, i["start"] - a), 3), end=round(min(b, i["end"]) - a, 3))
             for i in unit.items if a <= (i["start"] + i["end"]) / 2 < b]
    turns = [(round(max(s, a) - a, 3), round(min(e, b) - a, 3), spk) for s, e, spk in unit.turns
             if min(e, b) - max(s, a) > 0.01]
    return Unit(unit.name, unit.audio[int(round(a * SAMPLE_RATE)):int(round(b * SAMPLE_RATE))],
                items, turns, f"{unit.source} {a:.1f}-{b:.1f} s")


def clean_cut(unit: Unit, near: float) -> float:
    """The middle of the silent stretch (no reference word, utterance or turn) nearest ``near`` s."""
    spans = sorted([(i["start"], i["end"]) for i in unit.items] + [(s, e) for s, e, _ in unit.turns])
    merged: list[list[float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    gaps = [(a[1] + b[0]) / 2 for a, b in zip(merged, merged[1:]) if b[0] - a[1] >= 0.1]
    if not gaps:
        raise ValueError(f"{unit.name}: no silent point to split at")
    return round(min(gaps, key=lambda g: abs(g - near)), 3)


class Sources:
    """The real audio the blocks are cut from, loaded once: the meeting clips (by meeting id),
    pyannote's sample, the LibriVox clips."""

    def __init__(self, meetings_dir: Path, models_dir: Path):
        self.meetings_dir, self.models_dir = Path(meetings_dir), Path(models_dir)
        self._meetings: Optional[dict[str, EvalFile]] = None

    def meeting(self, meeting: str) -> Unit:
        if self._meetings is None:
            self._meetings = {f.id: f for f in load_meetings(self.meetings_dir)}
        if meeting not in self._meetings:
            raise FileNotFoundError(f"no clip of meeting {meeting} in {self.meetings_dir} "
                                    f"(found {', '.join(sorted(self._meetings))})")
        f = self._meetings[meeting]
        folder = Path(f.audio).parent
        items = [{"speaker": w["speaker"], "start": w["start"], "end": w["end"], "text": w["word"],
                  "level": "word"} for w in meeting_words(folder)]
        return Unit(meeting, read_wav(f.audio), items, list(f.turns), f"AMI {meeting} ({folder.name})")

    def sample(self) -> Unit:
        f = load_sample(self.models_dir)
        items = [{"speaker": u.speaker, "start": u.start, "end": u.end, "text": u.text,
                  "level": "utterance"} for u in f.utterances]
        # the RTTM's labels (speaker90/91) -> the STM's names, by overlap
        overlap: Counter = Counter()
        for s, e, lab in f.turns:
            for i in items:
                overlap[(lab, i["speaker"])] += max(0.0, min(e, i["end"]) - max(s, i["start"]))
        names = {}
        for (lab, name), _ in overlap.most_common():
            if lab not in names and name not in names.values():
                names[lab] = name
        turns = [(s, e, names.get(lab, lab)) for s, e, lab in f.turns]
        return Unit("sample", read_wav(f.audio), items, turns, "pyannote sample")

    def reader(self, clips: tuple[str, ...]) -> Unit:
        texts = librivox_texts(self.models_dir)
        parts, items, turns, t = [], [], [], 0.0
        for n, clip in enumerate(clips):
            audio = read_wav(self.models_dir / "audio" / "librivox" / f"{_LIBRIVOX_PREFIX}{clip}.wav")
            s0, s1 = speech_extent(audio)
            audio = audio[s0:s1]
            if n:
                parts.append(np.zeros(int(READER_PAUSE_S * SAMPLE_RATE), np.float32))
                t += READER_PAUSE_S
            end = round(t + len(audio) / SAMPLE_RATE, 3)
            items.append({"speaker": READER, "start": round(t, 3), "end": end, "text": texts[clip],
                          "level": "utterance"})
            turns.append((round(t, 3), end, READER))
            parts.append(audio.astype(np.float32))
            t = end
        return Unit("reader", np.concatenate(parts), items, turns, f"LibriVox {'+'.join(clips)}")

    def unit(self, name: str) -> Unit:
        spec = UNITS[name]
        if "meeting" in spec:
            u = self.meeting(spec["meeting"])
            if spec.get("window"):
                u = crop(u, *spec["window"])
        elif "sample" in spec:
            u = self.sample()
            if spec["sample"]:
                cut = clean_cut(u, SAMPLE_SPLIT * u.duration)
                u = crop(u, 0.0, cut) if spec["sample"] == 1 else crop(u, cut, None)
        else:
            u = self.reader(spec["reader"])
        u.name = name
        return u

    def fingerprint(self) -> str:
        """A hash of every source file the blocks can read."""
        h = hashlib.sha1()
        folders = sorted(p for p in self.meetings_dir.iterdir() if (p / "ref.words.json").is_file())
        paths = [p / n for p in folders for n in ("audio.wav", "ref.words.json", "ref.rttm", "info.json")]
        audio = self.models_dir / "audio"
        paths += [audio / n for n in ("sample.wav", "sample.stm", "sample.rttm")]
        paths += [audio / "librivox" / f"{_LIBRIVOX_PREFIX}{c}.wav" for c in LIBRIVOX_IDS]
        paths.append(audio / "librivox" / "transcription")
        for p in paths:
            h.update(p.name.encode())
            h.update(p.read_bytes() if p.is_file() else b"-")
        return h.hexdigest()[:10]


def _filler_order(pool: list[str], rng: np.random.Generator):
    """The filler units forever: each round a fresh permutation of the pool, never the same unit
    twice in a row."""
    last = None
    while True:
        order = [pool[i] for i in rng.permutation(len(pool))]
        if len(order) > 1 and order[0] == last:
            order[0], order[1] = order[1], order[0]
        yield from order
        last = order[-1]


def build_recording(spec: dict, sources: Sources, out_dir: Path,
                    max_minutes: Optional[float] = None) -> tuple[EvalFile, list[Block]]:
    rng = np.random.default_rng(spec["seed"])
    scale = min(1.0, max_minutes / spec["minutes"]) if max_minutes else 1.0
    total = spec["minutes"] * 60 * scale
    cap = total / (2 * len(spec["returns"])) if scale < 1 else None
    cache: dict[str, Unit] = {}

    def unit(name: str) -> Unit:
        if name not in cache:
            u = sources.unit(name)
            cache[name] = crop(u, 0.0, cap) if cap and u.duration > cap else u
        return cache[name]

    returning = set().union(*(unit(n).speakers for _, n in spec["returns"]))
    for name in spec["filler"]:
        if unit(name).speakers & returning:
            raise ValueError(f"{spec['id']}: filler {name} has speakers of a return block: "
                             f"{sorted(unit(name).speakers & returning)}")
    fillers = _filler_order(list(spec["filler"]), rng)
    placed: list[tuple[Block, Unit]] = []
    t = 0.5
    pending = next(fillers)

    def place(name: str, role: str) -> None:
        nonlocal t
        u = unit(name)
        start = round(t + (float(rng.uniform(*PAUSE_S)) if placed else 0.0), 2)
        gain = round(float(rng.uniform(-GAIN_DB, GAIN_DB)), 2)
        placed.append((Block(len(placed), name, role, start, round(start + u.duration, 3), gain,
                             sorted(u.speakers)), u))
        t = start + u.duration

    targets = [(minute * 60 * scale, name) for minute, name in sorted(spec["returns"])] + [(total, None)]
    for target, name in targets:
        # filler while its middle still falls before the target
        while t + PAUSE_S[1] + unit(pending).duration / 2 <= target:
            place(pending, "filler")
            pending = next(fillers)
        if name is not None:
            place(name, "return")
    duration = t + 0.5
    mix = np.zeros(int(math.ceil(duration * SAMPLE_RATE)), np.float64)
    utts: list[Utterance] = []
    turns: list[tuple[float, float, str]] = []
    items_out: list[dict] = []
    for b, u in placed:
        i = int(round(b.start * SAMPLE_RATE))
        level = min(LEVEL_RMS * 10 ** (b.gain_db / 20) / active_rms(u.audio),
                    PEAK / max(1e-6, float(np.abs(u.audio).max())))
        mix[i:i + len(u.audio)] += u.audio * level
        shifted = sorted(({**it, "start": round(it["start"] + b.start, 3),
                           "end": round(it["end"] + b.start, 3), "block": b.index} for it in u.items),
                         key=lambda it: (it["start"], it["end"]))
        items_out += shifted
        words = [it for it in shifted if it["level"] == "word"]
        utts += [Utterance(x.speaker, x.start, x.end, x.text, f"{u.source} @ {b.start:.1f} s")
                 for x in group_words([{"speaker": w["speaker"], "start": w["start"], "end": w["end"],
                                        "word": w["text"]} for w in words])]
        utts += [Utterance(it["speaker"], it["start"], it["end"], it["text"], f"{u.source} @ {b.start:.1f} s")
                 for it in shifted if it["level"] != "word"]
        turns += [(round(s + b.start, 3), round(e + b.start, 3), spk) for s, e, spk in u.turns]
    utts.sort(key=lambda x: (x.start, x.end))
    turns.sort()
    mix += np.random.default_rng(spec["seed"] + 1).normal(0, NOISE_RMS, len(mix))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{spec['id']}.wav"
    write_wav(path, mix.astype(np.float32))
    (out_dir / f"{spec['id']}.rttm").write_text("".join(
        f"SPEAKER {spec['id']} 1 {s:.3f} {e - s:.3f} <NA> <NA> {spk} <NA> <NA>\n" for s, e, spk in turns))
    (out_dir / f"{spec['id']}.words.json").write_text(json.dumps(items_out, indent=0))
    blocks = [b for b, _ in placed]
    (out_dir / f"{spec['id']}.blocks.json").write_text(json.dumps([asdict(b) for b in blocks], indent=1))
    speakers = sorted({spk for _, _, spk in turns} | {x.speaker for x in utts})
    n_filler = sum(b.role == "filler" for b in blocks)
    description = (f"{duration / 60:.1f} min, {len(blocks)} blocks ({n_filler} filler): "
                   + spec["description"] + (f" (scaled to {max_minutes} min)" if scale < 1 else ""))
    return EvalFile(spec["id"], str(path), len(mix) / SAMPLE_RATE, len(speakers), utts, turns,
                    description), blocks


def build_long_recordings(meetings_dir: Path, models_dir: Path, cache_dir: Path,
                          max_minutes: Optional[float] = None, rebuild: bool = False, log=print
                          ) -> tuple[list[EvalFile], dict[str, list[Block]]]:
    """Every recording of :data:`LONG_RECORDINGS` (built once into ``cache_dir``, then reused),
    and its blocks."""
    sources = Sources(meetings_dir, models_dir)
    blob = json.dumps([LONG_VERSION, LONG_RECORDINGS, UNITS, SAMPLE_SPLIT, PAUSE_S, GAIN_DB,
                       READER_PAUSE_S, LEVEL_RMS, PEAK, NOISE_RMS, max_minutes, sources.fingerprint()],
                      sort_keys=True, default=str)
    out_dir = Path(cache_dir) / "data" / f"long-{hashlib.sha1(blob.encode()).hexdigest()[:10]}"
    manifest = out_dir / "manifest.json"
    if manifest.is_file() and not rebuild:
        m = json.loads(manifest.read_text())
        files = [EvalFile.from_json(d) for d in m["files"]]
        if all(Path(f.audio).is_file() for f in files):
            return files, {k: [Block(**b) for b in v] for k, v in m["blocks"].items()}
    log(f"building the long recordings into {out_dir}...")
    files, blocks = [], {}
    for spec in LONG_RECORDINGS:
        f, b = build_recording(spec, sources, out_dir, max_minutes)
        files.append(f)
        blocks[f.id] = b
        log(f"  {f.id}: {f.duration / 60:.1f} min, {f.num_speakers} speakers, {len(b)} blocks")
    manifest.write_text(json.dumps({"files": [asdict(f) for f in files],
                                    "blocks": {k: [asdict(x) for x in v] for k, v in blocks.items()}},
                                   indent=1))
    return files, blocks


# --------------------------------------------------------------------------- returning speakers


def _intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def _minus(spans: list[tuple[float, float]], cut: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = list(spans)
    for cs, ce in cut:
        nxt = []
        for s, e in out:
            if ce <= s or cs >= e:
                nxt.append((s, e))
                continue
            if s < cs:
                nxt.append((s, cs))
            if ce < e:
                nxt.append((ce, e))
        out = nxt
    return out


def appearance_label(speaker: str, block: Block, reference: list, hypothesis: list
                     ) -> tuple[Optional[str], float, float]:
    """The hypothesis label that covers most of ``speaker``'s speech in ``block`` -- the speech
    where no other reference speaker talks, when there is at least 0.3 s of it, else all of it --
    with the share of the covered time it has, and the seconds of the speaker's speech. (None, 0,
    seconds) when no hypothesis turn covers any of it."""
    inside = lambda s, e: e > block.start and s < block.end  # noqa: E731
    own = [(s, e) for s, e, spk in reference if spk == speaker and inside(s, e)]
    others = [(s, e) for s, e, spk in reference if spk != speaker and inside(s, e)]
    clear = _minus(own, others)
    spans = clear if sum(e - s for s, e in clear) >= 0.3 else own
    cover: Counter = Counter()
    for s, e, lab in hypothesis:
        if inside(s, e):
            cover[lab] += _intersect(spans, [(s, e)])
    seconds = sum(e - s for s, e in own)
    cover = Counter({k: v for k, v in cover.items() if v > 0})
    if not cover:
        return None, 0.0, seconds
    lab, v = cover.most_common(1)[0]
    return lab, v / sum(cover.values()), seconds


def word_labels(f: EvalFile, blocks: list[Block], ref: list, hyp: list, sp) -> dict[tuple[str, int], Counter]:
    """(reference speaker, block index) -> how many of the speaker's reference words in that block
    got each hypothesis speaker (None: no speaker), over the words the WDER alignment pairs
    (``sp``: speaker_asr.testing.scoring.wder_counts' result on ``ref`` and ``hyp``)."""
    starts = [b.start for b in blocks]
    out: dict[tuple[str, int], Counter] = {}
    for i, j, _ in sp.pairs:
        r, h = ref[i], hyp[j]
        k = max(0, bisect.bisect_right(starts, f.utterances[r.utt].start) - 1)
        out.setdefault((r.speaker, blocks[k].index), Counter())[None if h.dropped else h.speaker] += 1
    return out


def block_wder(f: EvalFile, blocks: list[Block], ref: list, sp, role: str = "return") -> tuple[int, int]:
    """(speaker errors, words scored) of the WDER alignment ``sp`` over the reference words in
    the blocks of ``role`` (with the whole recording's speaker mapping)."""
    starts = [b.start for b in blocks]

    def role_of(i: int) -> str:
        return blocks[max(0, bisect.bisect_right(starts, f.utterances[ref[i].utt].start) - 1)].role

    wrong = {i for i, _ in sp.wrong}
    mine = [i for i, _, _ in sp.pairs if role_of(i) == role]
    return sum(i in wrong for i in mine), len(mine)


def returning_speakers(f: EvalFile, blocks: list[Block], hypothesis: list, mapping: dict[str, str],
                       word_labels: Optional[dict[tuple[str, int], Counter]] = None) -> list[dict]:
    """One row per reference speaker with more than one appearance (a block where they have
    reference turns): per appearance the block, its start (min), the speaker's seconds of speech,
    the hypothesis label that covers most of that speech (and its share), and the label mapped
    to a reference speaker by ``mapping`` (the best one-to-one mapping over the whole recording);
    ``kept`` when every appearance got the same label; ``theirs`` when that label maps to the
    speaker; the longest gap (min) between the end of their speech in one appearance and its
    start in the next. With ``word_labels`` ((speaker, block) -> counts of the hypothesis speakers
    their aligned reference words got), the same for the words (``kept_words``)."""
    rows = []
    for speaker in sorted({t[2] for t in f.turns}):
        apps = []
        for b in blocks:
            own = [(s, e) for s, e, spk in f.turns if spk == speaker and e > b.start and s < b.end]
            if not own:
                continue
            label, share, seconds = appearance_label(speaker, b, f.turns, hypothesis)
            words = (word_labels or {}).get((speaker, b.index), Counter())
            first, last = min(s for s, _ in own), max(e for _, e in own)
            apps.append({"block": b.index, "unit": b.unit, "role": b.role,
                         "first_s": first, "last_s": last, "start_min": round(first / 60, 2),
                         "speech_s": round(seconds, 2), "label": label, "share": round(share, 3),
                         "mapped": mapping.get(label) if label is not None else None,
                         "word_label": words.most_common(1)[0][0] if words else None,
                         "words": sum(words.values())})
        if len(apps) < 2:
            continue
        units = [a["unit"] for a in apps]
        labels = {a["label"] for a in apps}
        kept = None not in labels and len(labels) == 1
        wlabels = {a["word_label"] for a in apps}
        gaps = [(b["first_s"] - a["last_s"]) / 60 for a, b in zip(apps, apps[1:])]
        rows.append({
            "file": f.id, "speaker": speaker,
            "returns_with": ("other utterances" if len(set(units)) == len(units)
                             else "the same clip" if len(set(units)) == 1 else "some clips again"),
            "role": apps[0]["role"], "appearances": apps,
            "longest_gap_min": round(max(gaps), 2),
            "min_speech_s": min(a["speech_s"] for a in apps),
            "kept": kept, "theirs": kept and mapping.get(next(iter(labels))) == speaker,
            "kept_words": (None not in wlabels and len(wlabels) == 1) if word_labels is not None else None,
        })
    return rows


def label_summary(apps: list[dict], key: str = "label") -> str:
    """The labels of the appearances, in order when few, else counted."""
    labels = ["none" if a[key] is None else str(a[key]) for a in apps]
    if len(labels) <= 4:
        return ", ".join(labels)
    return ", ".join(f"{lab} x{n}" for lab, n in Counter(labels).most_common())
