"""`clgrid image`'s reading of a Measurement Set (`clgrid.imager.ms.MeasurementSet.read`):
whole cells (every correlation, ``getcolnp``) against strided slices of the correlations
needed (``getcolslicenp``), runs interleaved, medians; the two reads are checked equal.

    python benchmarks/ms_reading.py MS [--pol I] [--repeats 7]

The MS should be in the page cache (the first read of each kind is not counted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ms")
    parser.add_argument("--pol", default="I")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    from clgrid.imager import ms as reading
    from clgrid.imager.correlations import parse_polarizations

    pols = parse_polarizations(args.pol)
    times = {"whole cells": [], "strided slices": []}
    kept = {}
    with reading.open_ms(args.ms) as ms:
        groups = reading.channel_groups(ms.freqs, 1)
        for round_ in range(args.repeats + 1):
            for label, factor in ((("whole cells", 2), ("strided slices", 0))[::1 if round_ % 2 else -1]):
                reading.WHOLE_CELLS_UP_TO = factor
                started = time.perf_counter()
                data = ms.read(pols, groups)
                elapsed = time.perf_counter() - started
                if round_:
                    times[label].append(elapsed)
                else:
                    kept[label] = data
        rows, nchan = ms.nrow, ms.freqs.size
    a, b = kept["whole cells"], kept["strided slices"]
    assert np.array_equal(a.uvw, b.uvw)
    for p in pols:
        assert np.array_equal(a.vis[p][0], b.vis[p][0]) and np.array_equal(a.wgt[p][0], b.wgt[p][0])
    result = {"ms": args.ms, "rows": rows, "channels": nchan, "pols": list(pols),
              **{k: {"median_s": round(statistics.median(v), 3), "runs_s": [round(x, 3) for x in v]}
                 for k, v in times.items()}}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
