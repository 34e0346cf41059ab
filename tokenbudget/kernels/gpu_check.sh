#!/usr/bin/env bash
# Every GPU check of the torch runner (tokenbudget/kernels/gpu_check.py), for a lent CUDA machine:
# under 3 minutes on one GPU; prints one line per check; exit 0 when all passed.
# The package is installed (not editable: its folders map into tokenbudget.*) into a folder
# of its own, and run from outside the checkout, whose tokenbudget/ would shadow it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
site="$(mktemp -d)"
pip install -q --no-deps --no-build-isolation --target "$site" "$repo" 2>&1 | grep -v "Running pip as the 'root' user" || true
cd "$site"
PYTHONPATH="$site" timeout 170 python3 -m tokenbudget.kernels.gpu_check
