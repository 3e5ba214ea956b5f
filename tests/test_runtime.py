"""Device selection, program building and the template line mapping."""

import importlib.metadata
import os
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.device import codegen
from clgrid.device import runtime
from clgrid.strategies.base import check_precision

from conftest import relative_error


def test_devices_list_the_device_under_test_and_names_select_it(queue, device_name):
    assert queue.device in clgrid.devices()
    assert runtime.select_device(device_name) == queue.device
    kind = "cpu" if queue.device.type & cl.device_type.CPU else "gpu"
    assert runtime.select_device(kind).type & queue.device.type


@pytest.mark.parametrize("extra, distribution, platform", [
    ("pocl", "pocl-binary-distribution", "Portable Computing Language"),
    ("intel", runtime.INTEL_CPU_RUNTIME[0], "Intel(R) OpenCL")])
def test_pip_installed_drivers_are_listed(extra, distribution, platform):
    """`pip install clgrid[pocl]` / `[intel]` is all it takes for clgrid to list the device."""
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed here (pip install 'clgrid[{extra}]')")
    assert platform in {d.platform.name for d in clgrid.devices()}


def test_pip_driver_registration_keeps_the_system_drivers(tmp_path, monkeypatch):
    system = tmp_path / "etc"
    system.mkdir()
    (system / "vendor.icd").write_text("libvendor.so\n")
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(system))
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    monkeypatch.delenv("CLGRID_REGISTER_ICDS", raising=False)
    monkeypatch.setattr(runtime, "_pip_driver", lambda *_: tmp_path / "libintelocl.so")
    folder = runtime.register_pip_icds(tmp_path / "vendors")
    assert os.environ["OCL_ICD_VENDORS"] == str(folder)
    assert (folder / "vendor.icd").resolve() == system / "vendor.icd"
    assert (folder / "clgrid-intel-cpu.icd").read_text().strip() == str(tmp_path / "libintelocl.so")
    assert runtime.register_pip_icds(tmp_path / "other") is None        # the user's OCL_ICD_VENDORS stands
    monkeypatch.delenv("OCL_ICD_VENDORS")
    monkeypatch.setenv("CLGRID_REGISTER_ICDS", "0")
    assert runtime.register_pip_icds(tmp_path / "other") is None        # and so does an opt-out


def test_unknown_device_lists_the_devices_there(queue):
    with pytest.raises(clgrid.DeviceCapabilityError,
                       match=f"no OpenCL device matches 'quantum'.*{re.escape(queue.device.platform.name)}"):
        runtime.select_device("quantum")
    with pytest.raises(TypeError, match="device must be"):
        runtime.select_device(3)


def test_an_index_picks_one_of_the_matching_devices(queue):
    words = queue.device.platform.name.lower().split()[:1]
    matches = runtime.matching_devices(words[0])
    assert queue.device in matches
    for k, device in enumerate(matches):
        assert runtime.select_device(f"{words[0]} #{k}") == device
    with pytest.raises(clgrid.DeviceCapabilityError, match=f"only {len(matches)} OpenCL device"):
        runtime.select_device(f"{words[0]} #{len(matches)}")
    with pytest.raises(ValueError, match="must be followed by a device index"):
        runtime.select_device(f"{words[0]} #first")


def test_environment_variable_sets_the_default(monkeypatch, queue, device_name):
    monkeypatch.setenv("CLGRID_DEVICE", "no such device")
    with pytest.raises(clgrid.DeviceCapabilityError, match="no such device"):
        runtime.select_device()
    monkeypatch.setenv("CLGRID_DEVICE", device_name)
    assert runtime.select_device() == queue.device


def test_context_and_queue_are_accepted(queue):
    assert runtime.get_queue(queue) is queue
    assert runtime.select_device(queue.context) == queue.device
    assert runtime.get_queue(queue.device) is runtime.get_queue(queue.device)  # one queue per device


