"""Many varied generated dialogues, split once into a tuning part and a held-out part.

Each dialogue is a random script drawn from a seed: 2-5 speakers (espeak-ng voices of several
accents and engines, and the LibriVox reader at several pitches), turns from a sentence pool
(statements, questions, one-word answers), pauses of 0-2 s, overlapping turn starts,
backchannels ("mm-hm", "yes") said *inside* another speaker's turn, speakers at different levels,
and some files passed through 8 kHz mu-law telephone quality. :func:`generated_specs` returns the
specs in the format of ``data.DIALOGUES`` with the extra keys ``data.build_dialogue`` reads.

The split is fixed here, before any rule is chosen: the tuning part draws its seeds from 1000 on
and its sentences from the even entries of the pool, the held-out part from 2000 on and the odd
entries, so no held-out script line was ever seen while tuning. Rules and thresholds are chosen
on ``tuning`` only; ``heldout`` is reported, not fitted.
"""

from __future__ import annotations

import numpy as np

# espeak-ng voices (voice, words per minute range)
VOICES = ["en-us+m1", "en-us+m3", "en-us+m7", "en-us+f2", "en-us+f4", "en-gb+m2", "en-gb+f3",
          "en-gb-x-rp+m4", "en-gb-x-rp+f1", "en-gb-scotland+m5", "en-gb-x-gbclan+f5", "en-029+m6",
          "en-us-nyc+f1", "en-gb-x-gbcwmd+m3", "en-us+klatt2", "en-us+klatt4"]
READER_PITCHES = [0, -350, 250, 450]

SENTENCES = [
    "Did you get a chance to look at the report?",
    "I read most of it last night.",
    "The numbers for March look much better than February.",
    "Can we move the meeting to Thursday?",
    "That works for me.",
    "I think the second option is cheaper in the long run.",
    "Who is going to call the supplier?",
    "I can do it after lunch.",
    "We should ask Maria before we decide anything.",
    "She is away until next Monday.",
    "Then let's wait for her.",
    "How long will the repairs take?",
    "About two weeks, if the parts arrive on time.",
    "That is longer than I expected.",
    "Could you send me the address again?",
    "I already sent it this morning.",
    "Let me check my other inbox.",
    "The train was late again today.",
    "It has been late every day this week.",
    "Maybe we should start the call a bit later.",
    "What did the customer say about the price?",
    "He said it was fine, but he wants a discount next year.",
    "We can talk about that in December.",
    "Is everyone here now?",
    "I think Tom is still on his way.",
    "Okay, let's begin without him.",
    "The first item is the new website.",
    "I like the colours, but the menu is confusing.",
    "Which part of the menu?",
    "The second level, where the products are listed.",
    "Good point, we can simplify that.",
    "When is the launch planned?",
    "The plan says the end of the month.",
    "That sounds optimistic to me.",
    "Honestly, I agree with you.",
    "Let's write down the open questions.",
    "Number one, the budget for advertising.",
    "Number two, who writes the announcement.",
    "I would be happy to write it.",
    "Great, thank you very much.",
    "Where did you park the car?",
    "Behind the library, next to the old church.",
    "Did you remember to buy milk?",
    "I forgot, sorry, I will go again later.",
    "The weather is supposed to get worse tomorrow.",
    "Then we should finish the garden today.",
    "How was your holiday in Portugal?",
    "Wonderful, the food was excellent and the beaches were empty.",
    "I have never been there.",
    "You should go in the spring, it is not too hot.",
    "Can you hear me clearly now?",
    "Your voice is breaking up a little.",
    "Let me switch to another network.",
    "Is that better?",
    "Much better, thanks.",
    "So where were we?",
    "We were talking about the schedule for the exam.",
    "The exam is on the fourteenth, at nine in the morning.",
    "Do we need to bring our own paper?",
    "No, everything will be provided.",
    "What happens if someone is ill on that day?",
    "They can take it again in January.",
    "That seems fair.",
    "I still have a question about the second chapter.",
    "Go ahead, ask.",
    "Why does the author change the narrator halfway through?",
    "I think she wants us to doubt the first story.",
    "Interesting, I never thought about it that way.",
    "We are running out of time.",
    "Let's continue this next week.",
]
SHORT_TURNS = ["Yes.", "No.", "Okay.", "Sure.", "Right.", "Exactly.", "Maybe.", "Thanks.",
               "Really?", "Why?", "Great.", "Fine."]
