"""chunk_windows: in chunked long-form decoding each window is decoded once (transformers 4.51's
behaviour), keeping the unfinished tail the single pass wrote instead of decoding it again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speaker_asr.patches.chunk_windows import install, keep_tail, one_pass_per_window, right_overlaps

TS = 1000  # first timestamp token id in these hand-made windows


def _window(tokens, prompt_len=2):
    """The keywords transformers 5's generate passes to _retrieve_segment for one window."""
    sequence = torch.tensor(tokens)
    times = torch.arange(prompt_len + len(tokens), dtype=torch.float32) * 0.1
    return {"seek_sequence": sequence, "seek_outputs": [{"token_timestamps": times}],
            "time_offset": torch.tensor([20.0], dtype=torch.float64),
            "seek_num_frames": torch.tensor([3000]), "time_precision_features": 0.01,
            "prev_idx": 0, "idx": 0, "return_token_timestamps": True,
            "decoder_input_ids": torch.zeros(1, prompt_len, dtype=torch.long)}


def test_unfinished_window_keeps_its_tail_and_counts_as_done():
    # <|0.00|> a b <|1.00|><|1.00|> c d   (the last segment has no closing timestamp)
    kw = _window([TS, 5, 6, TS + 50, TS + 50, 7, 8])
    stock = [{"start": 20.0, "end": 21.0, "tokens": kw["seek_sequence"][:5], "idxs": (2, 7),
              "result": kw["seek_outputs"][0]}]
    segments, offset = keep_tail(stock, torch.tensor(100), **kw)  # stock: seek back to 1.00
    assert offset == 3000  # the whole window is done: no second pass over its end
    assert segments[0] is stock[0] and len(segments) == 2
    tail = segments[1]
    assert tail["tokens"].tolist() == [7, 8]
    assert tail["idxs"] == (7, 9)
    assert tail["start"] == 21.0 and tail["end"] == pytest.approx(50.0)
    assert torch.allclose(tail["token_timestamps"].double(), torch.tensor([20.7, 20.8], dtype=torch.float64))


def test_unfinished_stretch_outside_the_overlap_is_decoded_again():
    """Only the window's right overlap is decoded again by the next window: an unfinished stretch
    that starts before it (in the last window: anywhere, it has no overlap) is left to Whisper's
    second pass, else that speech would be lost."""
    from speaker_asr.compat import transformers_at_least

    kw = {**_window([TS, 5, 6, TS + 50, TS + 50, 7, 8]), "return_token_timestamps": False}
    stock = [{"start": 20.0, "end": 21.0, "tokens": kw["seek_sequence"][:5], "idxs": (2, 7),
              "result": kw["seek_outputs"][0]}]
    # a middle window with 5 s (500 frames) of right overlap; the tail starts at frame 100
    with right_overlaps([(480_000, 80_000, 80_000)]):
        assert keep_tail(stock, torch.tensor(100), **kw) == (stock, 100)
        assert keep_tail(stock, torch.tensor(2600), **kw)[1] == 3000  # inside the overlap: kept
    # the last window of the audio (no right overlap): decoded again from where it stopped
    with right_overlaps((480_000, 80_000, 0)):
        assert keep_tail(stock, torch.tensor(2600), **kw) == (stock, 2600)
        # with word timestamps too, except under transformers 4.51, whose window merge lost text
        # of a window decoded twice: there the single pass is kept
        kw["return_token_timestamps"] = True
        offset = keep_tail(stock, torch.tensor(2600), **kw)[1]
        assert offset == (2600 if transformers_at_least("4.52") else 3000)


def test_finished_window_is_left_as_transformers_split_it():
    kw = _window([TS, 5, 6, TS + 50])
    stock = [{"start": 20.0, "end": 21.0, "tokens": kw["seek_sequence"], "idxs": (2, 6)}]
    assert keep_tail(stock, torch.tensor(3000), **kw) == (stock, 3000)


def test_window_without_complete_segment_is_kept_whole():
    # transformers returns the whole window as one segment and seeks to its last timestamp
    kw = _window([TS, 5, 6, TS + 40, 7])
    whole = [{"start": 20.0, "end": 20.8, "tokens": kw["seek_sequence"], "idxs": (2, 7)}]
    segments, offset = keep_tail(whole, torch.tensor(80), **kw)
    assert segments == whole and offset == 3000


def test_splitter_changes_only_inside_the_context(tiny_models):
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(str(tiny_models["whisper"]))
    assert install(model)
    kw = _window([TS, 5, 6, TS + 50, TS + 50, 7, 8])
    # the stock splitter of a real transformers (4.51, 4.57 or 5), on the hand-made window
    kw["timestamp_begin"], kw["time_precision"], kw["input_stride"] = TS, 0.02, 2
    plain = model._retrieve_segment(**kw)
    with one_pass_per_window():
        single = model._retrieve_segment(**kw)
        with one_pass_per_window(False):
            assert model._retrieve_segment(**kw)[1] == plain[1]
    assert plain[1] < 3000 and single[1] == 3000
    assert single[0][-1]["tokens"].tolist() == [7, 8]
    assert [seg["tokens"].tolist() for seg in single[0][:-1]] == [seg["tokens"].tolist() for seg in plain[0]]


def test_chunked_request_encodes_each_batch_of_windows_once(tiny_models):
    from speaker_asr.config import InferenceConfig
    from helpers import tiny_settings

    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device

    settings = tiny_settings(tiny_models, assistant_model=None)
    transcriber = WhisperTranscriber(settings, *resolve_device(settings))
    calls = []
    encoder = transcriber.model.model.encoder
    forward = encoder.forward

    def counted(*a, **k):
        calls.append((a[0] if a else k["input_features"]).shape[0])
        return forward(*a, **k)

    encoder.forward = counted
    rng = np.random.default_rng(5)
    audio = (0.1 * rng.standard_normal(70 * 16_000)).astype(np.float32)  # 3 windows (0, 20, 40 s), one batch
    cfg = InferenceConfig(language="en", return_word_timestamps=True)
    result = transcriber.transcribe(audio, cfg, word_timestamps=True)
    # one pass over the batch; only the last window, whose end no other window covers, may be
    # continued where it stopped
    assert calls[0] == 3 and sum(calls[1:]) <= len(calls[1:]) <= 1, calls
    times = [w.start for w in result.words or [] if w.start is not None]
    assert times == sorted(times) and all(0 <= t <= 70 for t in times)
    assert transcriber.model._retrieve_segment.__name__ == "retrieve_segment"
