#!/usr/bin/env bash
# Every GPU check of the torch runner (tokenbudget/kernels/gpu_check.py), then whatif's
# calibration on the GPU (fit on the designed workloads, validated on held-out ones at
# concurrency 1, 4 and 16, the runs of both interleaved), for a lent CUDA machine: under 9
# minutes on one GPU; prints one line per check and whatif's table; exit 0 when all passed.
# The package is installed (not editable) into a folder of its own, and run from outside the
# checkout, whose tokenbudget/ would shadow it.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
site="$(mktemp -d)"
pip install -q --no-deps --no-build-isolation --target "$site" "$repo" 2>&1 | grep -v "Running pip as the 'root' user" || true
cd "$site"
status=0
PYTHONPATH="$site" timeout 170 python3 -m tokenbudget.kernels.gpu_check || status=1
echo "whatif-calibrate-cuda: fit on the GPU runner, held-out TTFT within 15%, old->new change within 5 points"
PYTHONPATH="$site" timeout 360 python3 -m tokenbudget.cli whatif --calibrate "$site/whatif-cuda.json" --device cuda --runner-model wide --clock wall || status=1
cp "$site/whatif-cuda.json" "${OUT:-/tmp}/whatif-cuda.json" 2>/dev/null || true
exit $status
