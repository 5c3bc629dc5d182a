#!/usr/bin/env bash
# Wheels for running bench/gpu_check.py on a GPU machine with Python 3.12 and no package registry.
#
# That machine has torch, jax (with scipy), cupy, numpy, pluggy and pytest; insitu also needs zarr
# and its own dependencies, downloaded here (where PyPI is reachable) into bench/gpu-wheels/ (ignored
# by git). Everything that travels must stay under 64 MiB; this script fails when it would not.
# On the GPU machine, from the repository root:
#   pip install --no-index --find-links bench/gpu-wheels zarr numcodecs obstore
#   python bench/gpu_check.py
set -euo pipefail

cd "$(dirname "$0")/.."
dest=bench/gpu-wheels
limit=$((64 * 1024 * 1024))
rm -rf "$dest"
mkdir -p "$dest"

# --no-deps with the list spelled out: pip would otherwise fetch numpy again (the machine has it).
# zarr 3 needs donfig (which needs PyYAML), google-crc32c, msgspec, numcodecs, packaging, typing_extensions.
python3 -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any \
  -d "$dest" \
  "zarr>=3.1,<4" "numcodecs>=0.14" google-crc32c msgspec donfig pyyaml packaging typing_extensions obstore

total=$(du -cb "$dest"/*.whl | tail -1 | cut -f1)
ls -1 "$dest"
echo "total: $((total / 1024)) KiB in $dest"
if [ "$total" -ge "$limit" ]; then
  echo "error: the wheels exceed 64 MiB" >&2
  exit 1
fi
