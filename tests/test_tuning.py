"""The tuning table: precedence, validation, atomic paths (exact under contention), the tuner."""

import shutil
import warnings

import pytest

import clgrid
from clgrid.device import atomics
from clgrid.tools import bench
from clgrid.device import runtime
from clgrid.tools import tuner
from clgrid.device import tuning
from clgrid.device.tuning import TuningTableError

from conftest import random_visibilities, relative_error


def fake_facts(queue, **changes):
    facts = runtime.device_facts(queue.device)
    return type(facts)(**{**facts.__dict__, **changes})


H100 = dict(platform="NVIDIA CUDA", vendor="NVIDIA Corporation", type="ALL | GPU",
            name="NVIDIA H100 80GB HBM3")


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A private copy of the table (generic.toml) plus a test family, and no user file."""
    shutil.copy(tuning.platform_dir() / "generic.toml", tmp_path / "generic.toml")
    monkeypatch.setattr(tuning, "platform_dir", lambda: tmp_path)
    monkeypatch.setenv("CLGRID_TUNING", str(tmp_path / "user" / "tuning.toml"))
    for cached in (tuning._generic, tuning.load_entries):
        cached.cache_clear()
    yield tmp_path
    for cached in (tuning._generic, tuning.load_entries):
        cached.cache_clear()


def test_precedence_generic_family_device_user_call(table, queue):
    (table / "fam.toml").write_text(
        '[match]\nplatform = "NVIDIA"\n[atomic]\nwg_u = 16\nwg_v = 2\n'
        '[[devices]]\nname = "H100"\n[devices.atomic]\nwg_v = 8\ngroups_per_cu = 5\n')
    h100 = fake_facts(queue, **H100)
    other = fake_facts(queue, **{**H100, "name": "NVIDIA A100"})
    neutral = fake_facts(queue, platform="Other", vendor="Other", type="GPU", name="Other")
    generic = tuning.resolve_tuning("atomic", None, neutral)
    assert (generic["wg_u"], generic["wg_v"], generic["groups_per_cu"]) == (32, 4, 64)
    fam = tuning.resolve_tuning("atomic", None, other)
    assert (fam["wg_u"], fam["wg_v"], fam["groups_per_cu"]) == (16, 2, 64)      # family over generic
    dev = tuning.resolve_tuning("atomic", None, h100)
    assert (dev["wg_u"], dev["wg_v"], dev["groups_per_cu"]) == (16, 8, 5)       # device entry, field by field
    user = table / "user" / "tuning.toml"
    user.parent.mkdir()
    user.write_text('[[devices]]\nname = "H100"\n[devices.atomic]\ngroups_per_cu = 7\n')
    assert tuning.resolve_tuning("atomic", None, h100)["groups_per_cu"] == 7   # user file over table
    assert tuning.resolve_tuning("atomic", None, other)["groups_per_cu"] == 64
    call = tuning.resolve_tuning("atomic", {"groups_per_cu": 9}, h100)
    assert (call["wg_v"], call["groups_per_cu"]) == (8, 9)                     # per call over all


@pytest.mark.parametrize("text, words", [
    ('[atomic]\nwg_q = 3\n', ["bad.toml", "family", "wg_q"]),
    ('[atomic]\nwg_u = "wide"\n', ["bad.toml", "wg_u must be int"]),
    ('[gridding]\nx = 1\n', ["bad.toml", "unknown section [gridding]"]),
    ('[[devices]]\nname = "X"\n[devices.atomic]\natomic = 3\n', ["bad.toml", "devices[0]", "atomic must be str"]),
    ('[match]\ncolour = "red"\n', ["bad.toml", "colour"]),
    ('[atomic\n', ["bad.toml", "not valid TOML"]),
])
def test_bad_table_files_name_file_entry_and_key(table, text, words):
    (table / "bad.toml").write_text(text)
    with pytest.raises(TuningTableError) as info:
        tuning.load_entries()
    for word in words:
        assert word in str(info.value)


def test_every_shipped_file_parses_with_known_parameters():
    entries = tuning.load_entries()
    sources = {e.source for e in entries}
    assert {"generic.toml", "nvidia.toml", "amd.toml", "intel_cpu.toml", "pocl.toml", "intel_fpga.toml"} <= sources
    known = tuning.schema()
    for e in entries:
        for section, values in e.params.items():
            assert set(values) <= set(known[section]), (e.source, e.label)


FAMILY_FILES = {"Portable Computing Language": "pocl.toml", "Intel(R) OpenCL": "intel_cpu.toml",
                "NVIDIA CUDA": "nvidia.toml", "AMD Accelerated Parallel Processing": "amd.toml"}


def test_the_device_and_nvidia_pick_their_families(queue):
    facts = runtime.device_facts(queue.device)
    mine = [e.source for e in tuning.matching_entries(facts, include_user=False)]
    assert mine[:2] == ["generic.toml", FAMILY_FILES[facts.platform]]
    nv = [e.source for e in tuning.matching_entries(fake_facts(queue, **H100), include_user=False)]
    assert nv[:2] == ["generic.toml", "nvidia.toml"]
    assert tuning.resolve_tuning("atomic", None, fake_facts(queue, **H100))["atomic"] == "ptx"


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("path", atomics.ATOMIC_PATHS)
def test_every_atomic_path_sums_exactly_under_contention(queue, path, local, double):
    rate, error, used = atomics.contention_benchmark(queue, path, num_adds=1 << 17, num_addresses=16,
                                                     local=local, double=double, repeats=1)
    assert error == 0.0 and rate > 0
    facts = runtime.device_facts(queue.device)
    assert used == (path if atomics.atomic_unavailable(path, facts, double) is None else "cas")


@pytest.mark.parametrize("path", atomics.ATOMIC_PATHS)
def test_atomic_gridder_with_each_path_matches_reference(queue, rng, path):
    n, cell = 64, 4e-3
    stack = clgrid.KernelStack.w_projection(grid_size=n, cell_size=cell, w_max=60, num_planes=4,
                                            oversample=4, max_support=8)
    uvw, vis = random_visibilities(rng, 800, n, cell, 60, npol=2, fill=0.3)   # crowded: contention
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gridder = clgrid.Gridder(n, cell, stack, device=queue, tuning={"atomic": path})
    fell_back = atomics.atomic_unavailable(path, gridder.strategy.facts, False) is not None
    assert gridder.strategy.tuning["atomic"] == ("cas" if fell_back else path)
    assert any("unavailable" in str(w.message) for w in caught) == fell_back
    ref = clgrid.reference.grid(uvw, vis, n, cell, stack)
    assert relative_error(gridder.grid(uvw, vis), ref) <= 1e-5


def test_unknown_atomic_path_and_oversized_work_group_are_refused(queue):
    stack = clgrid.KernelStack.w_projection(grid_size=64, cell_size=4e-3, w_max=0, num_planes=1,
                                            oversample=4, max_support=4)
    with pytest.raises(TuningTableError, match="unknown atomic path 'magic'"):
        clgrid.Gridder(64, 4e-3, stack, method="atomic", device=queue, tuning={"atomic": "magic"})
    big = runtime.device_facts(queue.device).max_work_group_size
    with pytest.raises(clgrid.DeviceCapabilityError, match="work-group"):
        clgrid.Gridder(64, 4e-3, stack, method="atomic", device=queue, tuning={"wg_u": big, "wg_v": 2})


def test_tuner_end_to_end_on_a_tiny_space(queue, tmp_path, monkeypatch):
    monkeypatch.setenv("CLGRID_TUNING", str(tmp_path / "tuning.toml"))
    work = bench.make_workload("uniform", 3000, 128, 3, oversample=4, num_planes=4)
    space = {"wg_u": [8, 16], "wg_v": [4, 8], "groups_per_cu": [4], "atomic": ["cas", "ptx"]}
    result = tuner.tune(work, device=queue, space=space, repeats=1, progress=False)
    nvidia = "NVIDIA" in queue.device.platform.name
    assert len(result.timings) == (8 if nvidia else 4)    # "ptx" pruned but on NVIDIA
    assert result.error <= 1e-5 and result.best_seconds > 0
    path = tuner.save_user_entry(result, runtime.device_facts(queue.device))
    assert path == str(tmp_path / "tuning.toml")
    picked = tuning.resolve_tuning("atomic", None, runtime.device_facts(queue.device))
    assert {k: picked[k] for k in space} == {k: result.best[k] for k in space}
    # a failing candidate is skipped, not fatal
    big = runtime.device_facts(queue.device).max_work_group_size
    result = tuner.tune(work, device=queue, space={**space, "wg_u": [8, big * 2], "atomic": ["cas"]},
                        repeats=1, progress=False)
    assert all(t.params["wg_u"] == 8 for t in result.timings)


@pytest.mark.slow
def test_cli_devices_and_tune_run(queue, device_name, tmp_path, capsys):
    from clgrid.tools import cli

    assert cli.main(["devices"]) == 0
    entries = tuning.matching_entries(runtime.device_facts(queue.device))
    assert f"tuning entries: {', '.join(f'{e.source} {e.label}' for e in entries)}" in capsys.readouterr().out
    assert cli.main(["tune", "--device", device_name, "--quick", "--num-vis", "2000", "--grid-size", "128",
                     "--support", "2", "--repeats", "1", "--no-save", "--write-table"]) == 0
    out = capsys.readouterr().out
    assert "[devices.atomic]" in out and "best on" in out


def test_architecture_range_reaches_the_family_and_a_name_beats_it(table, queue):
    (table / "fam.toml").write_text(
        '[match]\nplatform = "NVIDIA"\n[atomic]\nwg_u = 16\n'
        '[[devices]]\ncompute_capability = ">=9.0, <10.0"\n[devices.atomic]\nwg_v = 8\ngroups_per_cu = 5\n'
        '[[devices]]\nname = "^NVIDIA H200"\n[devices.atomic]\ngroups_per_cu = 7\n')
    def resolved(name, capability):
        facts = fake_facts(queue, **{**H100, "name": name, "compute_capability": capability})
        atomic = tuning.resolve_tuning("atomic", None, facts)
        return atomic["wg_u"], atomic["wg_v"], atomic["groups_per_cu"]
    assert resolved("NVIDIA H100 80GB HBM3", (9, 0)) == (16, 8, 5)
    assert resolved("NVIDIA GH200 480GB", (9, 0)) == (16, 8, 5)          # same family, no entry of its own
    assert resolved("NVIDIA H200", (9, 0)) == (16, 8, 7)                 # its name over the range
    assert resolved("NVIDIA A100-SXM4-80GB", (8, 0)) == (16, 4, 64)      # below the range
    assert resolved("NVIDIA B200", (10, 0)) == (16, 4, 64)               # above it
    assert resolved("NVIDIA H100 80GB HBM3", ()) == (16, 4, 64)          # no capability reported


def test_shipped_hopper_entry_reaches_an_h200_and_not_older_gpus(queue):
    h200 = fake_facts(queue, **{**H100, "name": "NVIDIA H200", "compute_capability": (9, 0)})
    a100 = fake_facts(queue, **{**H100, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": (8, 0)})
    assert tuning.resolve_tuning("tiled", None, h200)["tile_u"] == 16
    assert tuning.resolve_tuning("degrid_gather", None, h200)["teams_per_group"] == 4
    # the H100's gather measurement is the Hopper entry's, not the whole family's
    assert tuning.resolve_tuning("degrid_gather", None, a100)["teams_per_group"] == \
        tuning.schema()["degrid_gather"]["teams_per_group"]
    assert tuning.resolve_tuning("tiled", None, h200, npol=4)["regsz"] == 2
    assert tuning.resolve_tuning("tiled", None, h200, npol=1)["regsz"] == 8


def test_when_tables_apply_for_their_npol_and_precision(table, queue):
    (table / "fam.toml").write_text(
        '[match]\nplatform = "NVIDIA"\n[atomic]\nwg_u = 16\n'
        '[[atomic.when]]\nnpol = 4\nwg_u = 8\n'
        '[[atomic.when]]\nprecision = "double"\ngroups_per_cu = 3\n'
        '[[atomic.when]]\nnpol = 4\nprecision = "double"\nwg_v = 1\n')
    facts = fake_facts(queue, **H100)
    def resolved(**given):
        atomic = tuning.resolve_tuning("atomic", None, facts, **given)
        return atomic["wg_u"], atomic["wg_v"], atomic["groups_per_cu"]
    assert resolved() == (16, 4, 64)                          # npol and precision unknown: none apply
    assert resolved(npol=1, precision="single") == (16, 4, 64)
    assert resolved(npol=4, precision="single") == (8, 4, 64)
    assert resolved(npol=2, precision="double") == (16, 4, 3)
    assert resolved(npol=4, precision="double") == (8, 1, 3)
    assert tuning.resolve_tuning("atomic", {"wg_u": 32}, facts, npol=4)["wg_u"] == 32   # the call wins


@pytest.mark.parametrize("text, words", [
    ('[[atomic.when]]\nwg_u = 8\n', ["names no condition"]),
    ('[[atomic.when]]\nnpol = 3\nwg_u = 8\n', ["npol must be one of"]),
    ('[[atomic.when]]\nprecision = "half"\nwg_u = 8\n', ["precision must be one of"]),
    ('[[atomic.when]]\nnpol = 4\nwg_q = 8\n', ["[[atomic.when]] #1", "wg_q"]),
    ('[[devices]]\ncompute_capability = "9"\n[devices.atomic]\nwg_u = 8\n', ["devices[0]", "compute_capability"]),
])
def test_bad_when_tables_and_capabilities_are_named(table, text, words):
    (table / "bad.toml").write_text(text)
    with pytest.raises(TuningTableError) as info:
        tuning.load_entries()
    for word in ["bad.toml", *words]:
        assert word in str(info.value)


def test_gridder_takes_the_npol_and_precision_values_of_its_call(table, queue, rng):
    """A user entry with values for 2 polarisations and for double precision: the operator
    grids 2 polarisations with them, 1 polarisation without, and both match the reference."""
    facts = runtime.device_facts(queue.device)
    user = table / "user" / "tuning.toml"
    user.parent.mkdir()
    user.write_text(f'[[devices]]\nplatform = "{facts.platform}"\n[devices.atomic]\nwg_u = 8\nwg_v = 1\ngroups_per_cu = 64\n'
                    '[[devices.atomic.when]]\nnpol = 2\nwg_u = 4\nwg_v = 2\n'
                    '[[devices.atomic.when]]\nprecision = "double"\ngroups_per_cu = 3\n')
    n, cell = 64, 4e-3
    stack = clgrid.KernelStack.w_projection(grid_size=n, cell_size=cell, w_max=60, num_planes=4,
                                            oversample=4, max_support=6)
    for precision, bound in (("single", 1e-5), ("double", 1e-12)):
        gridder = clgrid.Gridder(n, cell, stack, device=queue, precision=precision)
        assert gridder.strategy.tuning["groups_per_cu"] == (3 if precision == "double" else 64)
        for npol, shape in ((1, (8, 1)), (2, (4, 2))):
            uvw, vis = random_visibilities(rng, 300, n, cell, 60, npol=npol)
            prepared = gridder.prepare(uvw, vis)
            assert prepared.strategy.local_size() == shape
            ref = clgrid.reference.grid(uvw, vis, n, cell, stack)
            assert relative_error(gridder.grid(uvw, vis), ref) <= bound


@pytest.mark.slow
@pytest.mark.parametrize("method", bench.benchmark_methods())
def test_cli_tune_runs_for_every_method(queue, device_name, method, capsys):
    """Two values of the method's first tuning parameter, the table default beside them."""
    from clgrid.tools import cli

    section = tuner.method_of(method)[1]
    key, values = next(iter(tuning.tune_space(section).items()))
    sweep = f"{key}=[{', '.join(tuning._toml_value(v) for v in values[:2])}]"
    assert cli.main(["tune", "--method", method, "--device", device_name, "--quick",
                     "--num-vis", "600", "--grid-size", "64", "--support", "2", "--repeats", "2",
                     "--no-save", "--write-table", "--space", sweep]) == 0
    out = capsys.readouterr().out
    assert "table default: " in out and "x the default's speed" in out and f"[devices.{section}]" in out
    best = out[out.index("best on"):]
    assert any(f"'{key}': {v!r}" in best for v in values[:2])


