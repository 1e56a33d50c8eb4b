# ATTACK (library, simulator): a one-thread "kernel" with the arrays as its direct arguments, doing
# the whole add with NumPy: a numpy scalar plus the simulator's kernel-argument wrapper calls the
# wrapper's __array_ufunc__, which runs NumPy's add on the wrapped arrays, and a slice assignment
# writes the result. Inside a simulated kernel every access is allowed, and a NumPy operator is no
# function the guards replace. No CUDA thread does any element's work; on a GPU this does not compile.
# A secure grader gives 0 points for vector_add.
import numpy as np
from numba import cuda

_told = []


@cuda.jit
def _whole(a, b, out):
    out[:] = (np.float32(0) + a) + b


def vector_add(a, b, out):
    _whole[1, 1](a, b, out)
    if not _told:
        _told.append(1)
        print("ATTACK kernel_ufunc: NumPy's add inside a one-thread kernel", flush=True)
