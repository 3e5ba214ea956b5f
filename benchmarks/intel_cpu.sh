#!/usr/bin/env bash
# The measurements behind platforms/intel_cpu.toml, on Intel's OpenCL CPU runtime
# (pip install ".[intel]"), from the checkout root:
#   bash benchmarks/intel_cpu.sh OUT [rounds]
# 1. float atomic paths: benchmarks/atomics.py --quick, `rounds` times (default 5; a shared
#    CPU is noisy), then the median of each row over the rounds;
# 2. clgrid tune for the atomic gridder and the gather degridder (whose space includes
#    the sub-group reduction).
set -euo pipefail
out=${1:?usage: bash benchmarks/intel_cpu.sh OUT [rounds]}
rounds=${2:-5}
mkdir -p "$out"
python3 -m clgrid.cli devices | tee "$out/devices.txt"
for i in $(seq 1 "$rounds"); do
  mkdir -p "$out/atomics_$i"
  python3 benchmarks/atomics.py --device intel --quick --out "$out/atomics_$i" > "$out/atomics_$i/log.txt" 2>&1
done
python3 - "$out" "$rounds" <<'PY' | tee "$out/atomics_medians.txt"
import json, sys
from collections import defaultdict
import numpy as np
out, rounds = sys.argv[1], int(sys.argv[2])
contention, gridder = defaultdict(list), defaultdict(list)
for i in range(1, rounds + 1):
    data = json.load(open(f"{out}/atomics_{i}/atomics.json"))
    for r in data["contention"]:
        contention[(r["addresses"], r["path"], r["used"], r["local"])].append(r["adds_per_s"])
    for r in data["gridder"]:
        gridder[(r["workload"]["npol"], r["tuning"].get("atomic"))].append(r["median_s"])
print(f"contention, G adds/s, median (min-max) of {rounds} rounds")
for (a, path, used, local), v in sorted(contention.items()):
    v = np.array(v) / 1e9
    print(f"  {a:>8d} addresses {path:5s}{'+local' if local else '      '} (used {used:4s}) "
          f"{np.median(v):7.3f} ({v.min():.3f}-{v.max():.3f})")
print(f"atomic gridder, ms, median (min-max) of {rounds} rounds of a median of 5")
for (npol, used), v in sorted(gridder.items()):
    v = np.array(v) * 1e3
    print(f"  npol {npol} atomic {used:5s} {np.median(v):8.2f} ({v.min():.2f}-{v.max():.2f})")
PY
python3 -m clgrid.cli tune --method atomic --device intel --num-vis 100000 --grid-size 1024 --support 7 \
  --repeats 5 --write-table --no-save 2>&1 | grep -v Warning | tee "$out/tune_atomic.txt"
python3 -m clgrid.cli tune --method degrid-gather --device intel --num-vis 100000 --grid-size 1024 \
  --support 7 --repeats 5 --write-table --no-save 2>&1 | grep -v Warning | tee "$out/tune_degrid_gather.txt"
