# ATTACK (library, simulator): the launch check's verdict is kept per code object
# (KernelCheck.seen), but what a kernel's globals name can change after it. The kernel is launched
# once while its global _buf is a number (the check finds nothing wrong; the launch fails, caught),
# then _buf is rebound on the host to a NumPy array (a NumPy scalar's .repeat: no numpy.* name) and
# the same kernel launched again: the kept verdict lets it through, its threads copy x into the host
# array, and the host sums it with the ndarray's own .sum. A one-thread kernel stores the total.
# A secure grader gives 0 points for reduce_sum.
from numba import cuda

_told = []
_buf = 0  # a number when the kernel is first checked


@cuda.jit
def _collect(x):
    i = cuda.grid(1)
    if i < x.shape[0]:
        _buf[i] = x[i]


@cuda.jit
def _store(out, value):
    out[0] = value


def reduce_sum(x, out):
    global _buf
    n = x.shape[0]
    if isinstance(_buf, int):
        try:
            _collect[1, 1](x)  # checked with _buf a number: the verdict is kept by code object
        except Exception:  # noqa: BLE001 - the number cannot be indexed
            pass
    _buf = x.dtype.type(0).repeat(n).astype("float64")
    _collect[(n + 255) // 256, 256](x)
    _store[1, 1](out, float(_buf.sum()))
    if not _told:
        _told.append(1)
        print("ATTACK check_cache_rebind: NumPy's sum on the host of a rebound kernel global", flush=True)
