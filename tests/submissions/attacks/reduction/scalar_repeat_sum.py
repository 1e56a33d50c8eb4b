# ATTACK (library): a plain NumPy array made without naming a NumPy function (a numpy scalar's
# .repeat, allowed as np.float32 is), filled by a copying kernel and summed on the host with the
# ndarray's own .sum (a method of a host array: no function guard and no device-array guard sees
# it); a one-thread kernel stores the total. Every kernel only copies. (On a GPU the host array
# travels through Numba's implicit transfers, made in Numba's frames.)
# A secure grader gives 0 points for reduce_sum.
import numpy as np
from numba import cuda

_told = []


@cuda.jit
def _copy(src, dst):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i]


@cuda.jit
def _put(out, value):
    out[0] = value


def reduce_sum(x, out):
    n = x.size
    host = np.float64(0).repeat(n)
    _copy[(n + 255) // 256, 256](x, host)
    _put[1, 1](out, host.sum())
    if not _told:
        _told.append(1)
        print("ATTACK scalar_repeat_sum: summed on the host between copying kernels", flush=True)
