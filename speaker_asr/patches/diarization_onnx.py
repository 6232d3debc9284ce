"""ONNX Runtime for the diarization's networks on CPU: exported in memory at load, probed
against torch, used only where they give the same output to float rounding.

* ``onnx_embedding_trunk``: the WeSpeaker ResNet network that ``embed_trunk_once`` runs once per
  window (fbank to frames): faster than torch on CPU at the same thread count, the same
  embeddings to float rounding (probed at load). Neither batching windows nor a thread count
  other than torch's made it faster on CPU.
* ``onnx_segmentation``: the segmentation model (segmentation-3.0's PyanNet) likewise: faster
  than torch for a batch of 32 windows, the same scores to float rounding and the same powerset
  argmax.

The timings behind both: docs/measurements.md ("Diarization on CPU"; the load-time export's cost
in "Figures behind the speed fixes' reasons").
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.patches.diarization import _equal_to_rounding, _pooled, off_cpu


def onnx_embedding_trunk(pipeline, device=None) -> Optional[str]:
    """On CPU, run the WeSpeaker ResNet trunk that :func:`embed_trunk_once` runs once per window
    (fbank -> frames: all but the pooling and the last layer) with ONNX Runtime instead of
    torch: faster on CPU (docs/measurements.md, "Diarization on CPU") with the same frames to
    float rounding (probed at load: at most 1e-5 of their scale apart). The model is exported in
    memory at load (a one-time cost added to the load) with as many threads as torch has. Returns
    None when it applied, else why not."""
    if off_cpu(device):
        return off_cpu(device)
    model = getattr(pipeline, "_trunk_model", None)
    if model is None:
        return "embed_trunk_once did not apply"
    missing = _onnx_missing()
    if missing:
        return missing
    import torch

    class Trunk(torch.nn.Module):
        def __init__(self, resnet):
            super().__init__()
            self.resnet = resnet

        def forward(self, fbank):
            return self.resnet.forward_frames(fbank)

    rate = int(getattr(pipeline._embedding, "sample_rate", SAMPLE_RATE) or SAMPLE_RATE)
    waveform = 0.1 * torch.randn(1, 1, 10 * rate, generator=torch.Generator().manual_seed(1))
    masks = torch.zeros(1, 2, 589)
    masks[0, 0, :350] = 1.0
    masks[0, 1, 200:] = 1.0
    try:
        with torch.inference_mode():
            fbank = model.compute_fbank(waveform)
        trunk = _onnx_session(Trunk(model.resnet).eval(), fbank.clone(), ("fbank", "frames"),
                              {0: "batch", 1: "frames"})
        want = _pooled(model, waveform, masks)
        got = _pooled(model, waveform, masks, trunk)
    except Exception as exc:
        return f"its ONNX export or run failed ({type(exc).__name__}: {str(exc)[:200]})"
    if not _equal_to_rounding(got, want):
        return "ONNX Runtime's embeddings differ from torch's"

    pipeline._embedding_trunk = trunk
    return None


def _onnx_session(module, example, names, dynamic):
    """``module`` exported in memory to ONNX and loaded in ONNX Runtime with as many threads as
    torch has; a ``run(tensor) -> tensor`` for it."""
    import inspect
    import io
    import warnings

    import onnxruntime
    import torch

    buffer = io.BytesIO()
    options = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), buffer, input_names=[names[0]], output_names=[names[1]],
                          dynamic_axes={names[0]: dynamic}, **options)
    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = max(1, torch.get_num_threads())
    session_options.inter_op_num_threads = 1
    # its threads sleep between runs instead of spinning: the decodes run beside on the same cores
    session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(buffer.getvalue(), session_options,
                                           providers=["CPUExecutionProvider"])

    def run(x):
        out = session.run(None, {names[0]: np.ascontiguousarray(x.detach().cpu().numpy())})[0]
        return torch.from_numpy(out)

    return run


def _onnx_missing() -> Optional[str]:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed"
    return None


def onnx_segmentation(pipeline, device=None) -> Optional[str]:
    """On CPU, run the segmentation model (segmentation-3.0's PyanNet: SincNet, LSTM, linear
    layers) in ONNX Runtime, exported in memory at load: faster than torch for a batch of 32
    windows (docs/measurements.md, "Diarization on CPU"), the same outputs to float rounding
    (probed at load on a batch of random windows, and their argmax, which decides the powerset
    speakers, identical). Returns None when it applied, else why not."""
    if off_cpu(device):
        return off_cpu(device)
    inference = getattr(pipeline, "_segmentation", None)
    model = getattr(inference, "model", None)
    if model is None or type(pipeline).__name__ != "SpeakerDiarization":
        return "the pipeline is not pyannote's SpeakerDiarization"
    missing = _onnx_missing()
    if missing:
        return missing
    import torch

    try:
        rate = int(model.hparams.sample_rate)
        samples = int(round(float(inference.duration) * rate))
        example = 0.1 * torch.randn(4, 1, samples, generator=torch.Generator().manual_seed(2))
        with torch.inference_mode():
            want = model(example).numpy()
        run = _onnx_session(model, example[:1], ("waveforms", "scores"), {0: "batch", 2: "samples"})
        got = run(example).numpy()
    except Exception as exc:
        return f"its ONNX export or run failed ({type(exc).__name__}: {str(exc)[:200]})"
    if not _equal_to_rounding(got, want) or not np.array_equal(got.argmax(axis=-1), want.argmax(axis=-1)):
        return "ONNX Runtime's segmentation differs from torch's"

    def forward(waveforms, *args, **kwargs):
        if args or kwargs or waveforms.device.type != "cpu":
            return type(model).forward(model, waveforms, *args, **kwargs)
        return run(waveforms)

    model.forward = forward
    return None
