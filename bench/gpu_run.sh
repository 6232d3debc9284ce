#!/usr/bin/env bash
# The one prepared GPU run: a preflight, then bench/gpu_benchmark.py's endpoint sections
# (the 8 s / 60 s bracket, large-v3 at batch 24 on 10 min, ASR vs diarization vs both), tables and
# JSON into OUT_DIR. On an H100/H200-class GPU it is meant to return within 8 minutes.
#
#   bench/gpu_wheels.sh                       # here, once: the wheels the GPU image lacks -> bench/.whl
#   device run, carry ["bench/.whl"]:  bash bench/gpu_run.sh "$OUT"
#   DEVICE=cpu bash bench/gpu_run.sh DIR      # the dry run: tiny shapes on the CPU, every step
#
# Environment: DEVICE (cuda | cpu; cpu runs the smoke shapes), WHEEL_DIR (bench/.whl), PYTHON
# (python3), BUDGET_S (the benchmark's time budget: it starts no new measurement after it; default
# 390 s on a GPU, so that with the preflight, the install and the model builds the run ends well
# inside 8 minutes), BENCH_ARGS (more arguments for gpu_benchmark.py).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-bench/results/gpu_run}}
device=${DEVICE:-cuda}
wheels=${WHEEL_DIR:-bench/.whl}
py=${PYTHON:-python3}
started=$SECONDS
# 1. the carried wheels against bench/gpu_wheels.txt: no imports, a fraction of a second
"$py" bench/gpu_preflight.py wheels --dir "$wheels"
# 2. installed beside the image's packages, first on the path
site=$(mktemp -d)/site
"$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYANNOTE_METRICS_ENABLED=false TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# 3. everything the run imports, and the device
"$py" bench/gpu_preflight.py imports --device "$device" --out "$out"
echo "preflight done in $((SECONDS - started)) s"
# 4. the measurements
if [ "$device" = cpu ]; then smoke=(--smoke); budget=${BUDGET_S:-600}; else smoke=(); budget=${BUDGET_S:-390}; fi
# shellcheck disable=SC2086
"$py" bench/gpu_benchmark.py "${smoke[@]}" --device "$device" --out "$out" --budget-s "$budget" ${BENCH_ARGS:-}
echo "gpu_run done in $((SECONDS - started)) s"
