"""Timing helpers the chapters share, introduced in the chapter *Your first kernel*.

Both need a GPU and CuPy: call them only from cells tagged ``gpu``.
"""
from __future__ import annotations

import numpy as np


def gpu_time(fn, repeats: int = 20, warmup: int = 3, calls: int = 1) -> float:
    """Median run time of one ``fn()`` on the GPU, in seconds, measured with CUDA events.

    Each of the ``repeats`` samples times ``calls`` calls made back to back and divides by
    ``calls``. With one call, the sample includes the host's cost of launching (what a
    single call costs the program). With several, the host queues call i + 1 while the GPU
    runs call i, so launch costs hide behind the GPU's work and the result is the GPU's
    time.
    """
    import cupy as cp

    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()  # wait for the stop marker
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3 / calls)  # ms -> s
    return float(np.median(times))


def copy_bandwidth_gbps(n_floats: int = 1 << 28) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written): the ceiling
    for kernels that only move data."""
    import cupy as cp

    src = cp.ones(n_floats, dtype=cp.float32)
    dst = cp.empty_like(src)

    def copy():
        dst[...] = src

    seconds = gpu_time(copy, calls=5)
    return 2 * src.nbytes / seconds / 1e9
