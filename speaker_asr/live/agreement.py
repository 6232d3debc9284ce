"""Which words of an utterance being spoken are sent as deltas: the local-agreement policy of
whisper_streaming (Machacek et al., 2023).

While an utterance grows, the live route decodes all of it again every so often. A decode's last
words are unreliable (the audio stops mid-word; Whisper punctuates the cut as an end), but text
that two successive decodes agree on rarely changes. So :meth:`LocalAgreement.update` takes
each new decode (its words, with times when the ASR gives them) and commits the longest common
prefix of it and the decode before, beyond what is already committed; the newly committed words
are the delta. Committed text is sent once and never taken back.

Decisions:

* Words are compared normalised (:func:`normalise`: Unicode NFKC, case-folded, punctuation at
  either end stripped), so "hello" and "Hello," agree: punctuation and case are what Whisper
  changes most between decodes of the same speech, and waiting for them to settle would hold
  back text for no gain in the words. What is emitted is the later decode's spelling (it heard
  more of the utterance).
* A decode is compared beyond the committed words (its *tail*): when its first words are the
  committed ones (normalised), the rest; otherwise, with word times, the words that start after
  the last committed word ends (0.1 s tolerance, as whisper_streaming) less any repetition of
  the last committed words at their start; without times, the words past the committed count.
* :meth:`LocalAgreement.finish` takes the utterance's final decode (the item's transcript) and
  returns the rest to send. When the final decode starts with the committed words spelled the
  same, the concatenated deltas are exactly the final transcript. When it does not (it changed a
  committed word, or only its case or punctuation), the deltas cannot be taken back: the rest is
  still sent (the final decode's words past the committed ones), :attr:`Finish.revised` says the
  deltas differ, and the completed event carries the full final transcript, which a client shows
  in their place (OpenAI's clients replace an item's deltas by its completed transcript).
* Text is the words' texts joined as Whisper spells them (a word's leading space is its
  separator), with the utterance's leading space dropped (:func:`words_text`), so the first
  delta starts with a letter, as OpenAI's transcript does.

Pure: no torch, no numpy.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Optional, Sequence

from speaker_asr.types import Word

# a word "after" the committed ones may start this much before the last committed word's end
TIME_TOLERANCE_S = 0.1
# the longest repetition of the committed words' end removed from a tail's start
MAX_OVERLAP_WORDS = 5


def normalise(text: str) -> str:
    """A word as agreement compares it: NFKC, case-folded, whitespace and punctuation at either
    end stripped; a word of punctuation only is compared as it is (stripped of whitespace)."""
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    start, end = 0, len(folded)
    while start < end and unicodedata.category(folded[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(folded[end - 1]).startswith("P"):
        end -= 1
    return folded[start:end].strip() or folded


def _piece(text: str) -> str:
    """A word's text as it is joined: trailing whitespace dropped, leading whitespace one space."""
    text = text.rstrip()
    if text and text[0].isspace():
        text = " " + text.lstrip()
    return text


def _joined(words: Sequence[Word]) -> str:
    return "".join(_piece(w.text) for w in words)


def words_text(words: Sequence[Word]) -> str:
    """The text of an utterance's words: the final transcript is ``words_text(final_words)``
    and the deltas add up to ``words_text(committed)``."""
    return _joined(words).lstrip()


def _same(a: Sequence[Word], b: Sequence[Word]) -> bool:
    return len(a) == len(b) and all(normalise(x.text) == normalise(y.text) for x, y in zip(a, b))


@dataclass(frozen=True)
class Delta:
    """What one decode committed: the words and the text to send (empty: nothing new)."""

    text: str = ""
    words: tuple[Word, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.text)


@dataclass(frozen=True)
class Finish:
    """The end of an utterance: ``delta`` is the last text to send, ``transcript`` the final
    decode's text (the completed event's), ``revised`` whether the deltas sent add up to
    something else than ``transcript`` (see the module's docstring)."""

    delta: str
    transcript: str
    revised: bool
    words: tuple[Word, ...] = ()


class LocalAgreement:
    """One utterance's deltas (one item): :meth:`update` with each decode of the growing audio,
    :meth:`finish` with the final one. Not thread-safe: one utterance, one caller."""

    def __init__(self) -> None:
        self.committed: list[Word] = []
        self._previous: Optional[list[Word]] = None  # the last decode's uncommitted words
        self._finished = False

    @property
    def text(self) -> str:
        """The committed text: every delta sent so far, concatenated."""
        return words_text(self.committed)

    def tail(self, words: Sequence[Word]) -> list[Word]:
        """The words of a decode past the committed ones (see the module's docstring)."""
        words = [w for w in words if w.text.strip()]
        n = len(self.committed)
        if n == 0:
            return words
        if _same(words[:n], self.committed):
            return words[n:]
        last_end = self.committed[-1].end
        if last_end is not None and words and all(w.start is not None for w in words):
            later = [w for w in words if w.start > last_end - TIME_TOLERANCE_S]
            for k in range(min(MAX_OVERLAP_WORDS, n, len(later)), 0, -1):
                if _same(later[:k], self.committed[-k:]):
                    return later[k:]
            return later
        return words[n:]

    def _send(self, words: Sequence[Word]) -> str:
        """The text of newly committed words, as it continues the committed text."""
        text = _joined(words)
        return text.lstrip() if not self.committed else text

    def update(self, words: Sequence[Word]) -> Delta:
        """A new decode of the growing utterance -> what it commits (an empty :class:`Delta`
        for the first decode, or when it agrees with the one before on nothing new)."""
        if self._finished:
            raise RuntimeError("this utterance is finished; start a LocalAgreement for the next one")
        tail = self.tail(words)
        previous, self._previous = self._previous, tail
        if previous is None:
            return Delta()
        agreed = 0
        while (agreed < len(previous) and agreed < len(tail)
               and normalise(previous[agreed].text) == normalise(tail[agreed].text)):
            agreed += 1
        if agreed == 0:
            return Delta()
        new = tail[:agreed]  # the later decode's spelling and times
        text = self._send(new)
        self.committed.extend(new)
        self._previous = tail[agreed:]
        return Delta(text, tuple(new))

    def finish(self, final_words: Sequence[Word]) -> Finish:
        """The utterance's final decode -> the last delta and the transcript. Concatenated,
        the deltas equal the transcript unless :attr:`Finish.revised`."""
        if self._finished:
            raise RuntimeError("this utterance is already finished")
        self._finished = True
        final = [w for w in final_words if w.text.strip()]
        transcript = words_text(final)
        n = len(self.committed)
        revised = words_text(final[:n]) != self.text  # the final decode changed committed text
        rest = self.tail(final) if revised else final[n:]
        delta = self._send(rest)
        self.committed.extend(rest)
        return Finish(delta, transcript, revised, tuple(rest))
