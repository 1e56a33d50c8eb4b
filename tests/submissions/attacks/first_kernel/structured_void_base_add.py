# ATTACK (library, simulator): NumPy on the host, on the grader's own buffers. DeviceArray.view
# accepts a structured dtype (sim_memory._plain_dtype allows any numpy.dtypes type without objects),
# and an element of a structured array is a numpy.void that is a VIEW whose .base is the whole
# ndarray over the grader's memory. One kernel thread reads element 0 of each structured view and
# hands the three numpy.void objects to a host method (a float subclass passed as a kernel argument,
# which to_kernel takes for a number). The host takes .base.view("<f4") of each and adds with
# ndarray's + (a C operator no guard wraps), writing straight into out's memory.
# A secure grader gives 0 points for vector_add.
from numba import cuda

_told = []
REC = [("f", "<f4")]


class Hook(float):
    def add(self, ea, eb, eo):
        a, b, o = ea.base.view("<f4"), eb.base.view("<f4"), eo.base.view("<f4")
        o[...] = a + b
        return 0.0


@cuda.jit
def _grab(a, b, out, hook):
    if cuda.grid(1) == 0:
        hook.add(a[0], b[0], out[0])


def vector_add(a, b, out):
    _grab[1, 1](a.view(REC), b.view(REC), out.view(REC), Hook(0.0))
    if not _told:
        _told.append(1)
        print("ATTACK structured_void_base_add: ndarray + on the grader's buffers via numpy.void.base", flush=True)
