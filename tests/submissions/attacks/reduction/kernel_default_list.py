# ATTACK (library, simulator): a host list reaches a kernel as a default argument value. The launch
# check (sim_memory.KernelCheck) reads the kernel's globals, closure cells and arguments, not
# fn.__defaults__, so `acc=_acc` is no argument, global or cell it looks at; the kernel's threads
# only copy each element into the list (a subscript store on a plain list: not an access the
# simulator checks), and the host sums the list with math.fsum. A one-thread kernel stores the total.
# No thread adds anything; on a GPU a list is no kernel argument (Numba does not compile it).
# A secure grader gives 0 points for reduce_sum.
import math

from numba import cuda

_told = []
_acc = [0.0]


@cuda.jit
def _collect(x, acc=_acc):
    i = cuda.grid(1)
    if i < x.shape[0]:
        acc[i] = float(x[i])


@cuda.jit
def _store(out, value):
    out[0] = value


def reduce_sum(x, out):
    n = x.shape[0]
    _acc[:] = [0.0] * n
    _collect[(n + 255) // 256, 256](x)
    _store[1, 1](out, math.fsum(_acc))
    if not _told:
        _told.append(1)
        print("ATTACK kernel_default_list: summed on the host from a kernel's default argument", flush=True)
