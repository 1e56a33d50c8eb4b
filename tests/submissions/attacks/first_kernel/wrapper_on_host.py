# ATTACK (library, simulator): no kernel at all. The simulator's own FakeWithinKernelCUDAArray (the
# wrapper a kernel's array arguments get) is built on the host around each device array. Its
# __array_ufunc__ hands NumPy the wrapped arrays, and its __setitem__ writes through the device
# array's: both reach the guarded methods from Numba's frames, which runner.guard_numba_arrays takes
# for Numba's own work, not the learner's. The addition is NumPy's, on the host.
# A secure grader gives 0 points for vector_add.
import numpy as np
from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray as Wrap

_told = []


def vector_add(a, b, out):
    Wrap(out)[:] = (np.float32(0) + Wrap(a)) + Wrap(b)
    if not _told:
        _told.append(1)
        print("ATTACK wrapper_on_host: added on the host through the simulator's kernel-argument wrapper", flush=True)
