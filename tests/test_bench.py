"""The benchmark runner: a tiny run on PoCL, its JSON, its plots, failures as rows."""

import json

import numpy as np

from clgrid import bench, cli, plots


def test_tiny_run_json_and_plots(queue, tmp_path):
    work = bench.make_workload("tracks", 3000, 128, 3, oversample=4, num_planes=4)
    result = bench.run_benchmark(work, device=queue, repeats=2)
    assert result.failed is None
    assert result.median_s > 0 and result.min_s <= result.median_s <= result.max_s
    assert result.grid_point_additions == result.workload["num_vis"] * 7 * 7 >= 3000 * 7 * 7
    assert 0 < result.error < 1e-5
    path = tmp_path / "run.json"
    bench.write_json(path, [result], bench.environment())
    data = json.loads(path.read_text())
    assert set(data) == {"environment", "results", "cpu_libraries"}
    env = data["environment"]
    assert {"clgrid", "git_commit", "python", "devices", "time"} <= set(env)
    assert any("Portable" in d["platform"] for d in env["devices"])
    row = data["results"][0]
    for key in ("device", "method", "precision", "workload", "median_s", "gpa_per_s", "vis_per_s",
                "error", "tuning", "repeats"):
        assert key in row
    assert row["workload"]["num_vis"] >= 3000 and row["tuning"]["atomic"] == "cas"
    for png in plots.plot_file(path, tmp_path / "plots"):
        assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_failing_run_is_a_row_not_a_crash(queue):
    work = bench.make_workload("uniform", 500, 64, 2, oversample=4, num_planes=2)
    result = bench.run_benchmark(work, device=queue, tuning={"wg_u": 1 << 20})
    assert result.failed and "work-group" in result.failed
    assert np.isnan(result.median_s)


def test_cli_quick_bench_and_bad_device(capsys, device_name):
    assert cli.main(["bench", "--quick", "--num-vis", "2000", "--grid-size", "128", "--support", "2",
                     "--repeats", "1", "--device", device_name]) == 0
    assert "GGPA/s" in capsys.readouterr().out
    assert cli.main(["bench", "--device", "no such device"]) == 2
    assert "no OpenCL device matches" in capsys.readouterr().err


def test_degridding_and_lofar_workloads(queue):
    work = bench.make_workload("lofar", 2000, 128, 3, oversample=4, num_planes=4)
    assert work.uvw.shape[0] == 946 and work.describe()["num_vis"] >= 2000
    result = bench.run_benchmark(work, device=queue, method="degrid-gather", repeats=1)
    assert result.failed is None
    assert result.grid_point_additions == result.workload["num_vis"] * 49
    assert 0 < result.error < 1e-5 and result.vis_per_s > 0
    known_peak = any(name in result.device for name in bench.PEAK_GFLOPS)    # the H100's, not a CPU's
    assert (result.peak_fraction is not None) == known_peak
    assert set(bench.benchmark_methods()) >= {"atomic", "moving_window", "degrid-gather",
                                              "degrid-moving_window"}
