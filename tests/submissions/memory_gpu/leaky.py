# Copies through a scratch buffer from cudaMalloc but never frees it: a leak.
import cupy as cp


def copy_via_runtime(src, dst):
    rt = cp.cuda.runtime
    scratch = rt.malloc(src.nbytes)
    rt.memcpy(scratch, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice)
    rt.memcpy(dst.data.ptr, scratch, src.nbytes, rt.memcpyDeviceToDevice)
