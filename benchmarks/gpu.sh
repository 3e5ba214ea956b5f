#!/usr/bin/env bash
# The GPU run behind BENCHMARKS.md: device tests on the GPU, then the benchmarks.
# On the GPU machine, from the checkout root:  bash benchmarks/gpu.sh "$OUT"
set -uo pipefail
out=${1:-.}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
python3 -m clgrid.cli devices | tee -a "$out/gpu.txt"
CLGRID_TEST_DEVICE=nvidia python3 -m pytest -q -p no:cacheprovider tests/test_gridder_atomic.py \
  tests/test_gridder_moving_window.py tests/test_degrid_device.py tests/test_tuning.py tests/test_texture.py \
  -k "not fpga and not pick_their_families and not cli_devices and not tuner_end" 2>&1 | tail -12 | tee "$out/tests.txt"
python3 benchmarks/atomics.py --device nvidia --out "$out" 2>&1 | grep -v Warning | tee "$out/atomics.txt"
# atomic gridder with the table's choice: MeerKAT tracks, 4 M visibilities on a 4096^2 grid, kernels 7^2 .. 63^2
python3 -m clgrid.cli bench --device nvidia --dataset tracks --num-vis 4000000 --grid-size 4096 \
  --support 3 --support 7 --support 15 --support 31 --precision single --precision double \
  --repeats 5 --json "$out/atomic_1pol.json" 2>&1 | tee "$out/atomic_1pol.txt"
python3 -m clgrid.cli bench --device nvidia --dataset tracks --num-vis 1000000 --grid-size 4096 \
  --support 3 --support 15 --npol 4 --repeats 5 --json "$out/atomic_4pol.json" 2>&1 | tee "$out/atomic_4pol.txt"
python3 -m clgrid.cli tune --device nvidia --num-vis 2000000 --grid-size 4096 --support 7 \
  --write-table --no-save 2>&1 | tail -25 | tee "$out/tune.txt"
# moving-window gridder: seed 004's LOFAR-like sweep beside atomic (about 6 minutes)
python3 benchmarks/moving_window.py --device nvidia --out "$out" 2>&1 | tee "$out/moving_window.txt"
# texture interpolation: image error against an exact DFT, nearest vs interpolated tables, speed
python3 benchmarks/texture_study.py --device nvidia --out "$out" 2>&1 | tee "$out/texture_study.txt"
