"""The moving window's chunk kernels (clgrid/strategies/track_chunks.py) under Oclgrind
(``oclgrind python3 tests/oclgrind_chunks_case.py OUT.npz --seed S --key K``), cutting a
plan made on the host and uploaded: a plan from the planning kernels' compaction Oclgrind
21.10 takes as unset (tests/test_oclgrind.py).  One cut per process: after a first one,
it reports the second's buffers as unset too.  The host's cut, the device's and the
device's work list are saved for the test to compare."""

import argparse
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402
from clgrid.planning.plan import make_plan  # noqa: E402
from clgrid.strategies.track_chunks import (Channel, LongestFirst, SupportAndSign, TrackChunker,  # noqa: E402
                                            WidestFirst)
from fpga_case import CELL, N, random_inputs, small_stack  # noqa: E402

KEYS = {"support_and_sign": (SupportAndSign, LongestFirst), "channel": (lambda stack: Channel(), WidestFirst)}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--key", choices=sorted(KEYS), required=True)
    parser.add_argument("--wg", type=int, required=True)
    args = parser.parse_args()
    stack = small_stack()
    uvw, _, _ = random_inputs(np.random.default_rng(args.seed), 48, 1, stack)
    uvw = uvw[np.argsort(uvw[:, 0])].reshape(4, 12, 3)      # four baselines of twelve steps
    queue = clgrid.device.runtime.get_queue("oclgrind")
    geometry = clgrid.Gridder(N, CELL, stack, method="atomic", device=queue).geometry
    plan = make_plan(queue, geometry, uvw, where="host")
    key, chunk_order = KEYS[args.key]
    chunker = TrackChunker(queue, stack, key(stack), chunk_order, 5, args.wg)
    order, host = chunker.on_host(plan.host(), plan)
    chunked = chunker.on_device(plan)
    tiles = np.arange(1, chunked.supports.size + 1)
    work, rows = chunker.work_list(chunked, tiles)
    device, work_rows = np.empty((chunked.num_chunks, 4), np.int32), np.empty((rows, 2), np.int32)
    cl.enqueue_copy(queue, device, chunked.chunks)
    cl.enqueue_copy(queue, work_rows, work)
    tiles_of_support = dict(zip(chunked.supports, tiles))
    np.savez(args.out, host=host, device=device, work=work_rows, tiles=[tiles_of_support[s] for s in device[:, 2]])
