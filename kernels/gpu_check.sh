#!/usr/bin/env bash
# Every GPU check of the torch runner (kernels/gpu_check.py), for a lent CUDA machine:
# under 3 minutes on one GPU; prints one line per check; exit 0 when all passed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
python -c "import tokenbudget.kernels" 2>/dev/null || pip install -q --no-deps --no-build-isolation -e .
timeout 170 python -m tokenbudget.kernels.gpu_check
