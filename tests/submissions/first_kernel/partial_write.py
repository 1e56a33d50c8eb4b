# Writes only the even elements.
from numba import cuda


@cuda.jit
def add_kernel(a, b, out):
    i = 2 * cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    add_kernel[(out.size + 255) // 256, 256](a, b, out)
