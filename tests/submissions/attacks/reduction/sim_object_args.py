# ATTACK (library, simulator): the device arrays travel to a "kernel" as attributes of an object of
# the learner's class. The simulator wraps only a kernel's direct array arguments, and
# runner.guard_numba_arrays allows every access while a simulated kernel runs, so one thread sums
# each block's slice with NumPy (a FakeCUDAArray forwards .sum to the array it wraps). No CUDA
# thread adds anything; on a GPU an object of a Python class is no kernel argument.
# A secure grader gives 0 points for block_sums.
from numba import cuda

_told = []


class _Pair:
    def __init__(self, x, partials):
        self.x, self.partials = x, partials


@cuda.jit
def _whole(pair):
    for k in range(pair.partials.shape[0]):
        pair.partials[k] = pair.x[k * 256:(k + 1) * 256].sum(dtype="float64")
    if not _told:
        _told.append(1)
        print("ATTACK sim_object_args: NumPy's sum per block inside a one-thread kernel", flush=True)


def block_sums(x, partials):
    _whole[1, 1](_Pair(x, partials))
