# Right answer, but it overwrites input a on the way.
from numba import cuda


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        a[i] = a[i] + b[i]
        out[i] = a[i]


def vector_add(a, b, out):
    add_kernel[(out.size + 255) // 256, 256](a, b, out)
