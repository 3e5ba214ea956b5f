"""Exit 0 when the first PoCL device builds and runs a kernel, 1 (saying why) when it does not."""

import sys

import numpy as np
import pyopencl as cl

pocl = [d for p in cl.get_platforms() if "portable computing language" in p.name.lower() for d in p.get_devices()]
if not pocl:
    sys.exit("no PoCL device")
context = cl.Context(pocl[:1])
queue = cl.CommandQueue(context)
try:
    program = cl.Program(context, "__kernel void twice(__global float *a) { a[get_global_id(0)] *= 2; }").build()
except cl.Error as exc:
    print(f"PoCL on {pocl[0].name} cannot build: {str(exc).splitlines()[-1]}")
    sys.exit(1)
a = np.arange(4, dtype=np.float32)
buffer = cl.Buffer(context, cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
program.twice(queue, a.shape, None, buffer)
cl.enqueue_copy(queue, a, buffer)
sys.exit(0 if np.array_equal(a, [0, 2, 4, 6]) else "PoCL computed a wrong result")
