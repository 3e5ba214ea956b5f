"""What quantising a visibility's offset from its cell costs an analytic kernel's image: why
`clgrid.sources.analytic` plans exact offsets instead of using a finer table.

Random points and values in 2-D are spread with the exponential-of-semicircle kernel of
`KernelStack.analytic` at their exact offsets and at offsets rounded to 1/oversample of a
cell, made into images (FFT, the kernel's exact transform as grid correction, the central
grid_size / sigma pixels) and compared: relative L2 of the image.  The plan's 16-bit
offsets hold at most oversample 65534; 32768 is the largest power of two.

    python benchmarks/analytic_offsets.py        # a few seconds

Measured: at oversample 32768, 9.3e-6 (epsilon 1e-4, sigma 2.5), 1.3e-5 (1e-5, sigma
1.75), 9.6e-6 (1e-10, sigma 2.5); half that at 65534: about 0.75 / (oversample * sigma)
whatever the kernel (a point moved by up to half a quantum shifts its fringes across
the image), so no table the plan can index reaches single precision's 1e-5 with margin,
nor double's epsilons at all.
"""

import numpy as np

import clgrid

OVERSAMPLES = (16, 256, 4096, 32768, 65534)


def image(kernels, grid_size, npix, near, delta, vis):
    """The central npix^2 of the corrected image of the points spread with offsets ``delta``."""
    s = int(kernels.supports[0])
    taps = np.arange(-s, s + 1)
    grid = np.zeros((grid_size, grid_size), complex)
    wu = kernels.weights(taps[None] + delta[:, 0, None])
    wv = kernels.weights(taps[None] + delta[:, 1, None])
    for i in range(vis.size):
        cu = (near[i, 0] + grid_size // 2 + taps).astype(int)
        cv = (near[i, 1] + grid_size // 2 + taps).astype(int)
        grid[np.ix_(cv, cu)] += vis[i] * np.outer(wv[i], wu[i])
    picture = clgrid.imaging.grid_to_image(grid) / clgrid.imaging.grid_correction(kernels, grid_size)
    lo = grid_size // 2 - npix // 2
    return picture[lo:lo + npix, lo:lo + npix].real


def main(npix=48, num_vis=3000, seed=1):
    rng = np.random.default_rng(seed)
    for epsilon, precision in ((1e-4, "single"), (1e-5, "single"), (1e-10, "double")):
        kernels = clgrid.KernelStack.analytic(epsilon, precision)
        grid_size = kernels.padded_size(npix)
        s = int(kernels.supports[0])
        pos = rng.uniform(-grid_size / 2 + s + 1, grid_size / 2 - s - 1, (num_vis, 2))
        vis = rng.normal(size=num_vis) + 1j * rng.normal(size=num_vis)
        near = np.round(pos)
        exact = image(kernels, grid_size, npix, near, near - pos, vis)
        print(f"epsilon {epsilon:g} ({precision}): width {kernels.width}, sigma {kernels.sigma}")
        for oversample in OVERSAMPLES:
            rounded = np.round((near - pos) * oversample) / oversample
            got = image(kernels, grid_size, npix, near, rounded, vis)
            print(f"  oversample {oversample:6d}: {np.linalg.norm(got - exact) / np.linalg.norm(exact):.2e}")


if __name__ == "__main__":
    main()
