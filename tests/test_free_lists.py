"""`clgrid.device.free_lists.FreeList`: the free blocks the pinned pools, the Dask
client's boxes and the workers' recycled outputs keep."""

import gc
import sys
import threading
import time

import numpy as np
import pytest

from clgrid.device.free_lists import FreeList
from clgrid.device.host_blocks import LentBlock


def counts(free: FreeList) -> dict:
    return {key: len(blocks) for key, blocks in free.free_blocks().items()}


def test_two_threads_taking_and_giving_back_never_hold_one_block_at_once(rng):
    """Two threads take a block of one of a few keys (a new one where none is free), mark
    it as theirs, let the other run, and give it back: no block is ever lent to both at
    once (each finds its own mark), none is lost or kept twice, and a key never keeps
    more than its cap; the bytes counted are the free blocks'."""
    free, per_key, rounds = FreeList(), 3, 2000
    keys = [int(k) for k in rng.integers(1, 100, 2)]
    made, wrong = [], []
    together = threading.Barrier(2)

    def work(me: int, seed: int):
        local = np.random.default_rng(seed)
        together.wait()
        try:
            for _ in range(rounds):
                key = keys[local.integers(len(keys))]
                block = free.take(key)
                if block is None:
                    block = np.zeros(1, np.int64)
                    made.append(block)
                if block[0] != 0:
                    wrong.append(("lent while held", int(block[0])))
                block[0] = me
                for _ in range(int(local.integers(0, 3))):
                    time.sleep(0)                    # (the other thread runs here)
                if block[0] != me:
                    wrong.append(("changed while held", int(block[0])))
                block[0] = 0
                free.give_back(key, block, free.generation, nbytes=key, per_key=per_key)
        except Exception as error:                   # (a thread's error would not fail the test)
            wrong.append(("raised", repr(error)))

    threads = [threading.Thread(target=work, args=(me, int(rng.integers(1 << 30)))) for me in (1, 2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)                      # the threads interleave often
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    assert not wrong, wrong[:5]
    left = counts(free)
    assert all(0 < n <= per_key for n in left.values()) and set(left) <= set(keys)
    assert free.free_bytes == sum(key * n for key, n in left.items())
    kept = [free.take(key) for key, n in left.items() for _ in range(n)]
    assert len({id(b) for b in kept}) == len(kept) and all(any(b is m for m in made) for b in kept)
    assert counts(free) == {} and free.free_bytes == 0


def test_a_block_lent_before_forget_is_not_kept():
    """`forget` drops the free blocks (returned to the lender) and a block out at the time
    is refused when it comes back; one lent after is kept."""
    free = FreeList()
    out, kept = np.zeros(8), np.zeros(8)
    generation = free.generation
    assert free.give_back("a", kept, generation, nbytes=64)
    assert counts(free) == {"a": 1} and free.free_bytes == 64
    dropped = free.forget()
    assert len(dropped) == 1 and dropped[0] is kept and counts(free) == {} and free.free_bytes == 0
    assert not free.give_back("a", out, generation, nbytes=64)      # lent before: not kept
    assert free.take("a") is None and free.free_bytes == 0
    assert free.give_back("a", out, free.generation, nbytes=64)     # lent again after: kept
    assert free.take("a") is out


def test_caps_a_block_given_back_twice_and_remove():
    """``per_key`` and ``bytes_at_most`` refuse a block that would pass them; a block
    given back twice is kept once (else it would be lent twice); `remove` takes one out."""
    free = FreeList()
    a, b, c = (np.zeros(2) for _ in range(3))
    assert free.give_back("k", a, per_key=2, nbytes=10, bytes_at_most=25)
    assert free.give_back("k", a, per_key=2, nbytes=10, bytes_at_most=25)      # twice: kept once
    assert counts(free) == {"k": 1} and free.free_bytes == 10
    assert free.give_back("k", b, per_key=2, nbytes=10, bytes_at_most=25)
    assert not free.give_back("k", c, per_key=2, nbytes=1)                      # the key is full
    assert not free.give_back("j", c, nbytes=10, bytes_at_most=25)              # the bytes would pass
    assert free.give_back("j", c, nbytes=5, bytes_at_most=25)
    free.remove("k", a)
    free.remove("k", a)                                                          # (not there: nothing)
    assert counts(free) == {"k": 1, "j": 1} and free.free_bytes == 15
    assert free.take("k") is b and free.take("k") is None


def test_a_block_collected_inside_the_lock_comes_back_on_the_same_thread():
    """A lent block in a reference cycle, freed by a collection that runs while its own
    thread holds the list's lock (an allocation inside a locked block sets it off), gives
    itself back there: the lock is reentrant, so the thread goes on and the block is
    free.  (On another thread, as a deadlock would never end.)"""
    free = FreeList()
    done = []

    def lend_and_collect():
        buffer = np.zeros(64, np.uint8)
        generation = free.generation
        cycle = [np.asarray(LentBlock(buffer, (64,), np.uint8, free.give_back, 64, buffer, generation))]
        cycle.append(cycle)
        del cycle, buffer
        with free.lock:
            gc.collect()                             # (as the collector would, on an allocation here)
            done.append(counts(free))

    gc.disable()
    try:
        worker = threading.Thread(target=lend_and_collect, daemon=True)
        worker.start()
        worker.join(timeout=20)
    finally:
        gc.enable()
    if worker.is_alive():
        pytest.fail("the block's give-back, inside its own thread's locked block, never ended")
    assert done == [{64: 1}]
