"""pyannote.audio speaker diarization: loading (4.x, and 3.3.x -- what the default Inference
Endpoints image's torch 2.5 takes) and one run on the in-memory waveform.

torch and pyannote are imported inside the functions that need them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from speaker_asr.types import Diarization, Turn
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.compat import pyannote_major

logger = logging.getLogger(__name__)

# how the speaker embeddings are computed (DIARIZATION_EMBEDDINGS)
EMBEDDINGS = ("recipe", "approximate")
# the segmentation model's precision on CPU (opt-in int8: speaker_asr/patches/diarization_onnx.py)
SEGMENTATIONS = ("float", "int8")
# repositories whose conditions must be accepted on the hub for each known pipeline
GATED_REPOS = {
    "pyannote/speaker-diarization-3.1": ["pyannote/speaker-diarization-3.1", "pyannote/segmentation-3.0"],
    "pyannote/speaker-diarization-3.0": ["pyannote/speaker-diarization-3.0", "pyannote/segmentation-3.0"],
    "pyannote/speaker-diarization-community-1": ["pyannote/speaker-diarization-community-1"],
}


def configure_pyannote_telemetry(enabled: bool) -> None:
    """pyannote.audio 4 sends usage metrics unless told not to. Set before the first import, and
    again through its API in case it was imported already."""
    os.environ["PYANNOTE_METRICS_ENABLED"] = "true" if enabled else "false"
    try:
        from pyannote.audio.telemetry import set_telemetry_metrics

        set_telemetry_metrics(enabled)
    except Exception:  # pyannote 3.x has no telemetry
        pass


def _local_pipeline_path(model: str) -> Optional[Path]:
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.yaml").is_file():
            raise RuntimeError(f"DIARIZATION_MODEL={model} is a folder without config.yaml")
        return path
    if path.is_file():
        return path
    if model.endswith((".yaml", ".yml")) or model.startswith((".", "/", "~")):
        raise RuntimeError(f"DIARIZATION_MODEL={model}: no such file or folder")
    return None


class _FolderModules(importlib.abc.MetaPathFinder):
    """Finds top-level modules in one folder, asked after every other finder."""

    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, name, path=None, target=None):
        if path is not None:  # a submodule: its package's own finder looks
            return None
        return importlib.machinery.PathFinder.find_spec(name, [str(self.folder)])


def use_folder_modules(folder: Path) -> None:
    """Make the Python modules in a local pipeline ``folder`` importable by name.

    A pipeline folder may ship the code of its own models: the kit's CAM++ pipeline holds
    ``campp_embedding.py``, and its embedding checkpoint names the module ``campp_embedding``,
    which pyannote imports while loading. Instead of the folder on ``sys.path`` or ``PYTHONPATH``,
    a finder for it goes last on ``sys.meta_path``: a module is taken from the folder only when
    nothing installed has that name, and only when something imports it. The code runs with the
    same trust as the folder's checkpoints (a local path the deployment chose; never for hub ids).
    :func:`load_diarization_pipeline` does this for every local folder; it is idempotent."""
    folder = Path(folder).resolve()
    if not any(isinstance(f, _FolderModules) and f.folder == folder for f in sys.meta_path):
        sys.meta_path.append(_FolderModules(folder))


def pyannote3_config(path: Path) -> str:
    """The pipeline file pyannote.audio 3.x loads for a local ``path``.

    3.x takes only a yaml file (a folder would be read as a hub id), resolves no ``$model/`` in it
    and knows no ``plda`` parameter (4.x's 3.1-recipe folders name one; the 3.1 recipe's clustering
    never reads it). A folder's ``config-pyannote3.yaml`` is used as it is; else its
    ``config.yaml`` (or the yaml file given), rewritten to a temporary file where it uses either
    4.x feature."""
    if path.is_dir():
        own = path / "config-pyannote3.yaml"
        if own.is_file():
            return str(own)
        path = path / "config.yaml"
    import tempfile

    import yaml

    text = path.read_text()
    config = yaml.safe_load(text.replace("$model/", f"{path.parent.resolve()}/"))
    params = (config.get("pipeline") or {}).get("params") or {}
    if "$model/" not in text and "plda" not in params:
        return str(path)
    params.pop("plda", None)
    for name in ("segmentation", "embedding"):  # 4.x names a model's folder, 3.x its checkpoint
        if isinstance(params.get(name), str) and (Path(params[name]) / "pytorch_model.bin").is_file():
            params[name] = str(Path(params[name]) / "pytorch_model.bin")
    config.pop("dependencies", None)
    folder = Path(tempfile.mkdtemp(prefix="pyannote3-pipeline-"))
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return str(folder / "config.yaml")


def _gated_message(model: str, reason: str = "") -> str:
    repos = GATED_REPOS.get(model, [model])
    accept = ", ".join(f"https://hf.co/{r}" for r in repos)
    return (f"could not load the diarization pipeline {model!r}{': ' + reason if reason else ''}. "
            f"It is gated: accept its conditions on the hub ({accept}) with the account whose "
            "token you use, and set HF_TOKEN to a valid read token (or set DIARIZATION_MODEL to a "
            "local pipeline folder, or to an empty value to disable diarization)")


def load_diarization_pipeline(model: str, token: Optional[str], device=None, telemetry: bool = False,
                              speedups: bool = True, embeddings: str = "recipe", segmentation: str = "float"):
    """pyannote ``Pipeline.from_pretrained`` for a hub id, a folder with config.yaml, or the yaml
    file; on ``device``, with the speed fixes of :mod:`speaker_asr.patches.diarization` (through
    the patch registry; the report is ``pipeline.patch_report``) unless ``speedups`` is false.
    A local folder's own Python modules (the yaml file's folder's) are importable while and after
    it loads (:func:`use_folder_modules`). ``embeddings``: "recipe" (every window's speakers
    embedded) or "approximate" (on CPU, past 5 minutes, the speakers of every fifth window
    embedded, the others pooled from their neighbours: speaker_asr/diarization/window_plan.py).
    ``segmentation``: "float" (the segmentation model's own float32 scores) or "int8" (opt-in, on
    CPU: its ONNX Runtime model with the LSTM's weights in int8, close to but not the same scores:
    ``onnx_segmentation`` in speaker_asr/patches/diarization_onnx.py). What is in force is
    ``pipeline.diarization_settings`` (:func:`settings_in_force`, logged).
    Fails with a message naming what to accept and set -- never the token."""
    if embeddings not in EMBEDDINGS:  # before the load: a bad value costs nothing
        raise ValueError(f"embeddings={embeddings!r}: expected one of {', '.join(EMBEDDINGS)}")
    if segmentation not in SEGMENTATIONS:
        raise ValueError(f"segmentation={segmentation!r}: expected one of {', '.join(SEGMENTATIONS)}")
    configure_pyannote_telemetry(telemetry)
    from pyannote.audio import Pipeline

    local = _local_pipeline_path(model)
    source = str(local) if local else model
    if local is not None:
        use_folder_modules(local if local.is_dir() else local.parent)
    if local is not None and pyannote_major() < 4:
        source = pyannote3_config(local)
    params = inspect.signature(Pipeline.from_pretrained).parameters
    auth = {"token": token} if "token" in params else {"use_auth_token": token}
    try:
        pipeline = Pipeline.from_pretrained(source, **auth)
    except Exception as exc:  # hub errors (gated, missing, offline) and bad local files
        reason = f"{type(exc).__name__}: {exc}"
        if token:
            reason = reason.replace(token, "<HF_TOKEN>")
        if local:
            raise RuntimeError(f"could not load the diarization pipeline from {source}: {reason}") from None
        raise RuntimeError(_gated_message(model, reason.splitlines()[0][:300])) from None
    if pipeline is None:  # pyannote returns None when a gated download is refused
        raise RuntimeError(_gated_message(model))
    if device is not None:
        import torch

        pipeline.to(torch.device(device))
    from speaker_asr.patches import registry

    # the speed fixes (patches/registry.py), decided once here; the report stays with the pipeline
    context = {"device": device, "embeddings": embeddings, "segmentation": segmentation}
    pipeline.patch_report = registry.install("diarization", pipeline, speedups, **context)
    logger.info("diarization patches: %s", registry.describe(pipeline.patch_report))
    pipeline.diarization_settings = settings_in_force(
        pipeline.patch_report, getattr(pipeline, "segmentation_precision", None) or {"asked": segmentation})
    logger.info("diarization: %s", pipeline.diarization_settings["summary"])
    return pipeline


def settings_in_force(report, segmentation: Optional[dict] = None) -> dict:
    """What the loaded pipeline computes, from its patch report: ``embeddings`` ("approximate":
    past ``shared_after_s`` every fifth window's speakers embedded, the others pooled from their
    neighbours; "recipe": every window's, as pyannote's recipe), ``segmentation`` ("float", or
    "int8" where that was asked for and applied: ``segmentation``, the pipeline's
    ``segmentation_precision``) and a one-line ``summary`` (logged, in /health)."""
    from speaker_asr.patches.diarization import EMBEDDING_STRIDE, SHARED_AFTER_S

    shared = next((r for r in report if r.name == "share_window_embeddings"), None)
    applied = shared is not None and shared.applied
    if applied:
        summary = (f"approximate past {SHARED_AFTER_S:g} s (DIARIZATION_EMBEDDINGS=approximate): every "
                   f"{EMBEDDING_STRIDE}th window's speakers embedded, the others pooled from the two "
                   "around them, the clustering trained on the embedded ones; faster, not the "
                   "recipe's computation (docs/measurements.md); every window's below")
    else:
        why = f" ({shared.reason})" if shared is not None and shared.reason else ""
        summary = f"every window's speakers embedded, as pyannote's recipe does{why}"
    segmentation = segmentation or {}
    int8 = segmentation.get("precision") == "int8"
    if int8:
        summary += (f"; segmentation int8 (LSTM weights; on the load probe "
                    f"{segmentation['argmax_changed']:.1%} of the frames' powerset argmax changed)")
    elif segmentation.get("asked") == "int8":
        seg = next((r for r in report if r.name == "onnx_segmentation"), None)
        why = segmentation.get("why_not") or (seg.reason if seg is not None else "") or "not applied"
        summary += f"; segmentation float32, int8 not applied ({why})"
    settings = {"embeddings": "approximate" if applied else "recipe",
                "shared_after_s": SHARED_AFTER_S if applied else None, "summary": summary,
                "segmentation": "int8" if int8 else "float"}
    if int8:
        settings["segmentation_probe"] = {k: segmentation[k] for k in (
            "argmax_changed", "mean_prob_diff", "max_prob_diff")}
    return settings


def _annotation_turns(annotation) -> list[Turn]:
    return [Turn(float(seg.start), float(seg.end), str(label))
            for seg, _, label in annotation.itertracks(yield_label=True)]


def diarize(pipeline, audio: np.ndarray, num_speakers: Optional[int] = None,
            min_speakers: Optional[int] = None, max_speakers: Optional[int] = None,
            hook=None) -> Diarization:
    """Run the pipeline on the in-memory waveform (no second decode, no resampling mismatch):
    its turns and, from pyannote 4, its own exclusive turns (None from 3.x, which has none), with
    the pipeline's own labels. ``hook`` is pyannote's own progress hook, called as
    ``hook(step_name, artefact, file=..., total=..., completed=...)`` after each step and, within
    the long steps (segmentation, embeddings), after each batch."""
    import torch

    kwargs = {k: v for k, v in (("num_speakers", num_speakers), ("min_speakers", min_speakers),
                                ("max_speakers", max_speakers)) if v is not None}
    waveform = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None]
    if hook is not None:
        kwargs["hook"] = hook
    with torch.inference_mode():
        output = pipeline({"waveform": waveform, "sample_rate": SAMPLE_RATE}, **kwargs)
    if hasattr(output, "speaker_diarization"):  # pyannote.audio 4.x DiarizeOutput
        exclusive = getattr(output, "exclusive_speaker_diarization", None)
        turns = _annotation_turns(output.speaker_diarization)
        return Diarization(turns, _annotation_turns(exclusive) if exclusive is not None else None)
    # pyannote.audio 3.x: an Annotation, without an exclusive diarization of its own
    return Diarization(_annotation_turns(output))


def frame_activity(pipeline, audio: np.ndarray):
    """The segmentation model's frame-level speaker activity over the whole of ``audio`` in one
    pass (an utterance of at most 30 s: a live item), as a
    :class:`~speaker_asr.diarization.frames.Activity` (powerset scores turned into local
    speakers by the pipeline's own conversion); None when the pipeline has no segmentation
    model this can run (not pyannote's ``SpeakerDiarization``), or the audio is shorter than
    the model's receptive field."""
    import torch

    from speaker_asr.diarization.frames import Activity

    inference = getattr(pipeline, "_segmentation", None)
    model = getattr(inference, "model", None)
    conversion = getattr(inference, "conversion", None)
    if model is None or conversion is None or not callable(conversion):
        return None
    rate = int(getattr(getattr(model, "hparams", None), "sample_rate", SAMPLE_RATE) or SAMPLE_RATE)
    if rate != SAMPLE_RATE or len(audio) < int(0.1 * SAMPLE_RATE):
        return None
    waveform = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None, None]
    device = getattr(inference, "device", None)
    if device is not None:
        waveform = waveform.to(device)
    with torch.inference_mode():
        scores = model(waveform)
        frames = conversion(scores)
    frames = np.asarray(frames.detach().cpu().numpy()[0] > 0.5)
    if not len(frames):
        return None
    # the frames' own step (SincNet's hop: 270 samples for segmentation-3.0); the audio's length
    # over the frames where the model says none
    step = None
    try:
        step = float(model.receptive_field.step)  # pyannote.audio 4.x
    except Exception:
        try:
            step = float(model.example_output.frames.step)  # pyannote.audio 3.x
        except Exception:
            step = None
    return Activity(frames, step or len(audio) / SAMPLE_RATE / len(frames))
