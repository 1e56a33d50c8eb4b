"""Host maths on every core: the judge's float64 references and its large random draws.

Large host work is split into blocks that run on Python threads (NumPy's matrix products,
``exp`` and random draws release the GIL). While any such blocks run, BLAS is held to one
thread per call: a block that calls a multi-threaded BLAS from each of 8 threads, while another
thread draws the next exercise's inputs, asks OpenBLAS for hundreds of threads, and its calls
queue on one another (measured on a 16-core host: Lab 19's references took minutes instead of
seconds). Every block-parallel helper goes through :func:`parallel_map`.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterable

import numpy as np

_USERS = [0]  # entries into one_blas_thread under way (on the main thread)
_LIMITS: list = [None]  # threadpoolctl's limiter while _USERS > 0: restores BLAS's own threads
_CONTROLLER: list = [None]


def cores() -> int:
    """The cores this process may run on (a Slurm job or a container may have fewer than the host)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _blas():
    """threadpoolctl's handle on the loaded BLAS libraries (None without threadpoolctl)."""
    if _CONTROLLER[0] is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # an install without it: host maths runs one block after another
            _CONTROLLER[0] = False
        else:
            _CONTROLLER[0] = ThreadpoolController().select(user_api="blas")
    return _CONTROLLER[0] or None


def blas_threads() -> int:
    """The most threads a loaded BLAS uses per call (1 where threadpoolctl finds none; the
    machine's cores where threadpoolctl is missing and nothing can be known)."""
    blas = _blas()
    if blas is None:
        return cores()
    return max((lib.get_num_threads() or 1 for lib in blas.lib_controllers), default=1)


@contextmanager
def one_blas_thread():
    """BLAS on one thread per call inside, entered and left on the main thread (nested entries
    count; the last one out gives a learner's notebook its own setting back). OpenBLAS ignores a
    limit set by another thread once the main thread has set one, so elsewhere this changes
    nothing: blocks there run in parallel only under a limit the main thread holds (the judge's)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _USERS[0] += 1  # the main thread's alone: no lock
    if _USERS[0] == 1 and _blas() is not None:
        _LIMITS[0] = _blas().limit(limits=1)
    try:
        yield
    finally:
        _USERS[0] -= 1
        if _USERS[0] == 0 and _LIMITS[0] is not None:
            _LIMITS[0].restore_original_limits()
            _LIMITS[0] = None


def parallel_map(fn: Callable, jobs: Iterable, blas: bool = True) -> list:
    """``[fn(job) for job in jobs]``, the jobs spread over the cores. Jobs that call BLAS
    (``blas``) run with it on one thread, or one after another where BLAS would not take the limit."""
    jobs = list(jobs)
    workers = min(len(jobs), cores())
    with one_blas_thread() if blas else nullcontext():
        if workers <= 1 or (blas and blas_threads() > 1):
            return [fn(job) for job in jobs]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="host-maths") as pool:
            return list(pool.map(fn, jobs))


ROWS_PER_BLOCK = 256  # of a product's rows per job: 256 x 4096 float64 is 8 MB of output


def matmul64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-D float64 arrays, blocks of rows on every core."""
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.result_type(a, b))

    def block(r0: int) -> None:
        np.matmul(a[r0:r0 + ROWS_PER_BLOCK], b, out=out[r0:r0 + ROWS_PER_BLOCK])

    parallel_map(block, range(0, a.shape[0], ROWS_PER_BLOCK))
    return out
