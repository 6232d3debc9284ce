"""One decoding pass per window in chunked long-form decoding, under every transformers release.

Chunked decoding (``long_form="chunked"``) cuts long audio into overlapping 30 s windows, decodes
them in batches and merges the windows' texts on their overlaps. transformers 4.51 (the version
the Inference Endpoints image pins) decodes each window once -- without word timestamps. With
word timestamps it, and 4.57 and 5 always, run every window through Whisper's sequential
algorithm instead: when a window's text ends inside a segment (no
closing timestamp, the usual case for a window cut mid-speech), it throws that segment away and
decodes the window *again* from the segment's start, a second encoder pass and decoding run for
the batch. The re-decoded stretch lies in the window's right overlap, which the next window
covers from its own start and the merge reconciles anyway, so it is paid for twice (and
transformers 4.51's pipeline then drops text when word timestamps are asked for, and a batch
of two or more windows fails with an IndexError in its token timestamps). One pass per window
saves that second pass; its timings and word error rates: docs/measurements.md ("What each speed
fix gains").

:func:`install` wraps one model's segment splitter so that, inside :func:`one_pass_per_window`,
an unfinished window keeps its tail as a last segment (the tokens the single pass wrote, with
their word times) and counts as done, which is transformers 4.51's output for the window without
word timestamps. Outside
that context (audio that fits one window, sequential long-form) nothing changes.
"""

from __future__ import annotations

import inspect

from speaker_asr.patches.scope import RequestScope

# whether windows decoded on this thread get one pass (set around a chunked request's decoding)
_ONE_PASS = RequestScope(False)
# the right overlap of each window of the batch being decoded, in feature frames (set around each
# batch by the pipeline): the part of a window that the next window decodes again
_RIGHT_OVERLAP = RequestScope(None)
HOP_LENGTH = 160  # samples per feature frame (Whisper's feature extractor)
# the keyword arguments transformers 5's generate passes to _retrieve_segment and this reads
_NEEDED = ("seek_sequence", "seek_outputs", "time_offset", "seek_num_frames",
           "time_precision_features", "prev_idx", "idx", "return_token_timestamps",
           "decoder_input_ids")


def one_pass_per_window(enabled: bool = True):
    """Within this block (this thread), windows decoded by an installed model get one pass."""
    return _ONE_PASS.set(enabled)


def _continued_windows_merge(word_timestamps: bool) -> bool:
    """Whether transformers' window merge handles a window decoded in more than one pass. 4.51's
    ``_decode_asr`` does not with word timestamps (the token times restart at each pass, and the
    merge then drops words), so there every window keeps its single pass when words are asked for
    (checked on the 49 s LibriVox test file and on the LibriVox clips followed by pyannote's
    sample: no word lost that way; 4.51's word mode still writes fewer words of the latter than
    its plain decoding, in its own window merge: docs/measurements.md, "Word timestamps:
    memory")."""
    from speaker_asr.compat import transformers_at_least

    return transformers_at_least("4.52") or not word_timestamps


def right_overlaps(stride, hop_length: int = HOP_LENGTH):
    """Within this block (this thread), the windows being decoded have the pipeline's ``stride``:
    ``(samples, left, right)`` for one window or a list of them for a batch."""
    if stride is None:
        rights = None
    else:
        rows = [stride] if isinstance(stride, tuple) else list(stride)
        rights = [int(row[2]) // hop_length for row in rows]
    return _RIGHT_OVERLAP.set(rights)


def keep_tail(segments: list, offset, **kw) -> tuple[list, object]:
    """``(segments, offset)`` of a window as one pass leaves it: when the splitter sent the
    decoder back to an unfinished segment (``offset`` short of the window) that starts inside the
    window's right overlap (which the next window decodes from its own start), the tokens after
    the last complete segment are kept as a final segment and the offset covers the whole window.
    An unfinished stretch that begins before the overlap -- always so in the last window, which
    has none -- is decoded again as Whisper does: nothing else would cover it (kept as a tail
    instead, the end of a recording can go untranscribed: docs/measurements.md, "Figures behind
    the speed fixes' reasons"). Not for word timestamps under
    transformers 4.51, whose window merge cannot take a window decoded twice."""
    prev, idx = kw["prev_idx"], kw["idx"]
    frames = kw["seek_num_frames"][prev]
    if offset >= frames:
        return segments, offset
    rights = _RIGHT_OVERLAP.get()
    if rights is not None and prev < len(rights) and offset < frames - rights[prev] \
            and _continued_windows_merge(kw["return_token_timestamps"]):
        return segments, offset
    sequence = kw["seek_sequence"]
    start = kw["decoder_input_ids"].shape[-1]  # the window's output starts after its prompt
    covered = segments[-1]["idxs"][1] - start if segments else 0
    if covered < len(sequence):
        result = kw["seek_outputs"][idx]
        window_start = kw["time_offset"][prev]
        tail = {"start": segments[-1]["end"] if segments else window_start,
                "end": window_start + frames * kw["time_precision_features"],
                "tokens": sequence[covered:],
                "idxs": (start + covered, start + len(sequence)),
                "result": result}
        if kw["return_token_timestamps"]:
            tail["token_timestamps"] = (result["token_timestamps"][start + covered:start + len(sequence)]
                                        + window_start)
        segments = [*segments, tail]
    return segments, frames


def install(model) -> bool:
    """Wrap ``model._retrieve_segment`` (transformers' splitter of a window's tokens into
    segments). Returns whether it applied: where the splitter takes the keywords this reads
    (4.51, 4.57 and 5.x do)."""
    stock = getattr(model, "_retrieve_segment", None)
    if stock is None:
        return False
    try:
        parameters = inspect.signature(stock).parameters
    except (TypeError, ValueError):
        return False
    if not all(name in parameters for name in _NEEDED):
        return False

    def retrieve_segment(**kw):
        segments, offset = stock(**kw)
        if not _ONE_PASS.get():
            return segments, offset
        return keep_tail(segments, offset, **kw)

    model._retrieve_segment = retrieve_segment
    return True
