# ATTACK (library, simulator): block_sums done by a kernel "extension" on the host. The simulator's
# FakeCUDAKernel passes every launch argument through the objects in kernel.extensions
# (prepare_args) after sim_memory made them KernelArrays of a running launch, in the launching
# thread. The learner's extension (appended to the public .extensions list) reads each block's 256
# values and writes the partial sums with math.fsum, on the host. No thread of the kernel, no shared
# memory, no tree. A secure grader gives 0 points for block_sums.
import math

from numba import cuda

_told = []
_held = []


class _Host:
    def prepare_args(self, ty, val, stream=0, retr=None):
        _held.append(val)
        if len(_held) == 2:
            x, partials = _held
            n = x.shape[0]
            for b in range(partials.shape[0]):
                partials[b] = math.fsum(x[i] for i in range(b * 256, min(n, (b + 1) * 256)))
        return ty, val


@cuda.jit
def _nothing(x, partials):
    pass


_nothing.extensions.append(_Host())


def block_sums(x, partials):
    _held.clear()
    _nothing[1, 1](x, partials)
    if not _told:
        _told.append(1)
        print("ATTACK kernel_extension_host_sum: partial sums in a launch extension on the host", flush=True)
