# Page-locks the learner's host array for a fast copy and never unlocks it.
import cupy as cp


def upload(host, out):
    cp.cuda.runtime.hostRegister(host.ctypes.data, host.nbytes, 0)
    out.copy_to_device(host)
