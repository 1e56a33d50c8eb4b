# ATTACK (library, simulator): the device arrays travel to a "kernel" inside a dict. The simulator
# wraps only a kernel's direct array arguments, and runner.guard_numba_arrays allows every access
# while a simulated kernel runs, so one thread calls NumPy's sum (a FakeCUDAArray forwards .sum to
# the array it wraps) and writes the total: no CUDA thread reads any element. On a GPU a dict is no
# kernel argument (it does not compile).
# A secure grader gives 0 points for reduce_sum.
from numba import cuda

_told = []


@cuda.jit
def _whole(arrays):
    arrays["out"][0] = arrays["x"].sum(dtype="float64")
    if not _told:
        _told.append(1)
        print("ATTACK sim_dict_args: NumPy's sum inside a one-thread kernel", flush=True)


def reduce_sum(x, out):
    _whole[1, 1]({"x": x, "out": out})
