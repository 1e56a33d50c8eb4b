# A correct solution to every exercise.
import numpy as np
from numba import cuda


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    n = out.size
    add_kernel[(n + 255) // 256, 256](a, b, out)


@cuda.jit
def saxpy_kernel(alpha, x, y, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.size, stride):
        out[i] = alpha * x[i] + y[i]


def saxpy(alpha, x, y, out):
    saxpy_kernel[min(1024, (out.size + 255) // 256), 256](alpha, x, y, out)


_ADD_SRC = r'''
extern "C" __global__ void add(const float* a, const float* b, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
'''
_add = None


def vector_add_cupy(a, b, out):
    global _add
    import cupy as cp

    if _add is None:
        _add = cp.RawKernel(_ADD_SRC, "add")
    n = out.size
    _add(((n + 255) // 256,), (256,), (a, b, out, np.int64(n)))
