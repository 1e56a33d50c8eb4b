# ATTACK (library, simulator): no kernel. The simulator's FakeWithinKernelCUDAArray (the wrapper a
# kernel's array arguments get) built on the host: its __getattr__ fetches the device array's .sum
# and its __setitem__ writes out, both from Numba's frames, which runner.guard_numba_arrays takes for
# Numba's own work. NumPy's sum on the host.
# A secure grader gives 0 points for reduce_sum.
from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray as Wrap

_told = []


def reduce_sum(x, out):
    Wrap(out)[0] = Wrap(x).sum(dtype="float64")
    if not _told:
        _told.append(1)
        print("ATTACK wrapper_on_host_sum: NumPy's sum through the simulator's wrapper", flush=True)
