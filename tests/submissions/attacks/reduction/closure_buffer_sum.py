# ATTACK (library): the kernel writes into a host array it captures as a module global (no
# argument, so no transfer and no guard), made without naming a NumPy function (a numpy scalar's
# .repeat). The host sums it with the ndarray's own .sum and a one-thread kernel stores the total,
# read from a module-level list the kernel also captures. Every kernel only copies.
# A secure grader gives 0 points for reduce_sum.
import numpy as np
from numba import cuda

_told = []
_buf = np.float64(0).repeat(0)
_total = [0.0]


@cuda.jit
def _collect(x):
    i = cuda.grid(1)
    if i < x.size:
        _buf[i] = x[i]


@cuda.jit
def _store(out):
    out[0] = _total[0]


def reduce_sum(x, out):
    global _buf
    n = x.size
    _buf = np.float64(0).repeat(n)
    _collect[(n + 255) // 256, 256](x)
    _total[0] = _buf.sum()
    _store[1, 1](out)
    if not _told:
        _told.append(1)
        print("ATTACK closure_buffer_sum: summed on the host from a captured buffer", flush=True)
