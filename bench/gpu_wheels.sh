#!/usr/bin/env bash
# Downloads the wheels of bench/gpu_wheels.txt (what the endpoint and pyannote.audio 4 need beyond
# the GPU machine's image: bench/gpu_image.txt) for its Python 3.12 on x86-64 Linux into bench/.whl
# (ignored by git; bench/gpu_run.sh installs them there and its preflight checks them).
#
#   bench/gpu_wheels.sh                                      # here, where pip reaches the package index
#   WHEEL_DIR=/tmp/whl PYTHON_VERSION=3.11 bench/gpu_wheels.sh   # another folder / Python (the CPU dry run)
#   then, for the device machine: carry ["bench/.whl"] and run bench/gpu_run.sh (bench/README.md)
set -euo pipefail
cd "$(dirname "$0")"
py=${PYTHON:-../.venv/bin/python}
out=${WHEEL_DIR:-.whl}  # relative to bench/
version=${PYTHON_VERSION:-3.12}
mkdir -p "$out"
# one pip call for every pin (blank lines, comments and the `!name` lines left behind dropped)
mapfile -t pins < <(sed 's/#.*//; s/[[:space:]]*$//' gpu_wheels.txt | grep -v -e '^$' -e '^!')
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$out" "${pins[@]}"
du -sh "$out"
