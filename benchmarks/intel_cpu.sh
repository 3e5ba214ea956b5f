#!/usr/bin/env bash
# The measurements behind clgrid/platforms/intel_cpu.toml, on Intel's OpenCL CPU runtime
# (pip install ".[intel]"), from the checkout root:
#   bash benchmarks/intel_cpu.sh OUT [part]      (part: atomics, tune, ab, gather; default all)
# atomics: benchmarks/atomics.py --quick, 5 rounds (a shared CPU is noisy), the median of
#          each row over the rounds;
# tune:    clgrid tune for the atomic gridder (19 minutes on 2 shared cores);
# ab:      the tuned shape with cas and ext, interleaved rounds (benchmarks/atomic_paths_ab.py);
# gather:  clgrid tune for the gather degridder (its space includes the sub-group reduction).
set -euo pipefail
out=${1:?usage: bash benchmarks/intel_cpu.sh OUT [part]}
part=${2:-all}
run() { [ "$part" = all ] || [ "$part" = "$1" ]; }
rounds=5
mkdir -p "$out"
python3 -m clgrid.tools.cli devices | tee "$out/devices.txt"
if run atomics; then
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
fi
run tune && python3 -m clgrid.tools.cli tune --method atomic --device intel --num-vis 100000 --grid-size 1024 --support 7 \
  --repeats 5 --write-table --no-save 2>&1 | grep -v Warning | tee "$out/tune_atomic.txt"
run ab && python3 benchmarks/atomic_paths_ab.py --device intel --tuning wg_u=8 --tuning wg_v=2 \
  --tuning groups_per_cu=16 --paths cas ext --rounds 7 2>&1 | grep -v Warning | tee "$out/ab.txt"
run gather && python3 -m clgrid.tools.cli tune --method degrid-gather --device intel --num-vis 100000 --grid-size 1024 \
  --support 7 --repeats 5 --write-table --no-save 2>&1 | grep -v Warning | tee "$out/tune_degrid_gather.txt"
true
