# ATTACK (library, simulator): each element leaves a one-thread kernel in the text of an exception.
# Kernel code may raise (ValueError is on sim_memory's list of kernel builtins, RAISE_VARARGS is no
# refused opcode), and the runner's simulator rewords a thread's error as "in thread ... : <str of
# the exception>", which carries the float32's exact repr. The host catches it (try/except is only
# refused inside kernels), parses the number, sums on the host with math.fsum, and a kernel stores
# the total it is given. No thread adds anything.
# A secure grader gives 0 points for reduce_sum.
import math

from numba import cuda

_told = []


@cuda.jit
def _peek(x, i):
    raise ValueError(x[i])


@cuda.jit
def _store(out, total):
    if cuda.grid(1) == 0:
        out[0] = total


def reduce_sum(x, out):
    vals = []
    for i in range(x.shape[0]):
        try:
            _peek[1, 1](x, i)
        except ValueError as e:
            vals.append(float(str(e).rsplit(":", 1)[-1]))
    _store[1, 1](out, math.fsum(vals))
    if not _told:
        _told.append(1)
        print("ATTACK kernel_exception_exfil_sum: elements read from exception text", flush=True)
