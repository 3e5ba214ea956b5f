"""`clgrid.dask` under memory pressure and on clusters of any size (issue 26, items 5 and 8).

- A call that can make no progress (its worker paused above Dask's pause threshold, tasks
  waiting for workers that left) ends with `ClusterStalledError` within ``stall_timeout``,
  and workers killed for memory end in an error, not a hang; a worker lost mid-call is
  recovered with the right image (its tasks used to wait for ever in the scheduler's
  "no-worker" state: the preference for a worker leaked onto the data's tasks).
- ``deterministic=True`` gives the same bits on 1 worker, 2 workers and without a
  cluster: the slabs of w-planes, where the sum is cut, no longer follow the worker count.

Clusters here are small and short-lived: two in-process ones (threads) for the bits, and
process clusters with a nanny where memory limits and restarts are the point.
"""

import concurrent.futures
import os
import threading
import time

import numpy as np
import pytest

from conftest import optional, wide_field

dask = optional("dask", "dask")
distributed = optional("distributed", "dask")
da = optional("dask.array", "dask")
import clgrid.dask as cd  # noqa: E402  (needs dask)
from clgrid.dask import watch  # noqa: E402
from clgrid.errors import ClusterStalledError  # noqa: E402

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
IMAGE = dict(npix_x=64, npix_y=64, pixsize_x=2e-3, pixsize_y=2e-3)
LIMIT = 120          # seconds any call here may take before the test calls it a hang


def call(function, **kwargs):
    """``function(**kwargs)`` on a daemon thread: its result or its error, or a test failure
    after ``LIMIT`` seconds (not a hang of the test run)."""
    box = {}

    def run():
        try:
            box["result"] = function(**kwargs)
        except BaseException as error:          # noqa: BLE001  (raised below, in the test)
            box["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(LIMIT)
    if thread.is_alive():
        pytest.fail(f"{function.__name__} did not end within {LIMIT} s")
    if "error" in box:
        raise box["error"]
    return box["result"]


@pytest.fixture
def process_cluster():
    """A process cluster of one nanny-run worker on the device under test, given the
    memory settings of the test: ``make(memory_limit, **config)``."""
    made = []

    def make(memory_limit, **config):
        with dask.config.set(config):
            cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                               memory_limit=memory_limit, dashboard_address=None,
                                               env={"CLGRID_DEVICE": DEVICE})
        client = distributed.Client(cluster)
        made.append((client, cluster))
        return client

    yield make
    for client, cluster in made:
        client.close()
        cluster.close()


# -- item 8: deterministic means the same bits whatever the cluster ---------------------

def test_deterministic_images_and_predictions_are_the_same_bits_on_any_cluster(rng):
    uvw, freq, vis, _, _ = wide_field(rng, 2400, (1.0e8, 1.1e8), uv=400.0, w=60.0, weights=None)
    dirty = rng.normal(size=(64, 64))
    common = dict(uvw=da.from_array(uvw, chunks=(600, 3)), freq=freq, epsilon=1e-9, do_wgridding=True,
                  device=DEVICE, deterministic=True, keep_operators=0)
    d2v = dict(common, dirty=dirty, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    results = {}
    with dask.config.set(scheduler="synchronous"):           # no cluster at all
        results["none"] = (cd.vis2dirty(vis=vis, **IMAGE, **common), cd.dirty2vis(**d2v).compute())
    for workers in (1, 2):
        with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=False,
                                      dashboard_address=None) as cluster, distributed.Client(cluster):
            results[workers] = (cd.vis2dirty(vis=vis, **IMAGE, **common), cd.compute(cd.dirty2vis(**d2v))[0])
    for name in (1, 2):
        np.testing.assert_array_equal(results[name][0], results["none"][0], err_msg=f"image, {name} workers")
        np.testing.assert_array_equal(results[name][1], results["none"][1], err_msg=f"vis, {name} workers")


# -- item 5: no hang under memory pressure ----------------------------------------------

