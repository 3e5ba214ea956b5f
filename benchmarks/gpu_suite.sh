#!/usr/bin/env bash
# The whole test suite on an NVIDIA GPU (issue 16: "0 failed on the H100").  On the GPU
# machine, from the checkout root, after `source ../shared/device/gpu-env.sh`:
#   bash benchmarks/gpu_suite.sh "$OUT"                 # every test file
#   bash benchmarks/gpu_suite.sh "$OUT" tests/test_x.py  # some files (a command's time limit)
# Writes gpu_suite_env.txt (GPU, driver, clgrid devices) and gpu_suite.txt (pytest's report:
# every failure, error and skip with its reason, the slowest tests) under $OUT.  Oclgrind
# tests skip with the reason where oclgrind is not installed (CI requires them instead).
set -uo pipefail
out=${1:-.}
shift || true
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(tests)
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv | tee "$out/gpu_suite_env.txt"
python3 -m clgrid.tools.cli devices 2>&1 | tee -a "$out/gpu_suite_env.txt"
git log -1 --format='commit %H %s' 2>/dev/null | tee -a "$out/gpu_suite_env.txt"
CLGRID_TEST_DEVICE=nvidia python3 -m pytest -q -p no:cacheprovider -rfEs --durations=15 "${files[@]}" \
  > "$out/gpu_suite.txt" 2>&1
status=$?
tail -60 "$out/gpu_suite.txt"
exit $status
