"""The ``clgrid`` command line: ``clgrid devices``, ``bench``, ``tune``, ``emit`` and ``image``."""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path

import numpy as np

from tqdm import tqdm

from .. import __version__
from . import bench
from . import compare
from ..device.binaries import INTEL_FPGA_PLATFORM, emit_program, offline_target
from ..sources.tables import KernelStack, quarter_size
from ..device.runtime import device_facts, devices, get_queue, open_only_drivers_for, select_device
from ..device.tuning import format_entry, matching_entries
from ..strategies import DEGRIDDING_METHODS, GRIDDING_METHODS, IMAGING
from ..sources.accuracy import choose_kernel
from ..sources.analytic import StackedKernel

# the tuning sections of the imaging operator's strategies (clgrid tune --imaging)
IMAGING_SECTIONS = tuple(dict.fromkeys(cls.name for pair in IMAGING.values() for cls in pair))


def cmd_devices(args) -> int:
    found = devices()
    if not found:
        print("no OpenCL devices found (pip install 'clgrid[pocl]' brings a CPU device)")
        return 1
    for i, d in enumerate(found):
        f = device_facts(d)
        atomics = [e for e in f.extensions if "atomic" in e]
        arch = f"; compute capability {'.'.join(map(str, f.compute_capability))}" if f.compute_capability else ""
        print(f"[{i}] {f.name}  ({f.platform}; {f.type}; driver {f.driver}{arch})\n"
              f"    compute units {f.compute_units}, global memory {f.global_memory / 2**30:.1f} GiB "
              f"(max buffer {f.max_allocation / 2**30:.1f} GiB), local memory {f.local_memory // 1024} KiB, "
              f"max work-group {f.max_work_group_size}\n"
              f"    fp64 {'yes' if f.fp64 else 'no'}, images {_image_limits(d) if f.images else 'no'}, "
              f"sub-groups {'yes' if f.subgroups else 'no'}, "
              f"atomics: {' '.join(atomics) or 'none'}\n"
              f"    tuning entries: {', '.join(f'{e.source} {e.label}' for e in matching_entries(f))}")
    return 0


def _image_limits(device) -> str:
    """The largest 3D image (texture interpolation keeps all w-planes in one)."""
    return f"3D up to {device.image3d_max_width}x{device.image3d_max_height}x{device.image3d_max_depth}"


def _sizes(quick: bool, args):
    """(visibilities, grid side, support) of every run: each --num-vis with each --support."""
    counts = args.num_vis if isinstance(args.num_vis, list) else [args.num_vis]
    counts = [n for n in counts if n] or [20000 if quick else 1_000_000]
    supports = args.support or ([3, 7] if quick else [3, 7, 15, 31])
    if getattr(args, "dataset", None) == "ska":   # the SKA-like set brings its own kernels
        supports = supports[:1]
    grid_size = args.grid_size or (512 if quick else 2048)
    return [(n, grid_size, s) for n in counts for s in supports]


KERNEL_STACK_LIMIT = 2 ** 31   # bytes of the benchmark's complex128 kernel stack on the host


