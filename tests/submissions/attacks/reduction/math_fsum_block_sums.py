# ATTACK (library, simulator): block_sums (no atomics, a shared-memory tree expected) done by one
# thread per block calling math.fsum on a slice of x. KernelCheck allows every math name in a kernel,
# a slice of a KernelArray is a view, and the view is iterable: the standard library's C code adds
# the block's 256 values. No shared memory, no tree, no barrier; Numba cannot compile math.fsum.
# A secure grader gives 0 points for block_sums.
import math

from numba import cuda

_told = []


@cuda.jit
def _sums(x, partials):
    b = cuda.blockIdx.x
    if cuda.threadIdx.x == 0 and b < partials.size:
        partials[b] = math.fsum(x[b * 256:(b + 1) * 256])


def block_sums(x, partials):
    _sums[partials.size, 32](x, partials)
    if not _told:
        _told.append(1)
        print("ATTACK math_fsum_block_sums: math.fsum per block", flush=True)
