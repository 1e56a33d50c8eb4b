# ATTACK (library, simulator): the work is done by a kernel "extension" on the host. The simulator's
# FakeCUDAKernel passes every argument through each object in kernel.extensions (prepare_args) inside
# the launch, after sim_memory has turned the arguments into KernelArrays and marked the launch as
# running, but in the launching thread, before any block runs. The learner appends an object of
# their own to the (public, mutable) .extensions list; its prepare_args sees out, a and b as live
# KernelArrays and adds every element in a Python loop on the host thread (who() finds no blockIdx
# there, so not even the race check records it). The kernel itself does nothing.
# A secure grader gives 0 points for vector_add.
from numba import cuda

_told = []
_held = {}


class _Host:
    def prepare_args(self, ty, val, stream=0, retr=None):
        _held.setdefault("args", []).append(val)
        args = _held["args"]
        if len(args) == 3:
            a, b, out = args
            for i in range(out.shape[0]):
                out[i] = a[i] + b[i]
        return ty, val


@cuda.jit
def _nothing(a, b, out):
    pass


_nothing.extensions.append(_Host())


def vector_add(a, b, out):
    _held.clear()
    _nothing[1, 1](a, b, out)
    if not _told:
        _told.append(1)
        print("ATTACK kernel_extension_host_add: the add done in a launch extension on the host", flush=True)
