"""The benchmark runner: a tiny run on PoCL, its JSON, its plots, failures as rows."""

import json

import numpy as np
import pytest

import clgrid
from clgrid.tools import bench
from clgrid.tools import cli
from clgrid.tools import plots
from clgrid.device.atomics import ATOMIC_PATHS


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
    assert set(data) == {"environment", "results"}
    env = data["environment"]
    assert {"clgrid", "git_commit", "python", "devices", "time"} <= set(env)
    assert any(d["platform"] == queue.device.platform.name.strip() for d in env["devices"])
    row = data["results"][0]
    for key in ("device", "method", "precision", "workload", "median_s", "gpa_per_s", "vis_per_s",
                "error", "tuning", "repeats"):
        assert key in row
    assert row["workload"]["num_vis"] >= 3000 and row["tuning"]["atomic"] in ATOMIC_PATHS
    for png in plots.plot_file(path, tmp_path / "plots"):
        assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_failing_run_is_a_row_not_a_crash(queue):
    work = bench.make_workload("uniform", 500, 64, 2, oversample=4, num_planes=2)
    result = bench.run_benchmark(work, device=queue, tuning={"wg_u": 1 << 20})
    assert result.failed and "work-group" in result.failed
    assert np.isnan(result.median_s)


@pytest.mark.slow
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


def test_bench_refuses_bad_arguments_by_name_before_device_work(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "select_device", lambda spec: (_ for _ in ()).throw(AssertionError("device work")))
    assert cli.main(["bench", "--num-vis", "-5", "--support", "300", "--repeats", "0",
                     "--json", str(tmp_path / "missing" / "x.json"), "--device", "pocl"]) == 2
    err = capsys.readouterr().err
    for named in ("--num-vis must be >= 1, got -5", "--support 300 needs", "--repeats must be >= 1",
                  "--json", "does not exist"):
        assert named in err


def test_bench_writes_each_row_as_it_finishes_and_keeps_them_on_ctrl_c(capsys, tmp_path, monkeypatch, device_name):
    real = bench.run_benchmark
    calls = []

    def interrupted_after_two(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(kwargs["method"])
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "run_benchmark", interrupted_after_two)
    path = tmp_path / "run.json"
    assert cli.main(["bench", "--num-vis", "500", "--grid-size", "64", "--support", "2", "--repeats", "1",
                     "--device", device_name, "--method", "atomic", "--method", "tiled", "--method", "moving_window",
                     "--json", str(path)]) == 130
    captured = capsys.readouterr()
    assert "interrupted after 2 of 3 runs" in captured.err
    rows = json.loads(path.read_text())["results"]
    assert [r["method"] for r in rows] == calls == ["atomic", "tiled"]
    assert all(r["min_s"] <= r["median_s"] <= r["max_s"] for r in rows)
    assert captured.out.count(" atomic ") == 1 and "min-max ms" in captured.out


def test_version(capsys):
    import pytest

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"clgrid {clgrid.__version__}"