def bench_argument_errors(args) -> list[str]:
    """What is wrong with ``clgrid bench``'s arguments, each by name, found before any device
    work (an hour's run must not fail at its end on a bad path, nor run on nonsense)."""
    errors = []
    for n in args.num_vis or []:
        if n < 1:
            errors.append(f"--num-vis must be >= 1, got {n}")
    for name in ("repeats", "oversample"):
        if getattr(args, name) < 1:
            errors.append(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.grid_size is not None and (args.grid_size < 16 or args.grid_size % 2):
        errors.append(f"--grid-size must be even and >= 16, got {args.grid_size}")
    if args.grid_size is None or args.grid_size >= 16:
        grid_size = args.grid_size or _sizes(args.quick, argparse.Namespace(num_vis=[1], support=[1],
                                                                          grid_size=None))[0][1]
        for support in args.support or []:
            planes = 32   # make_workload's stack
            stack_bytes = planes * quarter_size(max(support, 0), args.oversample) ** 2 * 16
            if support < 1 or support >= grid_size // 2 - 1:
                errors.append(f"--support must be in [1, {grid_size // 2 - 2}] for a {grid_size}^2 grid, "
                              f"got {support}")
            elif stack_bytes > KERNEL_STACK_LIMIT:
                errors.append(f"--support {support} needs a {stack_bytes / 2 ** 30:.1f} GiB kernel stack "
                              f"({planes} planes at --oversample {args.oversample}); the benchmark allows "
                              f"{KERNEL_STACK_LIMIT / 2 ** 30:.0f} GiB")
    for flag, path, folder in (("--json", args.json, False), ("--plots", args.plots, True)):
        if path and (why := _unwritable(Path(path), folder)):
            errors.append(f"{flag} {path}: {why}")
    if args.plots and not args.json:
        errors.append("--plots needs --json (the plots are drawn from it)")
    return errors


def _unwritable(path: Path, folder: bool) -> str | None:
    """Why ``path`` (a file, or a folder to create) cannot be written, or None."""
    if path.exists() and path.is_dir() != folder:
        return "is a folder" if not folder else "is a file"
    parent = path if folder and path.exists() else path.parent
    if not folder and not parent.is_dir():
        return f"folder {parent} does not exist"
    while not parent.exists():       # a plots folder is made, with its parents
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot write in {parent}"
    if path.exists() and not os.access(path, os.W_OK):
        return "is not writable"
    return None


def cmd_bench(args) -> int:
    """Rows print, and the JSON is rewritten, as each run finishes; Ctrl-C keeps what finished."""
    if args.compare:
        return cmd_compare(args)
    errors = bench_argument_errors(args)
    if errors:
        for message in errors:
            print(f"clgrid bench: {message}", file=sys.stderr)
        return 2
    try:
        chosen = [select_device(spec) for spec in args.device] if args.device else devices()
    except Exception as exc:
        print(f"clgrid bench: {exc}", file=sys.stderr)
        return 2
    if not chosen:
        print("clgrid bench: no OpenCL devices found", file=sys.stderr)
        return 2
    runs = [(d, m, p, size) for d in chosen for m in args.method for p in args.precision
            for size in _sizes(args.quick, args)]
    results = []
    workloads = {}
    environment = bench.environment() if args.json else None
    print(bench.HEADER, flush=True)
    progress = tqdm(runs, desc="bench", unit="run", disable=not sys.stderr.isatty())
    try:
        for device, method, precision, (num_vis, grid_size, support) in progress:
            key = (num_vis, grid_size, support)
            if key not in workloads:
                workloads[key] = bench.make_workload(args.dataset, num_vis, grid_size, support, npol=args.npol,
                                                     oversample=args.oversample)
            results.append(bench.run_benchmark(workloads[key], device=device, method=method,
                                               precision=precision, repeats=args.repeats,
                                               deterministic=args.deterministic))
            progress.write(results[-1].row())
            sys.stdout.flush()
            if args.json:
                bench.write_json(args.json, results, environment)
    except KeyboardInterrupt:
        progress.close()
        kept = f"; kept in {args.json}" if args.json and results else ""
        print(f"clgrid bench: interrupted after {len(results)} of {len(runs)} runs{kept}", file=sys.stderr)
        return 130
    progress.close()
    if args.json:
        bench.write_json(args.json, results, environment)
        print(f"wrote {args.json}")
        if args.plots:
            from .plots import plot_file

            print("plots:", ", ".join(plot_file(args.json, args.plots)))
    return 1 if any(r.failed for r in results) else 0


COMPARE_QUICK = dict(num_vis=20160, grid_size=256, methods=("rows", "atomic"))


def compare_argument_errors(args) -> list[str]:
    """What ``clgrid bench --compare`` cannot take, each by name (it has its own data: MeerKAT
    tracks, one size, single precision, one device)."""
    errors = []
    refused = {"--dataset": args.dataset != "tracks", "--support (the width is --width)": args.support,
               "--npol": args.npol != 1, "--precision double": "double" in (args.precision or []),
               "--deterministic": args.deterministic, "--plots": args.plots}
    errors += [f"--compare does not take {flag}" for flag, given in refused.items() if given]
    if args.device and len(args.device) > 1:
        errors.append(f"--compare takes one --device, got {len(args.device)}")
    if args.num_vis and len(args.num_vis) > 1:
        errors.append(f"--compare takes one --num-vis, got {len(args.num_vis)}")
    if args.num_vis and args.num_vis[0] < 1:
        errors.append(f"--num-vis must be >= 1, got {args.num_vis[0]}")
    if args.grid_size is not None and (args.grid_size < 32 or args.grid_size % 2):
        errors.append(f"--grid-size must be even and >= 32 (ducc0's smallest image), got {args.grid_size}")
    if args.width < 3 or args.width % 2 == 0:
        errors.append(f"--width must be odd and >= 3 (clgrid's kernels are 2 * support + 1 wide), "
                      f"got {args.width}")
    if not 0 < args.accuracy < 1:
        errors.append(f"--accuracy must be in (0, 1), got {args.accuracy}")
    if args.repeats < 1:
        errors.append(f"--repeats must be >= 1, got {args.repeats}")
    methods = [m for m in args.method or [] if m not in compare.nearest_methods()]
    if methods:
        errors.append(f"--method {', '.join(methods)}: --compare times gridders with nearest kernel "
                      f"samples: {', '.join(compare.nearest_methods())}")
    if args.json and (why := _unwritable(Path(args.json), False)):
        errors.append(f"--json {args.json}: {why}")
    return errors


def cmd_compare(args) -> int:
    """``clgrid bench --compare``: clgrid beside ducc0 and FINUFFT (cuFINUFFT on a GPU), `clgrid.tools.compare`."""
    errors = compare_argument_errors(args)
    if errors:
        for message in errors:
            print(f"clgrid bench: {message}", file=sys.stderr)
        return 2
    quick = COMPARE_QUICK if args.quick else {}
    try:
        device = select_device(args.device[0]) if args.device else None
        result = compare.compare(num_vis=args.num_vis[0] if args.num_vis else quick.get("num_vis", 1_000_000),
                                 npix=args.grid_size or quick.get("grid_size", 2048), width=args.width,
                                 accuracy=args.accuracy,
                                 methods=args.method or quick.get("methods"),
                                 device=device, repeats=args.repeats,
                                 do_wgridding=not args.no_w)
    except Exception as exc:
        print(f"clgrid bench --compare: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(compare.format_comparison(result))
    if args.json:
        compare.write_json(args.json, result, bench.environment(),
                           {k: v for k, v in vars(args).items() if k != "func"})
        print(f"wrote {args.json}")
    return 0


def cmd_tune(args) -> int:
    from . import tuner

    known = IMAGING_SECTIONS if args.imaging else bench.benchmark_methods()
    if args.imaging and args.method not in known and args.method in IMAGING:   # a spread: its section
        args.method = IMAGING[args.method][0].name
    if args.method not in known:
        print(f"clgrid tune: unknown {'imaging ' if args.imaging else ''}method {args.method!r}; choose one of "
              f"{list(known)}", file=sys.stderr)
        return 2

    try:
        queue = get_queue(args.device)
    except Exception as exc:
        print(f"clgrid tune: {exc}", file=sys.stderr)
        return 2
    facts = device_facts(queue.device)
    num_vis, grid_size, support = _sizes(args.quick, args)[0]
    try:
        space = {key: value if isinstance(value, list) else [value]
                 for key, value in _tuning_overrides(args.space).items()} or None
        if args.imaging:
            result = tuner.tune_imaging(args.method, device=queue, num_vis=num_vis, npix=grid_size,
                                        epsilon=args.epsilon, space=space, repeats=args.repeats,
                                        precision=args.precision)
            workload = f"MeerKAT tracks, {num_vis} visibilities, {grid_size}^2 with w, epsilon {args.epsilon}"
        else:
            workload = bench.make_workload(args.dataset, num_vis, grid_size, support, npol=args.npol,
                                           oversample=args.oversample)
            result = tuner.tune(workload, device=queue, strategy=args.method, repeats=args.repeats,
                                precision=args.precision, space=space)
    except (ValueError, RuntimeError) as exc:
        print(f"clgrid tune: {exc}", file=sys.stderr)
        return 1
    ranked = sorted((t for t in result.timings if t.median is not None), key=lambda t: t.median)
    print(f"{args.method} on {facts.name}, {len(result.timings)} candidates, {len(result.skipped)} skipped; "
          f"median of {args.repeats} (min-max); fastest {min(10, len(ranked))}:")
    for timing in ranked[:10]:
        print(f"  {' '.join(f'{k}={v}' for k, v in timing.params.items()):60s} {timing.describe()}")
    for params, why in result.skipped:
        print(f"  skipped {params}: {why}")
    default, best = result.default, result.winner
    if default.median is not None:
        print(f"table default: {default.describe()}; best: {best.describe()}, "
              f"{default.median / best.median:.2f}x the default's speed")
    else:
        print(f"table default failed: {default.reason}; best: {best.describe()}")
    print(f"best on {result.device}: {best.params} (error {result.error:.1e} against the reference)")
    if args.write_table:
        print(format_entry(tuner.device_match(facts), result.strategy,
                           tuner.strategy_values(result),
                           f"measured by clgrid tune on {facts.name}: "
                           f"{workload if isinstance(workload, str) else workload.describe()}"))
    if not args.no_save:
        print(f"saved to {tuner.save_user_entry(result, facts, args.output and Path(args.output))}")
    return 0


def _tuning_overrides(pairs) -> dict:
    """``KEY=VALUE`` pairs, each value read as TOML (``tile=64``, ``binary="x.aocx"``)."""
    overrides = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--tuning takes KEY=VALUE, got {pair!r}")
        overrides[key.strip()] = tomllib.loads(f"value = {value}")["value"]
    return overrides


def cmd_emit(args) -> int:
    if args.imaging:
        methods = {label: pair[1 if args.degrid else 0] for label, pair in IMAGING.items()}
        kind = "imaging (--imaging)"
    else:
        methods = DEGRIDDING_METHODS if args.degrid else GRIDDING_METHODS
        kind = "degridding" if args.degrid else "gridding"
    if args.method not in methods:
        print(f"clgrid emit: no {kind} method {args.method!r}; choose one of {list(methods)}", file=sys.stderr)
        return 2
    try:
        facts = (offline_target(args.target, args.platform) if args.target
                 else device_facts(select_device(args.device)))
        grid_size, float_taps = args.grid_size, False
        if args.imaging:
            if args.epsilon is None:
                raise ValueError("--imaging needs --epsilon (the accuracy the imaging operator's kernel reaches)")
            ndim = 3 if args.w_planes else 2
            choice = choose_kernel(args.epsilon, args.precision, ndim)
            stack = StackedKernel(choice.support, choice.beta, max(args.w_planes, 1), bool(args.w_planes))
            grid_size = (args.grid_size, args.grid_size)
            # (kernel values kept in float where the operator keeps them so at this epsilon)
            float_taps = methods[args.method].keeps_float_taps(choice, args.precision, ndim, args.epsilon)
        elif args.epsilon is not None:
            stack = KernelStack.analytic(args.epsilon, args.precision)
        elif args.max_support is None:
            raise ValueError("give --max-support (a table stack's widest support) or --epsilon (an analytic kernel)")
        else:
            # A stand-in stack with the real one's oversampling and widest support: all a program bakes in.
            q = quarter_size(args.max_support, args.oversample)
            stack = KernelStack.from_arrays([np.zeros((q, q))], [args.max_support], args.oversample, 0.0)
        source, description = emit_program(methods[args.method], facts, args.precision, args.npol,
                                           grid_size, stack, args.output,
                                           _tuning_overrides(args.tuning), float_taps)
    except Exception as exc:
        print(f"clgrid emit: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {source} and {description} (for {facts.name}, {facts.platform})")
    return 0


# -- clgrid image ------------------------------------------------------------------------

def image_options(args):
    """``clgrid image``'s arguments as `clgrid.imager.ImagingOptions` (ValueError naming the
    option for a value it cannot take)."""
    from ..imager import ImagingOptions, parse_angle

    mode, *values = [w.lower() for w in args.weight]
    takes = 1 if mode == "briggs" else 0
    if mode not in ("natural", "uniform", "briggs"):
        raise ValueError(f"--weight must be natural, uniform or briggs ROBUST, got {' '.join(args.weight)}")
    if len(values) < takes:
        raise ValueError("--weight briggs needs its robustness, e.g. --weight briggs 0.5")
    extra = values[takes:]
    if extra and not args.ms:
        args.ms = extra                               # "--weight natural obs.ms": the MSs after it
    elif extra:
        raise ValueError(f"--weight {mode} takes {takes or 'no'} value{'s' if takes != 1 else ''}, "
                         f"got {' '.join(args.weight)}")
    if not args.ms:
        raise ValueError("give the Measurement Set to image")
    try:
        robust = float(values[0]) if takes else 0.0
    except ValueError:
        raise ValueError(f"--weight briggs: the robustness must be a number, got {values[0]!r}") from None
    return ImagingOptions(
        ms=args.ms[0] if len(args.ms) == 1 else tuple(args.ms), name=args.name,
        size=tuple(args.size) if args.size else None,
        scale=parse_angle(args.scale, "--scale") if args.scale is not None else None,
        weight=mode, robust=robust, super_weight=args.super_weight, mf_weighting=args.mf_weighting,
        rank_filter=args.weighting_rank_filter, rank_filter_size=args.weighting_rank_filter_size,
        padding=args.padding, data_column=args.data_column, polarizations=args.pol,
        channels_out=args.channels_out, make_psf=args.make_psf, beam_fit=args.beam_fit, do_wgridding=not args.no_w,
        divide_by_n=args.divide_by_n, epsilon=args.epsilon, precision=args.precision, device=args.device,
        weights_on=args.weights_on, field_id=args.field, readers=args.parallel_reading, overwrite=args.overwrite,
        history=("clgrid image " + " ".join(sys.argv[1:] if args.argv is None else args.argv),))


def cmd_image(args) -> int:
    """``clgrid image``: `clgrid.imager.run` on the arguments; errors one per line, exit 2."""
    from ..imager import ImagingError, MSError, run

    try:
        options = image_options(args)
        run(options, quiet=args.quiet)
    except (ImagingError, MSError, ValueError, ImportError, FileExistsError) as exc:
        for line in str(exc).splitlines():
            print(f"clgrid image: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("clgrid image: interrupted (no partial file is left)", file=sys.stderr)
        return 130
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clgrid", description=__doc__)
    parser.add_argument("--version", action="version", version=f"clgrid {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("devices", help="list OpenCL platforms and devices").set_defaults(func=cmd_devices)
    b = sub.add_parser("bench", help="time gridding and degridding strategies against the float64 reference")
    b.add_argument("--quick", action="store_true", help="small sizes: under a minute on a 2-core CPU")
    b.add_argument("--device", action="append", help="device name to match (repeatable; default: every device)")
    b.add_argument("--method", action="append", choices=bench.benchmark_methods(), default=None,
                   help="gridding method or degrid-<method> (repeatable; default: all)")
    b.add_argument("--precision", action="append", choices=["single", "double"], default=None)
    b.add_argument("--dataset", choices=list(bench.DATASETS), default="tracks")
    b.add_argument("--num-vis", type=int, action="append", help="visibilities per run (repeatable)")
    b.add_argument("--grid-size", type=int, help="grid side N")
    b.add_argument("--support", type=int, action="append", help="kernel half-width (repeatable)")
    b.add_argument("--npol", type=int, choices=[1, 2, 4], default=1)
    b.add_argument("--oversample", type=int, default=8)
    b.add_argument("--repeats", type=int, help="timed runs after one warm-up (default 5; 3 with --compare --quick)")
    b.add_argument("--json", help="write every number and the environment to this file (rewritten after "
                                  "each run, so an interrupted run keeps what finished)")
    b.add_argument("--deterministic", action="store_true",
                   help="grid with Gridder(deterministic=True) (fixed-point accumulation)")
    b.add_argument("--plots", metavar="DIR", help="with --json: write PNG plots there (needs matplotlib)")
    b.add_argument("--compare", action="store_true",
                   help="clgrid beside ducc0 and FINUFFT (cuFINUFFT on a GPU) on MeerKAT tracks: kernels at "
                        "equal width, whole calls at equal image accuracy (the compare extra)")
    b.add_argument("--width", type=int, default=7, help="with --compare: kernel width of the kernel rows (odd)")
    b.add_argument("--accuracy", type=float, default=1e-4,
                   help="with --compare: full-image error the whole-call rows must reach")
    b.add_argument("--no-w", action="store_true", help="with --compare: whole calls in 2-D (FINUFFT's row too)")
    b.set_defaults(func=cmd_bench)

    t = sub.add_parser("tune", help="measure a strategy's parameters on a device and save the best")
    t.add_argument("--method", default="atomic",
                   help=f"gridding method or degrid-<method> (default: atomic): {', '.join(bench.benchmark_methods())}; "
                        f"with --imaging the imaging operator's: {', '.join(IMAGING_SECTIONS)} (or a [wgridding] spread, "
                        f"such as tiled: its spreading strategy's section)")
    t.add_argument("--imaging", action="store_true",
                   help="tune a strategy of the imaging operator (vis2dirty / dirty2vis), timed on its spread or "
                        "interpolation of every w-plane of MeerKAT tracks imaged with w (--num-vis, --grid-size "
                        "as the image's side, --epsilon)")
    t.add_argument("--epsilon", type=float, default=1e-4, help="with --imaging: the accuracy (default 1e-4)")
    t.add_argument("--device", help="device name to match (default: the default device)")
    t.add_argument("--quick", action="store_true", help="small data: a minute on a 2-core CPU")
    t.add_argument("--dataset", choices=list(bench.DATASETS), default="tracks")
    t.add_argument("--num-vis", type=int)
    t.add_argument("--grid-size", type=int)
    t.add_argument("--support", type=int, action="append")
    t.add_argument("--npol", type=int, choices=[1, 2, 4], default=1)
    t.add_argument("--oversample", type=int, default=8)
    t.add_argument("--precision", choices=["single", "double"], default="single")
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--space", action="append", metavar="KEY=[V1, V2]",
                   help="sweep only these parameters, over these values (repeatable; TOML values); "
                        "default: the method's [tune.*] space in clgrid/platforms/generic.toml")
    t.add_argument("--write-table", action="store_true", help="print an entry ready for clgrid/platforms/")
    t.add_argument("--output", help="user tuning file to write (default: $CLGRID_TUNING or the user config)")
    t.add_argument("--no-save", action="store_true", help="measure and print only")
    t.set_defaults(func=cmd_tune)

    e = sub.add_parser("emit", help="write a strategy's OpenCL source and the parameters baked into it, "
                                    "for an offline compiler such as aoc")
    e.add_argument("--method", default="fpga", help="strategy (default: fpga)")
    e.add_argument("--degrid", action="store_true", help="the degridding kernel of --method")
    e.add_argument("--target", help="device name the tuning table is matched against, such as "
                                    "'Arria 10', 'Stratix 10' (instead of a device here)")
    e.add_argument("--platform", default=INTEL_FPGA_PLATFORM,
                   help=f"platform name of --target (default: {INTEL_FPGA_PLATFORM}; the emulator is "
                        f"'Intel(R) FPGA Emulation Platform for OpenCL(TM)')")
    e.add_argument("--device", help="a device here to emit for, by name (default: the default device)")
    e.add_argument("--precision", choices=["single", "double"], default="single")
    e.add_argument("--npol", type=int, choices=[1, 2, 4], default=1)
    e.add_argument("--grid-size", type=int, required=True, help="grid side N")
    e.add_argument("--oversample", type=int, default=8, help="the kernel stack's oversampling")
    e.add_argument("--max-support", type=int,
                   help="the kernel stack's widest support (KernelStack.max_support); needed without --epsilon")
    e.add_argument("--epsilon", type=float,
                   help="emit for an analytic kernel source of this accuracy (KernelStack.analytic: the program "
                        "bakes in its polynomials) instead of a table stack")
    e.add_argument("--imaging", action="store_true",
                   help="the imaging operator's (vis2dirty/dirty2vis) w-stacking spread of --method (tiled, points, "
                        "rows), or with --degrid its interpolation; needs --epsilon")
    e.add_argument("--w-planes", type=int, default=0,
                   help="with --imaging: the w-planes of the stack (0: 2-D imaging, no w)")
    e.add_argument("--tuning", action="append", metavar="KEY=VALUE",
                   help="override a tuning parameter (repeatable; value in TOML syntax)")
    e.add_argument("-o", "--output", required=True,
                   help="the .cl file to write; its description goes beside it as .json")
    e.set_defaults(func=cmd_emit)

    i = sub.add_parser("image", help="dirty images and PSFs of a Measurement Set, with WSClean's options, file names "
                                     "and conventions (the ms extra)",
                       description="Dirty images (and PSFs) of a Measurement Set, as WSClean makes them: its option "
                                   "names (also with one dash: -size, -scale, -weight, -pol, -name, ...), defaults, "
                                   "weighting, flux scale (not divided by n), file names and FITS keywords.")
    i.add_argument("ms", nargs="*", help="the Measurement Set(s): several are imaged together, as WSClean images "
                                         "them (one phase centre; every spectral window of each)")
    i.add_argument("-o", "--name", "-name", dest="name", required=True, metavar="NAME",
                   help="prefix of the files: NAME-dirty.fits, NAME-psf.fits, NAME-0000-dirty.fits, "
                        "NAME-MFS-dirty.fits, NAME-Q-dirty.fits, ... (WSClean's -name)")
    i.add_argument("--size", "-size", nargs=2, type=int, metavar=("WIDTH", "HEIGHT"),
                   help="image size in pixels, even (default: twice the primary beam's FWHM when the MS has "
                        "the dish diameter, else 10 deg, at --scale)")
    i.add_argument("--scale", "-scale", metavar="ANGLE",
                   help="pixel size: 20asec, 1.5amin, 0.01deg, 1e-4rad (no unit: degrees) "
                        "(default: 1/3 of the finest fringe)")
    i.add_argument("--weight", "-weight", nargs="+", default=["uniform"], metavar="MODE",
                   help="natural, uniform (the default, as WSClean's) or briggs ROBUST")
    i.add_argument("--super-weight", "-super-weight", type=float, default=1.0,
                   help="weighting grid this many times coarser (WSClean's super-uniform; default 1)")
    i.add_argument("--mf-weighting", "-mf-weighting", action="store_true",
                   help="with --channels-out: one weighting grid for all channels (default: one per channel)")
    i.add_argument("--weighting-rank-filter", "-weighting-rank-filter", type=float, default=3.0, metavar="LEVEL",
                   help="lower a weight above LEVEL x its neighbourhood's mean (default 3; below 1: off)")
    i.add_argument("--weighting-rank-filter-size", "-weighting-rank-filter-size", type=int, default=16,
                   metavar="CELLS", help="the rank filter's window (default 16 uv cells)")
    i.add_argument("--padding", "-padding", type=float, default=1.2,
                   help="weighting grid size relative to the image (WSClean's -padding; default 1.2)")
    i.add_argument("--data-column", "-data-column", metavar="COLUMN",
                   help="column to image (default: CORRECTED_DATA where the MS has it, else DATA; printed)")
    i.add_argument("--pol", "-pol", default="I",
                   help="I, Q, U, V, XX, XY, YX, YY, RR, RL, LR, LL, or several: IQUV, xx,yy (one image each; "
                        "default I)")
    i.add_argument("--channels-out", "-channels-out", type=int, default=1, metavar="K",
                   help="K images over the band, and their MFS image (default 1)")
    i.add_argument("--make-psf", "-make-psf", action="store_true",
                   help="also the PSF, normalised to 1, and the beam fitted to it (BMAJ, BMIN, BPA)")
    i.add_argument("--beam-fit", choices=["wsclean", "whole-box"], default="wsclean",
                   help="wsclean (default): WSClean's fit, which uses one quadrant of the box around the PSF's "
                        "peak (clgrid/imager/beam.py says why); whole-box: every pixel of the box")
    i.add_argument("--field", "-field", type=int, default=0, help="field to image (default 0)")
    i.add_argument("--no-w", action="store_true", help="no w-correction (2-D gridding; default: w-correction)")
    i.add_argument("--divide-by-n", action="store_true",
                   help="divide the image by n = sqrt(1 - l^2 - m^2) (ducc0's convention; default: not, as WSClean)")
    i.add_argument("--epsilon", type=float, default=1e-4, help="accuracy of the image (default 1e-4)")
    i.add_argument("--precision", choices=["single", "double"],
                   help="default: single for --epsilon >= 1e-5, else double")
    i.add_argument("--device", help="OpenCL device name to match (default: the default device)")
    i.add_argument("--weights-on", choices=["auto", "device", "host"], default="auto",
                   help="where the imaging weights' passes over the samples run: on the imaging device, "
                        "on the host threads, or auto (the device where it is a GPU, else the host; default)")
    i.add_argument("--parallel-reading", "-parallel-reading", "-j", type=int, metavar="N",
                   help="processes reading the MS at once, each a range of rows (1: this process; default: "
                        "one per 8 M samples read, up to the cores)")
    i.add_argument("--overwrite", action="store_true", help="replace existing output files")
    i.add_argument("--quiet", action="store_true", help="no progress bars")
    i.set_defaults(func=cmd_image)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = argv
    if argv is None and args.command == "image" and args.device:
        # run as the program, one device for the whole process: the OpenCL drivers that cannot
        # give it are not opened (their memory: docs/benchmarks/imaging.md)
        open_only_drivers_for(args.device)
    if getattr(args, "method", None) is None and args.command == "bench" and not args.compare:
        args.method = bench.benchmark_methods()
    if getattr(args, "precision", None) is None and args.command == "bench":
        args.precision = ["single"]
    if args.command == "bench" and args.repeats is None:
        args.repeats = 3 if args.compare and args.quick else 5
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
