"""`clgrid image`'s reading of a Measurement Set (`clgrid.imager.ms.MeasurementSet.read`),
runs interleaved, medians, every read checked equal to the first kind's:

    python benchmarks/ms_reading.py MS [--pol I] [--repeats 7]            # cells vs slices
    python benchmarks/ms_reading.py MS --readers 1,4,8,16 [--json F]      # reader processes

Without ``--readers``: whole cells (every correlation, ``getcolnp``) against strided slices
of the correlations needed (``getcolslicenp``), in this process.  With ``--readers``: the
read by that many processes (`clgrid.imager.parallel_reading`; 1: this process), whole
cells or slices as clgrid chooses.

The MS should be in the page cache (the first read of each kind is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ms")
    parser.add_argument("--pol", default="I")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--readers", help="comma-separated reader counts to compare (default: cells vs slices)")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    from clgrid.imager import ms as reading
    from clgrid.imager.correlations import parse_polarizations

    pols = parse_polarizations(args.pol)
    if args.readers:
        kinds = [(f"{n} reader{'s' if n > 1 else ''}", dict(readers=n), None)
                 for n in (int(v) for v in args.readers.split(","))]
    else:
        kinds = [("whole cells", dict(readers=1), 2), ("strided slices", dict(readers=1), 0)]
    times = {k[0]: [] for k in kinds}
    reference = None
    with reading.open_ms(args.ms) as ms:
        groups = reading.channel_groups(ms.freqs, 1)
        for round_ in range(args.repeats + 1):
            order = kinds if round_ % 2 else kinds[::-1]
            for label, keywords, factor in order:
                if factor is not None:
                    reading.WHOLE_CELLS_UP_TO = factor
                started = time.perf_counter()
                data = ms.read(pols, groups, **keywords)
                elapsed = time.perf_counter() - started
                if round_:
                    times[label].append(elapsed)
                if reference is None:
                    reference = data
                elif round_ == 0:
                    assert np.array_equal(reference.uvw, data.uvw), label
                    for p in pols:
                        assert np.array_equal(reference.vis[p][0], data.vis[p][0]), label
                        assert np.array_equal(reference.wgt[p][0], data.wgt[p][0]), label
                del data
        rows, nchan = ms.nrow, ms.freqs.size
    result = {"ms": args.ms, "rows": rows, "channels": nchan, "pols": list(pols), "cores": os.cpu_count(),
              "load_average": [round(v, 2) for v in os.getloadavg()],
              **{k: {"median_s": round(statistics.median(v), 3), "runs_s": [round(x, 3) for x in v]}
                 for k, v in times.items()}}
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
