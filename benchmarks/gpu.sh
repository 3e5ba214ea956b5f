#!/usr/bin/env bash
# The GPU runs behind the benchmark pages (docs/benchmarks/, index in BENCHMARKS.md), in order. On the GPU machine, from the checkout root:
#   bash benchmarks/gpu.sh "$OUT" [part]
# The whole sequence takes about 25 minutes; `part` (tests, atomics, bench, degrid,
# moving_window, tiled, texture, plan, wgridding, imager) runs one section, for machines that limit a command's time;
# large_4k, large_8k, large_16k, large_32k, large_dsa, large_dsa_ducc0 (issue 29) run only when named.
set -uo pipefail
out=${1:-.}
part=${2:-all}
run() { [ "$part" = all ] || [ "$part" = "$1" ]; }
gpu=(--device nvidia)

if run tests; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
  python3 -m clgrid.tools.cli devices | tee -a "$out/gpu.txt"
  # the device tests on the GPU (the FPGA kernels and PoCL-specific checks excluded)
  CLGRID_TEST_DEVICE=nvidia python3 -m pytest -q -p no:cacheprovider tests/test_gridder_atomic.py \
    tests/test_gridder_moving_window.py tests/test_gridder_tiled.py tests/test_degrid_device.py \
    tests/test_tuning.py tests/test_texture.py \
    -k "not fpga and not pick_their_families and not cli_devices and not tuner" 2>&1 | tail -12 | tee "$out/tests.txt"
fi
if run atomics; then
  # float atomic paths: contention micro-benchmark and the atomic gridder with each path
  python3 benchmarks/atomics.py "${gpu[@]}" --out "$out" 2>&1 | tee "$out/atomics.txt"
  python3 -m clgrid.tools.cli tune "${gpu[@]}" --num-vis 2000000 --grid-size 4096 --support 7 \
    --write-table --no-save 2>&1 | tail -25 | tee "$out/tune.txt"
fi
if run bench; then
  # every GPU strategy on MeerKAT tracks, and a visibility sweep (seed 001 style)
  python3 -m clgrid.tools.cli bench "${gpu[@]}" --dataset tracks --num-vis 4000000 --grid-size 4096 \
    --support 3 --support 7 --support 15 --support 31 --method atomic --method tiled --method moving_window \
    --method texture --method degrid-gather --method degrid-moving_window --method degrid-texture \
    --json "$out/bench_h100.json" --plots "$out" 2>&1 | tee "$out/bench.txt"
  python3 -m clgrid.tools.cli bench "${gpu[@]}" --dataset uniform --num-vis 10000 --num-vis 100000 \
    --num-vis 1000000 --num-vis 10000000 --grid-size 8192 --support 16 --method atomic --method tiled \
    --method degrid-gather --json "$out/sweep_h100.json" --plots "$out" 2>&1 | tee "$out/sweep.txt"
fi
if run degrid; then
  python3 benchmarks/degrid.py "${gpu[@]}" --out "$out" 2>&1 | tee "$out/degrid.txt"
fi
if run moving_window; then
  # seed 004's LOFAR-like sweep beside atomic, coarsening, flush share, time_block
  python3 benchmarks/moving_window.py "${gpu[@]}" --out "$out" 2>&1 | tee "$out/moving_window.txt"
fi
if run tiled; then
  # the SKA-like set: stages, atomic side by side, parameter sweep
  python3 benchmarks/tiled.py "${gpu[@]}" --out "$out" 2>&1 | tee "$out/tiled.txt"
fi
if run texture; then
  python3 -m clgrid.tools.texture_precision "${gpu[@]}" 2>&1 | tee "$out/texture_precision.txt"
  python3 benchmarks/texture_study.py "${gpu[@]}" --out "$out" 2>&1 | tee "$out/texture_study.txt"
fi
if run plan; then
  # whole calls with host arrays (issue 14): plan, values, kernels, transfers; ducc0 beside;
  # a stream of 10x the device's memory through grid_chunks; the copy rates that bound it
  python3 benchmarks/transfers.py "${gpu[@]}" --megabytes 128 2>&1 | tee "$out/transfers.txt"
  python3 benchmarks/plan_pivot.py "${gpu[@]}" --num-vis 4000000 --grid-size 4096 --support 3 \
    --nthreads "$(nproc)" --stream-factor 10 --json "$out/plan_pivot_h100.json" 2>&1 | tail -5
