"""Inference Endpoints entry point: the toolkit imports this file from the repository root and calls
``EndpointHandler(path)(data)``. The code lives in the ``speaker_asr`` package (docs/architecture.md)."""

from speaker_asr.endpoint import EndpointHandler

__all__ = ["EndpointHandler"]
