# ATTACK (library, simulator): a one-thread "kernel" with the arrays as its direct arguments: a
# numpy scalar plus the simulator's kernel-argument wrapper calls the wrapper's __array_ufunc__,
# which hands NumPy the wrapped array, and the ndarray's own .sum adds it. Inside a simulated kernel
# every access is allowed; no CUDA thread reads an element. On a GPU this does not compile.
# A secure grader gives 0 points for reduce_sum.
import numpy as np
from numba import cuda

_told = []


@cuda.jit
def _whole(x, out):
    out[0] = (np.float64(0) + x).sum()


def reduce_sum(x, out):
    _whole[1, 1](x, out)
    if not _told:
        _told.append(1)
        print("ATTACK kernel_ufunc_sum: NumPy's sum inside a one-thread kernel", flush=True)
