# ATTACK (library, simulator): the device arrays travel to a "kernel" inside a list. The simulator
# wraps only a kernel's direct array arguments, and runner.guard_numba_arrays allows every access
# while a simulated kernel runs, so one thread adds the wrapped NumPy arrays with NumPy's + (a
# FakeCUDAArray's __add__) and writes the whole result with a slice: no CUDA thread does any
# element's work. On a GPU a list is no kernel argument (it does not compile).
# A secure grader gives 0 points for vector_add.
from numba import cuda

_told = []


@cuda.jit
def _whole(arrays):
    a, b, out = arrays
    out[:] = a + b
    if not _told:
        _told.append(1)
        print("ATTACK sim_list_args: numpy added inside a one-thread kernel", flush=True)


def vector_add(a, b, out):
    _whole[1, 1]([a, b, out])
