# ATTACK (library, GPU): takes the device pointers from __cuda_array_interface__ and copies with the
# CUDA driver API through ctypes (cuMemcpyDtoH / HtoD), adds on the host: no kernel, no named call the
# grader knows.
# A secure grader gives 0 points for vector_add.
import ctypes

_cu = ctypes.CDLL("libcuda.so.1")


def _ptr(arr):
    return ctypes.c_uint64(arr.__cuda_array_interface__["data"][0])


def vector_add(a, b, out):
    n = out.shape[0]
    ha, hb = (ctypes.c_float * n)(), (ctypes.c_float * n)()
    _cu.cuCtxSynchronize()
    _cu.cuMemcpyDtoH_v2(ha, _ptr(a), ctypes.c_size_t(4 * n))
    _cu.cuMemcpyDtoH_v2(hb, _ptr(b), ctypes.c_size_t(4 * n))
    ho = (ctypes.c_float * n)(*[x + y for x, y in zip(ha, hb)])
    _cu.cuMemcpyHtoD_v2(_ptr(out), ho, ctypes.c_size_t(4 * n))
