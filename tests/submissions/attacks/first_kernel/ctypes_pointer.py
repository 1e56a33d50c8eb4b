# ATTACK (library): reads and writes the arrays' memory through ctypes at their data pointers (in the
# simulator the device arrays are host memory), adds in plain Python: no kernel, no NumPy call, no
# named copy. (ctypes_cuda_driver.py is the GPU form.)
# A secure grader gives 0 points for vector_add.
import ctypes


def _pointer(arr):
    cai = getattr(arr, "__cuda_array_interface__", None)
    return cai["data"][0] if cai else arr.ctypes.data


def vector_add(a, b, out):
    n = out.shape[0]
    buf = ctypes.c_float * n
    ha, hb = buf.from_address(_pointer(a)), buf.from_address(_pointer(b))
    ho = buf.from_address(_pointer(out))
    for i in range(n):
        ho[i] = ha[i] + hb[i]
