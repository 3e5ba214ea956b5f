"""The device exclusive prefix sum against numpy, on one and several levels of blocks."""

import numpy as np
import pyopencl as cl
import pytest

from clgrid.device.scan import ExclusiveScan


@pytest.mark.parametrize("n", [1, 7, 32, 33, 1000, 40_000])
def test_exclusive_scan_equals_numpy(queue, rng, n):
    scan = ExclusiveScan(queue, wg=8, items=4)          # blocks of 32: 40,000 values need three levels
    values = rng.integers(0, 1000, n).astype(np.int32)
    src = cl.Buffer(queue.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=values)
    dst = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 4 * n)
    events = scan(src, dst, n)
    assert len(events) == 1 + 2 * (n > 32) + 2 * (n > 32 * 32) + 2 * (n > 32 ** 3)
    got = np.empty(n, np.int32)
    cl.enqueue_copy(queue, got, dst, wait_for=events).wait()
    np.testing.assert_array_equal(got, np.concatenate([[0], np.cumsum(values)[:-1]]))
