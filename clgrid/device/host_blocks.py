"""Host memory handed out as numpy arrays and taken back when the caller is done with it:
a block (a pinned buffer's mapping, a shared-memory file's) seen as one array through
numpy's ``__array_interface__``, so the block object is the base of the array and of
every view of it, and lives while any of them does; when it dies, its memory goes back
to whoever lent it (a pool of pinned blocks, `clgrid.device.transfer.host_empty`; a pool
of shared-memory boxes, `clgrid.dask.delivery`)."""

from __future__ import annotations

import weakref

import numpy as np

__all__ = ["LentBlock"]


class LentBlock:
    """``mapped`` (an array over the block's bytes, kept alive here) seen as one array of
    ``shape`` and ``dtype``; ``give_back(*args)`` runs once this object dies (not at the
    interpreter's exit).  ``np.asarray(LentBlock(...))`` is the array to hand out."""

    def __init__(self, mapped: np.ndarray, shape, dtype, give_back, *args):
        self.__array_interface__ = {"data": (mapped.ctypes.data, False), "shape": tuple(shape),
                                    "typestr": np.dtype(dtype).str, "version": 3}
        self.mapped = mapped
        finalizer = weakref.finalize(self, give_back, *args)
        finalizer.atexit = False