def test_fp64_refused_by_name_on_a_device_without_it(queue):
    facts = runtime.device_facts(queue.device)
    no_fp64 = type(facts)(**{**facts.__dict__, "fp64": False})
    with pytest.raises(clgrid.DeviceCapabilityError, match="cl_khr_fp64"):
        check_precision("double", no_fp64)
    check_precision("single", no_fp64)


def test_rendered_source_maps_lines_back_to_templates():
    source = codegen.render("grid_atomic.cl", double=False, atomic="cas", npol=2, oversample=4,
                            grid_size=64, wg_u=32, wg_v=4, groups_per_cu=8, deterministic=False,
                            source="source_table.cl", table_layout="compact")
    templates = {path.name: path.read_text().split("\n") for path in codegen.kernel_dir().glob("*.cl")}
    current, line = None, None
    checked = 0
    for text in source.split("\n"):
        if text.startswith("#line "):
            number, name = text.split()[1:3]
            current, line = name.strip('"'), int(number)
            continue
        if current and "{" not in templates[current][line - 1] and text.strip():
            assert text == templates[current][line - 1], (current, line)
            checked += 1
        line += 1
    assert checked > 50


def test_failed_build_source_never_follows_a_planted_symlink(queue, tmp_path, monkeypatch):
    """The source of a failed build goes to a new file, created exclusively under a name no
    one can foresee: a symlink planted where the old predictable name
    (<tmp>/clgrid-failed-<sha256[:12]>.cl) was is left alone, and so is its target."""
    import hashlib
    import os
    import stat
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    broken = f"__kernel void k(__global float *x) {{ x[0] = {os.getpid()} }}\n"     # ';' missing
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    planted = tmp_path / f"clgrid-failed-{hashlib.sha256(broken.encode()).hexdigest()[:12]}.cl"
    planted.symlink_to(victim)
    with pytest.raises(clgrid.KernelBuildError) as info:
        codegen.build_program(queue.context, broken)
    saved = Path(re.search(r"rendered source saved to (\S+)", str(info.value)).group(1))
    assert victim.read_text() == "precious" and planted.is_symlink()
    assert saved.parent == tmp_path and saved != planted and not saved.is_symlink()
    assert saved.read_text() == broken
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600


def test_build_error_names_template_line_and_saves_source(queue):
    source = codegen.render("grid_atomic.cl", double=False, atomic="cas", npol=1, oversample=4,
                            grid_size=64, wg_u=32, wg_v=4, groups_per_cu=8, deterministic=False,
                            source="source_table.cl", table_layout="compact")
    broken = source.replace("const size_t cell = row + p.grid_u + k;", "const size_t cell = row + p.grid_u + k")
    assert broken != source
    with pytest.raises(clgrid.KernelBuildError) as info:
        codegen.build_program(queue.context, broken)
    message = str(info.value)
    saved = re.search(r"rendered source saved to (\S+)", message)
    assert saved, message
    # The line the compiler names holds the broken statement: in the template where the
    # compiler honours #line (PoCL, Intel), in the saved rendered source where it does not
    # (NVIDIA's names "<kernel>:166").
    template = re.search(r"grid_atomic\.cl:(\d+)", message)
    rendered = re.search(r"<kernel>:(\d+)", message)
    assert template or rendered, message
    lines = ((codegen.kernel_dir() / "grid_atomic.cl").read_text() if template
             else open(saved.group(1)).read()).split("\n")
    assert "row + p.grid_u + k" in lines[int((template or rendered).group(1)) - 1]


