# Speaker-attributed speech recognition server: the Inference Endpoints custom-handler contract
# (POST / and /predict, GET /health, GET /metrics) in a GPU container. See docs/serving.md.
#
#   docker build -t speaker-asr .
#   docker run --gpus all -p 8080:80 -e HF_TOKEN=hf_... speaker-asr
#
# The models are downloaded when the container starts (health answers 503 until they are ready);
# mount a volume on /data to keep them between runs. For an Inference Endpoints "custom container",
# use port 80 and health route /health.

# CUDA 12.8 + cuDNN 9 runtime, Python and a CUDA build of torch (+ torchaudio). The requirements leave
# torch to the image; pyannote.audio 4 needs torch >= 2.8, so this image takes
# requirements-pyannote4.txt (requirements.txt is the default Inference Endpoints image's: torch 2.5).
ARG BASE_IMAGE=pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/data/huggingface \
    PYANNOTE_METRICS_ENABLED=false \
    HOST=0.0.0.0 \
    PORT=80

# ffmpeg decodes M4A/AAC, WebM, AMR and the containers libsndfile does not read
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg libsndfile1 \
 && rm -rf /var/lib/apt/lists/*

# torchcodec for the base image's torch (pyannote.audio 4 reads files with it): each release up to
# 0.11 is built for one torch minor and says not which, so pip would take the newest (built for
# torch >= 2.11). torch 2.8 -> 0.7 (requirements-pyannote4.txt has the table; another BASE_IMAGE
# needs its release here: the import check below fails the build otherwise)
ARG TORCHCODEC_VERSION=0.7.0

WORKDIR /app
COPY requirements-pyannote4.txt ./
# pinning the image's own torch keeps pip from swapping it for another build
RUN TORCH_VERSION="$(python -c 'import torch; print(torch.__version__.split("+")[0])')" \
 && python -m pip install -r requirements-pyannote4.txt "torch==${TORCH_VERSION}" \
      "torchcodec==${TORCHCODEC_VERSION}" \
 && python -c "import torchcodec.decoders"

COPY . .
# fail the build, not the deployment, when an import is broken
RUN python -c "import handler, config, diarization_utils, speaker_asr.cli, speaker_asr.serving.app" \
 && mkdir -p /data

EXPOSE 80
HEALTHCHECK --interval=30s --timeout=5s --start-period=900s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PORT', '80'), timeout=4)" || exit 1

CMD ["python", "-m", "speaker_asr", "serve"]
