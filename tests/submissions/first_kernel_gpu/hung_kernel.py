# A kernel that never ends.
from numba import cuda


@cuda.jit
def spin(out):
    while out.size > 0:
        pass


def vector_add(a, b, out):
    spin[1, 1](out)
