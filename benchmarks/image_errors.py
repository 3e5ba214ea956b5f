"""The image-error table: clgrid.vis2dirty and ducc0.wgridder at each epsilon, and the
seeds' W-projection tables, against a direct Fourier transform on a small wide-field case
with w.

Error: relative L2 over the whole image, ||image - dft|| / ||dft||.  The direct transform
is written here from the conventions in docs/user-guide/conventions.md:

    vis2dirty, ducc0:  dft[x, y] = Re sum_k V_k exp(+2 pi i (u x + v y - w (n - 1))) / n
    W-projection:      dft[x, y] = Re sum_k V_k exp(+2 pi i (u x + v y - w (n - 1)))   (no / n)

The W-projection rows come from clgrid.tools.stack_accuracy.stack_image_error (the stack's
image through the float64 reference gridder, which the device strategies match to
rounding).

    python benchmarks/image_errors.py                   # the table of docs/benchmarks/imaging.md
    python benchmarks/image_errors.py --num-vis 500 --npix 64 --quick
"""

import argparse
import time

import numpy as np

import clgrid
from clgrid.tools.stack_accuracy import stack_image_error


def direct_image(u, v, w, vis, x, y):
    """Re sum V exp(2 pi i (u x + v y - w (n - 1))) / n, in chunks of visibilities."""
    n = np.sqrt(1 - x[:, None] ** 2 - y[None, :] ** 2)
    out = np.zeros((len(x), len(y)))
    for s in range(0, len(u), 256):
        sl = slice(s, s + 256)
        ph = (u[sl, None, None] * x[None, :, None] + v[sl, None, None] * y[None, None, :]
              - w[sl, None, None] * (n - 1)[None])
        out += np.tensordot(vis[sl], np.exp(2j * np.pi * ph), axes=1).real
    return out / n


def rel(a, b):
    """Relative L2 error over the whole image and over its inner half (each axis halved)."""
    whole = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    q0, q1 = a.shape[0] // 4, a.shape[1] // 4
    inner = (slice(q0, a.shape[0] - q0), slice(q1, a.shape[1] - q1))
    return whole, float(np.linalg.norm(a[inner] - b[inner]) / np.linalg.norm(b[inner]))


def cell(e):
    return f"{e[0]:.2e} | {e[1]:.2e}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-vis", type=int, default=3000)
    p.add_argument("--npix", type=int, default=128)
    p.add_argument("--pixsize", type=float, default=2.5e-3, help="radians (default: an 18-degree field)")
    p.add_argument("--w-max", type=float, default=150.0, help="largest |w| in wavelengths")
    p.add_argument("--device", default="pocl")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="fewer epsilons")
    a = p.parse_args(argv)
    import ducc0.wgridder as wg

    rng = np.random.default_rng(a.seed)
    C = 299792458.0
    uv_max = 0.4 / a.pixsize                         # 80% of the image's Nyquist range
    u, v = rng.uniform(-uv_max, uv_max, (2, a.num_vis))
    w = rng.uniform(-a.w_max, a.w_max, a.num_vis)
    vis = rng.normal(size=a.num_vis) + 1j * rng.normal(size=a.num_vis)
    freq = np.array([C])                             # uvw in metres = wavelengths
    uvw = np.column_stack([u, v, w])
    x = (np.arange(a.npix) - a.npix // 2) * a.pixsize
    t = time.perf_counter()
    dft = direct_image(u, v, w, vis, x, x)
    print(f"# {a.num_vis} visibilities, {a.npix}^2 image of {np.degrees(a.npix * a.pixsize):.1f} deg, "
          f"|uv| <= {uv_max:.0f}, |w| <= {a.w_max:.0f} wavelengths (max |w (n - 1)| = "
          f"{a.w_max * (1 - np.sqrt(1 - 2 * x[0] ** 2)):.2f} cycles); direct transform {time.perf_counter() - t:.1f} s")
    print("| method | precision | epsilon | error, whole image | error, inner half |")
    print("|---|---|---|---|---|")
    common = dict(uvw=uvw, freq=freq, npix_x=a.npix, npix_y=a.npix, pixsize_x=a.pixsize, pixsize_y=a.pixsize,
                  do_wgridding=True)
    double_eps = [1e-2, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12] if a.quick else [10.0 ** -k for k in range(2, 13)]
    single_eps = [1e-2, 1e-5] if a.quick else [1e-2, 1e-3, 1e-4, 1e-5]
    for precision, eps_list, cd in (("double", double_eps, np.complex128), ("single", single_eps, np.complex64)):
        for eps in eps_list:
            values = vis[:, None].astype(cd)
            ours = clgrid.vis2dirty(vis=values, epsilon=eps, device=a.device, **common)
            theirs = wg.vis2dirty(vis=values, epsilon=eps, nthreads=2, **common)
            print(f"| clgrid.vis2dirty | {precision} | {eps:.0e} | {cell(rel(ours, dft))} |")
            print(f"| ducc0 {__import__('ducc0').__version__} vis2dirty | {precision} | {eps:.0e} | "
                  f"{cell(rel(theirs, dft))} |")
    # The seeds' W-projection (clgrid.tools.stack_accuracy: the same geometry, its own draw of
    # visibilities, every pixel, the reference gridder in float64)
    for planes, oversample in ((32, 8), (128, 8), (32, 32)):
        kernels = clgrid.KernelStack.w_projection(grid_size=a.npix, cell_size=a.pixsize, w_max=a.w_max,
                                                  num_planes=planes, oversample=oversample)
        e = stack_image_error(kernels, a.npix, a.pixsize, a.w_max, num_vis=a.num_vis, num_pixels=a.npix ** 2,
                              seed=a.seed)
        print(f"| W-projection: KernelStack.w_projection, {planes} planes, oversample {oversample} "
              f"(pswf, aa_support 3, threshold 1e-3), reference gridder | double | - | "
              f"{cell((e.whole, e.inner_half))} |")

if __name__ == "__main__":
    main()
