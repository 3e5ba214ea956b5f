"""Free blocks kept by key for a lender whose blocks come back when their last user drops
them (`clgrid.device.host_blocks.LentBlock`): the pinned blocks of
`clgrid.device.transfer.host_empty`, the client's shared-memory boxes of
`clgrid.dask.delivery`, the workers' recycled outputs of `clgrid.dask.recycled`.  Each
lender keeps its own policy (its caps, when a block is made, what disposing of one
means) and asks a `FreeList` for the common part."""

from __future__ import annotations

import threading

__all__ = ["FreeList"]


class FreeList:
    """Free blocks by key.  `take` a free block (None where there is none: the lender
    makes one); `give_back` one, kept unless its key or the list is full or it was lent
    before the last `forget`, in which cases the lender disposes of it.

    ``lock`` guards it all, and a lender takes it to make its own part of a step one with
    the list's (a count, a check of a cap).  It is reentrant: a lent block freed by the
    cyclic garbage collector is given back on the thread where the collection ran, which
    may be inside a locked block here (an allocation there set the collection off)."""

    def __init__(self):
        self.lock = threading.RLock()
        self.generation = 0             # `forget`s so far: a block lent before the last is not kept
        self.free_bytes = 0             # the free blocks' bytes, as given to `give_back`
        self._free: dict = {}           # key -> [(block, bytes)]

    def take(self, key):
        """A free block of ``key``, now lent; None where there is none."""
        with self.lock:
            free = self._free.get(key)
            if not free:
                return None
            block, nbytes = free.pop()
            self.free_bytes -= nbytes
            return block

    def give_back(self, key, block, generation: int | None = None, *, nbytes: int = 0,
                  per_key: int | None = None, bytes_at_most: int | None = None) -> bool:
        """Keep ``block`` (of ``nbytes``, counted in `free_bytes`) as a free block of ``key``;
        True where it is kept (or is already: a block given back twice is kept once).
        False, the block not kept, where ``generation`` (the list's when it was lent) is
        not the list's now, where ``key`` has ``per_key`` free blocks, or where the free
        blocks would pass ``bytes_at_most`` bytes."""
        with self.lock:
            if generation is not None and generation != self.generation:
                return False
            free = self._free.get(key, [])
            if any(b is block for b, _ in free):
                return True
            if per_key is not None and len(free) >= per_key:
                return False
            if bytes_at_most is not None and self.free_bytes + nbytes > bytes_at_most:
                return False
            self._free.setdefault(key, free).append((block, nbytes))
            self.free_bytes += nbytes
            return True

    def remove(self, key, block) -> None:
        """``block`` no longer kept free, where it is."""
        with self.lock:
            free = self._free.get(key, [])
            for i, (b, nbytes) in enumerate(free):
                if b is block:
                    del free[i]
                    self.free_bytes -= nbytes
                    return

    def forget(self) -> list:
        """Drop every free block (returned, for a lender that disposes of them) and start a
        new generation: blocks lent before are not kept when given back."""
        with self.lock:
            self.generation += 1
            kept, self._free, self.free_bytes = self._free, {}, 0
            return [b for free in kept.values() for b, _ in free]

    def free_blocks(self) -> dict:
        """The free blocks, by key (keys with none left out): a copy."""
        with self.lock:
            kept = dict(self._free)     # (a give-back in the loop, by the collector, may add a key)
            return {key: [b for b, _ in free] for key, free in kept.items() if free}
