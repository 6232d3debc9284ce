#!/usr/bin/env bash
# Downloads the pure-Python wheels that pyannote.audio 4.0.7 needs beyond what the GPU machine's
# image already holds (torch, torchaudio, transformers, lightning, matplotlib, ... are there), for
# its Python 3.12, into bench/.whl (gitignored). Only the pyannote section of gpu_benchmark.py
# needs them; the Whisper sections run on the image as it is.
#
#   bench/gpu_wheels.sh            # here, where pip reaches the package index
#   WHEEL_DIR=/tmp/whl PYTHON=python3 bench/gpu_wheels.sh   # another folder / interpreter
#   then on the GPU machine (carry: ["bench/.whl"]):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
#       bench/.whl/*.whl && export PYTHONPATH=/tmp/site:$PWD   # $PWD: the repository (speaker_asr)
set -euo pipefail
cd "$(dirname "$0")"
py=${PYTHON:-../.venv/bin/python}
out=${WHEEL_DIR:-.whl}  # relative to bench/
pkgs=(
  pyannote.audio==4.0.7 pyannote.core==6.1.0 pyannote.database==6.1.1 pyannote.metrics==4.2.0
  pyannote.pipeline==4.1.0 pyannoteai-sdk==0.4.0 asteroid-filterbanks==0.4.0
  torch-audiomentations==0.12.0 julius==0.2.8 torch-pitch-shift==1.2.5 primePy==1.3
  pytorch-metric-learning==2.9.0 optuna==5.0.0 colorlog==6.12.0 alembic==1.20.1 Mako==1.4.3
  SQLAlchemy==2.1.9
  opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2
  opentelemetry-exporter-otlp==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2
  opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2
  opentelemetry-exporter-otlp-common==0.66b2 opentelemetry-exporter-http-transport==0.66b2
  opentelemetry-proto==1.45.2
  googleapis-common-protos==1.76.0
)
mkdir -p "$out"
for p in "${pkgs[@]}"; do
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$out" "$p"
done
du -sh "$out"
