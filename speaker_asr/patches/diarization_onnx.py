"""ONNX Runtime for the diarization's networks on CPU: exported in memory at load, probed
against torch, used only where they give the same output to float rounding.

* ``onnx_embedding_trunk``: the WeSpeaker ResNet network that ``embed_trunk_once`` runs once per
  window (fbank to frames): faster than torch on CPU at the same thread count, the same
  embeddings to float rounding (probed at load). Neither batching windows nor a thread count
  other than torch's made it faster on CPU.
* ``onnx_segmentation``: the segmentation model (segmentation-3.0's PyanNet) likewise: faster
  than torch for a batch of 32 windows, the same scores to float rounding and the same powerset
  argmax. Opt-in (``segmentation="int8"``): its LSTM's weights quantized to int8, cheaper and
  close to torch's scores but not the same (probed at load, reported in the pipeline's settings).

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
    return _session(_export(module, example, names, dynamic), names)


def _export(module, example, names, dynamic) -> bytes:
    """``module`` exported to ONNX, in memory (TorchScript's exporter)."""
    import inspect
    import io
    import warnings

    import torch

    buffer = io.BytesIO()
    options = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), buffer, input_names=[names[0]], output_names=[names[1]],
                          dynamic_axes={names[0]: dynamic}, **options)
    return buffer.getvalue()


def _session(model: bytes, names):
    """The ONNX ``model`` in ONNX Runtime with as many threads as torch has; a ``run(tensor) ->
    tensor`` for it."""
    import onnxruntime
    import torch

    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = max(1, torch.get_num_threads())
    session_options.inter_op_num_threads = 1
    # its threads sleep between runs instead of spinning: the decodes run beside on the same cores
    session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(model, session_options, providers=["CPUExecutionProvider"])

    def run(x):
        out = session.run(None, {names[0]: np.ascontiguousarray(x.detach().cpu().numpy())})[0]
        return torch.from_numpy(out)

    return run


def _int8_lstm(model: bytes) -> bytes:
    """The ONNX ``model`` with its LSTM weights quantized to int8 per channel (ONNX Runtime's
    dynamic quantization: ``DynamicQuantizeLSTM``, activations quantized at run time), in memory:
    what ``onnxruntime.quantization.quantize_dynamic`` does, without its files. Only the LSTM:
    the LSTM is most of PyanNet's time; quantizing its linear layers as well gained nothing
    measurable and changed more argmax decisions, SincNet's filter construction (MatMul of
    constants) must not be quantized, and its convolutions (ConvInteger) ran slower than float
    (bench/segmentation_int8.py; docs/measurements.md)."""
    import logging

    import onnx
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    from onnxruntime.quantization.quant_utils import QuantizationMode, QuantType, add_infer_metadata
    from onnxruntime.quantization.quantize import update_opset_version

    proto = onnx.shape_inference.infer_shapes(onnx.load_from_string(model))
    add_infer_metadata(proto)
    proto = update_opset_version(proto, QuantType.QInt8)
    quiet = logging.getLogger().level
    logging.getLogger().setLevel(max(quiet, logging.ERROR))  # its advice to pre-process, at every load
    try:
        quantizer = ONNXQuantizer(proto, True, False, QuantizationMode.IntegerOps, False, QuantType.QInt8,
                                  QuantType.QUInt8, None, [], [], ["LSTM"], {"MatMulConstBOnly": True})
        quantizer.quantize_model()
    finally:
        logging.getLogger().setLevel(quiet)
    quantized = quantizer.model.model
    if not any(node.op_type == "DynamicQuantizeLSTM" for node in quantized.graph.node):
        raise RuntimeError("no LSTM was quantized")
    return quantized.SerializeToString()


def _onnx_missing() -> Optional[str]:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed"
    return None


# PyanNet's int8 segmentation (opt-in): what its load probe accepts on a batch of random windows
INT8_MAX_ARGMAX_CHANGED = 0.05  # share of frames whose powerset argmax differs from torch's
INT8_MAX_MEAN_PROB_DIFF = 0.02  # mean absolute difference of the powerset probabilities