def test_tracks_from_a_real_layout_match_the_reference(queue, rng):
    """MeerKAT Earth-rotation tracks at 1.4 GHz, 4 channels, 2 polarisations, both precisions."""
    from clgrid.tools import datasets

    layout = datasets.load_layout("meerkat")
    sub = rng.choice(layout.num_baselines, 120, replace=False)
    uvw = datasets.simulate_uvw(layout, declination=-0.6, hour_angles=np.linspace(-0.4, 0.4, 10),
                                baseline_subset=sub)
    freqs = np.array([1.30e9, 1.35e9, 1.40e9, 1.45e9])
    to_lambda = freqs.max() / 299792458.0
    n, w_max = 512, np.abs(uvw[..., 2]).max() * to_lambda
    cell = 0.8 * (n // 2 - 20) / (np.abs(uvw[..., :2]).max() * to_lambda) / n   # tracks fill the grid
    stack = clgrid.KernelStack.w_projection(grid_size=n, cell_size=cell, w_max=w_max, num_planes=16,
                                            oversample=8, max_support=16)
    vis = rng.normal(size=uvw.shape[:2] + (4, 2)) + 1j * rng.normal(size=uvw.shape[:2] + (4, 2))
    ref, report = clgrid.reference.grid(uvw, vis, n, cell, stack, freqs=freqs, return_report=True)
    assert report["gridded"] == report["samples"]
    for precision, tol in (("single", 1e-5), ("double", 1e-12)):
        gridder = clgrid.Gridder(n, cell, stack, device=queue, precision=precision)
        assert relative_error(gridder.grid(uvw, vis, freqs=freqs), ref) <= tol


@pytest.mark.parametrize("nbytes", [0, 8, 4096 * 3 + 8, 4096 * 5])
def test_fill_zeros_in_pieces_zeroes_exactly_the_prefix(queue, rng, monkeypatch, nbytes):
    """Fills go in pieces (NVIDIA fails on one large fill); every piece lands, nothing past nbytes."""
    monkeypatch.setattr(runtime, "FILL_PIECE_BYTES", 4096)
    poison = rng.normal(size=4096 * 6 // 8).astype(np.float64) + 7.0   # no zeros
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=poison)
    event = runtime.fill_zeros(queue, buffer, nbytes, np.float64)
    out = np.empty_like(poison)
    cl.enqueue_copy(queue, out, buffer, wait_for=[event]).wait()
    assert np.all(out[:nbytes // 8] == 0)
    assert np.array_equal(out[nbytes // 8:], poison[nbytes // 8:])


def fake_device(platform: str, max_alloc: int):
    """The device attributes device_facts reads, for a platform this machine lacks."""
    return SimpleNamespace(
        platform=SimpleNamespace(name=platform), vendor="v", name="d", type=cl.device_type.GPU,
        driver_version="1", max_compute_units=1, global_mem_size=4 * max_alloc, max_mem_alloc_size=max_alloc,
        local_mem_size=49152, max_work_group_size=1024, extensions="", double_fp_config=0, image_support=0)


def test_nvidia_buffers_are_capped_at_8_gib_and_a_bigger_grid_is_refused(queue, monkeypatch):
    assert runtime.device_facts(fake_device("NVIDIA CUDA", 21_254_373_376)).max_allocation == 2 ** 33
    assert runtime.device_facts(fake_device("NVIDIA CUDA", 2 ** 30)).max_allocation == 2 ** 30
    assert runtime.device_facts(fake_device("Portable Computing Language", 2 ** 40)).max_allocation == 2 ** 40
    stack = clgrid.KernelStack.w_projection(grid_size=64, cell_size=1e-3, w_max=10, num_planes=2, oversample=4,
                                            max_support=3)
    gridder = clgrid.Gridder(64, 1e-3, stack, method="atomic", device=queue)
    monkeypatch.setattr(gridder, "facts", runtime.device_facts(fake_device("NVIDIA CUDA", 21e9)))
    monkeypatch.setattr(gridder, "grid_size", 18000)
    with pytest.raises(clgrid.errors.DeviceCapabilityError, match="needs 9.66 GiB.*8.00 GiB per buffer"):
        gridder._check_grid_fits(4)
    gridder._check_grid_fits(1)   # 2.41 GiB fits


def test_kernel_objects_are_kept_per_thread(queue):
    """codegen.kernel: the same object again in one thread (no invoker lookup per launch),
    a different one in another thread (kernel objects hold their arguments)."""
    import threading

    from clgrid.device.codegen import build_program, kernel, render

    program = build_program(queue.context, render("scan.cl", wg=64, items=4))
    mine = kernel(program, "scan_blocks")
    assert kernel(program, "scan_blocks") is mine
    assert kernel(program, "add_block_offsets") is not mine
    other = []
    thread = threading.Thread(target=lambda: other.append(kernel(program, "scan_blocks")))
    thread.start()
    thread.join()
    assert other[0] is not mine and other[0].function_name == "scan_blocks"


@pytest.mark.parametrize("shape", [7919, 2 * 2731, (5462, 3), (1, 13)])
def test_launch_covers_sizes_without_small_factors_and_writes_nothing_beyond(queue, shape):
    """`codegen.launch` rounds dimension 0 up to whole work-groups (sizes with no small
    factors ran in groups of one or two items when the runtime chose): every id inside the
    shape is written once, nothing beyond it (the kernel's bound check), poisoned buffer."""
    source = """
    __kernel void mark(__global int *out, const int n0, const int n1)
    {
        const int i = get_global_id(0), j = get_global_id(1);
        if (i >= n0 || j >= n1)
            return;
        out[j * n0 + i] += 1 + i + n0 * j;
    }"""
    program = cl.Program(queue.context, source).build()
    n0, n1 = (shape, 1) if np.ndim(shape) == 0 else shape
    size = n0 * n1
    poison = np.full(size + 600, -7, np.int32)
    out = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=poison)
    kernel = codegen.kernel(program, "mark")
    codegen.launch(kernel, queue, shape, out, np.int32(n0), np.int32(n1)).wait()
    got = np.empty_like(poison)
    cl.enqueue_copy(queue, got, out)
    np.testing.assert_array_equal(got[:size], -7 + 1 + np.arange(size))
    np.testing.assert_array_equal(got[size:], -7)


@pytest.fixture
def fresh_loader(tmp_path, monkeypatch):
    """`open_only_drivers_for`'s world, made here: a system vendors folder with a PoCL and
    an NVIDIA .icd, clgrid's own vendors folder set (Intel's pip runtime registered), no
    platform listed yet, the CPU an AMD EPYC (Intel's runtime names its device so)."""
    system = tmp_path / "etc"
    system.mkdir()
    (system / "pocl.icd").write_text("libpocl.so.2\n")
    (system / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(system))
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path / "clgrid-vendors"))
    monkeypatch.delenv("CLGRID_REGISTER_ICDS", raising=False)
    monkeypatch.setattr(runtime, "_USER_VENDORS", None)
    monkeypatch.setattr(runtime, "_platforms_listed", False)
    monkeypatch.setattr(runtime, "_cpu_brand", lambda: "AMD EPYC 9555 64-Core Processor")
    return system


def test_a_named_pocl_opens_the_system_pocl_alone(fresh_loader, monkeypatch):
    for spec in ("pocl", "PoCL #0", "portable computing language cpu"):
        monkeypatch.setenv("OCL_ICD_VENDORS", "clgrid's")
        assert "only" in runtime.open_only_drivers_for(spec)
        assert os.environ["OCL_ICD_VENDORS"] == str(fresh_loader / "pocl.icd")
    # two PoCLs among the system's vendors: which one the loader lists first is not known
    # here, so neither is chosen; Intel's runtime still goes ("pocl" cannot name it)
    (fresh_loader / "pocl-other.icd").write_text("/opt/pocl/lib/libpocl.so\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", "clgrid's")
    assert "Intel" in runtime.open_only_drivers_for("pocl")
    assert "OCL_ICD_VENDORS" not in os.environ


@pytest.mark.parametrize("spec, intel_kept", [
    ("nvidia", False), ("gpu", False), ("H100 #1", False),
    ("intel", True), ("cpu", True), ("amd epyc", True), ("cpu #1", True), ("", True)])
def test_intels_runtime_is_left_out_only_where_it_cannot_be_the_device(fresh_loader, spec, intel_kept):
    before = os.environ["OCL_ICD_VENDORS"]
    said = runtime.open_only_drivers_for(spec)
    assert (said is None) == intel_kept
    assert os.environ.get("OCL_ICD_VENDORS") == (before if intel_kept else None)


def test_the_users_settings_and_a_listed_loader_are_left_alone(fresh_loader, monkeypatch):
    before = os.environ["OCL_ICD_VENDORS"]
    monkeypatch.setattr(runtime, "_USER_VENDORS", "/my/vendors")            # the user's own folder
    assert runtime.open_only_drivers_for("pocl") is None
    monkeypatch.setattr(runtime, "_USER_VENDORS", None)
    monkeypatch.setenv("CLGRID_REGISTER_ICDS", "0")                          # the opt-out
    assert runtime.open_only_drivers_for("nvidia") is None
    monkeypatch.delenv("CLGRID_REGISTER_ICDS")
    assert runtime.open_only_drivers_for(cl.get_platforms()[0].get_devices()[0]) is None   # not a name
    monkeypatch.setattr(runtime, "_platforms_listed", True)                 # too late: the loader has read its list
    assert runtime.open_only_drivers_for("pocl") is None
    assert os.environ["OCL_ICD_VENDORS"] == before


def test_clgrid_image_with_a_named_device_opens_only_its_driver(tmp_path):
    """`clgrid image --device pocl`, run as the program: the same device as with every driver
    open, and neither Intel's runtime nor pyopencl's own PoCL loaded (their libraries are not
    in the process's memory map)."""
    import subprocess
    import sys
    pytest.importorskip("casacore.tables", reason="needs python-casacore (the ms extra)")
    system = Path(os.environ.get("OPENCL_VENDOR_PATH") or "/etc/OpenCL/vendors")
    pocl = [icd for icd in system.glob("*.icd") if "pocl" in icd.read_text()]
    if len(pocl) != 1 or runtime._USER_VENDORS or os.environ.get("CLGRID_REGISTER_ICDS") == "0":
        pytest.skip(f"needs one system PoCL .icd in {system} (found {len(pocl)}) and no OCL_ICD_VENDORS "
                    f"or CLGRID_REGISTER_ICDS=0 of the user's")
    from clgrid.tools.simulated_ms import PointSource, write_ms
    ms = write_ms(str(tmp_path / "t.ms"), [PointSource(0.0, 0.0, 1.0)], stations=8, ntime=4, nchan=2).path
    script = ("import sys\nfrom clgrid.tools import cli\n"
              f"sys.argv = ['clgrid', 'image', {ms!r}, '-o', {str(tmp_path / 'x')!r}, '--size', '64', '64',"
              " '--scale', '1amin', '--device', 'pocl', '--quiet']\n"
              "code = cli.main()\nfrom clgrid.device.runtime import select_device\n"
              "print('@@' + select_device('pocl').name)\nprint('@@' + open('/proc/self/maps').read())\n"
              "sys.exit(code)\n")
    env = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "x-dirty.fits").is_file()
    _, name, maps = done.stdout.split("@@", 2)
    assert name.strip() == runtime.select_device("pocl").name
    assert "libintelocl" not in maps and "pyopencl/.libs/libpocl" not in maps


def test_import_leaves_scipy_fft_out_and_grid_sizes_stay_scipys():
    """`import clgrid` (and the command line's module) does not import scipy.fft, which
    brings scipy.special (~20 MiB in every process); the grid sizes its next_fast_len chose
    are chosen the same without it."""
    import subprocess
    import sys

    import scipy.fft

    from clgrid.imaging.geometry import _next_fast_len
    done = subprocess.run([sys.executable, "-c", "import sys, clgrid, clgrid.tools.cli; "
                           "print(sorted(m for m in sys.modules if m.startswith('scipy')))"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    sizes = list(range(1, 20000)) + [int(n) for n in np.random.default_rng().integers(20000, 2 ** 22, 300)]
    assert [_next_fast_len(n) for n in sizes] == [scipy.fft.next_fast_len(n) for n in sizes]
