# Never returns from vector_add; saxpy is correct and must still be graded.
from numba import cuda


def vector_add(a, b, out):
    while True:
        pass


@cuda.jit
def saxpy_kernel(alpha, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i]


def saxpy(alpha, x, y, out):
    saxpy_kernel[(out.size + 255) // 256, 256](alpha, x, y, out)