fi
if run wgridding; then
  # vis2dirty / dirty2vis (issue 15): pyvkfft for the device FFT (a wheel built by
  # ../shared/device/build-pyvkfft-wheel.sh into .whl/), the tests on the GPU, then the
  # issue's benchmarks side by side with ducc0 on the machine's cores.
  ls .whl/pyvkfft-*.whl >/dev/null 2>&1 && pip install -q --no-deps .whl/pyvkfft-*.whl
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  CLGRID_TEST_DEVICE=nvidia python3 -m pytest -q -p no:cacheprovider tests/test_vis2dirty.py \
    tests/test_wgridding_paths.py tests/test_conventions.py 2>&1 | tail -12 | tee "$out/wgridding_tests.txt"
  for w in "" "--no-w"; do
    python3 benchmarks/wgridding.py "${gpu[@]}" --num-vis 4000000 --npix 4096 --epsilon 1e-4 --single \
      --nthreads "$(nproc)" --repeats 5 --oracle $w --json "$out/wgridding_h100${w:+_now}.json" 2>&1 \
      | tee -a "$out/wgridding.txt"
  done
fi
if run imager; then
  # clgrid image (issue 27) on a simulated 64.5 M-visibility MeerKAT MS into 4096^2, beside the
  # same pipeline with ducc0.wgridder on every core standing in for WSClean (not installed here),
  # then the imaging weights alone, host threads against the device. Needs python-casacore and
  # astropy (the ms extra) and ducc0; the MS (2.1 GB) is written to /tmp once (about a minute),
  # not to $out. The part keeps to IMAGER_BUDGET_S seconds (default 480): imager.py starts no
  # round that would pass it. A dry run at a small size, e.g. on PoCL:
  #   IMAGER_DEVICE=pocl IMAGER_NTIME=20 IMAGER_NCHAN=4 IMAGER_SIZE=1024 bash benchmarks/gpu.sh /tmp/out imager
  imager_started=$SECONDS
  budget=${IMAGER_BUDGET_S:-480}
  device=${IMAGER_DEVICE:-nvidia}
  shrink=()
  [ -n "${IMAGER_NTIME:-}" ] && shrink+=(--ntime "$IMAGER_NTIME")
  [ -n "${IMAGER_NCHAN:-}" ] && shrink+=(--nchan "$IMAGER_NCHAN")
  [ -n "${IMAGER_SIZE:-}" ] && shrink+=(--size "$IMAGER_SIZE")
  if ! python3 -c "import casacore.tables, astropy, ducc0" 2>"$out/imager_missing.txt"; then
    echo "imager: python-casacore, astropy or ducc0 missing (install the carried wheels):" \
      "$(tail -1 "$out/imager_missing.txt")" | tee "$out/imager.txt"
  else
    # the weights benchmark goes last and takes about 30 s at most: the rest of the budget is imager.py's
    python3 benchmarks/imager.py --case gpu --device "$device" --peers clgrid,ducc0 --repeats 3 "${shrink[@]}" \
      --budget-s $((budget - 45)) --workdir "${TMPDIR:-/tmp}/clgrid-imager-bench" --json "$out/imager_gpu.json" \
      2>&1 | tail -40 | tee "$out/imager.txt"
    samples=64e6
    [ -n "${IMAGER_NTIME:-}${IMAGER_NCHAN:-}" ] && samples=$((2016 * ${IMAGER_NTIME:-1000} * ${IMAGER_NCHAN:-32}))
    python3 benchmarks/imaging_weights.py --device "$device" --samples "$samples" --channels "${IMAGER_NCHAN:-32}" \
      --npix "${IMAGER_SIZE:-4096}" --repeats 3 --json "$out/imaging_weights_gpu.json" 2>&1 >/dev/null \
      | tee -a "$out/imager.txt"
  fi
  echo "imager part: $((SECONDS - imager_started)) s of a budget of $budget s" | tee -a "$out/imager.txt"
fi
# Large images (issue 29), one case a part, each well inside 10 minutes (pyvkfft set up as
# for "wgridding"): large_4k, large_8k, large_16k, large_32k, large_dsa, large_dsa_ducc0;
# "auto" is clgrid's choice (one grid or facets), "1x1" one grid where the device holds it.
# Named parts only (not in "all").
for case in 4k 8k 16k 32k dsa; do
  if [ "$part" = "large_$case" ]; then
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
    case $case in
      32k) extra=(--facets auto,1x1 --parts call,reused --repeats 2) ;;
      dsa) extra=(--facets auto --parts call,reused --repeats 2) ;;
      16k) extra=(--facets auto,1x1 --ducc0-timeout 330) ;;
      *) extra=(--facets auto,1x1) ;;
    esac
    python3 benchmarks/large_images.py --case "$case" "${gpu[@]}" --nthreads "$(nproc)" "${extra[@]}" \
      --json "$out/large_${case}_h100.json" 2>&1 | grep -v '^ ' | tee "$out/large_${case}.txt"
  fi
done
if [ "$part" = large_dsa_ducc0 ]; then
  python3 benchmarks/large_images.py --case dsa --parts ducc0 --facets auto --nthreads "$(nproc)" \
    --ducc0-timeout 480 --json "$out/large_dsa_ducc0_h100.json" 2>&1 | grep -v '^ ' | tee "$out/large_dsa_ducc0.txt"
fi