@pytest.mark.slow
def test_a_worker_paused_for_memory_ends_the_call_with_a_clear_error(rng, process_cluster):
    # The worker's process sits above its pause threshold from the start (30% of 250 MiB):
    # it starts nothing, and Dask would wait for ever.
    process_cluster("250MiB", **{"distributed.worker.memory.pause": 0.3,
                                 "distributed.worker.memory.terminate": False,
                                 "distributed.worker.memory.target": False, "distributed.worker.memory.spill": False})
    uvw, freq, vis, _, _ = wide_field(rng, 800, (1.0e8, 1.1e8), uv=400.0, w=60.0, weights=None)
    started = time.monotonic()
    with pytest.raises(ClusterStalledError, match=r"paused for memory: .*MiB of its 250 MiB memory_limit"):
        call(cd.vis2dirty, uvw=da.from_array(uvw, chunks=(400, 3)), freq=freq, vis=vis, epsilon=1e-5,
             do_wgridding=True, device=DEVICE, stall_timeout=4, **IMAGE)
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_workers_killed_for_memory_end_in_an_error(rng, process_cluster):
    # 400 MiB: the imaging of a 1024^2 image takes the worker past 95% every time; the
    # nanny restarts it, and Dask gives the task up after its allowed failures.
    process_cluster("400MiB", **{"distributed.scheduler.allowed-failures": 1})
    uvw, freq, vis, _, _ = wide_field(rng, 20000, (1.0e8, 1.1e8), uv=400.0, w=60.0, weights=None)
    with pytest.raises((distributed.KilledWorker, ClusterStalledError)) as raised:
        call(cd.vis2dirty, uvw=da.from_array(uvw, chunks=(5000, 3)), freq=freq, vis=vis, epsilon=1e-7,
             do_wgridding=True, device=DEVICE, stall_timeout=30, npix_x=1024, npix_y=1024, pixsize_x=2e-4,
             pixsize_y=2e-4)
    assert "memory" in str(raised.value) + "".join(getattr(raised.value, "__notes__", []))


@pytest.mark.slow
def test_the_only_worker_lost_mid_call_is_recovered(rng, process_cluster):
    """Every task goes back to the scheduler when the only worker dies; none may stay
    tied to its old address (the hang: tasks of the data with a loose restriction to
    it waited in "no-worker" for ever after the nanny's new worker joined)."""
    client = process_cluster("4GiB")
    uvw, freq, vis, _, _ = wide_field(rng, 8000, (1.0e8, 1.1e8), uv=400.0, w=60.0, weights=None)
    args = dict(uvw=da.from_array(uvw, chunks=(1000, 3)), freq=freq, vis=vis, epsilon=1e-9, do_wgridding=True,
                device=DEVICE, deterministic=True, keep_operators=0, stall_timeout=60, **IMAGE)
    expected = call(cd.vis2dirty, **args)

    def imaging():
        return any(str(key).startswith("image_slab") for keys in client.processing().values() for key in keys)

    def kill_when_busy():               # while a slab is imaged: the data's tasks are done, held by the worker
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not imaging():
            time.sleep(0.02)
        try:
            client.run(os._exit, 1)                 # the worker dies; its nanny starts a new one
        except Exception:                           # noqa: BLE001  (it died before answering)
            pass

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        killer = pool.submit(kill_when_busy)
        got = call(cd.vis2dirty, **args)
        killer.result(timeout=LIMIT)
    np.testing.assert_array_equal(got, expected)


# -- the watch itself, without a cluster --------------------------------------------------

class FakeClient:
    """The scheduler's identity and processing answers, one per poll."""

    def __init__(self, polls):
        self.polls = iter(polls)
        self.now = ({}, {})         # before the call: no workers yet
        self.scheduler = self       # (the scheduler's identity, asked through `sync`: chunks.worker_identities)

    def sync(self, function, *args, **kwargs):
        return function(*args, **kwargs)

    def identity(self):
        return {"workers": self.now[0]}

    def poll(self):
        self.now = next(self.polls)

    def processing(self):
        return self.now[1]


def worker(status, memory=300 << 20, limit=400 << 20):
    return {"status": status, "memory_limit": limit, "metrics": {"memory": memory}}


def test_watch_gives_up_only_after_the_timeout_without_a_running_worker_busy(monkeypatch):
    clock = iter(range(100))
    monkeypatch.setattr(watch.time, "monotonic", lambda: next(clock))
    busy = ({"a": worker("running")}, {"a": ["k"]})
    paused = ({"a": worker("paused")}, {"a": ["k"]})
    restarted = ({"b": worker("running")}, {"b": []})
    client = FakeClient([busy, paused, paused, busy, paused, restarted, restarted, restarted])
    w = watch._Watch(client, 3)
    for _ in range(7):          # healthy at t=1 and t=4: never 3 s without
        client.poll()
        w.check()
    client.poll()
    with pytest.raises(ClusterStalledError) as raised:
        w.check()               # t=8: unhealthy since t=4
    message = str(raised.value)
    assert "1 worker(s) left during the call" in message and "no worker holds a task" in message


def test_stall_timeout_is_checked_by_name():
    for bad in (0, -1, "60", True, float("nan")):
        with pytest.raises(ValueError, match="stall_timeout must be a number of seconds > 0"):
            watch.stall_seconds(bad)
    assert watch.stall_seconds(None) == watch.STALL_TIMEOUT and watch.stall_seconds(np.inf) == np.inf