def onnx_segmentation(pipeline, device=None, precision: str = "float") -> Optional[str]:
    """On CPU, run the segmentation model (segmentation-3.0's PyanNet: SincNet, LSTM, linear
    layers) in ONNX Runtime, exported in memory at load: faster than torch for a batch of 32
    windows (docs/measurements.md, "Diarization on CPU"), the same outputs to float rounding
    (probed at load on a batch of random windows, and their argmax, which decides the powerset
    speakers, identical). Returns None when it applied, else why not.

    ``precision="int8"`` (opt-in, never the default): the LSTM's weights quantized to int8
    (:func:`_int8_lstm`) -- cheaper, and no longer the same output: the probe then asks only that
    it runs and its scores stay close to torch's (at most ``INT8_MAX_ARGMAX_CHANGED`` of the
    frames' argmax changed, powerset probabilities ``INT8_MAX_MEAN_PROB_DIFF`` apart on average).
    What is in force is ``pipeline.segmentation_precision``: ``{"precision": "int8" | "float",
    "asked": ..., "argmax_changed": ..., "mean_prob_diff": ..., "max_prob_diff": ..., "why_not":
    ...}`` (the probe's figures with int8; where int8 was asked but failed its export or probe,
    the float32 model runs and ``why_not`` says why)."""
    if precision not in ("float", "int8"):
        raise ValueError(f"segmentation={precision!r}: expected float or int8")
    pipeline.segmentation_precision = {"precision": "float", "asked": precision}
    if off_cpu(device):
        _int8_not_applied(pipeline, precision, off_cpu(device))
        return off_cpu(device)
    inference = getattr(pipeline, "_segmentation", None)
    model = getattr(inference, "model", None)
    if model is None or type(pipeline).__name__ != "SpeakerDiarization":
        _int8_not_applied(pipeline, precision, "the pipeline is not pyannote's SpeakerDiarization")
        return "the pipeline is not pyannote's SpeakerDiarization"
    missing = _onnx_missing()
    if missing:
        _int8_not_applied(pipeline, precision, missing)
        return missing
    import torch

    try:
        rate = int(model.hparams.sample_rate)
        samples = int(round(float(inference.duration) * rate))
        example = 0.1 * torch.randn(4, 1, samples, generator=torch.Generator().manual_seed(2))
        with torch.inference_mode():
            want = model(example).numpy()
        names = ("waveforms", "scores")
        exported = _export(model, example[:1], names, {0: "batch", 2: "samples"})
        run = _session(exported, names)
        got = run(example).numpy()
    except Exception as exc:
        _int8_not_applied(pipeline, precision, "the float32 export failed")
        return f"its ONNX export or run failed ({type(exc).__name__}: {str(exc)[:200]})"
    if not _equal_to_rounding(got, want) or not np.array_equal(got.argmax(axis=-1), want.argmax(axis=-1)):
        _int8_not_applied(pipeline, precision, "the float32 model differs from torch's")
        return "ONNX Runtime's segmentation differs from torch's"
    if precision == "int8":
        int8 = _int8_segmentation(exported, names, example, want)
        if isinstance(int8, str):
            _int8_not_applied(pipeline, precision, int8)
        else:
            run, probe = int8
            pipeline.segmentation_precision.update(precision="int8", **probe)

    def forward(waveforms, *args, **kwargs):
        if args or kwargs or waveforms.device.type != "cpu":
            return type(model).forward(model, waveforms, *args, **kwargs)
        return run(waveforms)

    model.forward = forward
    return None


def _int8_not_applied(pipeline, precision: str, why: str) -> None:
    if precision == "int8":
        pipeline.segmentation_precision["why_not"] = why


def _int8_segmentation(exported: bytes, names, example, want):
    """``(run, probe figures)`` of the ``exported`` model made int8 (:func:`_int8_lstm`), probed
    on ``example`` against torch's scores ``want``; else why not (a string)."""
    try:
        run = _session(_int8_lstm(exported), names)
        got = run(example).numpy()
    except Exception as exc:
        return f"its int8 quantization or run failed ({type(exc).__name__}: {str(exc)[:200]})"
    if got.shape != want.shape or not np.isfinite(got).all():
        return "its int8 model's scores are not finite or not of torch's shape"
    probe = segmentation_difference(got, want)
    if probe["argmax_changed"] > INT8_MAX_ARGMAX_CHANGED or probe["mean_prob_diff"] > INT8_MAX_MEAN_PROB_DIFF:
        return (f"its int8 model is too far from torch's on the load probe ({probe['argmax_changed']:.1%} of "
                f"the frames' argmax changed, probabilities {probe['mean_prob_diff']:.3f} apart on average)")
    return run, probe


def segmentation_difference(got: np.ndarray, want: np.ndarray) -> dict:
    """How far powerset log-probabilities ``got`` are from ``want`` (batch, frames, classes):
    the share of frames whose argmax (the decision) changed, the mean and largest absolute
    difference of the probabilities, and the largest of the scores (log-probabilities: large
    where a class is improbable in both, so a poor measure alone)."""
    changed = float(np.mean(got.argmax(axis=-1) != want.argmax(axis=-1)))
    prob = np.abs(np.exp(got.astype(np.float64)) - np.exp(want.astype(np.float64)))
    return {"argmax_changed": round(changed, 6), "mean_prob_diff": round(float(prob.mean()), 6),
            "max_prob_diff": round(float(prob.max()), 6),
            "max_score_diff": round(float(np.abs(got - want).max()), 6)}
