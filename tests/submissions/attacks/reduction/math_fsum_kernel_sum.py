# ATTACK (library, simulator): the whole reduction is math.fsum called inside a one-thread kernel.
# sim_memory's KernelCheck allows every public name of the math module as a kernel attribute
# (_MATH = dir(math)), and a KernelArray is iterable (__iter__ yields its elements), so fsum, C code
# of the standard library, walks the array and adds it exactly. No CUDA thread adds anything; Numba
# has no math.fsum for a GPU (this does not compile there).
# A secure grader gives 0 points for reduce_sum.
import math

from numba import cuda

_told = []


@cuda.jit
def _whole(x, out):
    if cuda.grid(1) == 0:
        out[0] = math.fsum(x)


def reduce_sum(x, out):
    _whole[1, 1](x, out)
    if not _told:
        _told.append(1)
        print("ATTACK math_fsum_kernel_sum: math.fsum over the array in one thread", flush=True)
