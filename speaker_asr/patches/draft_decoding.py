"""The previous decode of a growing utterance as the draft of the next one (speculative decoding
with a draft that costs nothing).

A live utterance is decoded again and again as it grows (speaker_asr/live/session.py): each decode
sees the audio of the one before and a little more, and its tokens repeat the previous decode's
almost everywhere. Greedy decoding makes one decoder step per token; on a CPU a step of a small
Whisper reads the whole decoder and the vocabulary projection from memory, so a 20 s utterance's
90 tokens cost 90 steps. transformers' assisted generation verifies several proposed tokens in
one step and keeps exactly the ones the model itself picks (greedy: its argmax at every position),
so the text and every token are what plain greedy decoding gives, in a few steps where the
proposals hold.

:class:`DraftCandidates` proposes them, prompt-lookup style: the previous decode's tokens that
followed the last tokens generated (the longest n-gram, up to 4, whose occurrence in the draft lies
nearest the current position; failing that the last text tokens alone, so a timestamp token that
moved by 20 ms does not lose the thread). :func:`install` hooks one model instance: its
``generate`` records the tokens it produced for the next decode, and its
``_get_candidate_generator`` returns a :class:`DraftCandidates` where the request set a draft.
Both only act inside :data:`DRAFT`'s scope (one thread, one request): other requests take the
stock paths. The transcriber (speaker_asr/asr/transcriber.py) sets the scope and turns assisted
generation on (``prompt_lookup_num_tokens``) only for greedy decoding without an assistant.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

from speaker_asr.patches.scope import RequestScope

# tokens proposed at once: a step verifying 12 costs little more than one token's step on a CPU
# (the weights are read once); a wrong early token wastes that step's extra positions. Of the
# counts measured, 12 strikes that balance best (docs/measurements.md, "Figures behind the speed
# fixes' reasons")
PROPOSED = 12
LONGEST_NGRAM = 4


@dataclass
class DraftTokens:
    """One decode's exchange with the patch: ``given``, the previous decode's tokens (None: decode
    plainly); ``generated``, filled by the decode with its own tokens (the next one's draft), None
    where the patch is not installed or the decode made more than one sequence."""

    given: Optional[list[int]] = None
    generated: Optional[list[int]] = None
    steps: int = 0  # verification steps taken (what the draft saved is the tokens minus these)
    verify: bool = False  # set by the transcriber where the decode may use the draft


DRAFT = RequestScope(None)


def draft_allowed(generate_kwargs: dict) -> bool:
    """Greedy decoding, one beam, no assistant and no sampled retries: the decodes a draft can
    speed up without changing them."""
    temperature = generate_kwargs.get("temperature")
    return (not generate_kwargs.get("do_sample") and generate_kwargs.get("num_beams", 1) == 1
            and "assistant_model" not in generate_kwargs
            and not isinstance(temperature, (tuple, list)) and not temperature)


def propose(sequence: list[int], draft: list[int], first_special: int, count: int = PROPOSED) -> list[int]:
    """The draft's tokens to propose after ``sequence`` (the tokens so far, prompt included), at
    most ``count``: where the longest tail of ``sequence`` (up to :data:`LONGEST_NGRAM` tokens)
    occurs in ``draft`` nearest to ``sequence``'s own length, what follows it there. Failing that,
    the same with the text tokens alone (ids below ``first_special``: no timestamps or control
    tokens), and a timestamp just generated on its own is proposed again first (Whisper closes a
    segment and opens the next with the same timestamp). Empty when nothing matches."""
    here = len(sequence)
    for size in range(min(LONGEST_NGRAM, here), 0, -1):
        at = _nearest(draft, sequence[-size:], here)
        if at is not None:
            return draft[at:at + count]
    text_at = [i for i, token in enumerate(draft) if token < first_special]
    text = [token for token in sequence if token < first_special]
    draft_text = [draft[i] for i in text_at]
    for size in range(min(3, len(text)), 0, -1):
        at = _nearest(draft_text, text[-size:], len(text))
        if at is None:
            continue
        start = text_at[at] if at < len(text_at) else len(draft)
        following = [t for t in draft[start:] if t < first_special]
        last = sequence[-1]
        opened = last >= first_special and (len(sequence) < 2 or sequence[-2] < first_special)
        return ([last] if opened else []) + following[:count - (1 if opened else 0)]
    return []


def _nearest(haystack: list[int], needle: list[int], position: int) -> Optional[int]:
    """The index just after an occurrence of ``needle`` in ``haystack``, the occurrence ending
    nearest ``position``; None when there is none."""
    size, best = len(needle), None
    first = needle[0]
    for end in range(size, len(haystack) + 1):
        if haystack[end - size] == first and haystack[end - size:end] == needle:
            if best is None or abs(end - position) < abs(best - position):
                best = end
    return best


@functools.cache
def _candidate_class():
    import torch
    from transformers.generation.candidate_generator import CandidateGenerator

    class DraftCandidates(CandidateGenerator):
        """transformers' candidate generator over a fixed draft (see the module docstring)."""

        def __init__(self, draft: DraftTokens, first_special: int, max_length: Optional[int]):
            self.draft = draft
            self.tokens = list(draft.given or ())
            self.first_special = first_special
            self.max_length = max_length

        def get_candidates(self, input_ids, *args, **kwargs):
            length = input_ids.shape[1]
            room = PROPOSED if self.max_length is None else min(PROPOSED, self.max_length - length - 1)
            proposed = []
            if room > 0:
                proposed = propose(input_ids[0].tolist(), self.tokens, self.first_special, room)
            self.draft.steps += 1
            if not proposed:
                return input_ids, None
            extra = torch.tensor([proposed], dtype=input_ids.dtype, device=input_ids.device)
            return torch.cat([input_ids, extra], dim=1), None

        def update_candidate_strategy(self, *args, **kwargs):
            return None

    return DraftCandidates


def install(model) -> Optional[str]:
    """Hook ``model`` (see the module docstring). None when it applied, else why not."""
    stock_candidates = getattr(model, "_get_candidate_generator", None)
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = min(eos) if eos else None
    if stock_candidates is None or not isinstance(eos, int):
        return "transformers' generation has no candidate generator to hand a draft to"
    try:
        _candidate_class()
    except ImportError:
        return "transformers has no CandidateGenerator"
    stock_generate = model.generate

    @functools.wraps(stock_candidates)
    def get_candidate_generator(generation_config, *args, **kwargs):
        draft = DRAFT.get()
        # only where the transcriber turned it on: an assistant's decode keeps its assistant
        if draft is None or not draft.verify or not draft.given:
            return stock_candidates(generation_config, *args, **kwargs)
        return _candidate_class()(draft, eos, getattr(generation_config, "max_length", None))

    @functools.wraps(stock_generate)
    def generate(*args, **kwargs):
        out = stock_generate(*args, **kwargs)
        draft = DRAFT.get()
        if draft is not None:
            draft.generated = _sequence(out, eos)
        return out

    model._get_candidate_generator = get_candidate_generator
    model.generate = generate
    return None


def _sequence(out: Any, eos: int) -> Optional[list[int]]:
    """The one sequence ``generate`` returned (a tensor, or a dict with ``sequences``), without
    its end-of-text tokens; None for a batch."""
    sequences = out.get("sequences") if isinstance(out, dict) else getattr(out, "sequences", out)
    shape = getattr(sequences, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != 1:
        return None
    return [int(t) for t in sequences[0].tolist() if int(t) != eos]
