"""`clgrid bench --compare`: the peers' conventions against a direct transform, the parsing of
their timers, the accuracy ladder, and the quick run CI makes, with its JSON."""

import json

import numpy as np
import pytest

import clgrid
from clgrid.tools import cli
from clgrid.tools import compare
from clgrid.tools import peers

from conftest import optional

DUCC0_OUTPUT = """Gridding:
  nthreads=2, dirty=(2048x2048), grid=(2772x2772), supp=8, eps=0.0001

Total wall clock time for gridding: 0.1541s
|
+- gridding proper      : 20.78% (0.0320s)
+- allocating grid      : 18.50% (0.0285s)
+- building index       : 15.93% (0.0246s)
|  |
|  +- filling              : 46.06% (0.0113s)
|  +- counting             : 27.99% (0.0069s)
|
+- FFT                  : 15.70% (0.0242s)
+- Baseline construction:  9.83% (0.0151s)
+- Initial scan         :  3.05% (0.0047s)
+- parameter calculation:  0.22% (0.0003s)
"""


@pytest.fixture(scope="module")
def small():
    """A few MeerKAT time steps on a 64^2 image: every pixel is on the lattice."""
    return compare.meerkat_tracks(2016 * 3, 64).time_steps(2)


@pytest.mark.parametrize("do_wgridding", [False, True])
def test_direct_transform_matches_ducc0_finufft_and_vis2dirty(queue, small, do_wgridding):
    """The exact image the accuracies are measured against has the peers' convention (a wrong
    sign or axis gives errors of order 1, single precision gives ~1e-6)."""
    optional("ducc0", "compare"), optional("finufft", "compare")
    pixels = compare.lattice(small.npix)
    assert pixels.size == 64
    exact = compare.dft_image(small, do_wgridding, pixels)
    uvw, freq, vis = small.rows
    images = {"ducc0": peers.ducc0_vis2dirty(uvw, freq, vis, 64, small.pixsize, 1e-5, do_wgridding, 2)[0],
              "clgrid": clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, npix_x=64, npix_y=64, pixsize_x=small.pixsize,
                                         pixsize_y=small.pixsize, epsilon=1e-5, do_wgridding=do_wgridding,
                                         device=queue)}
    if not do_wgridding:
        images["finufft"] = peers.finufft_type1(uvw, freq, vis, 64, small.pixsize, 1e-6, 2)[0]
    for name, image in images.items():
        assert compare.image_error(image, exact, pixels) < 1e-4, name


def test_ducc0_timers_are_read_and_unknown_output_refused():
    timers = peers._ducc0_timers(DUCC0_OUTPUT)
    assert timers["gridding proper"] == 0.032 and timers["support"] == 8 and timers["total"] == 0.1541
    assert "filling" not in timers                          # nested timers are not top-level steps
    assert sum(timers[n] for n in peers.DUCC0_SETUP_TIMERS) == pytest.approx(0.0246 + 0.0151 + 0.0047 + 0.0003)
    with pytest.raises(RuntimeError, match="not understood"):
        peers._ducc0_timers("Gridding:\n  supp=8\n")


def test_cheapest_epsilon_is_the_largest_that_meets_the_accuracy(small):
    """The ladder goes from 10x the accuracy down by half decades and stops at the first
    epsilon that meets it, or at one the library refuses."""
    pixels = compare.lattice(small.npix)
    exact = np.ones((pixels.size, pixels.size))

    def image_with_error(case, epsilon):          # an image whose error is epsilon / 2
        if epsilon < 2e-6:
            raise ValueError("epsilon too small for single precision")
        return np.full((case.npix, case.npix), 1 + epsilon / 2)

    epsilon, error, tried = compare._cheapest_epsilon(image_with_error, small, exact, pixels, 1e-4)
    assert epsilon == pytest.approx(1e-4) and error == pytest.approx(5e-5)
    assert [e for e, _ in tried] == pytest.approx([1e-3, 10 ** -3.5, 1e-4])
    epsilon, error, tried = compare._cheapest_epsilon(image_with_error, small, exact, pixels, 1e-6)
    assert epsilon is None and "single precision" in tried[-1][1] and error == pytest.approx(10 ** -5.5 / 2)


def test_default_methods_leave_the_cpu_strategies_off_gpus():
    from types import SimpleNamespace

    assert "rows" in compare.default_methods(SimpleNamespace(type="ALL | CPU"))
    on_gpu = compare.default_methods(SimpleNamespace(type="ALL | GPU"))
    assert "rows" not in on_gpu and "fpga" not in on_gpu and "tiled" in on_gpu
    assert set(compare.default_methods(SimpleNamespace(type="CPU"))) <= set(compare.nearest_methods())


def test_bench_compare_refuses_what_it_cannot_take_by_name(capsys, monkeypatch):
    monkeypatch.setattr(compare, "compare", lambda **kw: pytest.fail("device work"))
    assert cli.main(["bench", "--compare", "--dataset", "uniform", "--width", "8", "--device", "pocl",
                     "--device", "intel", "--method", "texture", "--npol", "4", "--accuracy", "2"]) == 2
    err = capsys.readouterr().err
    for named in ("--dataset", "--width must be odd", "one --device", "--method texture", "--npol",
                  "--accuracy must be in (0, 1)"):
        assert named in err


@pytest.mark.slow
def test_bench_compare_quick(capsys, tmp_path, device_name):
    """What CI runs: every row printed with what it times, the JSON with the peers' versions
    and threads, every round's seconds, each whole call at the accuracy it claims."""
    optional("ducc0", "compare"), optional("finufft", "compare")
    path = tmp_path / "compare.json"
    assert cli.main(["bench", "--compare", "--quick", "--device", device_name, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    for shown in ("clgrid rows", "clgrid atomic", "ducc0", "finufft", "gridding proper", "load average",
                  "rate of clgrid rows / ducc0 gridding proper", "clgrid vis2dirty", "t1 fancy spread"):
        assert shown in out
    data = json.loads(path.read_text())
    assert data["command_settings"]["quick"] and data["environment"]["git_commit"] is not None
    result = data["comparison"]
    assert result["peers"]["ducc0"]["version"] and result["peers"]["finufft"]["threads"] >= 1
    assert len(result["load_average"]["before"]) == 3 and result["data"]["max_abs_w_wavelengths"] > 0
    kernel = {row["peer"]: row for row in result["kernel"]}
    assert set(kernel) == {"clgrid rows", "clgrid atomic", "ducc0", "finufft"}
    for row in kernel.values():
        assert len(row["seconds"]["kernel"]) == 3 and row["info"]["width"] == 7
        low, median, high = (row["summary"]["kernel"][k] for k in ("min", "median", "max"))
        assert 0 < low <= median <= high
        assert {"kernel", "setup", "whole"} <= set(row["timed"])
    assert kernel["clgrid rows"]["info"]["error_vs_reference"] < 1e-5
    whole = {row["peer"]: row for row in result["whole"]}
    assert set(whole) == {"clgrid vis2dirty", "ducc0"}               # with w: no type-1 row
    for row in whole.values():
        assert row["info"]["image_error"] <= 1e-4 and row["info"]["epsilon"] >= 1e-5
    assert set(result["ratios"]) == {"clgrid rows / ducc0 gridding proper", "clgrid atomic / ducc0 gridding proper"}
