"""Resampling (to 16 kHz: speaker_asr.audio.decode.SAMPLE_RATE), the one way: scipy's polyphase filter (``resample_poly``, its own
anti-aliasing Kaiser window), for a whole file (:func:`resample`, speaker_asr/audio/decode.py)
and for a live stream given in pieces (:class:`StreamResampler`, speaker_asr/live/audio_format.py),
which gives, piece by piece, the samples the whole signal gives. (soxr's ``ResampleStream`` would
serve the stream too, with another filter: files and live sessions would then hear different
audio, and every measured live figure would move.)"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

def resample(audio: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Polyphase resampling (anti-aliased); returns float32."""
    if orig_sr == target_sr or audio.size == 0:
        return audio.astype(np.float32, copy=False)
    from scipy.signal import resample_poly

    ratio = Fraction(target_sr, int(orig_sr)).limit_denominator(1000)
    out = resample_poly(audio.astype(np.float32, copy=False), ratio.numerator, ratio.denominator,
                        axis=0)
    return out.astype(np.float32, copy=False)


class StreamResampler:
    """scipy's ``resample_poly`` from ``orig_sr`` to ``target_sr`` over a stream given in
    pieces: :meth:`push` returns the output samples that are final (their filter window lies in
    audio already given), :meth:`flush` the rest (the stream's end, zero-padded as
    ``resample_poly`` pads a whole signal) and starts a new stream.

    Output ``n`` of ``resample_poly`` is centred on input time ``n * down / up`` and reads the
    inputs within ``half_len / up`` samples of it (``half_len = 10 * max(up, down)``, scipy's
    filter). A window of the input that starts at a multiple of ``down`` gives, for the outputs
    whose inputs it holds, the samples the whole signal gives: those are sent, the window's
    start moves up, and only the inputs later outputs still read are kept."""

    def __init__(self, orig_sr: int, target_sr: int):
        ratio = Fraction(int(target_sr), int(orig_sr))
        self.up, self.down = ratio.numerator, ratio.denominator
        self.half_len = 10 * max(self.up, self.down)
        self._filter = None
        if not self.passthrough:  # resample_poly's own filter, designed once instead of per call
            from scipy.signal import firwin

            self._filter = firwin(2 * self.half_len + 1, 1.0 / max(self.up, self.down),
                                  window=("kaiser", 5.0)).astype(np.float32)
        self._reset()

    def _reset(self) -> None:
        self._kept = np.zeros(0, dtype=np.float32)
        self._start = 0  # input index of self._kept[0]: a multiple of down
        self._sent = 0  # outputs sent so far

    @property
    def passthrough(self) -> bool:
        return self.up == self.down

    def _resampled(self) -> np.ndarray:
        from scipy.signal import resample_poly

        return resample_poly(self._kept, self.up, self.down, window=self._filter).astype(np.float32, copy=False)

    def push(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        if self.passthrough:
            return x.copy()
        self._kept = np.concatenate([self._kept, x])
        total = self._start + len(self._kept)
        # the last output whose inputs are all given: n * down + half_len <= (total - 1) * up
        last = ((total - 1) * self.up - self.half_len) // self.down if total else -1
        if last < self._sent:
            return np.zeros(0, dtype=np.float32)
        first_here = self._start * self.up // self.down  # the window's output 0
        y = self._resampled()[self._sent - first_here: last + 1 - first_here]
        self._sent = last + 1
        # inputs the next output reads start at ceil((next * down - half_len) / up)
        needed = max(0, -(-(self._sent * self.down - self.half_len) // self.up))
        start = needed // self.down * self.down
        if start > self._start:
            self._kept = self._kept[start - self._start:]
            self._start = start
        return y

    def flush(self) -> np.ndarray:
        """The stream's last samples (its end zero-padded); the next push starts a new stream."""
        if self.passthrough:
            return np.zeros(0, dtype=np.float32)
        total = self._start + len(self._kept)
        count = -(-total * self.up // self.down)  # resample_poly's output length
        first_here = self._start * self.up // self.down
        y = self._resampled()[self._sent - first_here: count - first_here] if count > self._sent \
            else np.zeros(0, dtype=np.float32)
        self._reset()
        return y
