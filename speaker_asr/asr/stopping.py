"""Ending a Whisper decode early, from inside generate: the stopping criteria checked once per
generated token. Each token is a unit of the scheduler's (speaker_asr/scheduling/): there the
decode gives the ASR lane up to work ranked first, and a cancelled job's decode stops
(:class:`~speaker_asr.scheduling.WorkCancelled`). A caller's ``cancel`` event stops the decode with :class:`DecodeCancelled` (a
live session's partial decode that its utterance's end made useless), and ``stop_loops`` ends
the sequences whose text goes round in a loop (:func:`~speaker_asr.asr.hallucination.looping`)
instead of letting them run on to the token limit. The transcriber
(:class:`~speaker_asr.asr.transcriber.WhisperTranscriber`) passes them to generate as its
``stopping_criteria``.
"""

from __future__ import annotations

import threading
from typing import Optional

from speaker_asr.asr.hallucination import looping
from speaker_asr.scheduling import checkpoint


class DecodeCancelled(Exception):
    """A decode stopped by its caller through its ``cancel`` event."""


def stopping_criteria(cancel: Optional[threading.Event], stop_loops: bool, timestamp_begin: Optional[int]):
    """generate's stopping criteria, checked once per generated token: the scheduler's
    :func:`~speaker_asr.scheduling.checkpoint`; with ``cancel``, a
    :class:`DecodeCancelled` at the first token after it is set; with ``stop_loops``, the end of
    the sequences whose text tokens loop (:func:`~speaker_asr.asr.hallucination.looping`; the
    timestamp tokens from ``timestamp_begin`` on left out: each repeat of a looping sentence
    gets new times)."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Stop(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            checkpoint()
            if cancel is not None and cancel.is_set():
                raise DecodeCancelled("cancelled while it decoded")
            done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            if stop_loops:
                for i, row in enumerate(input_ids.tolist()):
                    done[i] = looping([t for t in row if timestamp_begin is None or t < timestamp_begin])
            return done

    return StoppingCriteriaList([Stop()])
