"""The recentred geometry (clgrid/imaging/geometry.py: ImageGeometry.tilt_x/tilt_y,
recentre_tilt): the tilted w term's range over an off-centre image is about a centred
image's, and exact over its pixels; the identity the tilted gridding rests on."""

import numpy as np
import pytest

from clgrid.imaging.geometry import choose_geometry, n_minus_one_range, recentre_tilt


def test_the_tilted_range_is_a_centred_images_and_exact_over_the_pixels(rng):
    npix, pix = 200, 1e-3
    for cx, cy in ((0.0, 0.0), (0.1, -0.05), (0.4, 0.3)):
        x = (np.arange(npix) - npix // 2) * pix + cx
        y = (np.arange(npix) - npix // 2) * pix + cy
        tx, ty = recentre_tilt(cx, cy)
        s = np.sqrt(1 - x[:, None] ** 2 - y[None, :] ** 2) - 1 + tx * x[:, None] + ty * y[None, :]
        lo, hi = n_minus_one_range(x, y, tx, ty)
        assert lo == pytest.approx(s.min(), abs=1e-15) and s.max() <= hi <= s.max() + 1e-6
        centred = n_minus_one_range(x - cx, y - cy)
        # the curvature of n grows off the centre (as 1 / n^3): 1.7 times at n = 0.87
        assert hi - lo < 2 * (centred[1] - centred[0])
    # the identity the gridding rests on: u x + v y - w (n - 1) = u' x + v' y - w s
    u, v, w = rng.normal(size=(3, 50)) * 1000
    tx, ty = recentre_tilt(0.3, 0.2)
    xs, ys = 0.3 + rng.normal(size=50) * 0.01, 0.2 + rng.normal(size=50) * 0.01
    n = np.sqrt(1 - xs ** 2 - ys ** 2)
    assert np.allclose(u * xs + v * ys - w * (n - 1),
                       (u + tx * w) * xs + (v + ty * w) * ys - w * (n - 1 + tx * xs + ty * ys), atol=1e-9)


def test_a_recentred_geometry_has_a_centred_fields_planes():
    kw = dict(epsilon=1e-5, do_wgridding=True, w_range=(0.0, 5000.0), num_kept=10 ** 5)
    centred = choose_geometry(512, 512, 4e-4, 4e-4, **kw)
    plain = choose_geometry(512, 512, 4e-4, 4e-4, center_x=0.2, center_y=0.1, **kw)
    tilted = choose_geometry(512, 512, 4e-4, 4e-4, center_x=0.2, center_y=0.1, recentre=True, **kw)
    assert not plain.tilted and tilted.tilted and tilted.tilt_x == pytest.approx(0.2 / np.sqrt(0.95))
    assert tilted.num_planes < 1.2 * centred.num_planes < plain.num_planes / 3
    x, y = tilted.image_lm()
    s = tilted.w_term(x[:, None], y[None, :]) - tilted.nshift
    assert np.abs(s).max() <= 1 / (2 * tilted.kernel.sigma * tilted.dw) * (1 + 1e-9)
    # no centre offset, nothing to tilt
    assert choose_geometry(512, 512, 4e-4, 4e-4, recentre=True, **kw) == centred