BACKCHANNELS_INSIDE = ["Mm-hm.", "Yes.", "Right.", "Okay.", "Yeah.", "I see."]
# LibriVox clip pieces the reader can read (data.LIBRIVOX_IDS)
READER_CLIPS = ["@0870", "@0880", "@0890", "@0920", "@0930"]

PARTS = {"tuning": 1000, "heldout": 2000}


def generated_specs(part: str, count: int) -> list[dict]:
    """``count`` dialogue specs of ``part`` ("tuning" or "heldout")."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {sorted(PARTS)}, got {part!r}")
    pool = SENTENCES[0::2] if part == "tuning" else SENTENCES[1::2]
    short = SHORT_TURNS[0::2] if part == "tuning" else SHORT_TURNS[1::2]
    specs = []
    for k in range(count):
        seed = PARTS[part] + k
        rng = np.random.default_rng(seed)
        n_speakers = int(rng.choice([2, 2, 3, 3, 4, 5]))
        reader = rng.random() < 0.4
        voices = list(rng.choice(VOICES, size=n_speakers - int(reader), replace=False))
        names = [chr(ord("A") + i) for i in range(n_speakers)]
        speakers = {}
        for i, name in enumerate(names):
            if reader and i == 0:
                speakers[name] = ("reader", int(rng.choice(READER_PITCHES)))
            else:
                speakers[name] = ("tts", str(voices.pop()), int(rng.integers(140, 200)))
        tts_names = [n for n in names if speakers[n][0] == "tts"]
        lines, prev = [], None
        clips = list(READER_CLIPS)
        rng.shuffle(clips)
        for _ in range(int(rng.integers(10, 20))):
            choices = [n for n in names if n != prev] or names
            spk = str(rng.choice(choices))
            if speakers[spk][0] == "reader":
                if not clips:
                    spk = str(rng.choice([n for n in tts_names if n != prev] or tts_names))
                else:
                    lines.append((spk, clips.pop()))
                    prev = spk
                    continue
            text = str(rng.choice(short)) if rng.random() < 0.25 else str(rng.choice(pool))
            lines.append((spk, text))
            prev = spk
        gap_max = float(rng.choice([0.3, 0.8, 2.0]))
        spec = dict(
            id=f"{'t' if part == 'tuning' else 'h'}{k + 1:02d}", seed=seed,
            speakers=speakers, script=lines, gap=(0.0, gap_max),
            overlap_prob=float(rng.choice([0.0, 0.15, 0.35])),
            listener=None, backchannel_prob=0.0,
            inside_backchannel_prob=float(rng.choice([0.0, 0.3, 0.6])),
            gains_db={n: float(rng.uniform(-8.0, 4.0)) for n in names},
            phone=bool(rng.random() < 0.25),
        )
        who = ", ".join(f"{n}: {v[1]}" if v[0] == "tts" else f"{n}: reader {v[1]:+d} cents"
                        for n, v in speakers.items())
        spec["description"] = (
            f"{n_speakers} speakers ({who}); "
            f"pauses 0-{gap_max:g} s, overlap {spec['overlap_prob']:g}, backchannels inside turns "
            f"{spec['inside_backchannel_prob']:g}, levels -8..+4 dB" + (", 8 kHz mu-law phone" if spec["phone"] else ""))
        specs.append(spec)
    return specs


def phone_quality(audio: np.ndarray, sample_rate: int = 16_000) -> np.ndarray:
    """8 kHz mu-law telephone quality, back at ``sample_rate``."""
    from scipy.signal import resample_poly

    narrow = resample_poly(audio, 1, sample_rate // 8000)
    narrow = np.clip(narrow, -1.0, 1.0)
    mu = 255.0
    coded = np.sign(narrow) * np.log1p(mu * np.abs(narrow)) / np.log1p(mu)
    coded = np.round(coded * 127.0) / 127.0  # 8 bits
    decoded = np.sign(coded) * ((1.0 + mu) ** np.abs(coded) - 1.0) / mu
    return resample_poly(decoded, sample_rate // 8000, 1).astype(np.float32)
