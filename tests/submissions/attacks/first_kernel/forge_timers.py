# ATTACK (forged, GPU): patches the grader's own bound copies of the clocks, which today live in the same
# process: autograder.measure._perf_counter (the wall-clock cross-check) and the Device instance's
# _elapsed (CuPy's event timer). Intervals of the submission's samples shrink 1000x, the baseline's stay
# true, and the wall clock shrinks alike, so the cross-check agrees. None of the watched names changes.
# The kernel is correct but deliberately slow: honestly no speed points.
# A secure grader gives no speed points for vector_add (2 at most, for correctness).
import time

import autograder.measure as _measure
from numba import cuda

_dev = _measure.device()
_real_elapsed, _real_flush = _dev._elapsed, _dev.flush_l2
_mine = [False]
_t0 = time.perf_counter()


def _elapsed(start, end):
    ms = _real_elapsed(start, end)
    return ms / 1000.0 if _mine[0] else ms


def _flush_l2():
    _mine[0] = False  # a new sample begins: whose it is shows when vector_add is called
    return _real_flush()


_dev._elapsed = _elapsed
_dev.flush_l2 = _flush_l2
_measure._perf_counter = lambda: _t0 + (time.perf_counter() - _t0) / 1000.0
print("ATTACK forge_timers: patched the grader's bound clocks", flush=True)


@cuda.jit
def _slow_add(a, b, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    _mine[0] = True
    _slow_add[32, 128](a, b, out)
