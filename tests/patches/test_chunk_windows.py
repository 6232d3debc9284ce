"""chunk_windows: in chunked long-form decoding each window is decoded once (transformers 4.51's
behaviour), keeping the unfinished tail the single pass wrote instead of decoding it again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speaker_asr.patches.chunk_windows import install, keep_tail, one_pass_per_window

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

    import transformers

    if transformers.__version__.startswith("4.51."):
        model = WhisperForConditionalGeneration.from_pretrained(str(tiny_models["whisper"]))
        assert install(model) is False  # 4.51 decodes each window once already
        return
    model = WhisperForConditionalGeneration.from_pretrained(str(tiny_models["whisper"]))
    assert install(model)
    kw = _window([TS, 5, 6, TS + 50, TS + 50, 7, 8])
    # the stock splitter of a real transformers (4.57 or 5), on the hand-made window
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
    import transformers

    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device

    settings = tiny_settings(tiny_models, assistant_model=None)
    transcriber = WhisperTranscriber(settings, *resolve_device(settings))
    calls = []
    encoder = transcriber.model.model.encoder
    forward = encoder.forward

    def counted(*a, **k):
        calls.append(1)
        return forward(*a, **k)

    encoder.forward = counted
    rng = np.random.default_rng(5)
    audio = (0.1 * rng.standard_normal(70 * 16_000)).astype(np.float32)  # 4 windows, one batch
    cfg = InferenceConfig(language="en", return_word_timestamps=True)
    result = transcriber.transcribe(audio, cfg, word_timestamps=True)
    assert len(calls) == 1, "a window was decoded twice"
    times = [w.start for w in result.words or [] if w.start is not None]
    assert times == sorted(times) and all(0 <= t <= 70 for t in times)
    if not transformers.__version__.startswith("4.51."):
        assert transcriber.model._retrieve_segment.__name__ == "retrieve_segment"
