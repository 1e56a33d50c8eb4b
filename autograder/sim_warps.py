"""Warp shuffles and warp barriers for Numba's CUDA simulator, which has none.

The lanes of one warp meet at a barrier of their own: each lane posts its value, all wait, each
reads the lane it asked for, all wait again (so that no lane posts its next value before every
lane has read this one). Under the grader's block scheduler (``runner.StrictBarriers``: each
thread a greenlet) the scheduler holds the wait and names a lane that never arrives at once;
under the simulator's own (each thread an OS thread) a ``threading.Barrier`` does, with a timeout.
``cuda.shfl_sync``, ``shfl_up_sync``, ``shfl_down_sync``, ``shfl_xor_sync`` and ``syncwarp`` then
behave as on a GPU when every lane of the warp takes part, which is what the mask 0xFFFFFFFF
promises. A lane that returned early or took another branch never arrives: the others stop with a
message that says so (on a GPU the result would be undefined).

``patch_simulator()`` is applied by ``course.setup()`` in simulator mode and, sent as source, by
the grader's runner in simulator mode, before learner code runs.
"""
from __future__ import annotations

import threading

WAIT_S = 60.0  # how long the lanes of a warp wait for the others (simulated threads are slow)
FULL = 0xFFFFFFFF


class _Warp:
    def __init__(self, lanes: int):
        self.lanes = lanes
        self.values = [None] * lanes
        self.barrier = threading.Barrier(lanes, timeout=WAIT_S)

    def wait(self, what: str, warp: int) -> None:
        lane = threading.current_thread()
        if hasattr(lane, "warp_wait"):  # the grader's block scheduler (runner.Lane): it checks the lanes
            lane.warp_wait(what)
            return
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise RuntimeError(
                f"{what}: not every lane of warp {warp} reached it (a lane returned early or took "
                "another branch); on a GPU the result would be undefined") from None

    def exchange(self, lane: int, value, source, what: str, warp: int):
        self.values[lane] = value
        self.wait(what, warp)
        src = source(lane)
        got = self.values[src] if 0 <= src < self.lanes else value
        self.wait(what, warp)
        return got


def _warp_of_thread():
    """(this thread's warp exchange, its lane, its warp index) in the running block."""
    t = threading.current_thread()
    manager = t._manager
    block = manager._block_dim
    size = int(block[0] * block[1] * block[2])
    warp, lane = divmod(t.thread_id, 32)
    lock = manager.__dict__.setdefault("_warps_lock", threading.Lock())
    with lock:
        warps = manager.__dict__.setdefault("_warps", {})
        if warp not in warps:
            warps[warp] = _Warp(min(32, size - 32 * warp))
    return warps[warp], lane, warp


def _check_mask(mask, what: str) -> None:
    if int(mask) & FULL != FULL:
        raise NotImplementedError(f"{what} with a partial mask ({int(mask):#x}): the simulator runs full warps only")


def shfl_sync(self, mask, value, src_lane):
    _check_mask(mask, "shfl_sync")
    w, lane, warp = _warp_of_thread()
    return w.exchange(lane, value, lambda _: int(src_lane) % 32, "shfl_sync", warp)


def shfl_up_sync(self, mask, value, delta):
    _check_mask(mask, "shfl_up_sync")
    w, lane, warp = _warp_of_thread()
    return w.exchange(lane, value, lambda i: i - int(delta) if i >= int(delta) else i, "shfl_up_sync", warp)


def shfl_down_sync(self, mask, value, delta):
    _check_mask(mask, "shfl_down_sync")
    w, lane, warp = _warp_of_thread()
    return w.exchange(lane, value, lambda i: i + int(delta) if i + int(delta) < w.lanes else i, "shfl_down_sync",
                      warp)


def shfl_xor_sync(self, mask, value, lane_mask):
    _check_mask(mask, "shfl_xor_sync")
    w, lane, warp = _warp_of_thread()
    return w.exchange(lane, value, lambda i: i ^ int(lane_mask), "shfl_xor_sync", warp)


def syncwarp(self, mask=FULL):
    _check_mask(mask, "syncwarp")
    w, _, warp = _warp_of_thread()
    w.wait("syncwarp", warp)
    # the lane's accesses after it are ordered after its warp's before it (sim_memory's race check);
    # a shuffle exchanges registers only, so it orders no memory access
    t = threading.current_thread()
    t.grader_warp_phase = getattr(t, "grader_warp_phase", 0) + 1


def patch_simulator() -> bool:
    """Give the simulator's cuda module the warp functions it lacks; False where there is no
    simulator to patch (a GPU run)."""
    try:
        from numba.cuda.simulator import kernelapi
    except ImportError:
        return False
    cls = kernelapi.FakeCUDAModule
    for name, fn in (("shfl_sync", shfl_sync), ("shfl_up_sync", shfl_up_sync), ("shfl_down_sync", shfl_down_sync),
                     ("shfl_xor_sync", shfl_xor_sync), ("syncwarp", syncwarp)):
        if not hasattr(cls, name):
            setattr(cls, name, fn)
    return True
