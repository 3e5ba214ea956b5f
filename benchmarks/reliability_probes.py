"""Probes behind docs/reliability.md's measurements (issue 26), each printing one table.

    python benchmarks/reliability_probes.py accuracy [--seeds 30] [--device pocl]
    python benchmarks/reliability_probes.py uploads [--calls 2000] [--device intel]

``accuracy``: the worst relative L2 error, as a multiple of epsilon, of `clgrid.vis2dirty`
and `clgrid.dirty2vis` on a small image (16 x 16 pixels) from 1, 3 and 30 visibilities,
over ``--seeds`` random draws, beside ducc0's at the same epsilon; the oracle is ducc0 at
epsilon 1e-12 in double precision.

``uploads``: ``--calls`` small `Gridder.grid` calls (1 to 59 visibilities, double
precision, "atomic") on ``--device``, each against the float64 reference: how many were
refused with a spurious error and how many came back wrong (uploads that a kernel on the
operator's other queue read before they were complete).
"""

import argparse
import collections
import warnings

import numpy as np

import clgrid
from clgrid import reference

IMAGE = dict(npix_x=16, npix_y=16, pixsize_x=2e-3, pixsize_y=2.5e-3)
CASES = [(True, 1e-4), (True, 1e-5), (False, 1e-6), (False, 1e-9), (False, 1e-11)]


def accuracy(seeds: int, device: str) -> None:
    import ducc0.wgridder as ducc0

    warnings.simplefilter("ignore")
    print("direction  w      precision  epsilon  nvis  worst/eps ducc0  worst/eps clgrid")
    for direction in ("vis2dirty", "dirty2vis"):
        for wgrid in (False, True):
            for single, eps in CASES:
                for nvis in (1, 3, 30):
                    worst = {"ducc0": 0.0, "clgrid": 0.0}
                    for seed in range(seeds):
                        rng = np.random.default_rng(seed)
                        uvw = rng.uniform(-1, 1, (nvis, 3)) * np.array([1200.0, 1200.0, 300.0])
                        args = dict(uvw=uvw, freq=np.array([1e8]), pixsize_x=IMAGE["pixsize_x"],
                                    pixsize_y=IMAGE["pixsize_y"], do_wgridding=wgrid)
                        if direction == "vis2dirty":
                            data = rng.normal(size=(nvis, 1)) + 1j * rng.normal(size=(nvis, 1))
                            cast = data.astype(np.complex64 if single else np.complex128)
                            call, key = (lambda f, **k: f.vis2dirty(npix_x=16, npix_y=16, **k)), "vis"
                        else:
                            data = rng.normal(size=(16, 16))
                            cast = data.astype(np.float32 if single else np.float64)
                            call, key = (lambda f, **k: f.dirty2vis(**k)), "dirty"
                        ref = call(ducc0, epsilon=1e-12, **{key: data}, **args)
                        scale = np.linalg.norm(ref)
                        got = {"ducc0": call(ducc0, epsilon=eps, **{key: cast}, **args),
                               "clgrid": call(clgrid, epsilon=eps, device=device, **{key: cast}, **args)}
                        for name, value in got.items():
                            worst[name] = max(worst[name], np.linalg.norm(value - ref) / scale / eps)
                    print(f"{direction:10s} {str(wgrid):6s} {'single' if single else 'double':10s} {eps:7.0e}  "
                          f"{nvis:4d}  {worst['ducc0']:15.3f}  {worst['clgrid']:16.3f}", flush=True)


def uploads(calls: int, device: str) -> None:
    warnings.simplefilter("ignore")
    n_grid, cell = 64, 4e-3
    queue = clgrid.device.runtime.get_queue(device)
    stack = clgrid.KernelStack.w_projection(grid_size=n_grid, cell_size=cell, w_max=100, num_planes=4,
                                            oversample=4, max_support=8)
    gridder = clgrid.Gridder(n_grid, cell, stack, method="atomic", precision="double", device=queue,
                             on_dropped="ignore")
    rng = np.random.default_rng(0)
    seen = collections.Counter()
    du = 1.0 / (n_grid * cell)
    for n in rng.integers(1, 60, calls):
        uvw = np.column_stack([rng.uniform(-0.9, 0.9, (n, 2)) * (n_grid // 2) * du, rng.uniform(-100, 100, n)])
        vis = rng.normal(size=(n, 1)) + 1j * rng.normal(size=(n, 1))
        try:
            got = gridder.grid(uvw, vis)
        except ValueError as error:
            seen[f"refused: {str(error)[:40]}"] += 1
            continue
        expected = reference.grid(uvw, vis, n_grid, cell, stack, on_dropped="ignore")
        if not np.any(expected):
            seen["right" if not np.any(got) else "wrong"] += 1
        else:
            seen["right" if reference.relative_error(got, expected) <= 1e-12 else "wrong"] += 1
    print(f"{calls} calls on {queue.device.name.strip()} ({queue.device.platform.name}): {dict(seen)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=["accuracy", "uploads"])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--device")
    args = parser.parse_args(argv)
    if args.probe == "accuracy":
        accuracy(args.seeds, args.device or "pocl")
    else:
        uploads(args.calls, args.device or "intel")


if __name__ == "__main__":
    main()
