# Honest work, but launched on a non-blocking side stream and left running when the function
# returns: the time must still be counted (or the outputs found unfinished).
from cuda.bindings import driver
from numba import cuda

_side = cuda.external_stream(int(driver.cuStreamCreate(1)[1]))  # 1: CU_STREAM_NON_BLOCKING


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    add_kernel[(out.size + 255) // 256, 256, _side](a, b, out)