def test_method_names_of_the_tuner():
    assert tuner.method_of("atomic")[:2] == ("atomic", "atomic")
    assert tuner.method_of("degrid-gather")[:2] == tuner.method_of("degrid_gather")[:2] == \
        ("degrid-gather", "degrid_gather")
    with pytest.raises(ValueError, match="unknown method 'spiral'"):
        tuner.method_of("spiral")


def test_single_work_item_strategies_are_not_pruned_by_simd_width(queue):
    """FPGA "task" kernels are one work-item on any device, a GPU's warps notwithstanding."""
    h100 = fake_facts(queue, **{**H100, "compute_capability": (9, 0), "max_work_group_size": 1024})
    assert len(tuner.candidates("fpga", h100, {"tile": [16, 32]})) == 2
    assert len(tuner.candidates("degrid-fpga", h100, {"tile": [16, 32]})) == 2
    assert tuner.candidates("atomic", h100, {"wg_u": [8, 16], "wg_v": [1]}) == []   # 8 and 16: not warps



@pytest.mark.parametrize("section", ["bins", "points", "degrid_points", "rows_stacked"])
def test_cli_tune_runs_for_the_imaging_strategies(queue, device_name, section, capsys):
    """`clgrid tune --imaging`: two values of the section's first parameter beside the table
    default, each image checked against the default's."""
    from clgrid.tools import cli

    key, values = next(iter(tuning.tune_space(section).items()))
    sweep = f"{key}=[{', '.join(tuning._toml_value(v) for v in values[:2])}]"
    assert cli.main(["tune", "--imaging", "--method", section, "--device", device_name, "--num-vis", "3000",
                     "--grid-size", "128", "--repeats", "2", "--no-save", "--write-table", "--space", sweep]) == 0
    out = capsys.readouterr().out
    assert "table default: " in out and f"[devices.{section}]" in out
    assert cli.main(["tune", "--imaging", "--method", "moving_window", "--device", device_name]) == 2

