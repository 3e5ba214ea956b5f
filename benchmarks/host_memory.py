"""Peak host memory of one `clgrid.vis2dirty` call against its input (issue 29: at most 3x the
input plus the image), and where it goes.

Run it in a fresh process (the peak is the process's): the input (uvw float64, vis) is
made first, then one call is measured: the process's peak resident memory less its
resident memory before the call (VmHWM, reset through /proc/self/clear_refs; the same
figure /usr/bin/time -v reports as "Maximum resident set size" less the input), the peak
of the host's numpy work (tracemalloc: the driver, geometry and image work, not the
device's buffers), and the peak of clgrid's device buffers by where they are made (on a
CPU device, PoCL, those are host memory too).

    /usr/bin/time -v python benchmarks/host_memory.py --num-vis 20000000 --npix 1024 --epsilon 1e-6
"""

import argparse
import os
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from large_images import HostPeak, pixel_size, tracks  # noqa: E402
from report import report  # noqa: E402
from clgrid.tools.buffers import BufferTracker  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-vis", type=int, default=20_000_000)
    p.add_argument("--npix", type=int, default=1024)
    p.add_argument("--epsilon", type=float, default=1e-6)
    p.add_argument("--single", action="store_true", help="complex64 (default complex128, as the issue)")
    p.add_argument("--device", default="pocl")
    p.add_argument("--nthreads", type=int, default=os.cpu_count())
    p.add_argument("--facets", default=None, help='"FxF" (default: clgrid\'s choice)')
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    sites = BufferTracker(sites=True).install()
    import clgrid

    uvw, freq, vis = tracks(a.num_vis, 1.4e9, single=a.single)
    pix = pixel_size(uvw, freq)
    inp = uvw.nbytes + vis.nbytes
    image_bytes = a.npix ** 2 * (4 if a.single else 8)
    facets = tuple(int(x) for x in a.facets.split("x")) if a.facets else None
    t = time.perf_counter()
    with HostPeak() as host:
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, npix_x=a.npix, npix_y=a.npix, pixsize_x=pix, pixsize_y=pix,
                         epsilon=a.epsilon, do_wgridding=True, nthreads=a.nthreads, device=a.device, facets=facets)
    seconds = time.perf_counter() - t
    res = dict(num_vis=a.num_vis, npix=a.npix, epsilon=a.epsilon, single=a.single, seconds=seconds,
               input_gib=inp / 2 ** 30, image_gib=image_bytes / 2 ** 30,
               extra_gib=None if host.extra is None else host.extra / 2 ** 30,
               extra_over_input=None if host.extra is None else host.extra / inp,
               target_gib=(3 * inp + image_bytes) / 2 ** 30, numpy_peak_gib=host.numpy_peak / 2 ** 30,
               device_buffers_peak_gib=sites.peak / 2 ** 30, device_buffers_per_vis=sites.peak / a.num_vis,
               device_buffers_at_peak={k: v / a.num_vis for k, v in sites.at_peak.most_common(12)},
               device=clgrid.device.runtime.get_queue(a.device).device.name.strip(),
               date=time.strftime("%Y-%m-%d %H:%M:%S"))
    report(res, a.json)


if __name__ == "__main__":
    main()
